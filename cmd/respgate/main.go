// Command respgate runs the stateful OpenAI Responses gateway: configuration from flags with
// RESPGATE_* environment equivalents (settings.go), the store (Postgres or embedded SQLite) with
// migrations run at start, the upstream vLLM client (or the built-in simulator when no upstream is
// configured), the lease sweeper, and graceful shutdown on SIGTERM/SIGINT.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"

	"github.com/respgate/respgate/internal/version"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/fleet"
	"github.com/respgate/respgate/upstream/vllmsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := dispatch(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "respgate:", err)
		os.Exit(1)
	}
}

// dispatch runs the command args name: `version` (or --version), `admin …`, or the gateway.
func dispatch(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version"):
		fmt.Fprintln(stdout, version.Get())
		return nil
	case len(args) > 0 && args[0] == "admin":
		return runAdmin(ctx, args[1:], lookupEnv, stdout, stderr)
	}
	return run(ctx, args, lookupEnv, stderr)
}

// run starts respgate and returns once ctx ends and everything it started has stopped; logs (and
// -h) go to out.
func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), out io.Writer) error {
	cfg, err := parseConfig(args, lookupEnv, out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	bi := version.Get()
	log.Info("respgate starting", append([]any{"version", bi.Version, "revision", bi.Revision, "go", bi.GoVersion}, cfg.logAttrs()...)...)

	// Traces go over OTLP/HTTP when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or the traces one)
	// is set; the exporter reads the rest of the OTEL_* variables itself.
	if hasEnv(lookupEnv, "OTEL_EXPORTER_OTLP_ENDPOINT") || hasEnv(lookupEnv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(otelResource(ctx)))
		otel.SetTracerProvider(tp)
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }() // flush spans after ctx ends
		log.Info("exporting traces over OTLP")
	}

	before := schemaVersion(cfg.databaseURL)
	st, err := openStore(ctx, cfg.databaseURL, cfg.dbMaxConns, log)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	log.Info("store ready", storeAttrs(cfg.databaseURL, before)...)
	// serve returns only once every goroutine it started has ended, so nothing uses the store
	// after this Close.
	defer st.Close()
	return serve(ctx, cfg, log, st)
}

func hasEnv(lookupEnv func(string) (string, bool), name string) bool {
	v, ok := lookupEnv(name)
	return ok && v != ""
}

func openStore(ctx context.Context, dsn string, maxConns int, log *slog.Logger) (store.Store, error) {
	switch {
	case isPostgresURL(dsn):
		// pgxpool's default (max(4, CPUs)) serialises a busy gateway's commits on 2 cores.
		if maxConns > math.MaxInt32 {
			return nil, fmt.Errorf("--database-max-conns %d is too large", maxConns)
		}
		return postgres.Open(ctx, dsn, postgres.WithMaxConns(int32(maxConns)), postgres.WithLogger(log)) //nolint:gosec // G115: bounded just above
	case strings.HasPrefix(dsn, "sqlite:"):
		path, err := sqlitePath(dsn)
		if err != nil {
			return nil, err
		}
		return sqlite.Open(ctx, path)
	}
	return nil, errors.New("--database-url (RESPGATE_DATABASE_URL) must be a postgres://, postgresql:// or sqlite: URL")
}

// sqlitePath is the file (or sqlite.Memory) of a sqlite: URL. sqlite:PATH is relative to the
// working directory unless absolute; sqlite:///abs/path is the URL spelling of an absolute path.
// sqlite://./x.db and sqlite://data/x.db are refused: read as URLs they name a host, and cutting
// "sqlite:" alone left "//./x.db", which created /x.db at the filesystem root.
func sqlitePath(dsn string) (string, error) {
	rest := strings.TrimPrefix(dsn, "sqlite:")
	switch {
	case strings.HasPrefix(rest, "///"):
		return rest[2:], nil
	case strings.HasPrefix(rest, "//"):
		p := strings.TrimPrefix(rest, "//")
		return "", fmt.Errorf("--database-url (RESPGATE_DATABASE_URL) sqlite://%s is ambiguous: write sqlite:%s for a path relative to the working directory, or sqlite:///ABSOLUTE/PATH", p, p)
	case rest == "":
		return "", errors.New("--database-url (RESPGATE_DATABASE_URL) sqlite: needs a path, e.g. sqlite:./data/respgate.db")
	}
	return rest, nil
}

// schemaVersion is the store's applied schema version before respgate opens it, -1 when it cannot
// be read (a new SQLite file, an unreachable database: Open then says why).
func schemaVersion(dsn string) int {
	a := &admin{dsn: dsn}
	applied, _, _, err := a.schema()
	if err != nil {
		return -1
	}
	return int(applied)
}

// storeAttrs is the start-up line about the store: the backend, the absolute SQLite path (or the
// Postgres URL without its password), the schema version and whether this start migrated it.
func storeAttrs(dsn string, before int) []any {
	after := schemaVersion(dsn)
	attrs := []any{"schema_version", after}
	switch {
	case before < 0:
		attrs = append(attrs, "migrated", "new store")
	case before != after:
		attrs = append(attrs, "migrated", fmt.Sprintf("%d -> %d", before, after))
	default:
		attrs = append(attrs, "migrated", "none pending")
	}
	if isPostgresURL(dsn) {
		return append([]any{"backend", "postgres", "url", redactURL(dsn)}, attrs...)
	}
	path, _ := sqlitePath(dsn)
	if path == sqlite.Memory {
		return []any{"backend", "sqlite", "path", path, "note", "in memory: everything is lost when respgate stops"}
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return append([]any{"backend", "sqlite", "path", path}, attrs...)
}

// otelResource names respgate's telemetry: service.name respgate and its version, unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
func otelResource(ctx context.Context) *resource.Resource {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "respgate"), attribute.String("service.version", version.Get().Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return resource.Default()
	}
	return res
}

// serve runs the gateway on st until ctx ends, then drains it. Every goroutine it starts (the
// simulator, the HTTP server, the sweeper, the server's shutdown) belongs to one errgroup that it
// waits for before returning.
func serve(ctx context.Context, cfg *config, log *slog.Logger, st store.Store) (err error) {
	var g errgroup.Group
	var fl *fleet.Fleet
	// Background work stops only after the HTTP server drained: its turns still renew leases.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopBg()
		err = errors.Join(err, g.Wait())
		if fl != nil {
			fl.Close() // its probers; every call through it has ended
		}
	}()

	caller, f, err := startUpstream(ctx, bg, &g, cfg, st, log)
	if err != nil {
		return err
	}
	fl = f
	srvCfg := cfg.server
	srvCfg.Logger = log
	srv, err := server.New(ctx, srvCfg, st, caller)
	if err != nil {
		return err
	}
	// Background turns and the retention purge run on River in the store's database
	// (docs/background.md); the lease sweeper runs here on every replica.
	if _, ok := st.(store.Jobs); ok {
		// Not ctx: River reads the end of its start context as a hard stop (it logged "Hard stop
		// started; cancelling all work" after every clean shutdown). Shutdown stops it gracefully
		// within the drain instead, and the store's Close is the backstop.
		if err := srv.StartBackground(context.WithoutCancel(ctx)); err != nil {
			return err
		}
	}
	g.Go(func() error { srv.Run(bg); return nil })

	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		// A backstop: the server itself answers 431 with an envelope past --max-header-bytes.
		MaxHeaderBytes: max(1<<20, 2*srvCfg.MaxHeaderBytes),
		// No WriteTimeout: it would cut long streams; slow readers are bounded per write instead
		// (--write-timeout).
		IdleTimeout: 120 * time.Second,
	}
	if err := serveDebug(bg, &g, cfg.debugListen, log); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	ln = server.Listener(ln) // net/http's own refusals as JSON envelopes too
	log.Info("respgate listening", "addr", ln.Addr().String())
	serveErr := make(chan error, 1)
	g.Go(func() error { serveErr <- serveHTTP(hs, ln); return nil })

	select {
	case err = <-serveErr:
		log.Error("serving stopped; draining", "error", err)
	case <-ctx.Done():
	}
	drain(ctx, &g, srv, hs, cfg, log)
	log.Info("respgate stopped")
	return err
}

// startUpstream is the turns' upstream: the built-in simulator when nothing is configured
// (served by g until bg ends), the fleet of --upstreams (reloaded on SIGHUP until bg ends), or
// the one configured server, which is probed once.
func startUpstream(ctx, bg context.Context, g *errgroup.Group, cfg *config, st store.Store, log *slog.Logger) (upstream.Caller, *fleet.Fleet, error) {
	upCfg := cfg.upstream
	if upCfg.BaseURL == "" && cfg.upstreamsFile == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, fmt.Errorf("start simulator: %w", err)
		}
		sim := &http.Server{Handler: vllmsim.New(vllmsim.Options{}), ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error { return serveHTTP(sim, ln) })
		g.Go(func() error {
			<-bg.Done()
			return sim.Close()
		})
		upCfg.BaseURL = "http://" + ln.Addr().String() + "/v1"
		log.Warn("NO UPSTREAM CONFIGURED: answers come from the built-in vLLM SIMULATOR, not a real model; set --upstream-url / RESPGATE_UPSTREAM_URL for vLLM",
			"simulator_url", upCfg.BaseURL)
	}
	probe := upCfg.BaseURL == cfg.upstream.BaseURL && cfg.upstreamsFile == "" // a configured vLLM, not the simulator
	upCfg.Logger = log
	caller, fl, err := newUpstream(ctx, cfg, upCfg, st, log)
	if err != nil {
		return nil, nil, err
	}
	if fl != nil && cfg.upstreamsFile != "" {
		g.Go(func() error { reloadOnHangup(bg, fl, cfg.upstreamsFile, log); return nil })
	}
	if probe {
		probeUpstream(ctx, caller, upCfg.BaseURL, log)
	}
	return caller, fl, nil
}

// drain shuts the gateway down within --shutdown-timeout: srv stops new turns and, past the
// deadline, ends the remaining streams with response.failed, beside hs.Shutdown, which waits for
// the handlers of those turns.
func drain(ctx context.Context, g *errgroup.Group, srv *server.Server, hs *http.Server, cfg *config, log *slog.Logger) {
	log.Info("shutting down: draining in-flight requests", "deadline", cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	shut := make(chan struct{})
	g.Go(func() error { defer close(shut); srv.Shutdown(sctx); return nil })
	// The HTTP server waits a little longer than the turns, so streams ended at the deadline can
	// still write their terminal event before connections are closed. A stream writes it only
	// after its failed record is committed, so the grace is the commit's own bound: with a fixed
	// 5 s, a hundred streams cut at once on a busy Postgres lost their terminal events to
	// hs.Close (integration/chaos, sigterm/200-streams).
	grace := max(5*time.Second, cfg.server.CommitTimeout)
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout+grace)
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil {
		log.Warn("shutdown deadline reached; closing remaining connections")
		_ = hs.Close()
	}
	// Shutdown stops the background workers within sctx; returning first cancelled sctx under
	// them, and River then logged a hard stop after every clean shutdown.
	<-shut
}

// serveDebug serves server.DebugHandler (profiles and runtime counters) on addr (--debug-listen;
// nothing when it is empty) in g until stop ends.
func serveDebug(stop context.Context, g *errgroup.Group, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-listen: %w", err)
	}
	log.Info("debug listener serving profiles", "addr", ln.Addr().String())
	hs := &http.Server{Handler: server.DebugHandler(), ReadHeaderTimeout: 10 * time.Second}
	g.Go(func() error { return serveHTTP(hs, ln) })
	g.Go(func() error {
		<-stop.Done()
		return hs.Close()
	})
	return nil
}

// serveHTTP is hs.Serve(ln) without the error every graceful shutdown returns.
func serveHTTP(hs *http.Server, ln net.Listener) error {
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newUpstream is the turn's upstream: the fleet of --upstreams, or the one server of upCfg
// (--upstream-url, or the simulator) — as a fleet of one when --upstream-affinity-header is set,
// since the header is the fleet's. The fleet, when there is one, is also returned, for SIGHUP
// and for Close.
func newUpstream(ctx context.Context, cfg *config, upCfg upstream.Config, st store.Store, log *slog.Logger) (upstream.Caller, *fleet.Fleet, error) {
	if cfg.upstreamsFile == "" && cfg.affinityHeader == "" {
		up, err := upstream.New(upCfg)
		if err != nil {
			return nil, nil, fmt.Errorf("upstream: %w", err)
		}
		return upstream.Single(up), nil, nil
	}
	var top fleet.Topology
	var err error
	if cfg.upstreamsFile != "" {
		top, err = loadTopology(cfg.upstreamsFile)
	} else {
		top, err = fleet.SingleTopology(upCfg.BaseURL, upCfg.APIKey)
	}
	if err != nil {
		return nil, nil, err
	}
	fc := fleet.Config{Topology: top, Client: upCfg, Logger: log}
	if cfg.affinityHeader != "" {
		// One secret for every replica on the database, so a chain's header value is the same
		// whichever respgate replica sends it.
		secret, err := st.SecretGetOrCreate(ctx, &store.SecretGetOrCreateParams{
			Name: store.SecretUpstreamAffinity,
			Generate: func() ([]byte, error) {
				b := make([]byte, 32)
				_, err := rand.Read(b)
				return b, err
			},
		})
		if err != nil {
			return nil, nil, fmt.Errorf("load upstream affinity secret: %w", err)
		}
		fc.AffinityHeader, fc.AffinitySecret = cfg.affinityHeader, secret
	}
	fl, err := fleet.New(ctx, fc)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range top.Pools {
		log.Info("upstream pool", "pool", p.String())
	}
	return fl, fl, nil
}

// loadTopology reads and checks the --upstreams file.
func loadTopology(path string) (fleet.Topology, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's own --upstreams setting
	if err != nil {
		return fleet.Topology{}, fmt.Errorf("--upstreams: %w", err)
	}
	top, err := fleet.ParseTopology(b, os.Getenv)
	if err != nil {
		return fleet.Topology{}, fmt.Errorf("--upstreams %s: %w", path, err)
	}
	return top, nil
}

// reloadOnHangup rereads the --upstreams file on every SIGHUP until stop ends: a file that does
// not parse is logged and changes nothing; replicas it removes drain (fleet.Reload).
func reloadOnHangup(stop context.Context, fl *fleet.Fleet, path string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-stop.Done():
			return
		case <-hup:
		}
		top, err := loadTopology(path)
		if err == nil {
			err = fl.Reload(stop, top)
		}
		if err != nil {
			log.Error("upstreams not reloaded; the running fleet is unchanged", "error", err)
		}
	}
}

// probeUpstream asks the configured vLLM for /models once at start-up and warns, with the URL
// (no credentials) and a hint, when it cannot be reached or does not serve the OpenAI API there.
// It never stops the start: vLLM may come up after respgate.
func probeUpstream(ctx context.Context, up upstream.Caller, baseURL string, log *slog.Logger) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := up.Models(pctx)
	if err == nil {
		log.Info("upstream answers", "url", redactURL(baseURL)+"/models")
		return
	}
	var ue *upstream.Error
	hint := "check --upstream-url (RESPGATE_UPSTREAM_URL) and that vLLM is running; respgate retries on every request"
	if errors.As(err, &ue) && ue.Status == http.StatusNotFound {
		hint = "vLLM serves the OpenAI API under /v1: --upstream-url (RESPGATE_UPSTREAM_URL) should end in /v1, e.g. http://vllm:8000/v1"
		if strings.HasSuffix(strings.TrimSuffix(baseURL, "/"), "/v1") {
			hint = "this server has no /v1/models: is --upstream-url (RESPGATE_UPSTREAM_URL) a vLLM (or OpenAI-compatible) server?"
		}
	}
	log.Warn("upstream probe failed: /models did not answer", "url", redactURL(baseURL)+"/models", "error", err, "hint", hint)
}
