// Package engine is respgate's turn engine (docs/design.md §10): it runs one turn from a typed
// specification (Spec) to an outcome (Outcome): admission, preparation (the history in one round
// trip, rehydration, context management), the upstream call through upstream.Caller,
// accumulation, the in-progress record and its lease, the commit, and the conversation's turn
// lease, taken and released by one owner. Front doors (package server: HTTP, Chat Completions,
// WebSocket) decode requests into a Spec, hand the engine a Sink for the client's events and
// render what it returns; the background worker runs stored turns through the same lifecycle.
//
// It knows no HTTP, WebSocket or Chat Completions wire format: a front door that needs to see a
// turn's events or its final result before the terminal event does so through its Sink and its
// Face.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/respgate/respgate/background"
	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/internal/telemetry"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// ToolPolicy says what happens to request tools vLLM cannot serve (hosted tools, custom tools).
type ToolPolicy string

const (
	// ToolPolicyDrop removes them, names them in the turn's DroppedTools and counts them.
	ToolPolicyDrop ToolPolicy = "drop"
	// ToolPolicyReject answers 400 naming the first unsupported tool.
	ToolPolicyReject ToolPolicy = "reject"
)

// Config holds the engine's settings, each documented on server.Config, which the command fills
// and the server hands on; the zero value of a field means its default (Defaults).
type Config struct {
	MaxInputItems        int
	KeepAlive            time.Duration
	LeaseTTL             time.Duration
	Retention            time.Duration
	SweepInterval        time.Duration
	SyncTimeout          time.Duration
	CommitTimeout        time.Duration
	WriteTimeout         time.Duration
	ToolPolicy           ToolPolicy
	MaxConcurrentStreams int
	MaxOutputItems       int
	MaxOutputItemBytes   int
	MaxOutputBytes       int
	SealKeys             []seal.Key
	SealRetired          []string
	ReasoningExposure    ReasoningExposure
	ReasoningContext     string
	ChainCacheBytes      int64
	ChatReplayIdle       time.Duration
	CompactionKeepTurns  int
	CompactionPrompt     string
	CompactionThreshold  float64
	ContextWindow        string

	BackgroundWorkers      int
	BackgroundTimeout      time.Duration
	BackgroundMaxQueued    int
	BackgroundMaxPerTenant int
	BackgroundPoll         time.Duration
	BackgroundFollowPoll   time.Duration

	Logger *slog.Logger
}

// Defaults sets every zero (or negative) field of c to its default: the one place the engine's
// defaults are written (server.Config and the command's flags show them from here).
func (c *Config) Defaults() {
	setDefault(&c.MaxInputItems, 10000)
	setDefault(&c.KeepAlive, 15*time.Second)
	setDefault(&c.LeaseTTL, 60*time.Second)
	setDefault(&c.SweepInterval, 30*time.Second)
	setDefault(&c.SyncTimeout, 10*time.Minute)
	setDefault(&c.CommitTimeout, 15*time.Second)
	setDefault(&c.WriteTimeout, 30*time.Second)
	setDefault(&c.ChainCacheBytes, 128<<20)
	setDefault(&c.ChatReplayIdle, 30*24*time.Hour)
	setDefault(&c.BackgroundWorkers, 8)
	setDefault(&c.BackgroundTimeout, 30*time.Minute)
	setDefault(&c.BackgroundMaxQueued, 1000)
	setDefault(&c.BackgroundMaxPerTenant, 100)
	setDefault(&c.BackgroundFollowPoll, 2*time.Second)
	setDefault(&c.CompactionKeepTurns, compact.DefaultKeepTurns)
	if c.ToolPolicy == "" {
		c.ToolPolicy = ToolPolicyDrop
	}
	if c.ReasoningExposure == "" {
		c.ReasoningExposure = ExposureRaw
	}
	if c.ReasoningContext == "" {
		c.ReasoningContext = wire.ContextAllTurns
	}
	if c.CompactionPrompt == "" {
		c.CompactionPrompt = compact.DefaultHandoffPrompt
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// setDefault sets *v to def when it is zero or negative (unset).
func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Engine runs turns. Build it with New; Drain and Stop end it.
type Engine struct {
	cfg      Config
	store    store.Store
	upstream upstream.Caller
	log      *slog.Logger
	tel      *telemetry.Set
	ring     *seal.Ring        // seals and opens respgate's encrypted_content (reasoning.go)
	contexts []byModel[string] // the default reasoning.context per model pattern
	owner    string            // lease owner id of this process
	chains   *chainCache       // histories of recent chain heads (chaincache.go)
	bodyBufs bufPool           // buffers of vLLM-bound bodies (bodybuf.go)

	// windows are the configured context windows, modelWindows caches vLLM's max_model_len per
	// model (context.go).
	windows      []byModel[int]
	modelWindows sync.Map
	// noTokenize: the upstream has no /tokenize route (404), so sizes are estimated (tokens.go).
	noTokenize atomic.Bool

	streams atomic.Int64 // active streaming turns

	// admission: inflight counts turns admitted while !closing; both change under mu, so no
	// turn is added once Drain waits.
	mu       sync.Mutex
	closing  bool
	inflight sync.WaitGroup
	stopOnce sync.Once
	// stopCtx ends when Drain's deadline passes: streams still running watch it with
	// context.AfterFunc (no goroutine) and are cut.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	// background: goroutines the engine owns beyond a turn (storeFailure); quit stops them.
	background sync.WaitGroup
	quitOnce   sync.Once
	quit       chan struct{}
	// bgRunner runs background turns and housekeeping on River (StartBackground; nil: not
	// started); bgWake wakes this process's readers of a response's event log.
	bgRunner *background.Runner
	bgWake   wakeHub
	// bgWatch is this engine's watcher of the store's event notifications (StartBackground;
	// nil: not watching); watching is true while it runs, so followers poll only as a fallback.
	bgWatch  *store.EventWatchParams
	watching atomic.Bool
	// appender flushes the event logs of the running foreground streams (appender.go); its
	// goroutine is one of background.
	appender *eventAppender
}

// New builds the engine over st and up, reporting to tel; cfg's zero fields get their defaults.
func New(ctx context.Context, cfg Config, st store.Store, up upstream.Caller, tel *telemetry.Set) (*Engine, error) {
	cfg.Defaults()
	ring, err := loadRing(ctx, st, &cfg)
	if err != nil {
		return nil, err
	}
	contexts, err := ParseReasoningContext(cfg.ReasoningContext)
	if err != nil {
		return nil, err
	}
	windows, err := ParseContextWindows(cfg.ContextWindow)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		store:    st,
		upstream: up,
		log:      cfg.Logger,
		tel:      tel,
		ring:     ring,
		contexts: contexts,
		windows:  windows,
		owner:    wire.NewID("gw_"),
		chains:   newChainCache(cfg.ChainCacheBytes),
		bodyBufs: newBodyBufs(),
		quit:     make(chan struct{}),
	}
	e.stopCtx, e.stopCancel = context.WithCancel(context.Background())
	e.appender = newEventAppender(st, cfg.Logger, cfg.CommitTimeout, &e.background, e.quit)
	if err := e.registerQueueGauge(); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	return e, nil
}

// Ring is the seal ring (read routes mint and open blobs with it).
func (e *Engine) Ring() *seal.Ring { return e.ring }

// ActiveStreams is the number of streaming turns in flight.
func (e *Engine) ActiveStreams() int64 { return e.streams.Load() }

// ErrShuttingDown answers a turn offered once the engine drains.
var ErrShuttingDown = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "shutting_down",
	Message: "The gateway is shutting down; retry on another instance."}

// Admitted runs fn as a turn in flight (Drain waits for it to return), or answers
// ErrShuttingDown without running it once the engine drains: the admission of every turn and of
// every compaction.
func (e *Engine) Admitted(fn func() error) error {
	if !e.AdmitInto(&e.inflight) {
		return ErrShuttingDown
	}
	defer e.inflight.Done()
	return fn()
}

// AdmitInto counts one more into wg (turns in flight, a front door's open connections), unless
// the engine drains: under mu, so nothing is added once Drain waits.
func (e *Engine) AdmitInto(wg *sync.WaitGroup) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	wg.Add(1)
	return true
}

// Drain stops taking new turns and waits for those in flight until ctx ends; streams still
// running then are cut (stored failed: the gateway shut down) and awaited.
func (e *Engine) Drain(ctx context.Context) {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.stopOnce.Do(e.stopCancel)
		<-done
	}
}

// StoppingContext ends when Drain's deadline has passed: what a front door runs beside a turn
// (a follow of a background response) ends with it.
func (e *Engine) StoppingContext() context.Context { return e.stopCtx }

// Stop stops the background workers (running turns may finish until ctx ends) and the engine's
// own goroutines, and waits for them. Call it after Drain.
func (e *Engine) Stop(ctx context.Context) {
	e.stopBackground(ctx)
	e.quitOnce.Do(func() { close(e.quit) })
	e.background.Wait()
}

// Run sweeps expired leases at start and every SweepInterval until ctx ends (crash recovery: a
// response left in_progress by a process that died is moved to failed).
func (e *Engine) Run(ctx context.Context) {
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		e.Sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep runs the lease sweeper once and, unless River's leader runs it (StartBackground), the
// retention purge.
func (e *Engine) Sweep(ctx context.Context) {
	e.sweepLeases(ctx)
	e.mu.Lock()
	onRiver := e.bgRunner != nil
	e.mu.Unlock()
	if onRiver {
		e.requeueStranded(ctx)
	} else {
		e.Purge(ctx)
	}
}

// strandedBatch bounds how many queued responses one requeue pass looks at.
const strandedBatch = 100

// requeueStranded gives a new job to the queued background responses whose job River handed,
// more than LeaseTTL ago, to a worker that never claimed it: its process died between River's
// fetch and the claim (a live worker claims within CommitTimeout, which is shorter). Without it
// River re-runs such a job only after --background-timeout + 5 min (issue 38 item 2;
// docs/background.md, "Crashes, cancels, time limits"). Every replica runs it, as the lease
// sweep; the store serialises concurrent requeues of one job.
func (e *Engine) requeueStranded(ctx context.Context) {
	jobs, ok := e.store.(store.Jobs)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CommitTimeout)
	defer cancel()
	n, err := jobs.ResponseBackgroundRequeue(ctx, &store.ResponseBackgroundRequeueParams{
		FetchedBefore: time.Now().Add(-e.cfg.LeaseTTL), Limit: strandedBatch})
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		e.log.Error("requeue stranded background responses", "error", err)
	case n > 0:
		e.log.Warn("requeued background responses whose worker died before running them", "count", n)
	}
}

// Purge applies retention to responses (when configured) and to chat replay records once: the
// housekeeping job River's elected leader runs every SweepInterval (docs/background.md).
func (e *Engine) Purge(ctx context.Context) {
	if e.cfg.Retention > 0 {
		before := time.Now().Add(-e.cfg.Retention)
		total := e.purgeBatches(ctx, "apply retention", func(limit int) (int, error) {
			return e.store.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: before, Limit: limit})
		})
		if total > 0 {
			e.log.Info("retention deleted old responses", "count", total, "retention", e.cfg.Retention.String())
		}
	}
	before := time.Now().Add(-e.cfg.ChatReplayIdle)
	total := e.purgeBatches(ctx, "purge chat replay records", func(limit int) (int, error) {
		return e.store.ReplayPurge(ctx, &store.ReplayPurgeParams{Before: before, Limit: limit})
	})
	if total > 0 {
		e.log.Info("purged idle chat replay records", "count", total)
	}
}

// sweepLeases fails the responses whose lease expired (their gateway died). Every replica runs
// it, not only River's leader: it is one indexed statement, and a leader that dies is replaced
// only after River's leader TTL (about 15 s), which would delay exactly the recovery the sweep
// exists for (docs/background.md, "Housekeeping").
func (e *Engine) sweepLeases(ctx context.Context) {
	n, err := e.store.ResponseSweep(ctx, &store.ResponseSweepParams{
		Now:     time.Now(),
		Message: MsgSweptExpired,
	})
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		e.log.Error("sweep expired leases", "error", err)
	case n > 0:
		e.tel.Sweeps.Add(ctx, int64(n))
		e.log.Warn("swept responses whose gateway died", "count", n)
	}
}

// purgeBatches calls del with a batch size until a batch deletes fewer, ctx ends or del fails
// (logged as what), and returns how many were deleted. Several replicas may purge at once:
// deleting what is already deleted is not an error.
func (e *Engine) purgeBatches(ctx context.Context, what string, del func(limit int) (int, error)) int {
	const batch = 500
	total := 0
	for ctx.Err() == nil {
		n, err := del(batch)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				e.log.Error(what, "error", err)
			}
			break
		}
		total += n
		if n < batch {
			break
		}
	}
	return total
}
