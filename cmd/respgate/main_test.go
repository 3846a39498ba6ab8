package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
)

// trackingStore counts the store calls in flight and records any made after Close.
type trackingStore struct {
	store.Store
	inFlight   atomic.Int32
	closed     atomic.Bool
	afterClose atomic.Int32
	sweeping   chan struct{} // closed when the first sweep started
	release    chan struct{} // the first sweep returns once this is closed and its ctx ended
	first      atomic.Bool
}

func (s *trackingStore) ResponseSweep(ctx context.Context, p *store.ResponseSweepParams) (int, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if s.closed.Load() {
		s.afterClose.Add(1)
	}
	if s.first.CompareAndSwap(false, true) {
		close(s.sweeping)
		<-ctx.Done()
		<-s.release // a sweep that is slow to notice its cancellation
	}
	return s.Store.ResponseSweep(context.WithoutCancel(ctx), p)
}

func (s *trackingStore) Close() error {
	s.closed.Store(true)
	return s.Store.Close()
}

// TestServeWaitsForItsGoroutinesBeforeReturning: the sweeper, the HTTP server, the simulator and
// the server's Shutdown all end before serve returns, so run's deferred store Close never races
// with them.
func TestServeWaitsForItsGoroutinesBeforeReturning(t *testing.T) {
	inner, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	st := &trackingStore{Store: inner, sweeping: make(chan struct{}), release: make(chan struct{})}
	cfg := mustParse(t, []string{"--listen", "127.0.0.1:0", "--shutdown-timeout", "5s"}, nil)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, log, st) }()
	select {
	case <-st.sweeping:
	case err := <-done:
		t.Fatalf("serve returned before sweeping: %v", err)
	}
	cancel() // SIGTERM

	// serve must not return while the sweep is still running. Give it the chance to (the wait
	// only decides when the sweep is let go; no assertion depends on how long anything takes).
	select {
	case err := <-done:
		close(st.release)
		t.Fatalf("serve returned (%v) while a store call was in flight (%d): the store would be closed under it", err, st.inFlight.Load())
	case <-time.After(200 * time.Millisecond):
	}
	close(st.release)
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if n := st.inFlight.Load(); n != 0 {
		t.Fatalf("%d store calls still in flight after serve returned", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := st.afterClose.Load(); n != 0 {
		t.Fatalf("%d store calls after Close", n)
	}
}

// TestRunStopsCleanlyOnCancel: run with the simulator and SQLite starts, logs its configuration
// once, and returns nil when its context ends (goleak in TestMain checks nothing is left).
func TestRunStopsCleanlyOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0"},
			env(map[string]string{"RESPGATE_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "db", "respgate.db")}), &out)
	}()
	logged(t, &out, done, "respgate listening")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.Bytes())
	}
	if n := bytes.Count(out.Bytes(), []byte(`"msg":"respgate starting"`)); n != 1 {
		t.Errorf("%d start-up lines:\n%s", n, out.Bytes())
	}
}

// TestDebugListenServesTheDebugHandlerOnItsOwnAddress: --debug-listen serves server.DebugHandler
// (its content is server's test) on its own address, not on the API's listener, and stops with
// run; without it no debug listener starts.
func TestDebugListenServesTheDebugHandlerOnItsOwnAddress(t *testing.T) {
	for _, on := range []bool{true, false} {
		args := []string{"--listen", "127.0.0.1:0"}
		if on {
			args = append(args, "--debug-listen", "127.0.0.1:0")
		}
		ctx, cancel := context.WithCancel(t.Context())
		var out syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, args, env(map[string]string{"RESPGATE_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "respgate.db")}), &out)
		}()
		api := logged(t, &out, done, "respgate listening")
		if !on {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			if bytes.Contains(out.Bytes(), []byte("debug listener")) {
				t.Fatalf("a debug listener started without --debug-listen:\n%s", out.Bytes())
			}
			continue
		}
		dbg := logged(t, &out, done, "debug listener serving profiles")
		if got := status(t, "http://"+dbg+"/debug/vars"); got != http.StatusOK {
			t.Errorf("debug /debug/vars: %d", got)
		}
		if got := status(t, "http://"+api+"/debug/pprof/heap"); got == http.StatusOK {
			t.Errorf("the API listener serves profiles")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		if _, err := get(t, "http://"+dbg+"/debug/pprof/"); err == nil {
			t.Errorf("the debug listener still answers after run returned")
		}
	}
}

// logged waits for run's log line msg and returns its addr.
func logged(t *testing.T, out *syncBuffer, done <-chan error, msg string) string {
	t.Helper()
	for {
		for l := range bytes.SplitSeq(out.Bytes(), []byte("\n")) {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(l, &rec) == nil && rec.Msg == msg {
				return rec.Addr
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned %v before logging %q:\n%s", err, msg, out.Bytes())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	code, err := get(t, url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code
}

// get answers url's status, its body read and closed.
func get(t *testing.T, url string) (int, error) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
