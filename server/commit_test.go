package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// flakyCommits is the real SQLite store whose first fail ResponseCommit calls fail with err (a
// transient error unless set). stored closes at the first commit that succeeds.
type flakyCommits struct {
	store.Store
	fail     int32
	err      error
	calls    atomic.Int32
	releases atomic.Int32
	once     sync.Once
	stored   chan struct{}
}

func (f *flakyCommits) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	if n := f.calls.Add(1); n <= f.fail {
		if f.err != nil {
			return f.err
		}
		return fmt.Errorf("commit %d: connection reset (injected)", n)
	}
	err := f.Store.ResponseCommit(ctx, p)
	if err == nil {
		f.once.Do(func() { close(f.stored) })
	}
	return err
}

func (f *flakyCommits) ConversationTurnRelease(ctx context.Context, p *store.ConversationTurnReleaseParams) error {
	f.releases.Add(1)
	return f.Store.ConversationTurnRelease(ctx, p)
}

// newSimServer is a Server on a fresh SQLite store, wrapped by wrap when it is not nil, with the
// simulator as upstream, logging to cfg.Logger (default nowhere). Cleanup shuts it down.
func newSimServer(t *testing.T, cfg Config, wrap func(store.Store) store.Store) *Server {
	t.Helper()
	s, _ := newSimServerAndSim(t, cfg, wrap)
	return s
}

// newSimServerAndSim is newSimServer that also returns the simulator, whose log holds what the
// server sent upstream.
func newSimServerAndSim(t *testing.T, cfg Config, wrap func(store.Store) store.Store) (*Server, *vllmsim.Sim) {
	t.Helper()
	return newSimServerVia(t, cfg, wrap, nil)
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newSimServerVia is newSimServerAndSim whose upstream calls go through via(transport) when via
// is not nil: a test holds or watches them there.
func newSimServerVia(t *testing.T, cfg Config, wrap func(store.Store) store.Store, via func(http.RoundTripper) http.RoundTripper) (*Server, *vllmsim.Sim) {
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
	var rt http.RoundTripper = tr
	if via != nil {
		rt = via(tr)
	}
	up, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1", Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store = sq
	if wrap != nil {
		st = wrap(sq)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(t.Context(), cfg, st, upstream.Single(up))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, simulator
}

// call serves one request as tenant "k" and returns the status and body.
func call(t *testing.T, s *Server, method, target, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// A turn in a conversation appends its input and output to the conversation only when it
// completed or is incomplete; a failed turn appends nothing. Either way the conversation's lease
// is free afterwards, and completed_at is set only on a completed response.
func TestConversationTurnsAppendOnlyWhatFinished(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		stream      bool
		status      string
		appended    bool
	}{
		{"completed", "openai/gpt-oss-sim", false, "completed", true},
		{"completed streamed", "openai/gpt-oss-sim", true, "completed", true},
		{"incomplete", "openai/gpt-oss-sim?max_output_tokens=3", false, "incomplete", true},
		{"failed", "openai/gpt-oss-sim?status=500", false, "failed", false},
		{"failed streamed", "openai/gpt-oss-sim?status=500", true, "failed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &flakyCommits{stored: make(chan struct{})}
			s := newSimServer(t, Config{}, func(st store.Store) store.Store { fc.Store = st; return fc })
			code, body := call(t, s, http.MethodPost, "/v1/conversations", `{}`)
			var conv struct{ ID string }
			if code != http.StatusOK || json.Unmarshal([]byte(body), &conv) != nil {
				t.Fatalf("create conversation: %d %s", code, body)
			}
			turn := fmt.Sprintf(`{"model":%q,"input":"hi","conversation":%q,"stream":%v}`, tc.model, conv.ID, tc.stream)
			code, body = call(t, s, http.MethodPost, "/v1/responses", turn)
			if !tc.stream && tc.status != "failed" {
				var r struct {
					Status      string
					CompletedAt json.RawMessage `json:"completed_at"`
				}
				if json.Unmarshal([]byte(body), &r) != nil || r.Status != tc.status || (string(r.CompletedAt) == "null") != (tc.status != "completed") {
					t.Fatalf("%d %s: want status %s, completed_at set only when completed", code, body, tc.status)
				}
			}
			code, body = call(t, s, http.MethodGet, "/v1/conversations/"+conv.ID+"/items", "")
			var items struct{ Data []struct{ Type string } }
			if code != http.StatusOK || json.Unmarshal([]byte(body), &items) != nil {
				t.Fatalf("list items: %d %s", code, body)
			}
			if got := len(items.Data) >= 2; got != tc.appended || !tc.appended && len(items.Data) != 0 {
				t.Fatalf("%s turn: conversation has %d items, want appended=%v", tc.status, len(items.Data), tc.appended)
			}
			// The terminal commit releases the lease itself, with its append or without one (a
			// failed turn): no separate release call.
			if n := fc.releases.Load(); n != 0 {
				t.Fatalf("a %s turn made %d release calls after its commit released the lease", tc.status, n)
			}
			// The lease is free: the next turn is not refused with 409.
			if code, body = call(t, s, http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"again","conversation":%q}`, conv.ID)); code != http.StatusOK {
				t.Fatalf("the next turn: %d %s", code, body)
			}
		})
	}
}

// The commit is retried (3 attempts) on a transient error, never on a conflict or a missing record;
// a begun (streamed) record whose commit failed is stored failed in the background as soon as the
// store takes it; a non-streamed one, which the client never saw, is not written at all.
func TestCommitRetriesAndStoresTheFailureOfABegunRecord(t *testing.T) {
	for _, tc := range []struct {
		name        string
		stream      bool
		fail        int32
		err         error
		wantCode    int    // non-streamed: the answer's status
		wantMessage string // the client's error message ("" none)
		calls       int32  // commit attempts once everything has settled
		stored      string // the status read back ("" no record)
	}{
		{"sync: the third attempt succeeds", false, 2, nil, http.StatusOK, "", 3, "completed"},
		{"sync: three attempts fail", false, 3, nil, http.StatusInternalServerError, engine.MsgNotStored, 3, ""},
		{"sync: conflict is not retried", false, 1, store.ErrConflict, http.StatusInternalServerError, engine.MsgLeaseLost, 1, ""},
		{"sync: not found is not retried", false, 1, store.ErrNotFound, http.StatusInternalServerError, engine.MsgNotStored, 1, ""},
		{"stream: the third attempt succeeds", true, 2, nil, http.StatusOK, "", 3, "completed"},
		{"stream: stored failed in the background", true, 4, nil, http.StatusOK, engine.MsgNotStored, 5, "failed"},
		{"stream: deleted meanwhile", true, 1, store.ErrNotFound, http.StatusOK, engine.MsgDeleted, 1, "in_progress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &flakyCommits{fail: tc.fail, err: tc.err, stored: make(chan struct{})}
			var sq store.Store
			s := newSimServer(t, Config{}, func(st store.Store) store.Store { sq, fc.Store = st, st; return fc })
			code, body := call(t, s, http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"hi","stream":%v}`, tc.stream))
			var id, message string
			if tc.stream {
				frames := parseSSE(t, body)
				id = responseID(t, frames)
				term := frames[len(frames)-2]
				var ev struct {
					Response struct{ Error *struct{ Message string } }
				}
				_ = json.Unmarshal([]byte(term.data), &ev)
				if ev.Response.Error != nil {
					message = ev.Response.Error.Message
				}
				if want := map[bool]string{true: "response.completed", false: "response.failed"}[tc.wantMessage == ""]; term.typ != want {
					t.Fatalf("terminal event %s, want %s", term.typ, want)
				}
			} else {
				var r struct {
					ID    string
					Error *struct{ Message string }
				}
				_ = json.Unmarshal([]byte(body), &r)
				id = r.ID
				if r.Error != nil {
					message = r.Error.Message
				}
			}
			if code != tc.wantCode || message != tc.wantMessage {
				t.Fatalf("%d %q, want %d %q (%s)", code, message, tc.wantCode, tc.wantMessage, body)
			}
			if tc.stored == "failed" {
				<-fc.stored // the background store
			}
			s.Shutdown(context.Background()) // no background work is left
			if n := fc.calls.Load(); n != tc.calls {
				t.Fatalf("%d commit attempts, want %d", n, tc.calls)
			}
			if id == "" {
				if tc.stored != "" {
					t.Fatal("no response id")
				}
				return
			}
			r, _, err := sq.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: s.TenantOf("k"), ID: id})
			switch {
			case tc.stored == "" && !errors.Is(err, store.ErrNotFound):
				t.Fatalf("read back %s: %v, want no record", id, err)
			case tc.stored != "" && (err != nil || string(r.Status) != tc.stored):
				t.Fatalf("read back %s: %v %v, want %s", id, r, err, tc.stored)
			case tc.stored == "failed" && !strings.Contains(string(r.Error), engine.MsgNotStored):
				t.Fatalf("stored error %s, want %q", r.Error, engine.MsgNotStored)
			}
		})
	}
}
