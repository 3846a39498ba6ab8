package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// The serve modes run the benchmark's helper servers as separate processes, so that /proc charges
// each one its own CPU time and RSS:
//
//	benchrun sim     -listen ADDR                       the vLLM simulator, request log off
//	benchrun proxy   -listen ADDR -target URL           arm B: a bare httputil.ReverseProxy
//
// proxy also serves server.DebugHandler's /debug/ paths, as respgate does on --debug-listen, so
// child.memstats reads both the same way.

// debugMux serves server.DebugHandler (profiles and runtime counters), as respgate's
// --debug-listen does, for benchrun's own proxy; everything else goes to next.
func debugMux(next http.Handler) http.Handler {
	debug := server.DebugHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/") {
			debug.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveUntilSignal serves h on addr until SIGTERM/SIGINT, then shuts down gracefully.
func serveUntilSignal(addr string, h http.Handler, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10, IdleTimeout: 120 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("benchrun helper listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	return nil
}

func serveSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	_ = fs.Parse(args)
	// RecordLimit -1: vLLM keeps no request log, and the simulator's default ring of 1,024
	// request bodies would hold gigabytes in the chain-depth scenario.
	sim := vllmsim.New(vllmsim.Options{RecordLimit: -1})
	return serveUntilSignal(*listen, newStamper(sim), slog.New(slog.NewJSONHandler(os.Stderr, nil)))
}

// nonceMark tags a request whose delta events the simulator should time-stamp: the input text
// carries nonceMark + an id, which reaches the simulator unchanged through every arm.
const nonceMark = "bench-nonce-"

// stampsPath answers (and forgets) the stamps of the requests whose nonce has the given prefix,
// as {"nonce": stamps, …}.
const stampsPath = "/bench/stamps"

// stamps are wall-clock times (Unix ns) the simulator noted for one tagged request.
type stamps struct {
	// Arrive: the request's headers were read; Body: its whole body was read (the moment the
	// model could start on it).
	Arrive int64 `json:"arrive"`
	Body   int64 `json:"body"`
	// Deltas: each delta event's frame was flushed to the connection.
	Deltas []int64 `json:"deltas"`
}

// stamper wraps the simulator: for a tagged request it records when the request arrived and
// when each delta event was flushed. Matched with the client's own times (the same clock:
// CLOCK_REALTIME is shared by processes), they split an arm's latency into the part before the
// request reached the model and the relay of each event, free of the simulator's own jitter.
type stamper struct {
	next http.Handler
	mu   sync.Mutex
	m    map[string]*stamps
}

func newStamper(next http.Handler) *stamper { return &stamper{next: next, m: map[string]*stamps{}} }

func (s *stamper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrive := time.Now().UnixNano()
	if r.URL.Path == stampsPath {
		prefix := r.URL.Query().Get("prefix")
		out := map[string]*stamps{}
		s.mu.Lock()
		for k, v := range s.m {
			if strings.HasPrefix(k, prefix) {
				out[k] = v
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	if r.Method != http.MethodPost {
		s.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	st := &stamps{Arrive: arrive, Body: time.Now().UnixNano()}
	r.Body = io.NopCloser(bytes.NewReader(body))
	i := bytes.Index(body, []byte(nonceMark))
	if i < 0 {
		s.next.ServeHTTP(w, r)
		return
	}
	j := i + len(nonceMark)
	for j < len(body) && (body[j] == '-' || body[j] == '_' || body[j] >= '0' && body[j] <= '9' || body[j] >= 'a' && body[j] <= 'z') {
		j++
	}
	sw := &stampWriter{ResponseWriter: w, st: st}
	st.Deltas = make([]int64, 0, 300)
	s.next.ServeHTTP(sw, r)
	s.mu.Lock()
	s.m[string(body[i:j])] = st
	s.mu.Unlock()
}

// stampWriter notes the time of each flush that ends a delta event's frame (the simulator writes
// and flushes one frame at a time).
type stampWriter struct {
	http.ResponseWriter
	delta bool
	st    *stamps
}

func (w *stampWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(".delta\ndata:")) {
		w.delta = true
	}
	return w.ResponseWriter.Write(p)
}

func (w *stampWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if w.delta {
		w.st.Deltas = append(w.st.Deltas, time.Now().UnixNano())
		w.delta = false
	}
}

func (w *stampWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if w.delta {
		w.st.Deltas = append(w.st.Deltas, time.Now().UnixNano())
		w.delta = false
	}
	return err
}

func (w *stampWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveProxy is arm B, the floor: Go's reverse proxy with the request body read whole before it
// is forwarded (as respgate must, to parse it) and each response write flushed at once.
func serveProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	target := fs.String("target", "", "upstream base URL, e.g. http://127.0.0.1:8000")
	_ = fs.Parse(args)
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("proxy: bad -target %q", *target)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = u.Host
		},
		FlushInterval: -1,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 32<<20))
		if err != nil {
			http.Error(w, "body", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r)
	})
	return serveUntilSignal(*listen, debugMux(h), slog.New(slog.NewJSONHandler(os.Stderr, nil)))
}
