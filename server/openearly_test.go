package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// The in-progress record never sits on the time to first byte (issue 25 item 3): the client's
// stream opens once upstream has answered, and response.created waits for the record.

// heldBeginStore is the real SQLite store whose ResponseBegin waits for release (and then fails
// with beginErr, when set) after telling entered.
type heldBeginStore struct {
	store.Store
	entered  chan struct{}
	release  chan struct{}
	beginErr error
	commits  atomic.Int32
}

func (h *heldBeginStore) ResponseBegin(ctx context.Context, p *store.ResponseBeginParams) error {
	h.entered <- struct{}{}
	<-h.release
	if h.beginErr != nil {
		return h.beginErr
	}
	return h.Store.ResponseBegin(ctx, p)
}

func (h *heldBeginStore) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	h.commits.Add(1)
	return h.Store.ResponseCommit(ctx, p)
}

// headerClient records a response; headers tells once the status line was flushed before any
// body byte.
type headerClient struct {
	recorder
	headers chan struct{}
	once    sync.Once
}

func (c *headerClient) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started()
	return c.body.Write(b)
}

func (c *headerClient) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.code != 0 && c.body.Len() == 0 {
		c.once.Do(func() { close(c.headers) })
	}
}

func (c *headerClient) snapshot() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.body.String()
}

func newHeldBeginServer(t *testing.T, beginErr error) (*Server, *heldBeginStore) {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	t.Cleanup(sim.Close)
	up, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.CloseIdleConnections)
	st := &heldBeginStore{Store: sq, entered: make(chan struct{}, 1), release: make(chan struct{}), beginErr: beginErr}
	s, err := New(t.Context(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, upstream.Single(up))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, st
}

// serveHeld serves a stored stream in the background; the returned channel closes when it ends.
func serveHeld(t *testing.T, s *Server, c *headerClient) <-chan struct{} {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/responses",
		strings.NewReader(`{"model":"openai/gpt-oss-sim?quirks=none&tokens=4","input":"hi","stream":true,"store":true}`))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() { defer close(done); s.ServeHTTP(c, req) }()
	return done
}

func TestAStreamOpensBeforeItsInProgressRecordIsWrittenAndNamesItsIdOnlyAfter(t *testing.T) {
	s, st := newHeldBeginServer(t, nil)
	c := &headerClient{recorder: recorder{header: http.Header{}}, headers: make(chan struct{})}
	done := serveHeld(t, s, c)
	<-st.entered
	<-c.headers // upstream answered: the status line went out while the record is not written
	if code, body := c.snapshot(); code != http.StatusOK || body != "" {
		t.Fatalf("before the record was written: status %d, body %q; want 200 and no event", code, body)
	}
	close(st.release)
	<-done
	_, body := c.snapshot()
	if !strings.HasPrefix(body, "event: response.created\n") || !strings.Contains(body, "event: response.completed\n") ||
		!strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream %q: want response.created first, response.completed, [DONE]", body)
	}
}

func TestAStreamWhoseInProgressRecordFailsAfterItOpenedEndsWithAnErrorEvent(t *testing.T) {
	s, st := newHeldBeginServer(t, errors.New("store unreachable (injected)"))
	c := &headerClient{recorder: recorder{header: http.Header{}}, headers: make(chan struct{})}
	done := serveHeld(t, s, c)
	<-st.entered
	<-c.headers
	close(st.release)
	<-done
	code, body := c.snapshot()
	want := "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The gateway had an internal error.\",\"param\":null,\"sequence_number\":0}\n\ndata: [DONE]\n\n"
	if code != http.StatusOK || body != want {
		t.Fatalf("status %d, stream %q; want 200 and %q", code, body, want)
	}
	if n := st.commits.Load(); n != 0 {
		t.Errorf("%d commits for a response that was never begun", n)
	}
}
