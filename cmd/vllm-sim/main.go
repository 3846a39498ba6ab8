// Command vllm-sim serves the vLLM simulator (package upstream/vllmsim) over HTTP: vLLM's
// /v1/responses, /v1/models, /tokenize and /health, plus /sim/requests, the log of the requests
// it received.
//
//	vllm-sim --listen :8000 [--instances 4] [--fault 'delay_ms=20'] [--seed 1]
//	         [--prefix-cache-blocks 4096 --prefill-per-token 50us --prefill-base 5ms --decode-per-token 1ms]
//
// --instances N serves N independent simulated vLLM servers from one process, on N consecutive
// ports from --listen's (each on a port of its own when that port is 0): each has its own
// prefix cache and request log, as N replicas of a fleet would (docs/fleet.md). Every flag has
// an environment equivalent (VLLM_SIM_LISTEN, VLLM_SIM_INSTANCES, VLLM_SIM_FAULT, VLLM_SIM_SEED,
// VLLM_SIM_MAX_MODEL_LEN, VLLM_SIM_PREFIX_CACHE_BLOCKS, VLLM_SIM_PREFILL_BASE, VLLM_SIM_PREFILL_PER_TOKEN,
// VLLM_SIM_DECODE_PER_TOKEN). It logs one "vllm-sim listening" line per instance once it
// accepts connections. It stops gracefully on SIGINT or SIGTERM: it stops accepting, lets
// running requests finish for up to --shutdown-timeout, then closes the remaining connections.
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
	"sync"
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
	instances, err := strconv.Atoi(envOr("VLLM_SIM_INSTANCES", "1"))
	if err != nil {
		return fmt.Errorf("parse VLLM_SIM_INSTANCES: %w", err)
	}
	maxLen, err := strconv.Atoi(envOr("VLLM_SIM_MAX_MODEL_LEN", "0"))
	if err != nil {
		return fmt.Errorf("parse VLLM_SIM_MAX_MODEL_LEN: %w", err)
	}
	blocks, err := strconv.Atoi(envOr("VLLM_SIM_PREFIX_CACHE_BLOCKS", "0"))
	if err != nil {
		return fmt.Errorf("parse VLLM_SIM_PREFIX_CACHE_BLOCKS: %w", err)
	}
	var durs [3]time.Duration
	for i, name := range []string{"VLLM_SIM_PREFILL_BASE", "VLLM_SIM_PREFILL_PER_TOKEN", "VLLM_SIM_DECODE_PER_TOKEN"} {
		if durs[i], err = time.ParseDuration(envOr(name, "0s")); err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
	}
	listen := flag.String("listen", envOr("VLLM_SIM_LISTEN", ":8000"), "address to listen on; with --instances, the first of consecutive ports (env VLLM_SIM_LISTEN)")
	flag.IntVar(&instances, "instances", instances, "independent simulated servers to serve, on consecutive ports (env VLLM_SIM_INSTANCES)")
	fault := flag.String("fault", os.Getenv("VLLM_SIM_FAULT"), "fault spec applied to every request, e.g. 'delay_ms=20' or 'quirks=none' (env VLLM_SIM_FAULT)")
	flag.Uint64Var(&seed, "seed", seed, "non-zero: deterministic ids (env VLLM_SIM_SEED)")
	flag.IntVar(&maxLen, "max-model-len", maxLen, "context length each instance reports and enforces; 0: 131072 (env VLLM_SIM_MAX_MODEL_LEN)")
	flag.IntVar(&blocks, "prefix-cache-blocks", blocks, "prefix cache capacity per instance in 16-token blocks; 0 disables it (env VLLM_SIM_PREFIX_CACHE_BLOCKS)")
	flag.DurationVar(&durs[0], "prefill-base", durs[0], "time to first token before any prefill (env VLLM_SIM_PREFILL_BASE)")
	flag.DurationVar(&durs[1], "prefill-per-token", durs[1], "prefill time per uncached input token, e.g. 50us (env VLLM_SIM_PREFILL_PER_TOKEN)")
	flag.DurationVar(&durs[2], "decode-per-token", durs[2], "time per output token when the request's fault sets no delay_ms (env VLLM_SIM_DECODE_PER_TOKEN)")
	shutdownTimeout := flag.Duration("shutdown-timeout", 10*time.Second, "how long running requests may finish after SIGTERM")
	flag.Parse()

	if err := vllmsim.ValidateFault(*fault); err != nil {
		return err
	}
	if instances < 1 || instances > 256 {
		return errors.New("--instances must be between 1 and 256")
	}
	if maxLen < 0 || blocks < 0 || durs[0] < 0 || durs[1] < 0 || durs[2] < 0 {
		return errors.New("--prefix-cache-blocks and the costs must not be negative")
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("--listen: port %q is not a number", portText)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	lns, err := listenAll(host, port, instances)
	if err != nil {
		return err
	}
	handlers := make([]http.Handler, len(lns))
	for i, ln := range lns {
		handlers[i] = vllmsim.New(vllmsim.Options{Fault: *fault, Seed: seed, MaxModelLen: maxLen, PrefixCacheBlocks: blocks,
			PrefillBase: durs[0], PrefillPerToken: durs[1], DecodePerToken: durs[2]})
		log.Info("vllm-sim listening", "instance", i, "addr", ln.Addr().String(),
			"models", []string{vllmsim.HarmonyModel, vllmsim.ParserModel}, "fault", *fault,
			"prefix_cache_blocks", blocks, "prefill_base", durs[0].String(), "prefill_per_token", durs[1].String(),
			"decode_per_token", durs[2].String())
	}
	return serveUntilSignal(lns, handlers, *shutdownTimeout, log)
}

// listenAll listens on n consecutive ports from port (any free ports when port is 0) of host.
func listenAll(host string, port, n int) ([]net.Listener, error) {
	var lns []net.Listener
	for i := range n {
		p := port
		if port != 0 {
			p = port + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("listen (instance %d): %w", i, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// serveUntilSignal serves handlers[i] on lns[i] until SIGINT or SIGTERM (or a server fails),
// then lets running requests finish for shutdownTimeout, cuts the rest, and waits for every
// server.
func serveUntilSignal(lns []net.Listener, handlers []http.Handler, shutdownTimeout time.Duration, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	servers := make([]*http.Server, len(lns))
	served := make(chan error, len(lns))
	var wg sync.WaitGroup
	for i, ln := range lns {
		srv := &http.Server{Handler: handlers[i], ReadHeaderTimeout: 10 * time.Second}
		servers[i] = srv
		wg.Go(func() { served <- srv.Serve(ln) })
	}
	var failed error
	select {
	case err := <-served:
		failed = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("vllm-sim shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var sw sync.WaitGroup
	for _, srv := range servers {
		sw.Go(func() {
			if err := srv.Shutdown(shutdownCtx); err != nil {
				_ = srv.Close() // streams still running after the timeout are cut
			}
		})
	}
	sw.Wait()
	wg.Wait()
	close(served)
	for err := range served {
		if failed == nil && !errors.Is(err, http.ErrServerClosed) {
			failed = fmt.Errorf("serve: %w", err)
		}
	}
	return failed
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
