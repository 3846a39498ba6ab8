package jobq_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/jobq"
)

// newClient is a jobq client on a migrated SQLite database of its own.
func newClient(t *testing.T) (*jobq.Client[*sql.Tx], *sql.DB) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "q.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	drv := riversqlite.New(db)
	if err := jobq.Migrate(t.Context(), drv, ""); err != nil {
		t.Fatal(err)
	}
	c, err := jobq.New(drv, "")
	if err != nil {
		t.Fatal(err)
	}
	return c, db
}

func inTx[T any](t *testing.T, db *sql.DB, f func(tx *sql.Tx) T) T {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := f(tx)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Enqueue and cancel happen in the caller's transaction: a queued job cancelled in a transaction
// is cancelled, an unknown job counts as over, and Notify of an unknown job is not an error.
func TestEnqueueAndCancelInTheCallersTransaction(t *testing.T) {
	c, db := newClient(t)
	args := store.BackgroundJobArgs{Tenant: "t", ResponseID: "resp_1"}
	id := inTx(t, db, func(tx *sql.Tx) int64 {
		bt := c.BackgroundTx(t.Context(), tx, nil, nil)
		id, err := bt.InsertJob(args)
		if err != nil || id <= 0 {
			t.Fatalf("InsertJob = %d, %v", id, err)
		}
		return id
	})
	state := inTx(t, db, func(tx *sql.Tx) rivertype.JobState {
		st, err := c.BackgroundTx(t.Context(), tx, nil, nil).CancelJob(id)
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
	if state != rivertype.JobStateCancelled {
		t.Fatalf("a queued job cancelled: %s", state)
	}
	unknown := inTx(t, db, func(tx *sql.Tx) rivertype.JobState {
		st, err := c.CancelTx(t.Context(), tx, 987654)
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
	if unknown != rivertype.JobStateCancelled {
		t.Fatalf("an unknown job: %s, want cancelled (over)", unknown)
	}
	if err := c.Notify(t.Context(), 987654); err != nil {
		t.Fatalf("Notify of an unknown job: %v", err)
	}
	// A job rolled back with its transaction never existed.
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := c.InsertTx(t.Context(), tx, args)
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	if st := inTx(t, db, func(tx *sql.Tx) rivertype.JobState { st, _ := c.CancelTx(t.Context(), tx, rolled); return st }); st != rivertype.JobStateCancelled {
		t.Fatalf("a rolled-back job: %s", st)
	}
}

type testWorker struct {
	river.WorkerDefaults[store.BackgroundJobArgs]
	got chan store.BackgroundJobArgs
}

func (w *testWorker) Work(_ context.Context, job *river.Job[store.BackgroundJobArgs]) error {
	w.got <- job.Args
	return nil
}

// Started, the client works what was enqueued (SQLite has no notifier: the short poll finds it);
// a second Start is refused; Stop before any Start, and Stop after, succeed.
func TestStartWorksQueuedJobsOnceAndStopEnds(t *testing.T) {
	c, db := newClient(t)
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	w := &testWorker{got: make(chan store.BackgroundJobArgs, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	cfg := &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}
	if err := c.Start(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context(), cfg); !errors.Is(err, store.ErrJobsStarted) {
		t.Fatalf("second Start = %v, want ErrJobsStarted", err)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			if err := c.Stop(context.WithoutCancel(t.Context())); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	want := store.BackgroundJobArgs{Tenant: "t", ResponseID: "resp_2"}
	inTx(t, db, func(tx *sql.Tx) int64 {
		id, err := c.InsertTx(t.Context(), tx, want)
		if err != nil {
			t.Fatal(err)
		}
		return id
	})
	select {
	case got := <-w.got:
		if got != want {
			t.Fatalf("worked %+v, want %+v", got, want)
		}
	case <-t.Context().Done():
		t.Fatal("the job was never worked")
	}
	if cfg.Schema != "" || cfg.FetchPollInterval != 0 {
		t.Fatalf("Start changed the caller's config: %+v", cfg)
	}
	stop()
}

// blockingWorker holds each job until its context ends, reporting when it starts and ends.
type blockingWorker struct {
	river.WorkerDefaults[store.BackgroundJobArgs]
	started, ended chan int64
}

func (w *blockingWorker) Work(ctx context.Context, job *river.Job[store.BackgroundJobArgs]) error {
	w.started <- job.ID
	<-ctx.Done()
	w.ended <- job.ID
	return ctx.Err()
}

// A job a worker holds is stranded as of any time after it was fetched, not before; a job not
// running is never stranded. Notify of a running job succeeds and ends its worker's context.
func TestStrandedNamesRunningJobsFetchedBeforeAndNotifyCancelsThem(t *testing.T) {
	c, db := newClient(t)
	w := &blockingWorker{started: make(chan int64, 1), ended: make(chan int64, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	if err := c.Start(t.Context(), &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	before := time.Now().Add(-time.Hour)
	insert := func() int64 {
		return inTx(t, db, func(tx *sql.Tx) int64 {
			id, err := c.InsertTx(t.Context(), tx, store.BackgroundJobArgs{Tenant: "t", ResponseID: "resp_s"})
			if err != nil {
				t.Fatal(err)
			}
			return id
		})
	}
	running := insert()
	select {
	case got := <-w.started:
		if got != running {
			t.Fatalf("worker started %d, want %d", got, running)
		}
	case <-t.Context().Done():
		t.Fatal("the job never started")
	}
	queued := insert() // the only worker is busy: it stays available
	got, err := c.Stranded(t.Context(), []int64{running, queued, 987654}, time.Now().Add(time.Hour))
	if err != nil || len(got) != 1 || !got[running] {
		t.Fatalf("Stranded as of later = %v, %v; want only the running job %d", got, err, running)
	}
	if got, err := c.Stranded(t.Context(), []int64{running, queued}, before); err != nil || len(got) != 0 {
		t.Fatalf("Stranded as of before its fetch = %v, %v; want none", got, err)
	}
	// Cancelled while the only worker is busy, the queued job never runs (so Stop need not wait).
	if st := inTx(t, db, func(tx *sql.Tx) rivertype.JobState { st, _ := c.CancelTx(t.Context(), tx, queued); return st }); st != rivertype.JobStateCancelled {
		t.Fatalf("the queued job cancelled: %s", st)
	}
	if err := c.Notify(t.Context(), running); err != nil {
		t.Fatalf("Notify of a running job: %v", err)
	}
	select {
	case got := <-w.ended:
		if got != running {
			t.Fatalf("worker ended %d, want %d", got, running)
		}
	case <-t.Context().Done():
		t.Fatal("Notify did not end the running job")
	}
}

// Stop with its deadline already passed cancels the running job and returns only once the job
// has returned, without an error.
func TestStopPastItsDeadlineCancelsRunningJobsAndWaitsForThem(t *testing.T) {
	c, db := newClient(t)
	w := &blockingWorker{started: make(chan int64, 1), ended: make(chan int64, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	if err := c.Start(t.Context(), &river.Config{Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}}); err != nil {
		t.Fatal(err)
	}
	id := inTx(t, db, func(tx *sql.Tx) int64 {
		id, err := c.InsertTx(t.Context(), tx, store.BackgroundJobArgs{Tenant: "t", ResponseID: "resp_stop"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	})
	select {
	case <-w.started:
	case <-t.Context().Done():
		t.Fatal("the job never started")
	}
	past, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Stop(past); err != nil {
		t.Fatalf("Stop past its deadline: %v", err)
	}
	select {
	case got := <-w.ended:
		if got != id {
			t.Fatalf("ended %d, want %d", got, id)
		}
	default:
		t.Fatal("Stop returned while its running job had not returned")
	}
}
