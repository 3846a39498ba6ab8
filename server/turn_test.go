package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
	"github.com/respgate/respgate/wire"
)

// Unit tests of the turn lifecycle (docs/design.md §1): a real Server on the real SQLite store,
// the vLLM simulator as upstream, and the client's end of the connection in process. The store
// wrapper and the client's writer log into one ordered list of steps, so "the commit happens
// before the terminal event" is a fact about that order, not about timing; a store that fails
// or blocks its commit, and an upstream gate that holds a request until the client leaves, make
// the failure paths happen every time.

// steps is the ordered log of what a turn did, shared by the store and the client.
type steps struct {
	mu   sync.Mutex
	list []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, step)
}

func (s *steps) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// index is the position of the first step equal to step, or -1.
func index(list []string, step string) int { return slices.Index(list, step) }

// turnStore is the real SQLite store; it logs the lifecycle's writes and records every commit.
// commitErr makes every ResponseCommit fail with it (nothing is stored); lostErr makes every
// ResponseCommit store its record and then return lostErr (the answer lost on the way back); with
// release set, the first ResponseCommit closes entered and waits for release before doing
// anything.
type turnStore struct {
	store.Store
	steps     *steps
	commitErr error
	lostErr   error
	chainErr  error // ResponseChainGet fails with it
	beginErr  error // ResponseBegin fails with it
	// beginAfter, when set, holds the failing ResponseBegin until it is closed.
	beginAfter chan struct{}
	entered    chan struct{}
	release    chan struct{}
	once       sync.Once
	// listed, when set, receives how many runs each ResponseEventList returned (dropped when
	// nobody waits).
	listed chan int

	mu      sync.Mutex
	commits []store.ResponseCommitParams
}

func (s *turnStore) ResponseBegin(ctx context.Context, p *store.ResponseBeginParams) error {
	s.steps.add("store: begin")
	if s.beginErr != nil {
		if s.beginAfter != nil {
			<-s.beginAfter
		}
		return s.beginErr
	}
	return s.Store.ResponseBegin(ctx, p)
}

func (s *turnStore) ResponseEventList(ctx context.Context, p *store.ResponseEventListParams) ([]store.Event, error) {
	evs, err := s.Store.ResponseEventList(ctx, p)
	if s.listed != nil {
		select {
		case s.listed <- len(evs):
		default:
		}
	}
	return evs, err
}

func (s *turnStore) ResponseChainGet(ctx context.Context, p *store.ResponseChainGetParams) (*store.Chain, error) {
	if s.chainErr != nil {
		return nil, s.chainErr
	}
	return s.Store.ResponseChainGet(ctx, p)
}

func (s *turnStore) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	s.mu.Lock()
	s.commits = append(s.commits, *p)
	s.mu.Unlock()
	s.steps.add("store: commit " + string(p.Response.Status))
	if s.release != nil {
		first := false
		s.once.Do(func() { first = true; close(s.entered) })
		if first {
			<-s.release
		}
	}
	if s.commitErr != nil {
		s.steps.add("store: commit failed")
		return s.commitErr
	}
	err := s.Store.ResponseCommit(ctx, p)
	s.steps.add("store: commit returned")
	if err == nil && s.lostErr != nil {
		return s.lostErr
	}
	return err
}

// firstCommit is the first commit the turn made (the test fails without one).
func (s *turnStore) firstCommit(t *testing.T) store.ResponseCommitParams {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.commits) == 0 {
		t.Fatal("the turn made no commit")
	}
	return s.commits[0]
}

// recorder is the status line and body of a response, safe for the turn's goroutines (the
// client and headerClient test writers share it).
type recorder struct {
	mu     sync.Mutex
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = code
	}
}

// started sets the implicit 200 of a first write without WriteHeader, as net/http does; the
// caller holds mu.
func (r *recorder) started() {
	if r.code == 0 {
		r.code = http.StatusOK
	}
}

// client is the client's end of one request: it logs each write as the SSE events it carries
// (or "client: body" for a plain answer). failAfter > 0 makes every write after that many fail,
// as for a client that has gone away.
type client struct {
	recorder
	steps     *steps
	writes    int
	failAfter int
	// opened, when set, is closed at the first flush: the stream's status line has gone out.
	opened chan struct{}
}

func (c *client) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started()
	c.writes++
	if c.failAfter > 0 && c.writes > c.failAfter {
		return 0, errors.New("broken pipe (the client left)")
	}
	c.body.Write(b)
	logged := false
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			c.steps.add("client: " + strings.TrimPrefix(line, "event: "))
			logged = true
		case line == "data: [DONE]":
			c.steps.add("client: [DONE]")
			logged = true
		}
	}
	if !logged && !bytes.HasPrefix(b, []byte(":")) {
		c.steps.add("client: body")
	}
	return len(b), nil
}

func (c *client) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened != nil {
		close(c.opened)
		c.opened = nil
	}
}

// events returns the data of the client's SSE events of the given type.
func (c *client) events(typ wire.EventType) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for frame := range strings.SplitSeq(c.body.String(), "\n\n") {
		if name, data, ok := strings.Cut(frame, "\ndata: "); ok && name == "event: "+string(typ) {
			out = append(out, data)
		}
	}
	return out
}

// upstreamGate holds every upstream request, when hold is set, until the request's context ends
// (the client left): arrived receives once per held request. Otherwise it passes requests on;
// with steps set, it logs "upstream: body closed" when the turn closes an answer's body.
type upstreamGate struct {
	next    *http.Transport
	hold    bool
	arrived chan struct{}
	steps   *steps
}

func (g *upstreamGate) RoundTrip(req *http.Request) (*http.Response, error) {
	if !g.hold {
		res, err := g.next.RoundTrip(req)
		if err == nil && g.steps != nil {
			res.Body = &loggedBody{ReadCloser: res.Body, steps: g.steps}
		}
		return res, err
	}
	g.arrived <- struct{}{}
	<-req.Context().Done()
	return nil, req.Context().Err()
}

type loggedBody struct {
	io.ReadCloser
	steps *steps
	once  sync.Once
}

func (b *loggedBody) Close() error {
	b.once.Do(func() { b.steps.add("upstream: body closed") })
	return b.ReadCloser.Close()
}

type turnHarness struct {
	s     *Server
	st    *turnStore
	steps *steps
	gate  *upstreamGate
}

// newTurnHarness builds a Server on a fresh SQLite store wrapped by turnStore (set up by
// configure) and on the simulator behind upstreamGate. Cleanup shuts the server down (stopping a
// failed record still being retried) and closes every connection.
func newTurnHarness(t *testing.T, configure func(*turnStore, *upstreamGate)) *turnHarness {
	t.Helper()
	return newTurnHarnessConfig(t, Config{}, configure)
}

// newTurnHarnessConfig is newTurnHarness with the server's configuration cfg.
func newTurnHarnessConfig(t *testing.T, cfg Config, configure func(*turnStore, *upstreamGate)) *turnHarness {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	t.Cleanup(sim.Close)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	t.Cleanup(tr.CloseIdleConnections)
	h := &turnHarness{steps: &steps{}, gate: &upstreamGate{next: tr, arrived: make(chan struct{}, 1)}}
	h.st = &turnStore{Store: sq, steps: h.steps}
	if configure != nil {
		configure(h.st, h.gate)
	}
	up, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1", Transport: h.gate})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h.s, err = New(t.Context(), cfg, h.st, upstream.Single(up))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.s.Shutdown(context.Background()) })
	return h
}

// serve runs one POST /v1/responses with body to its end, as c's client, under ctx.
func (h *turnHarness) serve(ctx context.Context, c *client, body string) {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	h.s.ServeHTTP(c, req)
}

func (h *turnHarness) newClient() *client {
	return &client{steps: h.steps, recorder: recorder{header: http.Header{}}}
}

// leaveWhileUpstreamHolds serves body on a held upstream and cancels the client's request once
// the upstream call is in flight, before the upstream answered anything.
func (h *turnHarness) leaveWhileUpstreamHolds(t *testing.T, body string) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := h.newClient()
	done := make(chan struct{})
	go func() { defer close(done); h.serve(ctx, c, body) }()
	<-h.gate.arrived
	cancel()
	<-done
	return c
}

// stored reads back the record of a commit from the real store.
func (h *turnHarness) stored(t *testing.T, p store.ResponseCommitParams) *store.Response {
	t.Helper()
	r, _, err := h.st.Store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: p.Response.Tenant, ID: p.Response.ID})
	if err != nil {
		t.Fatalf("read back %s: %v", p.Response.ID, err)
	}
	return r
}

// errorCode is the code member of a stored error object.
func errorCode(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("stored error %s: %v", raw, err)
	}
	return e.Code
}

const (
	streamBody = `{"model":"openai/gpt-oss-sim","input":"hi","stream":true}`
	syncBody   = `{"model":"openai/gpt-oss-sim","input":"hi"}`
)

// terminals are the client-visible steps that end a stream.
var terminals = []string{"client: response.completed", "client: response.incomplete", "client: response.failed", "client: [DONE]"}

func TestStreamCommitsBeforeItsTerminalEvent(t *testing.T) {
	h := newTurnHarness(t, nil)
	h.serve(t.Context(), h.newClient(), streamBody)
	got := h.steps.snapshot()
	begin, commit, committed := index(got, "store: begin"), index(got, "store: commit completed"), index(got, "store: commit returned")
	created, completed, done := index(got, "client: response.created"), index(got, "client: response.completed"), index(got, "client: [DONE]")
	if begin < 0 || created < begin || commit < created || committed < commit || completed < committed || done != completed+1 ||
		done != len(got)-1 {
		t.Fatalf("steps %q\nwant: begin, response.created (after begin), ..., commit, commit returned, response.completed, [DONE]", got)
	}
	if r := h.stored(t, h.st.firstCommit(t)); r.Status != wire.StatusCompleted {
		t.Fatalf("stored %s, want completed", r.Status)
	}
}

// A commit whose outcome is unknown (the store took it, every answer was lost, retries included)
// is read back: found stored, it is the turn's commit, and the stream ends response.completed.
func TestACommitThatLandedDespiteItsErrorIsTheTurnsCommit(t *testing.T) {
	h := newTurnHarness(t, func(st *turnStore, _ *upstreamGate) {
		st.lostErr = errors.New("connection reset after COMMIT (injected)")
	})
	h.serve(t.Context(), h.newClient(), streamBody)
	got := h.steps.snapshot()
	if index(got, "client: response.completed") < 0 || index(got, "client: response.failed") >= 0 {
		t.Fatalf("steps %q, want response.completed", got)
	}
	if r := h.stored(t, h.st.firstCommit(t)); r.Status != wire.StatusCompleted {
		t.Fatalf("stored %s, want completed", r.Status)
	}
}

// A stream whose commit fails ends with response.failed carrying the reason, never with the
// response.completed the model's answer would have given (docs/design.md §1 invariant 2).
func TestStreamWhoseCommitFailsEndsWithResponseFailed(t *testing.T) {
	for _, c := range []struct {
		name      string
		err       error
		code, msg string
	}{
		{"store unreachable", errors.New("connection refused (injected)"), "server_error", engine.MsgNotStored},
		{"lease lost", fmt.Errorf("swept (injected): %w", store.ErrConflict), "server_error", engine.MsgLeaseLost},
		{"deleted meanwhile", fmt.Errorf("gone (injected): %w", store.ErrNotFound), engine.CodeDeleted, engine.MsgDeleted},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTurnHarness(t, func(st *turnStore, _ *upstreamGate) { st.commitErr = c.err })
			cl := h.newClient()
			h.serve(t.Context(), cl, streamBody)
			got := h.steps.snapshot()
			var seen []string
			for _, s := range got {
				if slices.Contains(terminals, s) {
					seen = append(seen, s)
				}
			}
			if want := []string{"client: response.failed", "client: [DONE]"}; !slices.Equal(seen, want) {
				t.Fatalf("terminal steps %q, want %q (all steps %q)", seen, want, got)
			}
			if index(got, "client: response.failed") < index(got, "store: commit failed") {
				t.Fatalf("response.failed before the commit failed: %q", got)
			}
			failed := cl.events(wire.EventFailed)
			var ev struct {
				Response struct {
					Status string
					Error  struct{ Code, Message string }
				}
			}
			if len(failed) != 1 || json.Unmarshal([]byte(failed[0]), &ev) != nil {
				t.Fatalf("response.failed events %q", failed)
			}
			if ev.Response.Status != "failed" || ev.Response.Error.Code != c.code || ev.Response.Error.Message != c.msg {
				t.Fatalf("response.failed says %+v, want failed %s %q", ev.Response, c.code, c.msg)
			}
		})
	}
}

// While the commit has not returned, the client has no terminal byte: neither the terminal event
// nor [DONE].
func TestStreamSendsNoTerminalByteWhileItsCommitBlocks(t *testing.T) {
	h := newTurnHarness(t, func(st *turnStore, _ *upstreamGate) {
		st.entered, st.release = make(chan struct{}), make(chan struct{})
	})
	done := make(chan struct{})
	go func() { defer close(done); h.serve(t.Context(), h.newClient(), streamBody) }()
	<-h.st.entered
	during := h.steps.snapshot()
	close(h.st.release)
	<-done
	for _, s := range during {
		if slices.Contains(terminals, s) {
			t.Fatalf("%q reached the client while the commit was blocked: %q", s, during)
		}
	}
	if index(during, "client: response.created") < 0 {
		t.Fatalf("the stream had not started when the commit began: %q", during)
	}
	got := h.steps.snapshot()
	if c, t2 := index(got, "store: commit returned"), index(got, "client: response.completed"); c < 0 || t2 < c {
		t.Fatalf("steps %q: response.completed must follow the commit's return", got)
	}
}

// A client that leaves is recorded as cancelled with code client_disconnected, whether it
// leaves a non-streamed turn or a stream before upstream answered a byte: neither the model's
// answer (there is none) nor a gateway failure.
func TestAClientThatLeavesBeforeUpstreamAnswersIsStoredCancelled(t *testing.T) {
	for _, c := range []struct {
		name, body string
		begun      bool
	}{
		{"non-streamed", syncBody, false},
		{"streamed", streamBody, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newTurnHarness(t, func(_ *turnStore, g *upstreamGate) { g.hold = true })
			h.leaveWhileUpstreamHolds(t, c.body)
			p := h.st.firstCommit(t)
			if p.Response.Status != wire.StatusCancelled || errorCode(t, p.Response.Error) != "client_disconnected" || p.Begun != c.begun {
				t.Fatalf("committed %s error %s begun=%v, want cancelled client_disconnected begun=%v",
					p.Response.Status, p.Response.Error, p.Begun, c.begun)
			}
			if r := h.stored(t, p); r.Status != wire.StatusCancelled {
				t.Fatalf("stored %s, want cancelled", r.Status)
			}
			if got := h.steps.snapshot(); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "client: response.") }) {
				t.Fatalf("the client that left was sent events: %q", got)
			}
		})
	}
}

// A client that leaves mid-stream (its writes fail) is recorded as cancelled with what it
// received, and nothing more is written to it.
func TestAClientThatLeavesMidStreamIsStoredCancelled(t *testing.T) {
	h := newTurnHarness(t, nil)
	cl := h.newClient()
	cl.failAfter = 2
	h.serve(t.Context(), cl, streamBody)
	p := h.st.firstCommit(t)
	if p.Response.Status != wire.StatusCancelled || errorCode(t, p.Response.Error) != "client_disconnected" || !p.Begun {
		t.Fatalf("committed %s error %s begun=%v, want cancelled client_disconnected after begin", p.Response.Status, p.Response.Error, p.Begun)
	}
	if cl.writes != 3 {
		t.Fatalf("%d writes to a client whose third write failed, want no more after it", cl.writes)
	}
	if r := h.stored(t, p); r.Status != wire.StatusCancelled {
		t.Fatalf("stored %s, want cancelled", r.Status)
	}
}

// A non-streamed answer goes out only after its commit; a failed commit is a 500 envelope, never
// the model's answer.
func TestNonStreamedTurnAnswersAfterItsCommit(t *testing.T) {
	t.Run("stored", func(t *testing.T) {
		h := newTurnHarness(t, nil)
		cl := h.newClient()
		h.serve(t.Context(), cl, syncBody)
		got := h.steps.snapshot()
		if c, b := index(got, "store: commit returned"), index(got, "client: body"); c < 0 || b < c || cl.code != http.StatusOK {
			t.Fatalf("%d, steps %q: want the body after the commit returned", cl.code, got)
		}
		if !strings.Contains(cl.body.String(), `"status":"completed"`) {
			t.Fatalf("answer %s", cl.body.String())
		}
	})
	t.Run("commit fails", func(t *testing.T) {
		h := newTurnHarness(t, func(st *turnStore, _ *upstreamGate) { st.commitErr = errors.New("disk full (injected)") })
		cl := h.newClient()
		h.serve(t.Context(), cl, syncBody)
		var env struct{ Error wire.ErrorBody }
		if err := json.Unmarshal(cl.body.Bytes(), &env); err != nil || cl.code != http.StatusInternalServerError ||
			env.Error.Message != engine.MsgNotStored || deref(env.Error.Code) != "server_error" {
			t.Fatalf("%d %s, want the 500 envelope %q", cl.code, cl.body.String(), engine.MsgNotStored)
		}
		// No in-progress record was written, so nothing is retried in the background.
		if p := h.st.firstCommit(t); p.Begun {
			t.Fatal("a non-streamed turn committed as if it had begun a record")
		}
	})
}

// A stream that upstream refuses before its first byte is an error envelope with upstream's
// status, and its record (the client saw no id, but it was begun) is stored failed with the
// same code.
func TestStreamRefusedByUpstreamIsAnEnvelopeAndAFailedRecord(t *testing.T) {
	h := newTurnHarness(t, nil)
	cl := h.newClient()
	h.serve(t.Context(), cl, `{"model":"openai/gpt-oss-sim?status=503","input":"hi","stream":true}`)
	var env struct{ Error wire.ErrorBody }
	if err := json.Unmarshal(cl.body.Bytes(), &env); err != nil || cl.code != http.StatusServiceUnavailable {
		t.Fatalf("%d %s, want a 503 envelope", cl.code, cl.body.String())
	}
	p := h.st.firstCommit(t)
	if p.Response.Status != wire.StatusFailed || !p.Begun || errorCode(t, p.Response.Error) != deref(env.Error.Code) {
		t.Fatalf("committed %s %s begun=%v, want failed with the envelope's code %q", p.Response.Status, p.Response.Error, p.Begun, deref(env.Error.Code))
	}
	if r := h.stored(t, p); r.Status != wire.StatusFailed {
		t.Fatalf("stored %s, want failed", r.Status)
	}
}

// A request whose store connection fails is a 503 store_unavailable with Retry-After, which the
// SDKs retry, not a 500 internal error, whether the history load or the in-progress write failed;
// a stream that had already opened says store_unavailable in its error event. A store that
// answers with an error is still a 500.
func TestStoreConnectionFailureIs503StoreUnavailable(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, c := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"connection reset", fmt.Errorf("store: %w", reset), http.StatusServiceUnavailable, "store_unavailable"},
		{"connection cut", fmt.Errorf("store: %w", io.ErrUnexpectedEOF), http.StatusServiceUnavailable, "store_unavailable"},
		{"database error", errors.New("store: ERROR: out of shared memory (SQLSTATE 53200)"), http.StatusInternalServerError, ""},
	} {
		for _, step := range []string{"history load", "in-progress write", "in-progress write after upstream answered"} {
			t.Run(c.name+"/"+step, func(t *testing.T) {
				h := newTurnHarness(t, nil)
				base := h.newClient()
				h.serve(t.Context(), base, syncBody)
				var r struct{ ID string }
				if err := json.Unmarshal(base.body.Bytes(), &r); err != nil || r.ID == "" {
					t.Fatalf("base turn: %d %s", base.code, base.body.String())
				}
				switch step {
				case "history load":
					h.st.chainErr = c.err
				case "in-progress write":
					h.st.beginErr = c.err
				default: // the stream has opened when the write fails: an error event says it
					h.st.beginErr = c.err
				}
				bodies := []string{syncBody, streamBody}
				if step != "history load" {
					bodies = bodies[1:] // a non-streamed turn writes no in-progress record (syncTurn)
				}
				for _, body := range bodies {
					cl := h.newClient()
					if step == "in-progress write after upstream answered" {
						// The write fails only once the client's stream has opened (upstream
						// answered first), not merely once upstream's headers arrived.
						cl.opened = make(chan struct{})
						h.st.beginAfter = cl.opened
					}
					h.serve(t.Context(), cl, strings.Replace(body, `"input"`, `"previous_response_id":"`+r.ID+`","input"`, 1))
					opened := step == "in-progress write after upstream answered"
					if ev := cl.events("error"); opened || cl.code == http.StatusOK && len(ev) == 1 {
						if cl.code != http.StatusOK || len(ev) != 1 {
							t.Fatalf("%s: %d %q, want an opened stream with one error event", body, cl.code, cl.body.String())
						}
						var e struct{ Code string }
						if err := json.Unmarshal([]byte(ev[0]), &e); err != nil || e.Code != cmp.Or(c.code, "server_error") {
							t.Fatalf("%s: error event %s", body, ev[0])
						}
						continue
					}
					var env struct{ Error struct{ Code *string } }
					if err := json.Unmarshal(cl.body.Bytes(), &env); err != nil {
						t.Fatalf("%s: %d %q: %v", body, cl.code, cl.body.String(), err)
					}
					if code := deref(env.Error.Code); cl.code != c.status || code != c.code {
						t.Fatalf("%s: %d %q, want %d %q", body, cl.code, code, c.status, c.code)
					}
					if ra := cl.header.Get("Retry-After"); (c.status == http.StatusServiceUnavailable) != (ra == "1") {
						t.Fatalf("%s: Retry-After %q", body, ra)
					}
				}
			})
		}
	}
}
