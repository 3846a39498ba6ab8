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
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"

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
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "respgate:", err)
		os.Exit(1)
	}
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
	log.Info("respgate starting", cfg.logAttrs()...)

	// Traces go over OTLP/HTTP when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or the traces one)
	// is set; the exporter reads the rest of the OTEL_* variables itself.
	if hasEnv(lookupEnv, "OTEL_EXPORTER_OTLP_ENDPOINT") || hasEnv(lookupEnv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		otel.SetTracerProvider(tp)
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }() // flush spans after ctx ends
		log.Info("exporting traces over OTLP")
	}

	st, err := openStore(ctx, cfg.databaseURL, cfg.dbMaxConns, log)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
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
		return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	}
	return nil, errors.New("--database-url must be a postgres://, postgresql:// or sqlite: URL")
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

	upCfg := cfg.upstream
	if upCfg.BaseURL == "" && cfg.upstreamsFile == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("start simulator: %w", err)
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
	caller, f, err := newUpstream(ctx, cfg, upCfg, st, log)
	if err != nil {
		return err
	}
	fl = f
	if fl != nil && cfg.upstreamsFile != "" {
		g.Go(func() error { reloadOnHangup(bg, fl, cfg.upstreamsFile, log); return nil })
	}
	srvCfg := cfg.server
	srvCfg.Logger = log
	srv, err := server.New(ctx, srvCfg, st, caller)
	if err != nil {
		return err
	}
	// Background turns and the retention purge run on River in the store's database
	// (docs/background.md); the lease sweeper runs here on every replica.
	if _, ok := st.(store.Jobs); ok {
		if err := srv.StartBackground(ctx); err != nil {
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
	log.Info("shutting down: draining in-flight requests", "deadline", cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	// Shutdown stops new turns; past the deadline it ends the remaining streams with
	// response.failed. It runs beside hs.Shutdown, which waits for the handlers of those turns.
	g.Go(func() error { srv.Shutdown(sctx); return nil })
	// The HTTP server waits a little longer than the turns, so streams ended at the deadline can
	// still write their terminal event before connections are closed. A stream writes it only
	// after its failed record is committed, so the grace is the commit's own bound: with a fixed
	// 5 s, a hundred streams cut at once on a busy Postgres lost their terminal events to
	// hs.Close (integration/chaos, sigterm/200-streams).
	grace := max(5*time.Second, srvCfg.CommitTimeout)
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout+grace)
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil {
		log.Warn("shutdown deadline reached; closing remaining connections")
		_ = hs.Close()
	}
	log.Info("respgate stopped")
	return err
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
