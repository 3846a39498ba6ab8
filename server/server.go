// Package server owns respgate's HTTP surface: the Echo routes, authentication to a tenant,
// request validation, the OpenAI error envelope, SSE writing and the turn lifecycle that ties the
// store, rehydration, the upstream client and the accumulator together (docs/design.md §1). It holds no
// SQL and no wire-format reconciliation of its own.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/internal/telemetry"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// ToolPolicy says what happens to request tools vLLM cannot serve (engine.ToolPolicy).
type ToolPolicy = engine.ToolPolicy

const (
	// ToolPolicyDrop removes them, names them in the X-Respgate-Dropped-Tools header and counts them.
	ToolPolicyDrop = engine.ToolPolicyDrop
	// ToolPolicyReject answers 400 naming the first unsupported tool.
	ToolPolicyReject = engine.ToolPolicyReject
)

// ReasoningExposure is what clients see of reasoning items (engine.ReasoningExposure).
type ReasoningExposure = engine.ReasoningExposure

const (
	// ExposureRaw shows reasoning as the model produced it.
	ExposureRaw = engine.ExposureRaw
	// ExposureHidden never shows reasoning text (docs/reasoning.md).
	ExposureHidden = engine.ExposureHidden
)

// Config holds the server's settings. The zero value of every field means its default.
type Config struct {
	// APIKeys, when non-empty, is the allowlist of accepted bearer keys; any other key is a 401.
	APIKeys []string
	// MaxBodyBytes bounds a request body (default 32 MiB → 413).
	MaxBodyBytes int64
	// MaxHeaderBytes bounds the request line and headers (default 64 KiB → 431). The HTTP
	// server's own MaxHeaderBytes should be larger (the command sets 1 MiB).
	MaxHeaderBytes int
	// MaxInputItems bounds the items of one request's input (default 10,000).
	MaxInputItems int
	// KeepAlive is the interval of SSE comment keepalives during upstream silence (default 15 s).
	KeepAlive time.Duration
	// LeaseTTL is how long an in-progress response's lease lasts before the sweeper may fail it; it
	// is renewed while the stream runs (default 60 s).
	LeaseTTL time.Duration
	// Retention, when positive, deletes stored responses older than this (with their items, except
	// those a conversation lists) from the background loop; 0 keeps them forever.
	Retention time.Duration
	// SweepInterval is how often expired leases are swept, and retention applied (default 30 s).
	SweepInterval time.Duration
	// SyncTimeout bounds a non-streamed upstream call, which vLLM answers only when generation is
	// done (default 10 min → 504).
	SyncTimeout time.Duration
	// CommitTimeout bounds the final commit (default 15 s).
	CommitTimeout time.Duration
	// ToolPolicy for tools vLLM cannot serve (default drop).
	ToolPolicy ToolPolicy
	// MaxConcurrentStreams bounds concurrent streaming responses (default 0: unbounded); beyond it
	// a request gets 503 with Retry-After.
	MaxConcurrentStreams int
	// WriteTimeout bounds each write of an event to a client (default 30 s): a client that stops
	// reading is dropped instead of holding the stream's memory without bound.
	WriteTimeout time.Duration
	// BodyReadTimeout bounds reading a request body (default 30 s → 408), so a 1-byte-per-second
	// client cannot hold a handler.
	BodyReadTimeout time.Duration
	// MaxBodyBytesInFlight bounds the bytes of all request bodies being read or held at once
	// (default 4×MaxBodyBytes); past it a request gets 503 with Retry-After.
	MaxBodyBytesInFlight int64
	// MaxJSONDepth bounds the nesting of a request body's JSON (default 64 → 400).
	MaxJSONDepth int
	// MaxOutputItems, MaxOutputItemBytes and MaxOutputBytes bound what the accumulator holds of one
	// response: items and parts, bytes of one item, bytes of all (accumulator.Options; 0: its
	// defaults).
	MaxOutputItems     int
	MaxOutputItemBytes int
	MaxOutputBytes     int
	// SealKeys are the operator's seal keys (RESPGATE_SEAL_KEYS): the first seals, all open. The
	// key generated and kept in the store is added as an opening key (the sealing key when none
	// is configured). SealRetired lists retired key ids, named as such in errors
	// (docs/reasoning.md).
	SealKeys    []seal.Key
	SealRetired []string
	// ReasoningExposure is what clients see of reasoning (default raw).
	ReasoningExposure ReasoningExposure
	// ReasoningContext is the default reasoning.context of requests that do not set it, by model:
	// "all_turns", "current_turn", or "pattern=value" pairs separated by commas, the first
	// pattern (path.Match) matching the model deciding (default all_turns; ParseReasoningContext).
	ReasoningContext string
	// WSMaxMessageBytes bounds one WebSocket client message (default MaxBodyBytes); a larger one
	// closes the connection with status 1009.
	WSMaxMessageBytes int64
	// WSIdleTimeout closes a WebSocket connection that has run no turn and received no message
	// for this long (default 10 min).
	WSIdleTimeout time.Duration
	// WSCacheBytes bounds the item JSON a WebSocket connection keeps of its store:false responses
	// for continuation (default 64 MiB).
	WSCacheBytes int64
	// WSMaxLanes bounds the lanes (stream_id) one WebSocket connection runs at once (default 4);
	// a response.create that would open one more is answered with an error event.
	WSMaxLanes int
	// ChainCacheBytes bounds the item JSON of the chain histories a replica keeps for the
	// continuation of recent responses (chainCache; default 128 MiB).
	ChainCacheBytes int64
	// ChatReplayIdle is how long a chat replay record may go unused before the sweeper purges it
	// (default 30 days; docs/chat-completions.md).
	ChatReplayIdle time.Duration
	// ChatReplayMaxRecords bounds the replay records kept per tenant and scope, the most
	// recently used (default 1024).
	ChatReplayMaxRecords int
	// ChatReplayMaxRecordBytes bounds the items of one replay record (default 4 MiB); a larger
	// turn is not captured (and blocks the older records at its position).
	ChatReplayMaxRecordBytes int
	// ChatReplayMaxBytes bounds the items replayed into one request (default 16 MiB); replay
	// stops where it would pass it.
	ChatReplayMaxBytes int
	// CompactionKeepTurns is how many of the most recent user turns compaction keeps verbatim
	// (default compact.DefaultKeepTurns; docs/compaction.md).
	CompactionKeepTurns int
	// CompactionPrompt is the handoff prompt the model answers with the summary (default
	// compact.DefaultHandoffPrompt).
	CompactionPrompt string
	// CompactionThreshold, when positive, compacts a turn's history before the turn once its
	// estimated size passes this fraction of the model's context window (0: never).
	CompactionThreshold float64
	// ContextWindow is the context window per model ("pattern=tokens" pairs, ParseContextWindows);
	// models it does not name use vLLM's max_model_len.
	ContextWindow string
	// BackgroundWorkers is how many background turns this process runs at once (default 8);
	// BackgroundTimeout bounds one run (default 30 min); BackgroundMaxQueued bounds the queued
	// background responses of all tenants (default 1000 → 503), BackgroundMaxPerTenant the
	// unfinished ones of one tenant (default 100 → 429); BackgroundPoll is how often an idle
	// worker looks for jobs nothing woke it for (default 1 s; SQLite has no notifier, so there
	// it is the pick-up latency: default 100 ms). docs/background.md.
	BackgroundWorkers      int
	BackgroundTimeout      time.Duration
	BackgroundMaxQueued    int
	BackgroundMaxPerTenant int
	BackgroundPoll         time.Duration
	// BackgroundFollowPoll is how often a reader of a running background response's stream
	// looks at the store when nothing woke it, on a store whose notifications wake it
	// (store.EventWatcher: Postgres): a fallback for a missed notification (default 2 s).
	// Elsewhere readers look every 100 ms.
	BackgroundFollowPoll time.Duration
	// TracerProvider receives spans (default: the global provider, a no-op unless the command
	// installed the OTLP exporter).
	TracerProvider trace.TracerProvider
	// Logger receives structured logs (default slog.Default()). Bodies are never logged.
	Logger *slog.Logger
}

// DefaultConfig is the configuration every zero field of a Config stands for. The command's flags
// show these defaults, so each is written once, here.
func DefaultConfig() Config {
	var c Config
	c.defaults()
	c.Logger = nil
	return c
}

func (c *Config) defaults() {
	// The engine's settings have their defaults in the engine (engine.Config.Defaults): the
	// server's own are written here.
	e := c.engineConfig()
	e.Defaults()
	c.MaxInputItems, c.KeepAlive, c.LeaseTTL, c.SweepInterval = e.MaxInputItems, e.KeepAlive, e.LeaseTTL, e.SweepInterval
	c.SyncTimeout, c.CommitTimeout, c.WriteTimeout, c.ChainCacheBytes = e.SyncTimeout, e.CommitTimeout, e.WriteTimeout, e.ChainCacheBytes
	c.ChatReplayIdle, c.ToolPolicy, c.ReasoningExposure, c.ReasoningContext = e.ChatReplayIdle, e.ToolPolicy, e.ReasoningExposure, e.ReasoningContext
	c.CompactionKeepTurns, c.CompactionPrompt = e.CompactionKeepTurns, e.CompactionPrompt
	c.BackgroundWorkers, c.BackgroundTimeout, c.BackgroundMaxQueued = e.BackgroundWorkers, e.BackgroundTimeout, e.BackgroundMaxQueued
	c.BackgroundMaxPerTenant, c.BackgroundFollowPoll, c.Logger = e.BackgroundMaxPerTenant, e.BackgroundFollowPoll, e.Logger
	setDefault(&c.MaxBodyBytes, 32<<20)
	setDefault(&c.MaxHeaderBytes, 64<<10)
	setDefault(&c.BodyReadTimeout, 30*time.Second)
	setDefault(&c.MaxBodyBytesInFlight, 4*c.MaxBodyBytes)
	setDefault(&c.MaxJSONDepth, 64)
	setDefault(&c.WSMaxMessageBytes, c.MaxBodyBytes)
	setDefault(&c.WSIdleTimeout, 10*time.Minute)
	setDefault(&c.WSCacheBytes, 64<<20)
	setDefault(&c.WSMaxLanes, 4)
	setDefault(&c.ChatReplayMaxRecords, 1024)
	setDefault(&c.ChatReplayMaxRecordBytes, 4<<20)
	setDefault(&c.ChatReplayMaxBytes, 16<<20)
}

// setDefault sets *v to def when it is zero or negative (unset).
func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// engineConfig is the part of c the turn engine runs with.
func (c *Config) engineConfig() engine.Config {
	return engine.Config{MaxInputItems: c.MaxInputItems, KeepAlive: c.KeepAlive, LeaseTTL: c.LeaseTTL, Retention: c.Retention,
		SweepInterval: c.SweepInterval, SyncTimeout: c.SyncTimeout, CommitTimeout: c.CommitTimeout, WriteTimeout: c.WriteTimeout,
		ToolPolicy: c.ToolPolicy, MaxConcurrentStreams: c.MaxConcurrentStreams, MaxOutputItems: c.MaxOutputItems,
		MaxOutputItemBytes: c.MaxOutputItemBytes, MaxOutputBytes: c.MaxOutputBytes, SealKeys: c.SealKeys, SealRetired: c.SealRetired,
		ReasoningExposure: c.ReasoningExposure, ReasoningContext: c.ReasoningContext, ChainCacheBytes: c.ChainCacheBytes,
		ChatReplayIdle: c.ChatReplayIdle, CompactionKeepTurns: c.CompactionKeepTurns, CompactionPrompt: c.CompactionPrompt,
		CompactionThreshold: c.CompactionThreshold, ContextWindow: c.ContextWindow,
		BackgroundWorkers: c.BackgroundWorkers, BackgroundTimeout: c.BackgroundTimeout, BackgroundMaxQueued: c.BackgroundMaxQueued,
		BackgroundMaxPerTenant: c.BackgroundMaxPerTenant, BackgroundPoll: c.BackgroundPoll, BackgroundFollowPoll: c.BackgroundFollowPoll,
		Logger: c.Logger}
}

// Server is respgate's HTTP application: the front doors (routes, authentication, decoding,
// error rendering per transport) over the turn engine. Build it with New; it is an
// http.Handler.
type Server struct {
	cfg    Config
	store  store.Store
	engine *engine.Engine
	up     upstream.Caller // GET /v1/models
	log    *slog.Logger
	tel    *telemetry.Set
	echo   *echo.Echo
	secret []byte
	keys   []string // tenant fingerprints of the allowlisted keys (nil: every key accepted)

	// budget is the request-body budget (MaxBodyBytesInFlight) shared by every request body and
	// WebSocket message.
	budget *semaphore.Weighted

	// sockets counts open WebSocket connections (admitted while the engine takes turns); drained
	// is closed once shutdown has drained the turns, and the connections then close (1001).
	sockets     sync.WaitGroup
	drainedOnce sync.Once
	drained     chan struct{}
}

// New builds the server: it loads (or creates) the server secret from the store and registers the
// routes. It does not start background work; call Run for the sweeper.
func New(ctx context.Context, cfg Config, st store.Store, up upstream.Caller) (*Server, error) {
	cfg.defaults()
	if cfg.LeaseTTL <= cfg.WriteTimeout {
		// A turn can wait up to WriteTimeout on a client write before it commits; its lease must
		// outlive that wait.
		return nil, fmt.Errorf("lease TTL (%s) must be longer than the write timeout (%s)", cfg.LeaseTTL, cfg.WriteTimeout)
	}
	secret, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{
		Name:     store.SecretTenantHMAC,
		Generate: func() ([]byte, error) { return []byte(wire.NewID("")), nil },
	})
	if err != nil {
		return nil, fmt.Errorf("load server secret: %w", err)
	}
	tel, err := telemetry.New(ctx, cfg.TracerProvider)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if err := tel.Instrument(up, st); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	eng, err := engine.New(ctx, cfg.engineConfig(), st, up, tel)
	if err != nil {
		return nil, err
	}
	s := &Server{
		tel:     tel,
		cfg:     cfg,
		store:   st,
		engine:  eng,
		up:      up,
		log:     cfg.Logger,
		secret:  secret,
		drained: make(chan struct{}),
		budget:  semaphore.NewWeighted(cfg.MaxBodyBytesInFlight),
	}
	for _, k := range cfg.APIKeys {
		s.keys = append(s.keys, s.tenantOf(k))
	}
	s.echo = s.routes()
	return s, nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Engine is the server's turn engine (the command starts its background work and sweeper).
func (s *Server) Engine() *engine.Engine { return s.engine }

// Shutdown stops taking new turns and waits for in-flight ones until ctx ends; streams still
// running then are ended with response.failed (stored) by cancelling them. Then it closes the
// WebSocket connections (status 1001, going away) and waits for them, and stops the engine's
// background work and waits for it.
func (s *Server) Shutdown(ctx context.Context) {
	s.engine.Drain(ctx)
	s.drainedOnce.Do(func() { close(s.drained) })
	s.sockets.Wait()
	s.engine.Stop(ctx)
}

// Run sweeps expired leases until ctx ends (engine.Engine.Run).
func (s *Server) Run(ctx context.Context) { s.engine.Run(ctx) }

// StartBackground starts this process's background workers (engine.Engine.StartBackground).
func (s *Server) StartBackground(ctx context.Context) error { return s.engine.StartBackground(ctx) }

// ActiveStreams is the number of streaming turns in flight.
func (s *Server) ActiveStreams() int64 { return s.engine.ActiveStreams() }
