package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/telemetry"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
	"github.com/respgate/respgate/wire"
)

// The engine's tests drive turns as a front door does: a create body decoded into a Spec, run
// by Serve with a door that records what the client would have received (testDoor).

// testTenant is the tenant every harness turn runs as.
const testTenant = "tenant-k"

// testConfig is cfg with its defaults, logging nowhere unless cfg says where.
func testConfig(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Defaults()
	return cfg
}

// newTestEngine is an Engine over st and up with cfg's defaults filled in; cleanup drains and
// stops it.
func newTestEngine(tb testing.TB, cfg Config, st store.Store, up upstream.Caller) *Engine {
	tb.Helper()
	tel, err := telemetry.New(tb.Context(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := New(tb.Context(), testConfig(cfg), st, up, tel)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Drain(context.Background()); e.Stop(context.Background()) })
	return e
}

// newSQLite is a fresh SQLite store, closed at cleanup.
func newSQLite(t *testing.T) store.Store {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	return sq
}

// newSimEngine is an Engine on a fresh SQLite store, wrapped by wrap when it is not nil, with
// the simulator as upstream; it also returns the simulator, whose log holds what was sent
// upstream.
func newSimEngine(t *testing.T, cfg Config, wrap func(store.Store) store.Store) (*Engine, *vllmsim.Sim) {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	simulator := vllmsim.New(vllmsim.Options{})
	sim := httptest.NewServer(simulator)
	t.Cleanup(sim.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	up, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store = sq
	if wrap != nil {
		st = wrap(sq)
	}
	return newTestEngine(t, cfg, st, upstream.Single(up)), simulator
}

// specOf decodes a create body into the Spec a front door would build (with a minimal echo).
func specOf(tb testing.TB, body string) *Spec {
	tb.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &members); err != nil {
		tb.Fatalf("body %s: %v", body, err)
	}
	w, err := wire.DecodeCreateRequest(members)
	if err != nil {
		tb.Fatalf("body %s: %v", body, err)
	}
	echo, err := wire.Marshal(map[string]any{"model": w.Model.Value, "store": w.Store})
	if err != nil {
		tb.Fatal(err)
	}
	return &Spec{Tenant: testTenant, Request: w, Input: w.Input, Model: w.Model.Value, PreviousResponseID: w.PreviousResponseID,
		ConversationID: w.ConversationID, Store: w.Store, Stream: w.Stream, Background: w.Background, Echo: echo}
}

// call runs one turn from a create body and returns what its client would get: 200 and the
// response object (non-streamed) or the event stream (streamed), else the error's status and
// envelope.
func call(t *testing.T, e *Engine, body string) (int, string) {
	t.Helper()
	return callSpec(t, e, specOf(t, body))
}

// callSpec is call of a Spec the test has adjusted.
func callSpec(t *testing.T, e *Engine, spec *Spec) (int, string) {
	t.Helper()
	d := &testDoor{}
	out, err := e.Serve(t.Context(), spec, d)
	if err != nil {
		ae := KnownAPIError(err)
		if ae == nil {
			ae = e.Unexpected(err)
		}
		return ae.Status, string(ae.Envelope())
	}
	if d.opened {
		return http.StatusOK, d.String()
	}
	return http.StatusOK, string(RenderResponse(nil, &out.Response, out.Visible()))
}

// testDoor records a turn's preparation and its client events.
type testDoor struct {
	mu       sync.Mutex
	prepared Prepared
	opened   bool
	buf      bytes.Buffer
	last     time.Time
}

func (d *testDoor) Prepared(p Prepared) { d.prepared = p }

func (d *testDoor) Open() Sink {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.opened = true
	return d
}

func (d *testDoor) Write(b []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buf.Write(b)
	d.last = time.Now()
	return nil
}

func (d *testDoor) Keepalive() error { return d.Write([]byte(": keepalive\n\n")) }

func (d *testDoor) IdleSince() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

func (d *testDoor) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.buf.String()
}

// engineOver is an Engine on a fresh SQLite store whose upstream is reached through rt.
func engineOver(t *testing.T, rt http.RoundTripper) *Engine {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	up, err := upstream.New(upstream.Config{BaseURL: "http://upstream.invalid/v1", Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	return newTestEngine(t, Config{}, sq, upstream.Single(up))
}

// sseResponse is a 200 event stream answering r with stream.
func sseResponse(r *http.Request, stream []byte) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(stream)),
		ContentLength: -1, Request: r}
}

// recordSimStream is the simulator's event stream for body.
func recordSimStream(tb testing.TB, body string) []byte {
	tb.Helper()
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	defer sim.Close()
	resp, err := http.Post(sim.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("record: %d %v", resp.StatusCode, err)
	}
	return raw
}
