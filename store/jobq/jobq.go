// Package jobq is the River client a store backend owns (docs/background.md), written once for
// both backends over River's driver type: the transactional enqueue and cancel of
// store.Store's background methods, and the worker client the background package configures
// (store.Jobs). It holds no SQL of respgate's tables and must not be imported outside store/.
package jobq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/respgate/respgate/store"
)

// Client is a backend's River client: insert-only until Start hands it workers. Safe for
// concurrent use.
type Client[TTx any] struct {
	driver riverdriver.Driver[TTx]
	schema string

	mu      sync.Mutex
	client  *river.Client[TTx]
	working bool
}

// New builds the insert-only client on driver; schema is River's (empty: the search_path).
func New[TTx any](driver riverdriver.Driver[TTx], schema string) (*Client[TTx], error) {
	c, err := river.NewClient(driver, &river.Config{Schema: schema, Logger: discard, FetchCooldown: FetchCooldown})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &Client[TTx]{driver: driver, schema: schema, client: c}, nil
}

// pollWithoutNotifier is the fetch poll interval where River has no notifier. Both of respgate's
// drivers have one: Postgres's LISTEN/NOTIFY, and on SQLite River's notification table (riversqlite).
const pollWithoutNotifier = 100 * time.Millisecond

// FetchCooldown is the least time between two fetches of a worker client and between two insert
// notifications it sends (River uses FetchCooldown for both). River's default, 100 ms, was most of
// a background turn's start (issue 41): an enqueue within 100 ms of this client's last insert
// notification sent none, so its job waited for the fetch poll (1 s), and a notification landing
// within 100 ms of the last fetch waited out the rest of it. 5 ms bounds the second wait to 5 ms
// and narrows the first to two creates within 5 ms of each other (the later one's job may wait
// for the poll when the earlier one's fetch ran before it committed). A replica then fetches at
// most 200 times a second, which only that rate of creates reaches: fetches follow notifications.
const FetchCooldown = 5 * time.Millisecond

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// Migrate applies River's own migrations, each in its own transaction (the caller's migrate
// step serialises replicas).
func Migrate[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], schema string) error {
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: discard})
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

func (j *Client[TTx]) current() *river.Client[TTx] {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.client
}

// InsertTx enqueues args inside tx (River's transactional enqueue) and returns the job id. The
// job runs at most once at a time; MaxAttempts 3 lets River re-run a job whose worker died
// (the claim in the store decides whether a re-run may start the turn).
func (j *Client[TTx]) InsertTx(ctx context.Context, tx TTx, args river.JobArgs) (int64, error) {
	res, err := j.current().InsertTx(ctx, tx, args, &river.InsertOpts{MaxAttempts: 3})
	if err != nil {
		return 0, fmt.Errorf("enqueue job: %w", err)
	}
	return res.Job.ID, nil
}

// CancelTx cancels job id inside tx and returns its state after the cancel: cancelled when it
// was still queued, running when a worker has it (its context is cancelled once tx commits and
// Notify runs), or a finalized state.
func (j *Client[TTx]) CancelTx(ctx context.Context, tx TTx, id int64) (rivertype.JobState, error) {
	job, err := j.current().JobCancelTx(ctx, tx, id)
	if errors.Is(err, rivertype.ErrNotFound) {
		return rivertype.JobStateCancelled, nil // cleaned away: it is over
	}
	if err != nil {
		return "", fmt.Errorf("cancel job: %w", err)
	}
	return job.State, nil
}

// BackgroundTx is tx as store's shared background transactions run it (store.BackgroundTx):
// queryRow and exec are the backend's statements in tx, and River's enqueue and cancel of a job run
// in tx too (InsertTx, CancelTx).
func (j *Client[TTx]) BackgroundTx(ctx context.Context, tx TTx, queryRow func(sql string, args ...any) store.Row, exec func(sql string, args ...any) error) store.BackgroundTx {
	return store.BackgroundTx{
		QueryRow:  queryRow,
		Exec:      exec,
		InsertJob: func(args store.BackgroundJobArgs) (int64, error) { return j.InsertTx(ctx, tx, args) },
		CancelJob: func(id int64) (rivertype.JobState, error) { return j.CancelTx(ctx, tx, id) },
	}
}

// Stranded returns which of jobIDs River holds running since before fetchedBefore (handed to a
// worker that has not finished them: store.RequeueBackground).
func (j *Client[TTx]) Stranded(ctx context.Context, jobIDs []int64, fetchedBefore time.Time) (map[int64]bool, error) {
	res, err := j.current().JobList(ctx, river.NewJobListParams().IDs(jobIDs...).
		States(rivertype.JobStateRunning).First(len(jobIDs)))
	if err != nil {
		return nil, fmt.Errorf("list running jobs: %w", err)
	}
	out := map[int64]bool{}
	for _, job := range res.Jobs {
		if job.AttemptedAt != nil && job.AttemptedAt.Before(fetchedBefore) {
			out[job.ID] = true
		}
	}
	return out, nil
}

// Notify tells the client running job id (this process's, or through River's notifier another
// replica's) to cancel it now rather than at its next poll.
func (j *Client[TTx]) Notify(ctx context.Context, id int64) error {
	if _, err := j.current().JobCancel(ctx, id); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("cancel job: %w", err)
	}
	return nil
}

// Start replaces the insert-only client by one built from cfg (its Schema is set here) and starts
// it. It may be called once: later calls return store.ErrJobsStarted (store.Jobs).
func (j *Client[TTx]) Start(ctx context.Context, cfg *river.Config) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.working {
		return store.ErrJobsStarted
	}
	c := workerConfig(cfg, j.schema, j.driver.SupportsListener())
	client, err := river.NewClient(j.driver, &c)
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	j.client, j.working = client, true
	return nil
}

// workerConfig is cfg as Start builds its client from it: River's schema set, and where River has
// no notifier (listener false) a short fetch poll unless cfg sets one; a set poll gets a fetch
// cooldown no longer than itself unless cfg sets one. cfg itself is not changed.
func workerConfig(cfg *river.Config, schema string, listener bool) river.Config {
	c := *cfg
	c.Schema = schema
	if c.FetchPollInterval <= 0 && !listener {
		// No notifier (SQLite): polling is how a worker learns of a new job, so poll often.
		c.FetchPollInterval = pollWithoutNotifier
	}
	if c.FetchCooldown <= 0 {
		c.FetchCooldown = FetchCooldown
		if c.FetchPollInterval > 0 {
			c.FetchCooldown = min(c.FetchCooldown, c.FetchPollInterval)
		}
	}
	return c
}

// Stop stops the working client: running jobs may finish until ctx ends, then their contexts
// are cancelled and Stop waits for them. A client never started is a no-op.
func (j *Client[TTx]) Stop(ctx context.Context) error {
	j.mu.Lock()
	c, working := j.client, j.working
	j.mu.Unlock()
	if !working {
		return nil
	}
	err := c.Stop(ctx)
	if err == nil {
		return nil
	}
	// Past the deadline: cancel the running jobs and wait for them to return.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.StopAndCancel(cctx); err != nil {
		return fmt.Errorf("stop river: %w", err)
	}
	return nil
}
