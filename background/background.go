// Package background owns respgate's River workers and periodic jobs (docs/background.md): the
// worker of background turns (background:true responses) and the housekeeping job (the retention
// purge, run by River's elected leader only; the lease sweeper is not a River job: every replica
// runs it, server.Server.Run, so crash recovery does not wait for a new leader). It must not become a
// second turn implementation: a worker only hands the job's response to Config.Turn, which the
// server implements with the same turn lifecycle as a foreground turn (nothing imports server;
// the server registers itself here at start-up). River runs in the store's database; the store
// owns its River client (store.Jobs), this package configures it.
package background

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/metric"

	"github.com/respgate/respgate/store"
)

// Causes of a background turn's context ending (context.Cause), so the turn stores the truth;
// the defaults of Config's Cancelled, TimedOut and Stopping.
var (
	// ErrCancelled: POST /v1/responses/{id}/cancel cancelled the run (River's remote cancel).
	ErrCancelled = errors.New("background: the response was cancelled")
	// ErrTimedOut: the run passed Config.Timeout.
	ErrTimedOut = errors.New("background: the run passed its time limit")
	// ErrStopping: the worker's process is shutting down.
	ErrStopping = errors.New("background: the gateway is shutting down")
)

// TurnFunc runs the turn of the stored queued background response (tenant, responseID) to its
// end and stores it, writing its client events to the response's event log. It returns nil when
// the response needs no more work (done, cancelled, already claimed by another run, deleted); an
// error makes River retry the job later. ctx ends with one of Config's causes.
type TurnFunc func(ctx context.Context, tenant, responseID string) error

// Config configures Start. Turn is required.
type Config struct {
	// Workers is how many background turns this process runs at once (default 8: a
	// single vLLM backend batches that many well).
	Workers int
	// Timeout bounds one run of a background turn (default 30 min).
	Timeout time.Duration
	// Turn runs a background turn (the server's lifecycle).
	Turn TurnFunc
	// Housekeeping, when set, runs every HousekeepingInterval (default 30 s) and at start, on
	// the elected leader only.
	Housekeeping         func(ctx context.Context)
	HousekeepingInterval time.Duration
	// FetchPollInterval is how often a worker looks for new jobs when nothing woke it (default:
	// River's 1 s where the database has a notifier, as both backends have (Postgres's
	// LISTEN/NOTIFY, River's notification table on SQLite), 100 ms where it has none, since
	// there it is the queue's pick-up latency).
	FetchPollInterval time.Duration
	// Logger receives River's logs (default slog.Default()).
	Logger *slog.Logger
	// Meter, when set, records the job metrics (docs/background.md, "Metrics").
	Meter metric.Meter
	// The causes a turn's context ends with (context.Cause), so the turn can store the truth:
	// Cancelled when POST /v1/responses/{id}/cancel cancelled it (River's remote cancel),
	// TimedOut past Timeout, Stopping at shutdown. Defaults: ErrCancelled, ErrTimedOut,
	// ErrStopping.
	Cancelled, TimedOut, Stopping error
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.HousekeepingInterval <= 0 {
		c.HousekeepingInterval = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	for _, d := range []struct {
		cause *error
		def   error
	}{{&c.Cancelled, ErrCancelled}, {&c.TimedOut, ErrTimedOut}, {&c.Stopping, ErrStopping}} {
		if *d.cause == nil {
			*d.cause = d.def
		}
	}
}

// riverConfig is the River configuration Start hands the store (cfg with its defaults): the turn
// worker on the default queue with cfg.Workers slots and cfg.Timeout per run, and the housekeeping
// job every cfg.HousekeepingInterval, run at start, when cfg.Housekeeping is set.
func riverConfig(cfg Config, m *metrics) (*river.Config, error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &turnWorker{cfg: cfg, m: m}); err != nil {
		return nil, fmt.Errorf("background: %w", err)
	}
	rc := &river.Config{
		Logger:            cfg.Logger,
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		JobTimeout:        cfg.Timeout,
		FetchPollInterval: cfg.FetchPollInterval, // 0: the store's default (store/jobq)
		// A job whose process died is rescued (and its response's claim decides what a re-run
		// may do) once it has been running longer than any run may.
		RescueStuckJobsAfter: cfg.Timeout + 5*time.Minute,
	}
	if cfg.Housekeeping != nil {
		if err := river.AddWorkerSafely(workers, &housekeepingWorker{run: cfg.Housekeeping}); err != nil {
			return nil, fmt.Errorf("background: %w", err)
		}
		rc.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(cfg.HousekeepingInterval),
			func() (river.JobArgs, *river.InsertOpts) { return housekeepingArgs{}, nil },
			&river.PeriodicJobOpts{ID: housekeepingKind, RunOnStart: true})}
	}
	return rc, nil
}

// Runner is a started set of workers. Stop it before the store closes.
type Runner struct {
	jobs store.Jobs
}

// Start configures River's client in jobs (the store) with the turn worker and the housekeeping
// job and starts it.
func Start(ctx context.Context, jobs store.Jobs, cfg Config) (*Runner, error) {
	cfg.defaults()
	if cfg.Turn == nil {
		return nil, errors.New("background: Config.Turn is required")
	}
	m, err := newMetrics(cfg.Meter)
	if err != nil {
		return nil, err
	}
	rc, err := riverConfig(cfg, m)
	if err != nil {
		return nil, err
	}
	if err := jobs.JobsStart(ctx, rc); err != nil {
		return nil, fmt.Errorf("background: %w", err)
	}
	return &Runner{jobs: jobs}, nil
}

// Stop stops fetching jobs and waits for running turns until ctx ends; then their contexts end
// with ErrStopping (they store a failed response saying so) and Stop waits for them.
func (r *Runner) Stop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	return r.jobs.JobsStop(ctx)
}

// turnWorker works background turn jobs.
type turnWorker struct {
	river.WorkerDefaults[store.BackgroundJobArgs]
	cfg Config
	m   *metrics
}

func (w *turnWorker) Timeout(*river.Job[store.BackgroundJobArgs]) time.Duration { return w.cfg.Timeout }

func (w *turnWorker) Work(ctx context.Context, job *river.Job[store.BackgroundJobArgs]) error {
	w.m.started(ctx, job.CreatedAt)
	defer w.m.running.Add(context.WithoutCancel(ctx), -1)
	// The turn's context ends with a cause the turn can tell apart (River's own causes are its
	// internals): a cancel, the time limit, or shutdown.
	tctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, river.ErrJobCancelledRemotely):
			cancel(w.cfg.Cancelled)
		case errors.Is(cause, context.DeadlineExceeded):
			cancel(w.cfg.TimedOut)
		default:
			cancel(w.cfg.Stopping)
		}
	})
	defer stop()
	return w.cfg.Turn(tctx, job.Args.Tenant, job.Args.ResponseID)
}

const housekeepingKind = "respgate_housekeeping"

type housekeepingArgs struct{}

func (housekeepingArgs) Kind() string { return housekeepingKind }

// InsertOpts: one pending housekeeping job at most, and no retries (the next interval is one).
func (housekeepingArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning, rivertype.JobStateScheduled}}}
}

type housekeepingWorker struct {
	river.WorkerDefaults[housekeepingArgs]
	run func(ctx context.Context)
}

func (w *housekeepingWorker) Work(ctx context.Context, _ *river.Job[housekeepingArgs]) error {
	w.run(ctx)
	return nil
}
