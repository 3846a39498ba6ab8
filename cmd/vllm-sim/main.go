// Command vllm-sim serves the vLLM simulator (package upstream/vllmsim) over HTTP: vLLM's
// /v1/responses and /v1/models, plus /sim/requests, the log of the requests it received.
//
//	vllm-sim --listen :8000 [--fault 'delay_ms=20'] [--seed 1]
//
// Every flag has an environment equivalent (VLLM_SIM_LISTEN, VLLM_SIM_FAULT, VLLM_SIM_SEED). It stops
// gracefully on SIGINT or SIGTERM: it stops accepting, lets running requests finish for up to
// --shutdown-timeout, then closes the remaining connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/respgate/respgate/upstream/vllmsim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	seed, err := strconv.ParseUint(envOr("VLLM_SIM_SEED", "0"), 10, 64)
	if err != nil {
		return fmt.Errorf("parse VLLM_SIM_SEED: %w", err)
	}
	listen := flag.String("listen", envOr("VLLM_SIM_LISTEN", ":8000"), "address to listen on (env VLLM_SIM_LISTEN)")
	fault := flag.String("fault", os.Getenv("VLLM_SIM_FAULT"), "fault spec applied to every request, e.g. 'delay_ms=20' or 'quirks=none' (env VLLM_SIM_FAULT)")
	flag.Uint64Var(&seed, "seed", seed, "non-zero: deterministic ids (env VLLM_SIM_SEED)")
	shutdownTimeout := flag.Duration("shutdown-timeout", 10*time.Second, "how long running requests may finish after SIGTERM")
	flag.Parse()

	if err := vllmsim.ValidateFault(*fault); err != nil {
		return err
	}
	sim := vllmsim.New(vllmsim.Options{Fault: *fault, Seed: seed})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	log.Info("vllm-sim listening", "addr", ln.Addr().String(),
		"models", []string{vllmsim.HarmonyModel, vllmsim.ParserModel}, "fault", *fault)

	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("vllm-sim shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close() // streams still running after the timeout are cut
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
