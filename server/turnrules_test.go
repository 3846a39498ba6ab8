package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// envelope decodes an error answer.
func envelope(t *testing.T, body string) wire.ErrorBody {
	t.Helper()
	var env struct{ Error wire.ErrorBody }
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("not an error envelope: %s", body)
	}
	return env.Error
}

// The rules a turn checks before it writes anything or calls upstream, each with its status,
// param and code.
func TestTurnRequestRules(t *testing.T) {
	const model = `"model":"openai/gpt-oss-sim"`
	for _, tc := range []struct {
		name        string
		cfg         Config
		body        string
		status      int
		param, code string
		dropped     string // the X-Respgate-Dropped-Tools header of a 200 ("" absent)
	}{
		{"input at the item limit", Config{MaxInputItems: 2}, `{` + model + `,"input":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, 200, "", "", ""},
		{"input one item past the limit", Config{MaxInputItems: 2}, `{` + model + `,"input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]}`, 400, "input", "array_above_max_length", ""},
		{"no tool dropped: no header", Config{}, `{` + model + `,"input":"hi","tools":[{"type":"function","name":"f"}]}`, 200, "", "", ""},
		{"hosted tools dropped and named", Config{}, `{` + model + `,"input":"hi","tools":[{"type":"web_search"},{"type":"function","name":"f"},{"type":"custom","name":"c"}]}`, 200, "", "", "web_search,custom"},
		{"reject policy, function tools only", Config{ToolPolicy: ToolPolicyReject}, `{` + model + `,"input":"hi","tools":[{"type":"function","name":"f"}]}`, 200, "", "", ""},
		{"reject policy names the first unsupported tool", Config{ToolPolicy: ToolPolicyReject}, `{` + model + `,"input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}`, 400, "tools", "unsupported_tool_type", ""},
		{"unknown previous response", Config{}, `{` + model + `,"input":"hi","previous_response_id":"resp_nope"}`, 400, "previous_response_id", "previous_response_not_found", ""},
		{"unknown conversation", Config{}, `{` + model + `,"input":"hi","conversation":"conv_nope"}`, 404, "conversation", "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimServer(t, tc.cfg, nil)
			req := func() (int, string, http.Header) {
				r := newRequest(t, http.MethodPost, "/v1/responses", tc.body)
				rec := newRecorder()
				s.ServeHTTP(rec, r)
				return rec.Code, rec.Body.String(), rec.Header()
			}
			code, body, hdr := req()
			if code != tc.status {
				t.Fatalf("%d %s, want %d", code, body, tc.status)
			}
			if tc.status != 200 {
				env := envelope(t, body)
				if deref(env.Param) != tc.param || deref(env.Code) != tc.code {
					t.Fatalf("%s: param %q code %q, want %q %q", body, deref(env.Param), deref(env.Code), tc.param, tc.code)
				}
				return
			}
			if got, ok := hdr["X-Respgate-Dropped-Tools"]; (tc.dropped == "") == ok || ok && got[0] != tc.dropped {
				t.Fatalf("X-Respgate-Dropped-Tools %q (present %v), want %q", got, ok, tc.dropped)
			}
		})
	}
}

// Continuing from a response: one still in progress is a 400 naming it, one whose ancestor was
// deleted is a 400 naming the ancestor, and an item_reference to a stored item is resolved.
func TestContinuationRules(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	post := func(body string) (int, string) { return call(t, s, http.MethodPost, "/v1/responses", body) }
	idOf := func(body string) string {
		var r struct {
			ID     string
			Output []struct{ ID, Type string }
		}
		if json.Unmarshal([]byte(body), &r) != nil || r.ID == "" {
			t.Fatalf("answer %s", body)
		}
		return r.ID
	}
	code, body := post(`{"model":"openai/gpt-oss-sim","input":"first"}`)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	a := idOf(body)
	code, body = post(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"second","previous_response_id":%q}`, a))
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	b := idOf(body)
	var out struct{ Output []struct{ ID, Type string } }
	_ = json.Unmarshal([]byte(body), &out)
	var msgID string
	for _, it := range out.Output {
		if it.Type == "message" {
			msgID = it.ID
		}
	}
	if msgID == "" {
		t.Fatalf("no message in %s", body)
	}
	// An item_reference to b's message is resolved from the store (a reference not found is a 400).
	if code, body = post(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":[{"type":"item_reference","id":%q},{"role":"user","content":"go on"}]}`, msgID)); code != http.StatusOK {
		t.Fatalf("item_reference to a stored message: %d %s", code, body)
	}
	// An in-progress response cannot be continued.
	tn := s.TenantOf("k")
	running := store.Response{ID: wire.NewID(wire.PrefixResponse), Tenant: tn, Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now(), Echo: []byte(`{}`)}
	if err := s.store.ResponseBegin(t.Context(), &store.ResponseBeginParams{Response: running, LeaseOwner: "gw_other", LeaseExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	code, body = post(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"x","previous_response_id":%q}`, running.ID))
	if env := envelope(t, body); code != 400 || deref(env.Code) != "previous_response_in_progress" || deref(env.Param) != "previous_response_id" {
		t.Fatalf("continuing an in-progress response: %d %s", code, body)
	}
	// Deleting a leaves b's chain with a hole, named in the error.
	if code, body = call(t, s, http.MethodDelete, "/v1/responses/"+a, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	code, body = post(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"third","previous_response_id":%q}`, b))
	if env := envelope(t, body); code != 400 || deref(env.Code) != "previous_response_not_found" || !strings.Contains(env.Message, a) {
		t.Fatalf("continuing past a deleted ancestor: %d %s", code, body)
	}
}

// beginFails is the real store whose ResponseBegin fails, then sends on failed (when it is not
// nil and has room).
type beginFails struct {
	store.Store
	failed chan struct{}
}

func (b *beginFails) ResponseBegin(context.Context, *store.ResponseBeginParams) error {
	select {
	case b.failed <- struct{}{}:
	default:
	}
	return errors.New("disk full (injected)")
}

// Upstream and store failures of a turn before its first event: a store that cannot begin the
// record is a 500 (and the conversation is free again), a non-streamed call past SyncTimeout a
// 504 upstream_timeout, an unreadable upstream answer a 502 upstream_error; the latter two
// are what the stored record says too.
func TestTurnFailuresBeforeTheFirstEvent(t *testing.T) {
	t.Run("begin fails", func(t *testing.T) {
		// Upstream fails too, once the begin has failed: the turn then waits for the begin's
		// result before it answers (engine.connect), so the failure is known before any client
		// stream could open, whatever the order of the two. An upstream that answered instead
		// could win the race with the begin's result, and that answer is answered in-band
		// (engine/stream.go); the begin's failure, not upstream's, is what the client gets.
		bf := &beginFails{failed: make(chan struct{}, 2)}
		s, _ := newSimServerVia(t, Config{}, func(st store.Store) store.Store { bf.Store = st; return bf },
			func(http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if r.URL.Path == "/v1/responses" {
						select {
						case <-bf.failed:
						case <-r.Context().Done():
						}
						return nil, errors.New("upstream unreachable (injected)")
					}
					return nil, errors.New("unexpected upstream call " + r.URL.Path)
				})
			})
		code, body := call(t, s, http.MethodPost, "/v1/conversations", `{}`)
		var conv struct{ ID string }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &conv) != nil {
			t.Fatalf("create conversation: %d %s", code, body)
		}
		turn := fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"hi","stream":true,"conversation":%q}`, conv.ID)
		for range 2 { // the second is not refused as locked: the first released the lease
			if code, body = call(t, s, http.MethodPost, "/v1/responses", turn); code != http.StatusInternalServerError || envelope(t, body).Type != "server_error" {
				t.Fatalf("%d %s, want a 500 envelope", code, body)
			}
		}
	})
	for _, tc := range []struct {
		name, model string
		cfg         Config
		status      int
		code, msg   string
	}{
		{"sync timeout", "openai/gpt-oss-sim?stall=1h", Config{SyncTimeout: 50 * time.Millisecond}, http.StatusGatewayTimeout, "upstream_timeout",
			"The upstream model server did not answer in time."},
		{"unreadable answer", "openai/gpt-oss-sim?malformed=0", Config{}, http.StatusBadGateway, "upstream_error", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &flakyCommits{stored: make(chan struct{})}
			s := newSimServer(t, tc.cfg, func(st store.Store) store.Store { fc.Store = st; return fc })
			code, body := call(t, s, http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"hi"}`, tc.model))
			if env := envelope(t, body); code != tc.status || deref(env.Code) != tc.code || tc.msg != "" && env.Message != tc.msg {
				t.Fatalf("%d %s, want %d %s", code, body, tc.status, tc.code)
			}
			select {
			case <-fc.stored:
			default:
				t.Fatal("the failed turn was not stored")
			}
		})
	}
}
