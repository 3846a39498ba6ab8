package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/background"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// Background responses (docs/background.md). POST /v1/responses with background:true is prepared
// exactly like a foreground turn (every 400 before anything is written), then stored queued with
// its River job in one store transaction and answered at once; a worker on any replica
// (package background) runs it through this file's runBackground, which is serveTurn's
// streamed lifecycle (streamTurn) with an event sink that has no client: every client event goes
// to the response's event log, which GET ?stream=true replays and follows on any replica.

// bgState is a background turn's settings the worker needs beyond the stored record and the
// vLLM-bound body (store.BackgroundTurn.State).
type bgState struct {
	ToolNames        map[string]wire.ToolName `json:"tool_names,omitempty"`
	IncludeEncrypted bool                     `json:"include_encrypted,omitempty"`
	// Prepend leads the output (the compaction item of automatic compaction, turn.prepend).
	Prepend []wire.Item `json:"prepend,omitempty"`
}

// followPoll is how often a reader of a response in progress looks for new events when nothing
// wakes it (FollowInterval).
const followPoll = 100 * time.Millisecond

// bgFlushInterval is how often a background turn's new events reach its event log (a foreground
// stream's client reads them live; a background stream's readers read the log).
const bgFlushInterval = 50 * time.Millisecond

// Errors of the background queue (docs/errors.md).
var (
	errQueueFull = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "background_queue_full",
		Message: "The gateway's background queue is full; retry shortly.", RetryAfter: retryAfter}
	errTenantBusy = &wire.APIError{Status: http.StatusTooManyRequests, Type: wire.ErrRateLimit, Code: "too_many_background_responses",
		Message: "Too many of your background responses are queued or running; retry when some have finished.", RetryAfter: retryAfter}
	errNoWorkers = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "background_unavailable",
		Message: "This gateway's store cannot run background responses."}
)

// retryAfter is the Retry-After (seconds) of the background queue's 429 and 503.
const retryAfter = "5"

// enqueue stores a prepared background turn queued with its job; the door answers with the
// queued response, or follows its event log (Follow).
func (e *Engine) enqueue(ctx context.Context, t *Turn) (*Outcome, error) {
	if _, ok := e.store.(store.Jobs); !ok {
		return nil, errNoWorkers
	}
	state, err := json.Marshal(bgState{ToolNames: t.toolNames, IncludeEncrypted: t.include, Prepend: t.prepend})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CommitTimeout)
	defer cancel()
	if t.convTurn.Load() {
		// The conversation's turn lease is held from now until the worker commits: while the
		// turn waits in the queue nothing renews it, so it lasts as long as a run may.
		err := e.store.ConversationTurnExtend(sctx, &store.ConversationTurnAcquireParams{Tenant: t.rec.Tenant,
			ConversationID: t.rec.ConversationID, ResponseID: t.rec.ID, ExpiresAt: time.Now().Add(e.cfg.BackgroundTimeout + e.cfg.LeaseTTL)})
		if err != nil {
			return nil, err
		}
	}
	t.rec.Status = wire.StatusQueued
	start := time.Now()
	err = e.store.ResponseEnqueueBackground(sctx, &store.ResponseEnqueueBackgroundParams{Response: t.rec, Input: t.input,
		Turn:      store.BackgroundTurn{Body: t.body, State: state},
		MaxQueued: e.cfg.BackgroundMaxQueued, MaxPerTenant: e.cfg.BackgroundMaxPerTenant})
	e.tel.Store(ctx, "response_enqueue_background", start)
	switch {
	case errors.Is(err, store.ErrQueueFull):
		return nil, errQueueFull
	case errors.Is(err, store.ErrTenantBusy):
		return nil, errTenantBusy
	case err != nil:
		return nil, err
	}
	t.handOff() // the queued job holds it now: its worker releases it
	e.log.Info("background response queued", "response_id", t.rec.ID, "input_items", len(t.input))
	return t.outcome(nil), nil
}

// RunBackground is background.TurnFunc: it claims the queued response and runs its turn through
// streamTurn, the lifecycle of every streamed turn, into a sink with no client. The
// conversation's turn lease, taken when the turn was queued, is released here, in one deferred
// call, unless the commit ended it.
//
// Every exit after the claim stores a terminal record (issue 38 item 1): a run whose context
// ended before its turn reached upstream (a cancel, its time limit or shutdown landing between
// the claim and the upstream call) is stored at once, and the claim itself runs under a
// deadline of its own, not the run's context, so a cancel arriving mid-claim cannot leave a
// claimed response that nobody runs.
func (e *Engine) RunBackground(ctx context.Context, tn, id string) error {
	if chaosHold != nil {
		chaosHold(ctx, e.log, holdFetched, id)
	}
	t, err := e.claim(ctx, tn, id)
	if t == nil || err != nil {
		return err
	}
	defer t.release()
	if chaosHold != nil {
		chaosHold(ctx, e.log, holdClaimed, id)
	}
	if ctx.Err() != nil {
		e.endUnstarted(ctx, t)
		return nil
	}
	e.log.Info("background response running", "response_id", id)
	return e.streamTurn(ctx, t, func() Sink { return &bgSink{t: t} })
}

// chaosHold, when set, holds a background run at one of its first moments (holdFetched: River
// handed the job to this worker, nothing is claimed; holdClaimed: the response is claimed, the
// turn has not reached upstream) so that the chaos matrix can put a fault in that window: a
// kill -9, a cancel (integration/chaos, docs/testing.md "Chaos and soak"). It is set only in a
// binary built with the chaoshooks build tag (chaoshooks.go), never in a release build.
var chaosHold func(ctx context.Context, log *slog.Logger, stage, responseID string)

// The stages chaosHold is called at.
const (
	holdFetched = "fetched"
	holdClaimed = "claimed"
)

// endUnstarted stores a claimed turn whose run ended before it reached upstream: cancelled with
// no error for a cancel, failed with the true reason for the time limit or shutdown. Nothing was
// sent upstream and no event was logged.
func (e *Engine) endUnstarted(ctx context.Context, t *Turn) {
	t.leased = true // the claim took the response's lease
	r := &accumulator.Result{Status: wire.StatusCancelled}
	if !errors.Is(context.Cause(ctx), errCancelRequested) {
		r.Status = wire.StatusFailed
		r.Error = &wire.ErrorObject{Code: "server_error", Message: cutMessage(ctx)}
	}
	e.log.Info("background response ended before it reached upstream", "response_id", t.rec.ID, "status", r.Status)
	_ = e.finish(ctx, t, r)
}

// claim loads a queued background turn and claims it, or returns nil when it is no longer
// queued (deleted, cancelled, or run by another worker). Its store calls share one deadline
// (CommitTimeout) and ignore the run's context: a claim cut by a cancel may have committed
// (a statement cancelled in flight can still land), leaving a response in_progress that no
// keeper renews. A claim whose outcome is unknown is repeated once (the claim is idempotent for
// its owner).
func (e *Engine) claim(runCtx context.Context, tn, id string) (*Turn, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), e.cfg.CommitTimeout)
	defer cancel()
	bt, err := e.store.BackgroundTurnGet(ctx, &store.BackgroundTurnGetParams{Tenant: tn, ResponseID: id})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // deleted while queued
	}
	if err != nil {
		return nil, err
	}
	var st bgState
	if err := json.Unmarshal(bt.State, &st); err != nil {
		return nil, fmt.Errorf("background turn %s: state: %w", id, err)
	}
	rec, _, err := e.store.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tn, ID: id})
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Exactly one run: the claim moves queued to in_progress under this process's lease. A re-run
	// of the job (River rescued it after its worker died) finds the response claimed or ended and
	// does nothing: the sweeper fails a claimed response whose lease expired, with the reason.
	claim := func(ctx context.Context, again bool) error {
		return e.store.ResponseBackgroundClaim(ctx, &store.ResponseBackgroundClaimParams{Tenant: tn, ID: id,
			LeaseOwner: e.owner, LeaseExpiresAt: time.Now().Add(e.cfg.LeaseTTL), Again: again})
	}
	err = claim(ctx, false)
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		// Unknown outcome: it may have landed. Ask again, under a fresh deadline.
		e.log.Warn("background claim failed; repeating it", "response_id", id, "error", err)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(runCtx), e.cfg.CommitTimeout)
		err = claim(rctx, true)
		rcancel()
	}
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		e.log.Info("background response not run: no longer queued", "response_id", id)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec.Status = wire.StatusInProgress
	t := &Turn{engine: e, rec: *rec, store: true, body: bt.Body, toolNames: st.ToolNames, prepend: st.Prepend,
		include: st.IncludeEncrypted, view: e.View(tn, st.IncludeEncrypted), claimed: true}
	t.convTurn.Store(rec.ConversationID != "") // taken when it was queued
	return t, nil
}

var (
	// errCancelRequested: POST /v1/responses/{id}/cancel.
	errCancelRequested = errors.New("server: the response was cancelled")
	// errBackgroundTimeout is a shutdown of one turn: its run passed --background-timeout.
	errBackgroundTimeout = fmt.Errorf("background run passed its time limit: %w", ErrShutdown)
)

// cutMessage is the stored message of a stream cut by ctx's end (ErrShutdown or a time limit).
func cutMessage(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errBackgroundTimeout) {
		return "The background response ran longer than the gateway's time limit (--background-timeout)."
	}
	return "The gateway shut down before the response finished; retry it."
}

// goneError is the error a response cut by its client (or a cancel) is stored with: none for a
// cancel, which is the client's wish and not a failure.
func goneError(ctx context.Context, msg string) *wire.ErrorObject {
	if errors.Is(context.Cause(ctx), errCancelRequested) {
		return nil
	}
	return &wire.ErrorObject{Code: "client_disconnected", Message: msg}
}

// bgSink is a background turn's event sink: there is no client; the accumulator's events reach
// the event log through the turn's eventLog, flushed by its keeper every bgFlushInterval.
type bgSink struct{ t *Turn }

var _ Sink = (*bgSink)(nil)

// write asks the keeper to log the events it has just been given (the first at once, later
// ones at most every bgFlushInterval).
func (s *bgSink) Write([]byte) error { s.t.keeper.flushSoon(); return nil }
func (*bgSink) Keepalive() error     { return nil }
func (*bgSink) IdleSince() time.Time { return time.Now() }

// CancelBackground cancels a background response (POST /v1/responses/{id}/cancel): a queued one
// is stored cancelled at once; a running one is cancelled wherever it runs (River delivers the
// cancel to its worker's context, which cancels the upstream call) and CancelBackground waits for
// its worker to store it (cancelWait at most); a finished one is left unchanged. The caller reads
// the response afterwards. store.ErrNotFound when there is no such response.
func (e *Engine) CancelBackground(ctx context.Context, tn, id string) error {
	outcome, err := e.store.ResponseCancelBackground(ctx, &store.ResponseCancelBackgroundParams{Tenant: tn, ID: id})
	if err != nil {
		return err
	}
	if outcome == store.CancelRunning {
		e.log.Info("background response cancel requested", "response_id", id)
		return e.waitTerminal(ctx, tn, id)
	}
	return nil
}

// cancelWait bounds how long a cancel waits for the worker to store the cancelled response; it
// then answers with the response as stored (still in_progress: the cancel goes on).
const cancelWait = 10 * time.Second

// waitTerminal waits until the response is terminal (woken by the turn's end, in this process
// or through the store's notifications, else by polling the store), cancelWait or ctx's end.
func (e *Engine) waitTerminal(ctx context.Context, tn, id string) error {
	ctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	defer e.bgWake.forget(id)
	for {
		wake := e.bgWake.wait(id) // before the read: no wake is missed
		r, _, err := e.store.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tn, ID: id})
		if err != nil || r.Status.Terminal() {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t := time.NewTimer(e.FollowInterval(r))
		select {
		case <-ctx.Done():
		case <-wake:
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// wakeHub wakes the readers of a response's event log in this process when its turn appends
// events or ends, here or (through the store's notifications, wakeFromStore) on another
// replica, so they do not wait for their next poll.
type wakeHub struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// wait returns a channel closed at the next wake of id.
func (h *wakeHub) wait(id string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch == nil {
		h.ch = map[string]chan struct{}{}
	}
	c, ok := h.ch[id]
	if !ok {
		c = make(chan struct{})
		h.ch[id] = c
	}
	return c
}

// forget drops id's waiters (waking them): a reader leaving, so a response never woken in this
// process (its turn runs elsewhere) leaves nothing behind.
func (h *wakeHub) forget(id string) { h.wake(id) }

// wakeAll wakes every waiter (notifications may have been missed).
func (h *wakeHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, c := range h.ch {
		close(c)
		delete(h.ch, id)
	}
}

// wake wakes the current waiters of id.
func (h *wakeHub) wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.ch[id]; ok {
		close(c)
		delete(h.ch, id)
	}
}

// queuedGaugeTimeout bounds the queue-depth gauge's count on a /metrics scrape.
const queuedGaugeTimeout = 2 * time.Second

// registerQueueGauge exports respgate_background_queued, the queued background responses of
// every tenant, counted from the store on each scrape (docs/background.md, "Metrics"). The count
// stops at twice --background-max-queued (the queue passes its bound only by the creates in
// flight), so a scrape's cost is bounded whatever the store holds; a failed count leaves the
// gauge out of that scrape.
func (e *Engine) registerQueueGauge() error {
	limit := 2 * e.cfg.BackgroundMaxQueued
	_, err := e.tel.Meter.Int64ObservableGauge("respgate.background.queued",
		metric.WithDescription("queued background responses of every tenant (a store-wide count: every replica reports the same)"),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			ctx, cancel := context.WithTimeout(ctx, queuedGaugeTimeout)
			defer cancel()
			n, err := e.store.ResponseQueuedCount(ctx, &store.ResponseQueuedCountParams{Limit: limit})
			if err != nil {
				e.log.Warn("count queued background responses", "error", err)
				return nil
			}
			o.Observe(int64(n))
			return nil
		}))
	return err
}

// StartBackground starts this process's background workers and the housekeeping job (lease
// sweep and retention, on the elected leader) on River in the store's database. The store must
// implement store.Jobs (both backends do). Shutdown stops them.
func (e *Engine) StartBackground(ctx context.Context) error {
	jobs, ok := e.store.(store.Jobs)
	if !ok {
		return errors.New("server: the store does not run background jobs")
	}
	// Followers of a response running on another replica are woken by the store's
	// notifications where it has them (Postgres); the poll is then only a fallback.
	if w, ok := e.store.(store.EventWatcher); ok {
		p := &store.EventWatchParams{Wake: e.wakeFromStore}
		if err := w.EventWatchStart(ctx, p); err != nil {
			return err
		}
		e.mu.Lock()
		e.bgWatch = p
		e.mu.Unlock()
		e.watching.Store(true)
	}
	// River runs until Shutdown stops it, not until ctx ends.
	r, err := background.Start(context.WithoutCancel(ctx), jobs, background.Config{
		Workers: e.cfg.BackgroundWorkers, Timeout: e.cfg.BackgroundTimeout, Turn: e.RunBackground,
		Housekeeping: e.Purge, HousekeepingInterval: e.cfg.SweepInterval,
		FetchPollInterval: e.cfg.BackgroundPoll, Logger: e.log, Meter: e.tel.Meter,
		// The turn lifecycle's own causes: a cancel is stored cancelled, the time limit and
		// shutdown failed with their own message.
		Cancelled: errCancelRequested, TimedOut: errBackgroundTimeout, Stopping: ErrShutdown,
	})
	if err != nil {
		// The workers of a store shared by several servers serve them all (ErrJobsStarted); the
		// watcher stays for this server's followers then, else Shutdown stops it.
		return err
	}
	e.mu.Lock()
	e.bgRunner = r
	e.mu.Unlock()
	return nil
}

// WakeOn returns a channel closed at the next wake of response id's readers in this process (its
// turn logged events or ended, here or, through the store's notifications, elsewhere). Take it
// before reading the store, so that no wake is missed; Forget it when the reader leaves.
func (e *Engine) WakeOn(id string) <-chan struct{} { return e.bgWake.wait(id) }

// Forget drops id's waiters (a reader leaving).
func (e *Engine) Forget(id string) { e.bgWake.forget(id) }

// wakeFromStore is this server's store.EventWatchParams.Wake: a response's event log grew or it
// ended, in any process ("": anything may have; wake every follower).
func (e *Engine) wakeFromStore(id string) {
	if id == "" {
		e.bgWake.wakeAll()
		return
	}
	e.tel.FollowWakes.Add(context.Background(), 1)
	e.bgWake.wake(id)
}

// followInterval is how often a follower of r looks at the store when nothing woke it: the
// fallback poll for a background response whose notifications reach this process, else
// followPoll.
func (e *Engine) FollowInterval(r *store.Response) time.Duration {
	if e.watching.Load() && isBackground(r) {
		return e.cfg.BackgroundFollowPoll
	}
	return followPoll
}

// isBackground reports whether r was created with background:true (its request echo).
func isBackground(r *store.Response) bool {
	var echo struct {
		Background bool `json:"background"`
	}
	return json.Unmarshal(r.Echo, &echo) == nil && echo.Background
}

// stopBackground stops the workers: running turns may finish until ctx ends, then they are
// stored failed (the gateway shut down) and awaited.
func (e *Engine) stopBackground(ctx context.Context) {
	e.mu.Lock()
	r := e.bgRunner
	e.bgRunner = nil
	watch := e.bgWatch
	e.bgWatch = nil
	e.mu.Unlock()
	if err := r.Stop(ctx); err != nil {
		e.log.Error("stop background workers", "error", err)
	}
	if watch != nil {
		e.watching.Store(false)
		if err := e.store.(store.EventWatcher).EventWatchStop(context.WithoutCancel(ctx), watch); err != nil {
			e.log.Error("stop event watch", "error", err)
		}
	}
}
