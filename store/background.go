package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/respgate/respgate/wire"
)

// Background turns (docs/background.md): a response created with background:true is stored
// queued together with its River job in ONE transaction (ResponseEnqueueBackground); a worker on
// any replica claims it (ResponseBackgroundClaim), runs it through the server's turn lifecycle and
// commits it with ResponseCommit like any turn. River runs inside the store's own database: its
// tables are created by each backend's migrate step (rivermigrate), and the backend owns the River
// client, so the transactional enqueue and the job's cancel never expose a transaction.

// BackgroundJobKind is the River job kind of a background turn.
const BackgroundJobKind = "respgate_background_turn"

// BackgroundJobArgs are a background turn's River job arguments: only the response's key; the
// turn itself is in the store (BackgroundTurnGet), so the job row stays small.
type BackgroundJobArgs struct {
	Tenant     string `json:"tenant"`
	ResponseID string `json:"response_id"`
}

// Kind is River's job kind (river.JobArgs).
func (BackgroundJobArgs) Kind() string { return BackgroundJobKind }

// Errors of the background queue's bounds (ResponseEnqueueBackground).
var (
	// ErrQueueFull: the queue already holds MaxQueued queued background responses.
	ErrQueueFull = errors.New("store: background queue full")
	// ErrTenantBusy: the tenant already has MaxPerTenant unfinished background responses.
	ErrTenantBusy = errors.New("store: tenant has too many background responses")
	// ErrJobsStarted: the store's workers are already running (JobsStart was called before,
	// e.g. by another server on the same store object); they serve every server on it.
	ErrJobsStarted = errors.New("store: background workers already started")
)

// BackgroundTurn is what a background turn's worker needs beyond the response record.
type BackgroundTurn struct {
	// Body is the vLLM-bound request, rehydrated and validated when the response was created.
	Body []byte
	// State is the server's own settings of the turn (JSON, opaque to the store).
	State json.RawMessage
	// JobID is the River job's id (set by ResponseEnqueueBackground).
	JobID int64
}

type ResponseEnqueueBackgroundParams struct {
	// Response is the record, stored with status queued and no lease (a queued response is the
	// queue's, not a process's: the sweeper leaves it alone).
	Response Response
	Input    []wire.Item
	Turn     BackgroundTurn
	// MaxQueued bounds the queued background responses of all tenants, MaxPerTenant the
	// unfinished (queued or in progress) ones of Response.Tenant (0: unbounded). Past them the
	// error is ErrQueueFull or ErrTenantBusy and nothing is written.
	MaxQueued    int
	MaxPerTenant int
}

// Bounds is the enqueue's answer given the tenant's unfinished background responses and the
// queued ones of every tenant, counted in its transaction: ErrTenantBusy, ErrQueueFull or nil.
func (p *ResponseEnqueueBackgroundParams) Bounds(tenantUnfinished, queued int) error {
	if p.MaxPerTenant > 0 && tenantUnfinished >= p.MaxPerTenant {
		return ErrTenantBusy
	}
	if p.MaxQueued > 0 && queued >= p.MaxQueued {
		return ErrQueueFull
	}
	return nil
}

type BackgroundTurnGetParams struct {
	Tenant     string
	ResponseID string
}

type ResponseBackgroundClaimParams struct {
	Tenant         string
	ID             string
	LeaseOwner     string
	LeaseExpiresAt time.Time
	// Again: LeaseOwner's previous claim of this response had an unknown outcome (a timeout, a
	// connection lost after the commit); the claim also succeeds, renewing the lease, when
	// LeaseOwner already holds it.
	Again bool
}

type ResponseCancelBackgroundParams struct {
	Tenant string
	ID     string
}

// CancelOutcome is what ResponseCancelBackground did.
type CancelOutcome int

const (
	// CancelQueued: the response was queued; its job will never run and it is stored cancelled.
	CancelQueued CancelOutcome = iota + 1
	// CancelRunning: a worker runs it; River cancels the run's context wherever it runs, and the
	// worker stores the response cancelled with its partial output.
	CancelRunning
	// CancelFinished: it had already ended; nothing changed.
	CancelFinished
)

// CancelDecision is what a cancel does to a background response in status: nothing once the
// response ended (CancelFinished; River is not asked); CancelQueued while it is still queued,
// whatever River's job state, so the cancel is its end (the backend stores it cancelled and frees
// its conversation in the same transaction); otherwise CancelRunning, the run's context is
// cancelled wherever it runs. A queued response whose job River has already handed to a worker
// (job running) is ended here too: nothing has been sent upstream, and the worker's claim
// (queued → in_progress, ResponseBackgroundClaim) then finds it cancelled and does nothing, so a
// cancel never waits for a worker that may be dead (issue 38 item 2).
func CancelDecision(status wire.Status) CancelOutcome {
	switch {
	case status.Terminal():
		return CancelFinished
	case status == wire.StatusQueued:
		return CancelQueued
	default:
		return CancelRunning
	}
}

// BackgroundTx is a backend's transaction as the background transactions every backend shares
// (EnqueueBackgroundTx, CancelBackgroundTx) run it. River's own statements run in it too, so a job
// and the rows that name it commit together.
type BackgroundTx struct {
	QueryRow func(sql string, args ...any) Row
	Exec     func(sql string, args ...any) error
	// InsertJob enqueues a background turn's River job in the transaction and returns its id.
	InsertJob func(args BackgroundJobArgs) (int64, error)
	// CancelJob cancels the River job in the transaction and returns the state River left it in.
	CancelJob func(jobID int64) (rivertype.JobState, error)
}

// EnqueueBackgroundTx is ResponseEnqueueBackground's transaction, the same in every backend but
// for insert, which writes the queued record and its input items (each backend with its
// lineage): the queue's bounds are counted first (past them the error is ErrTenantBusy or
// ErrQueueFull and nothing is written), then insert runs, then the River job is enqueued and the
// turn's row names it. Errors are the driver's as tx returns them.
func EnqueueBackgroundTx(tx BackgroundTx, d Driver, p *ResponseEnqueueBackgroundParams, insert func() error) error {
	r := &p.Response
	if p.MaxPerTenant > 0 || p.MaxQueued > 0 {
		var tenant, queued int
		if err := tx.QueryRow(BackgroundBoundsSQL, r.Tenant).Scan(&tenant, &queued); err != nil {
			return err
		}
		if err := p.Bounds(tenant, queued); err != nil {
			return err
		}
	}
	if err := insert(); err != nil {
		return err
	}
	id, err := tx.InsertJob(BackgroundJobArgs{Tenant: r.Tenant, ResponseID: r.ID})
	if err != nil {
		return err
	}
	return tx.Exec(BackgroundTurnInsertSQL, r.Tenant, r.ID, id, p.Turn.Body, string(p.Turn.State), d.Time(time.Now()))
}

// CancelBackgroundTx is ResponseCancelBackground's transaction, the same in every backend: it
// reads the response and its job; once the response ended it changes nothing (River is not
// asked); otherwise River cancels the job, and a response River will never run is stored
// cancelled and frees its conversation (CancelDecision). It returns the outcome and the job; the
// backend wakes a running job's worker after the commit. Errors are the driver's, uninterpreted.
func CancelBackgroundTx(tx BackgroundTx, q *Queries, p *ResponseCancelBackgroundParams) (CancelOutcome, int64, error) {
	var (
		jobID  int64
		status wire.Status
		conv   string
	)
	if err := tx.QueryRow(q.BackgroundCancelRead, p.Tenant, p.ID).Scan(&jobID, &status, &conv); err != nil {
		return 0, 0, err
	}
	if status.Terminal() {
		return CancelFinished, jobID, nil
	}
	if _, err := tx.CancelJob(jobID); err != nil {
		return 0, 0, err
	}
	out := CancelDecision(status)
	if out != CancelQueued {
		return out, jobID, nil
	}
	if err := tx.Exec(bgCancelQueuedSQL, p.Tenant, p.ID); err != nil {
		return 0, 0, err
	}
	if conv != "" {
		if err := tx.Exec(turnReleaseSQL, p.Tenant, conv, p.ID); err != nil {
			return 0, 0, err
		}
	}
	return out, jobID, nil
}

// CancelBackgroundResult is ResponseCancelBackground's answer once its transaction
// (CancelBackgroundTx, outcome out for job jobID) has ended with err, already interpreted by the
// backend: the same in every backend. A job a worker runs (CancelRunning) is woken at once by
// wake, River's cancel outside the transaction (on Postgres River's notifier reaches every
// replica; on SQLite it is delivered in process), rather than at the worker's next poll.
func CancelBackgroundResult(ctx context.Context, out CancelOutcome, jobID int64, err error, wake func(ctx context.Context, jobID int64) error) (CancelOutcome, error) {
	if err != nil {
		return 0, fmt.Errorf("cancel background response: %w", err)
	}
	if out == CancelRunning {
		if err := wake(ctx, jobID); err != nil {
			return out, fmt.Errorf("cancel background response: %w", err)
		}
	}
	return out, nil
}

// ResponseBackgroundRequeueParams selects the stranded jobs ResponseBackgroundRequeue re-runs.
type ResponseBackgroundRequeueParams struct {
	// FetchedBefore: a queued response whose job River handed to a worker before this time is
	// stranded (a live worker claims it within its claim deadline, far shorter).
	FetchedBefore time.Time
	// Limit bounds how many queued responses (oldest first) are looked at.
	Limit int
}

// StrandedJob is a queued background response and the job River handed to a worker.
type StrandedJob struct {
	Tenant, ResponseID string
	JobID              int64
}

// RequeueBackground is ResponseBackgroundRequeue, the same in every backend (docs/background.md,
// "Crashes, cancels, time limits"). A job River handed to a worker that died before claiming its
// response stays running in River until River's rescuer looks at it (--background-timeout + 5
// min), while the response stays queued. The candidates are the oldest queued background
// responses (d, Limit of them); stranded keeps those whose job River reports running since
// before FetchedBefore; each is then given a new job in its own transaction (inTx): the response
// and its turn are locked and must still be queued with the old job (lockQueued (tenant,
// response, old job) → count: 0 when a claim or another replica's requeue came first), the new job is
// enqueued and named in background_turns, and the old job is cancelled, so River's rescue of it
// later finalises it instead of re-running it. It returns how many were requeued.
func RequeueBackground(ctx context.Context, d Driver, p *ResponseBackgroundRequeueParams, lockQueued string,
	stranded func(ctx context.Context, jobIDs []int64, fetchedBefore time.Time) (map[int64]bool, error),
	inTx func(ctx context.Context, f func(tx BackgroundTx) error) error) (int, error) {
	cands, err := query(ctx, d, "requeue background responses", func(rows Rows) ([]StrandedJob, error) {
		var out []StrandedJob
		for rows.Next() {
			var j StrandedJob
			if err := rows.Scan(&j.Tenant, &j.ResponseID, &j.JobID); err != nil {
				return nil, err
			}
			out = append(out, j)
		}
		return out, rows.Err()
	}, bgQueuedJobsSQL, d.Time(p.FetchedBefore), p.Limit)
	if err != nil || len(cands) == 0 {
		return 0, err
	}
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.JobID
	}
	held, err := stranded(ctx, ids, p.FetchedBefore)
	if err != nil {
		return 0, fmt.Errorf("requeue background responses: %w", err)
	}
	n := 0
	for _, c := range cands {
		if !held[c.JobID] {
			continue
		}
		err := inTx(ctx, func(tx BackgroundTx) error {
			var queued int
			if err := tx.QueryRow(lockQueued, c.Tenant, c.ResponseID, c.JobID).Scan(&queued); err != nil || queued == 0 {
				return err // claimed or ended meanwhile: nothing to do
			}
			id, err := tx.InsertJob(BackgroundJobArgs{Tenant: c.Tenant, ResponseID: c.ResponseID})
			if err != nil {
				return err
			}
			if err := tx.Exec(bgRequeueSQL, c.Tenant, c.ResponseID, id, c.JobID); err != nil {
				return err
			}
			_, err = tx.CancelJob(c.JobID)
			if err == nil {
				n++
			}
			return err
		})
		if err != nil {
			return n, fmt.Errorf("requeue background response: %w", d.InterpretError(err))
		}
	}
	return n, nil
}

// Jobs is implemented by the backends that run River in their database (both do). The background
// package hands in River's configuration (workers, queues, periodic jobs); the backend builds the
// client on its own driver, so no driver type crosses this interface.
type Jobs interface {
	// JobsStart starts working jobs with cfg (once). Until then the store can enqueue and cancel
	// but works nothing.
	JobsStart(ctx context.Context, cfg *river.Config) error
	// JobsStop stops working: no new jobs are fetched and running ones may finish until ctx ends;
	// then their contexts are cancelled and JobsStop waits for them to return.
	JobsStop(ctx context.Context) error
	// ResponseBackgroundRequeue gives a new job to every queued background response whose job
	// River handed to a worker before FetchedBefore that never claimed it (its process died
	// between River's fetch and the claim), so another worker runs it now rather than after
	// River's rescue (RequeueBackground). It returns how many it requeued.
	ResponseBackgroundRequeue(ctx context.Context, p *ResponseBackgroundRequeueParams) (int, error)
}

// EventWatcher is implemented by backends whose event logs a turn in another process appends to
// and that can tell this process at once (Postgres: LISTEN/NOTIFY on a connection of the store's
// own; docs/background.md, "Following a running response"). The writes with Notify set (a
// background turn's event appends and commit, and the cancel of a queued background response)
// wake the watchers of every process on the database. SQLite has none: its turns and followers
// share one process, which wakes its followers itself.
type EventWatcher interface {
	// EventWatchStart adds p to the watchers. The first one starts the listener (one connection
	// for the store, however many watchers); Wake is called from then until EventWatchStop(p)
	// returns.
	EventWatchStart(ctx context.Context, p *EventWatchParams) error
	// EventWatchStop removes p (the pointer given to EventWatchStart); the last one stops the
	// listener and waits for it to end, whatever ctx (the listener's own exit is bounded). After
	// it returns, p.Wake is not called.
	EventWatchStop(ctx context.Context, p *EventWatchParams) error
}

// EventWatchParams is one watcher of EventWatcher.
type EventWatchParams struct {
	// Wake is called with the id of a response whose event log grew or that ended, and with ""
	// when notifications may have been missed (the listener connected or reconnected): then
	// every follower must look again. It runs on the listener's goroutine and must not block.
	Wake func(responseID string)
}
