package background

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
)

func TestConfigDefaultsKeepWhatIsSetAndFillTheRest(t *testing.T) {
	var c Config
	c.defaults()
	if c.Workers != 8 || c.Timeout != 30*time.Minute || c.HousekeepingInterval != 30*time.Second || c.Logger == nil ||
		!errors.Is(c.Cancelled, ErrCancelled) || !errors.Is(c.TimedOut, ErrTimedOut) || !errors.Is(c.Stopping, ErrStopping) {
		t.Fatalf("defaults %+v", c)
	}
	mine := errors.New("mine")
	set := Config{Workers: 2, Timeout: time.Second, HousekeepingInterval: time.Minute, Cancelled: mine, TimedOut: mine, Stopping: mine}
	set.defaults()
	if set.Workers != 2 || set.Timeout != time.Second || set.HousekeepingInterval != time.Minute ||
		!errors.Is(set.Cancelled, mine) || !errors.Is(set.TimedOut, mine) || !errors.Is(set.Stopping, mine) {
		t.Fatalf("set values changed: %+v", set)
	}
	neg := Config{Workers: -1, Timeout: -1, HousekeepingInterval: -1}
	neg.defaults()
	if neg.Workers != 8 || neg.Timeout != 30*time.Minute || neg.HousekeepingInterval != 30*time.Second {
		t.Fatalf("negative values not defaulted: %+v", neg)
	}
}

// runWork runs one turn job whose River context ended as end makes it, and returns the cause the
// turn's context ended with and the job's arguments the turn was given.
func runWork(t *testing.T, cfg Config, end func() (context.Context, context.CancelFunc)) (args [2]string, m *sdkmetric.ManualReader, cause error) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	cfg.Meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	cfg.Turn = func(ctx context.Context, tenant, id string) error {
		<-ctx.Done()
		cause, args = context.Cause(ctx), [2]string{tenant, id}
		return nil
	}
	cfg.defaults()
	mt, err := newMetrics(cfg.Meter)
	if err != nil {
		t.Fatal(err)
	}
	w := &turnWorker{cfg: cfg, m: mt}
	ctx, cancel := end()
	defer cancel()
	job := &river.Job[store.BackgroundJobArgs]{JobRow: &rivertype.JobRow{CreatedAt: time.Now()},
		Args: store.BackgroundJobArgs{Tenant: "tenant-a", ResponseID: "resp_1"}}
	if err := w.Work(ctx, job); err != nil {
		t.Fatal(err)
	}
	return args, reader, cause
}

// The turn's context ends with a cause the turn can tell apart: River's remote cancel is
// Cancelled, the job's deadline TimedOut, anything else (shutdown) Stopping; the turn is given
// the job's tenant and response id.
func TestWorkEndsTheTurnWithTheCauseOfTheJobsEnd(t *testing.T) {
	remote := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(river.ErrJobCancelledRemotely)
		return ctx, func() {}
	}
	deadline := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.Background(), time.Unix(1, 0))
	}
	stopped := func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}
	custom := errors.New("custom cancel")
	for _, tc := range []struct {
		name string
		cfg  Config
		end  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"remote cancel", Config{}, remote, ErrCancelled},
		{"time limit", Config{}, deadline, ErrTimedOut},
		{"shutdown", Config{}, stopped, ErrStopping},
		{"configured cause", Config{Cancelled: custom}, remote, custom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, reader, cause := runWork(t, tc.cfg, tc.end)
			if !errors.Is(cause, tc.want) {
				t.Fatalf("cause %v, want %v", cause, tc.want)
			}
			if args != [2]string{"tenant-a", "resp_1"} {
				t.Fatalf("turn given %v", args)
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			running, waits := int64(-1), uint64(0)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Sum[int64]:
						if m.Name == "respgate.background.running" && len(d.DataPoints) == 1 {
							running = d.DataPoints[0].Value
						}
					case metricdata.Histogram[float64]:
						if m.Name == "respgate.background.job_wait" && len(d.DataPoints) == 1 {
							waits = d.DataPoints[0].Count
						}
					}
				}
			}
			if running != 0 || waits != 1 {
				t.Fatalf("after the run: running %d (want 0), job_wait count %d (want 1)", running, waits)
			}
		})
	}
}

func TestWorkReturnsTheTurnsErrorSoRiverRetries(t *testing.T) {
	boom := errors.New("boom")
	cfg := Config{Turn: func(context.Context, string, string) error { return boom }}
	cfg.defaults()
	m, _ := newMetrics(nil)
	w := &turnWorker{cfg: cfg, m: m}
	job := &river.Job[store.BackgroundJobArgs]{JobRow: &rivertype.JobRow{CreatedAt: time.Now()}}
	if err := w.Work(context.Background(), job); !errors.Is(err, boom) {
		t.Fatalf("Work = %v", err)
	}
	if w.Timeout(job) != cfg.Timeout {
		t.Fatalf("Timeout %v, want %v", w.Timeout(job), cfg.Timeout)
	}
}

// One housekeeping job at a time, never retried: its next interval is the retry.
func TestHousekeepingJobIsUniqueAndNotRetried(t *testing.T) {
	a := housekeepingArgs{}
	if a.Kind() != "respgate_housekeeping" {
		t.Fatalf("kind %q", a.Kind())
	}
	o := a.InsertOpts()
	if o.MaxAttempts != 1 {
		t.Fatalf("MaxAttempts %d", o.MaxAttempts)
	}
	for _, s := range []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled} {
		if !slices.Contains(o.UniqueOpts.ByState, s) {
			t.Fatalf("unique states %v lack %s", o.UniqueOpts.ByState, s)
		}
	}
	ran := 0
	w := &housekeepingWorker{run: func(context.Context) { ran++ }}
	if err := w.Work(context.Background(), nil); err != nil || ran != 1 {
		t.Fatalf("Work = %v, ran %d", err, ran)
	}
}

func TestStartNeedsATurnAndAStoppedRunnerIsANoOp(t *testing.T) {
	if _, err := Start(t.Context(), nil, Config{}); err == nil {
		t.Fatal("Start without Turn succeeded")
	}
	var r *Runner
	if err := r.Stop(t.Context()); err != nil {
		t.Fatalf("nil Runner Stop = %v", err)
	}
}

// On a real store the housekeeping job runs at start (the only replica is the leader), and a
// second Start on the same store is refused.
func TestStartRunsHousekeepingOnARealStore(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ran := make(chan struct{})
	var once sync.Once
	r, err := Start(t.Context(), st, Config{Workers: 1,
		Turn:         func(context.Context, string, string) error { return nil },
		Housekeeping: func(context.Context) { once.Do(func() { close(ran) }) }})
	if err != nil || r == nil {
		t.Fatalf("Start = %v, %v; want a Runner", r, err)
	}
	hang, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard, not a timing check
	defer cancel()
	select {
	case <-ran:
	case <-hang.Done():
		t.Fatal("housekeeping never ran")
	}
	if _, err := Start(t.Context(), st, Config{Turn: func(context.Context, string, string) error { return nil }}); !errors.Is(err, store.ErrJobsStarted) {
		t.Fatalf("second Start = %v, want ErrJobsStarted", err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}
