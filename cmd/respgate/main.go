// Command respgate runs the stateful OpenAI Responses gateway: configuration from flags with
// RESPGATE_* environment equivalents, the store (Postgres or embedded SQLite) with migrations run
// at start, the upstream vLLM client (or the built-in simulator when no upstream is configured),
// the lease sweeper, and graceful shutdown on SIGTERM/SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

type config struct {
	listen, upstreamURL, upstreamKey, databaseURL, apiKeys, logLevel, toolPolicy          string
	shutdownTimeout, keepAlive, upstreamConnect, upstreamIdle, leaseTTL, sweep, retention time.Duration
	maxBody                                                                               int64
	maxStreams, dbMaxConns                                                                int
}

// envName is the environment variable of a flag: RESPGATE_ and the flag's name in upper case
// with dashes as underscores (--upstream-url: RESPGATE_UPSTREAM_URL).
func envName(flagName string) string {
	return "RESPGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseConfig(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("respgate", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", ":8080", "address to listen on (RESPGATE_LISTEN)")
	fs.StringVar(&c.upstreamURL, "upstream-url", "", "vLLM base URL incl. /v1; empty starts the built-in simulator (RESPGATE_UPSTREAM_URL)")
	fs.StringVar(&c.upstreamKey, "upstream-api-key", "", "bearer key sent to vLLM (RESPGATE_UPSTREAM_API_KEY)")
	fs.StringVar(&c.databaseURL, "database-url", "sqlite:./data/respgate.db", "postgres://… or sqlite:PATH or sqlite::memory: (RESPGATE_DATABASE_URL)")
	fs.IntVar(&c.dbMaxConns, "database-max-conns", 32, "Postgres connection pool size (RESPGATE_DATABASE_MAX_CONNS)")
	fs.StringVar(&c.apiKeys, "api-keys", "", "comma-separated accepted client keys; empty accepts any key, isolated per key (RESPGATE_API_KEYS)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error (RESPGATE_LOG_LEVEL)")
	fs.StringVar(&c.toolPolicy, "tool-policy", "drop", "tools vLLM cannot serve: drop (with X-Respgate-Dropped-Tools) or reject (RESPGATE_TOOL_POLICY)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight requests (RESPGATE_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.keepAlive, "keepalive", 15*time.Second, "SSE keepalive interval during upstream silence (RESPGATE_KEEPALIVE)")
	fs.DurationVar(&c.upstreamConnect, "upstream-connect-timeout", 10*time.Second, "upstream connect + headers timeout (RESPGATE_UPSTREAM_CONNECT_TIMEOUT)")
	fs.DurationVar(&c.upstreamIdle, "upstream-idle-timeout", 120*time.Second, "max upstream silence mid-stream (RESPGATE_UPSTREAM_IDLE_TIMEOUT)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 60*time.Second, "lease of an in-progress response; after a crash the sweeper fails it once expired (RESPGATE_LEASE_TTL)")
	fs.DurationVar(&c.retention, "retention", 0, "delete stored responses older than this (e.g. 720h); 0 keeps them forever (RESPGATE_RETENTION)")
	fs.DurationVar(&c.sweep, "sweep-interval", 30*time.Second, "how often expired leases are swept (RESPGATE_SWEEP_INTERVAL)")
	fs.Int64Var(&c.maxBody, "max-body-bytes", 32<<20, "largest accepted request body (RESPGATE_MAX_BODY_BYTES)")
	fs.IntVar(&c.maxStreams, "max-streams", 0, "max concurrent streams, 0 = unbounded (RESPGATE_MAX_STREAMS)")
	// Environment first, through each flag's own parser, so a malformed value is an error as it
	// is on the command line; then the command line, which wins.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(envName(f.Name)); ok && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", envName(f.Name), err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.toolPolicy != "drop" && c.toolPolicy != "reject" {
		return nil, fmt.Errorf("--tool-policy must be drop or reject")
	}
	return c, nil
}

// redactURL drops the password of a database URL for printing.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
	}
	return u.String()
}

func openStore(ctx context.Context, dsn string, maxConns int) (store.Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		// pgxpool's default (max(4, CPUs)) serialises a busy gateway's commits on 2 cores.
		return postgres.Open(ctx, dsn, postgres.WithMaxConns(int32(maxConns)))
	case strings.HasPrefix(dsn, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	}
	return nil, errors.New("--database-url must start with postgres://, postgresql:// or sqlite:")
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "respgate:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := parseConfig(os.Args[1:])
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
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var keys []string
	for _, k := range strings.Split(cfg.apiKeys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	log.Info("respgate starting",
		"listen", cfg.listen,
		"upstream_url", cfg.upstreamURL,
		"upstream_api_key_set", cfg.upstreamKey != "",
		"database_url", redactURL(cfg.databaseURL),
		"database_max_conns", cfg.dbMaxConns,
		"api_keys", len(keys),
		"tool_policy", cfg.toolPolicy,
		"shutdown_timeout", cfg.shutdownTimeout.String(),
		"keepalive", cfg.keepAlive.String(),
		"upstream_connect_timeout", cfg.upstreamConnect.String(),
		"upstream_idle_timeout", cfg.upstreamIdle.String(),
		"max_body_bytes", cfg.maxBody,
		"max_streams", cfg.maxStreams,
		"lease_ttl", cfg.leaseTTL.String(),
		"sweep_interval", cfg.sweep.String(),
		"retention", cfg.retention.String())

	// Traces go over OTLP/HTTP when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or the traces one)
	// is set; the exporter reads the rest of the OTEL_* variables itself.
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		otel.SetTracerProvider(tp)
		defer func() { _ = tp.Shutdown(context.Background()) }()
		log.Info("exporting traces over OTLP")
	}

	st, err := openStore(ctx, cfg.databaseURL, cfg.dbMaxConns)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	upstreamURL := cfg.upstreamURL
	if upstreamURL == "" {
		simURL, closeSim, err := startSimulator()
		if err != nil {
			return err
		}
		defer closeSim()
		upstreamURL = simURL
		log.Warn("NO UPSTREAM CONFIGURED: answers come from the built-in vLLM SIMULATOR, not a real model; set --upstream-url / RESPGATE_UPSTREAM_URL for vLLM",
			"simulator_url", simURL)
	}
	up, err := upstream.New(upstream.Config{BaseURL: upstreamURL, APIKey: cfg.upstreamKey,
		ConnectTimeout: cfg.upstreamConnect, IdleTimeout: cfg.upstreamIdle})
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	srv, err := server.New(ctx, server.Config{APIKeys: keys, MaxBodyBytes: cfg.maxBody, KeepAlive: cfg.keepAlive,
		ToolPolicy: server.ToolPolicy(cfg.toolPolicy), MaxConcurrentStreams: cfg.maxStreams, Logger: log,
		LeaseTTL: cfg.leaseTTL, SweepInterval: cfg.sweep, Retention: cfg.retention}, st, up)
	if err != nil {
		return err
	}
	bg, cancelBg := context.WithCancel(context.Background())
	defer cancelBg()
	go srv.Run(bg)

	hs := &http.Server{
		Addr:              cfg.listen,
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    1 << 20, // a backstop: the server answers 431 with an envelope past 64 KiB
		// No WriteTimeout: it would cut long streams; slow readers are bounded per write instead.
		IdleTimeout: 120 * time.Second,
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	log.Info("respgate listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "deadline", cfg.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	go srv.Shutdown(sctx) // stops new turns; past the deadline ends the remaining streams with response.failed
	// The HTTP server waits a little longer than the turns, so streams ended at the deadline can
	// still write their terminal event before connections are closed.
	hctx, hcancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout+5*time.Second)
	defer hcancel()
	if err := hs.Shutdown(hctx); err != nil {
		log.Warn("shutdown deadline reached; closing remaining connections")
		_ = hs.Close()
	}
	log.Info("respgate stopped")
	return nil
}

// startSimulator serves the vLLM simulator on a loopback port and returns its base URL.
func startSimulator() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("start simulator: %w", err)
	}
	hs := &http.Server{Handler: vllmsim.New(vllmsim.Options{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/v1", func() { _ = hs.Close() }, nil
}
