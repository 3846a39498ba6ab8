package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/respgate/respgate/upstream/vllmsim"
)

// These tests drive WebSocket mode (server/ws.go) through a real socket to the handler on the
// real SQLite store and the simulator; integration/ws_test.go also checks every event against the
// Open Responses schema.

type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func newSocketServer(t *testing.T) (*httptest.Server, *vllmsim.Sim) {
	t.Helper()
	s, sim := newSimServerAndSim(t, Config{}, nil)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, sim
}

func dialSocket(t *testing.T, ts *httptest.Server) *wsClient {
	t.Helper()
	c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/v1/responses", //nolint:bodyclose // the library closes it
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer k"}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &wsClient{t: t, c: c}
}

func (s *wsClient) write(typ websocket.MessageType, msg string) {
	s.t.Helper()
	if err := s.c.Write(s.t.Context(), typ, []byte(msg)); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

// socketTurn is what one message got: the events through the terminal one, or one error event.
type socketTurn struct {
	types  []string
	final  struct{ ID, Status string }
	text   string
	status int
	code   string
	param  string
}

func (s *wsClient) read() *socketTurn {
	s.t.Helper()
	var out socketTurn
	for {
		// A hang guard, not a measurement: a turn that never answers fails the test instead of
		// waiting for the test binary's timeout.
		ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
		_, msg, err := s.c.Read(ctx)
		cancel()
		if err != nil {
			s.t.Fatalf("read: %v", err)
		}
		var ev struct {
			Type     string
			Status   int
			Delta    string
			Response struct{ ID, Status string }
			Error    struct {
				Code  string
				Param *string
			}
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			s.t.Fatalf("message not JSON: %s", msg)
		}
		out.types = append(out.types, ev.Type)
		switch ev.Type {
		case "error":
			out.status, out.code = ev.Status, ev.Error.Code
			if ev.Error.Param != nil {
				out.param = *ev.Error.Param
			}
			return &out
		case "response.output_text.delta":
			out.text += ev.Delta
		case "response.completed", "response.incomplete", "response.failed":
			out.final.ID, out.final.Status = ev.Response.ID, ev.Response.Status
			return &out
		}
	}
}

func (s *wsClient) turn(body string) *socketTurn {
	s.t.Helper()
	s.write(websocket.MessageText, `{"type":"response.create",`+strings.TrimPrefix(body, "{"))
	return s.read()
}

func (tr *socketTurn) ok(t *testing.T) *socketTurn {
	t.Helper()
	if tr.final.Status != "completed" {
		t.Fatalf("turn ended with %v (error %d %s), want response.completed", tr.types, tr.status, tr.code)
	}
	return tr
}

func (tr *socketTurn) wantError(t *testing.T, status int, code, param string) {
	t.Helper()
	if tr.status != status || tr.code != code || tr.param != param {
		t.Fatalf("got %v (error %d %s param %q), want error %d %s param %q", tr.types, tr.status, tr.code, tr.param, status, code, param)
	}
}

// store:false turns continue from their connection's memory: only there, and not past a
// continuation that failed (which evicts what it continued).
func TestSocketStoreFalseTurnsContinueFromTheirConnection(t *testing.T) {
	ts, _ := newSocketServer(t)
	w := dialSocket(t, ts)
	first := w.turn(`{"model":"openai/gpt-oss-sim","store":false,"input":"remember: owls hoot"}`).ok(t)
	second := w.turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"` + first.final.ID + `","input":"what do you know?"}`).ok(t)
	if !strings.Contains(second.text, "Facts: owls hoot.") {
		t.Fatalf("the continuation did not get the history: %q", second.text)
	}
	dialSocket(t, ts).turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"`+first.final.ID+`","input":"again"}`).
		wantError(t, 400, "previous_response_not_found", "previous_response_id")
	w.turn(`{"model":"openai/gpt-oss-sim?status=503","store":false,"previous_response_id":"`+second.final.ID+`","input":"x"}`).
		wantError(t, 503, "upstream_unavailable", "")
	w.turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"`+second.final.ID+`","input":"x"}`).
		wantError(t, 400, "previous_response_not_found", "previous_response_id")
	w.turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"` + first.final.ID + `","input":"and?"}`).ok(t)

	// An incomplete response is kept and can be continued; one that failed in the stream is not,
	// and its continuation evicts what it continued.
	cut := w.turn(`{"model":"openai/gpt-oss-sim","store":false,"max_output_tokens":16,"input":"tell me everything"}`)
	if cut.final.Status != "incomplete" {
		t.Fatalf("a turn over max_output_tokens ended %v, want response.incomplete", cut.types)
	}
	w.turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"` + cut.final.ID + `","input":"go on"}`).ok(t)
	failed := w.turn(`{"model":"openai/gpt-oss-sim?cut_after=5","store":false,"previous_response_id":"` + first.final.ID + `","input":"x"}`)
	if failed.final.Status != "failed" {
		t.Fatalf("a cut upstream ended %v, want response.failed", failed.types)
	}
	for _, id := range []string{failed.final.ID, first.final.ID} {
		w.turn(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":"`+id+`","input":"x"}`).
			wantError(t, 400, "previous_response_not_found", "previous_response_id")
	}
}

// A warm-up (generate:false) runs no model, answers completed, and is continued like any response.
func TestSocketWarmUpRunsNoModelAndIsContinued(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%t", stored), func(t *testing.T) {
			ts, sim := newSocketServer(t)
			w := dialSocket(t, ts)
			warm := w.turn(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","store":%t,"generate":false,"input":"remember: owls hoot"}`, stored)).ok(t)
			if n := len(sim.Requests()); n != 0 || warm.text != "" {
				t.Fatalf("the warm-up sent %d requests upstream and answered %q", n, warm.text)
			}
			next := w.turn(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","store":%t,"previous_response_id":%q,"input":"what do you know?"}`, stored, warm.final.ID)).ok(t)
			if !strings.Contains(next.text, "Facts: owls hoot.") || len(sim.Requests()) != 1 {
				t.Fatalf("the continuation of a warm-up: %q after %d upstream requests", next.text, len(sim.Requests()))
			}
			other := dialSocket(t, ts).turn(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","previous_response_id":%q,"input":"again?"}`, warm.final.ID))
			if stored {
				other.ok(t)
			} else {
				other.wantError(t, 400, "previous_response_not_found", "previous_response_id")
			}
		})
	}
}

// A bad message gets an error event with its status, code and param, and the connection serves
// the next turn.
func TestSocketRefusesBadMessagesWithErrorEventsAndStaysOpen(t *testing.T) {
	ts, _ := newSocketServer(t)
	w := dialSocket(t, ts)
	for _, tc := range []struct {
		msg         string
		status      int
		code, param string
	}{
		{`{"type":"response.create","model":"m","input":"x","stream":false}`, 400, "unsupported_parameter", "stream"},
		{`{"type":"response.create","model":"m","input":"x","background":true}`, 400, "unsupported_parameter", "background"},
		{`{"model":"m","input":"x"}`, 400, "invalid_value", "type"},
		{`{"type":"response.cancel"}`, 400, "invalid_value", "type"},
		{`{"type":"response.create","input":"x"}`, 400, "missing_required_parameter", "model"},
		{`{"type":"response.create",`, 400, "invalid_json", ""},
		{`{"type":"response.create","model":"openai/gpt-oss-sim?status=429","input":"x"}`, 429, "rate_limit_exceeded", ""},
	} {
		w.write(websocket.MessageText, tc.msg)
		w.read().wantError(t, tc.status, tc.code, tc.param)
	}
	w.write(websocket.MessageBinary, `{"type":"response.create"}`)
	w.read().wantError(t, 400, "invalid_message", "")
	w.turn(`{"model":"openai/gpt-oss-sim","input":"still here?"}`).ok(t)
}
