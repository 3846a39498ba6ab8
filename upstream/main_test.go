package upstream

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/traces/*.events.golden")

// TestMain fails the package when any test leaks a goroutine: streaming code leaks them first
// (docs/style.md).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testKey is a planted secret: no error, log line or String may ever contain it.
const testKey = "sk-test-PLANTED-SECRET-5f1d2c"

// newTestClient returns a Client for base (a server's URL, without /v1) whose idle connections
// are closed when the test ends.
func newTestClient(t testing.TB, base string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{BaseURL: base + "/v1", APIKey: testKey}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// sseServer serves sseHandler over HTTP.
func sseServer(t testing.TB, chunks ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(sseHandler(chunks...))
	t.Cleanup(srv.Close)
	return srv
}

// sseHandler serves body as a text/event-stream, written in the given chunks with a flush after
// each.
func sseHandler(chunks ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for _, c := range chunks {
			if _, err := io.WriteString(w, c); err != nil {
				return
			}
			_ = rc.Flush()
		}
	})
}

// rawServer hands each accepted request's hijacked connection to fn, which writes raw bytes.
// The handler returns when fn does; the connection is closed then.
func rawServer(t testing.TB, fn func(conn net.Conn, rw *bufio.ReadWriter)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		fn(conn, rw)
		_ = rw.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// event is a decoded event that owns its data.
type event struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// outcome is everything a decode produced: the events and how the stream ended.
type outcome struct {
	Events []event
	End    string // "eof", "closed" or an error Kind name
}

func endName(err error) string {
	switch {
	case err == io.EOF:
		return "eof"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind.String()
	}
	return "unclassified: " + err.Error()
}

// drain reads s to its end with Events, copying every event (Data is only valid until the loop's
// body returns).
func drain(t testing.TB, s *Stream) outcome {
	t.Helper()
	defer s.Close()
	var o outcome
	for ev, err := range s.Events() {
		if err != nil {
			o.End = endName(err)
			break
		}
		o.Events = append(o.Events, event{Type: string(ev.Type), Data: string(ev.Data)})
	}
	return o
}

// pull steps through s.Events one event at a time, for tests that act between two events (stop
// reading, cancel, look at the stream). After the error that ends the stream it keeps returning
// that error. The iterator is stopped when the test ends.
func pull(t testing.TB, s *Stream) func() (wire.Event, error) {
	next, stop := iter.Pull2(s.Events())
	t.Cleanup(stop)
	var end error
	return func() (wire.Event, error) {
		if end != nil {
			return wire.Event{}, end
		}
		ev, err, ok := next()
		if !ok {
			t.Fatal("Events ended without its final error")
		}
		end = err
		return ev, err
	}
}

// memStream decodes r without HTTP: the same Stream as over the network, with an idle timer that
// never fires. It is for decoding tests, the fuzz target and the decoder benchmark.
func memStream(c *Client, r io.Reader) *Stream {
	ctx, cancel := context.WithCancelCause(context.Background())
	cl := &call{caller: context.Background(), ctx: ctx, cancel: cancel, idleD: time.Hour}
	cl.idle = time.AfterFunc(time.Hour, func() { cancel(errIdleTimeout) })
	cl.idle.Stop()
	return c.newStream(cl, http.StatusOK, io.NopCloser(r))
}

// chunkReader returns its data in the given chunk sizes (cycling), never more per Read.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = min(n, r.sizes[r.i%len(r.sizes)])
		r.i++
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// waitOrTimeout fails the test when ch does not close or deliver within d.
func waitOrTimeout[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	var zero T
	return zero
}

func mustKind(t testing.TB, err error, want Kind) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *upstream.Error", err, err)
	}
	if e.Kind != want {
		t.Fatalf("kind = %s, want %s (error: %v)", e.Kind, want, e)
	}
	return e
}

func assertNoSecrets(t testing.TB, what, s string, base string) {
	t.Helper()
	for _, secret := range []string{testKey, base, strings.TrimPrefix(base, "http://")} {
		if secret != "" && strings.Contains(s, secret) {
			t.Errorf("%s contains %q: %s", what, secret, s)
		}
	}
}
