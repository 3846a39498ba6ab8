package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

// The Responses WebSocket mode (server/ws.go, docs/clients.md), driven by a plain client of the
// same library respgate serves it with.

// wsConn is a test client connection.
type wsConn struct {
	t *testing.T
	c *websocket.Conn
}

func wsURL(g *gw) string { return "ws" + strings.TrimPrefix(g.URL, "http") + "/responses" }

// dialWS opens a connection with hdr as header pairs (default: a bearer key); status is the
// handshake's HTTP status (0 if there was no answer).
func dialWS(t testing.TB, url string, hdr ...string) (c *websocket.Conn, status int, err error) {
	t.Helper()
	if hdr == nil {
		hdr = []string{"Authorization", "Bearer test-key"}
	}
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	c, res, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{HTTPHeader: h}) //nolint:bodyclose // the library closes it (or it is the connection)
	if res != nil {
		status = res.StatusCode
	}
	if c != nil {
		c.SetReadLimit(64 << 20)
	}
	return c, status, err
}

func openWS(t *testing.T, g *gw) *wsConn {
	t.Helper()
	c, _, err := dialWS(t, wsURL(g))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return &wsConn{t: t, c: c}
}

// send sends a response.create whose body is the JSON object body.
func (w *wsConn) send(body string) {
	w.t.Helper()
	msg := `{"type":"response.create",` + strings.TrimPrefix(strings.TrimSpace(body), "{")
	if err := w.c.Write(w.t.Context(), websocket.MessageText, []byte(msg)); err != nil {
		w.t.Fatalf("send: %v", err)
	}
}

// wsError is a WebSocket error event.
type wsError struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Error  struct {
		Type    string  `json:"type"`
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// wsTurn is what one response.create got: its events up to the terminal one, or an error event.
type wsTurn struct {
	raw    [][]byte
	events []responses.ResponseStreamEventUnion
	final  *responses.Response
	err    *wsError
}

// next reads one message.
func (w *wsConn) next() []byte {
	w.t.Helper()
	typ, msg, err := w.c.Read(w.t.Context())
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		w.t.Fatalf("a %v message", typ)
	}
	return msg
}

// read reads one turn's messages: through its terminal event, or a single error event. Every
// event is checked against the Open Responses schema and streaming rules (the SSE checker fed the
// same events), and the shape rules of checkStreamShape; an error event against
// WebSocketErrorEvent.
func (w *wsConn) read() *wsTurn {
	w.t.Helper()
	var out wsTurn
	st := schema(w.t).NewStream()
	for {
		msg := w.next()
		var head struct{ Type string }
		if err := json.Unmarshal(msg, &head); err != nil {
			w.t.Fatalf("message not JSON: %s", msg)
		}
		if head.Type == "error" && len(out.raw) == 0 {
			if err := schema(w.t).Validate("WebSocketErrorEvent", "error event", msg); err != nil {
				w.t.Errorf("%v", err)
			}
			out.err = &wsError{}
			_ = json.Unmarshal(msg, out.err)
			return &out
		}
		out.raw = append(out.raw, msg)
		_, _ = fmt.Fprintf(st, "event: %s\ndata: %s\n\n", head.Type, msg)
		var ev responses.ResponseStreamEventUnion
		if err := json.Unmarshal(msg, &ev); err != nil {
			w.t.Fatalf("event: %v", err)
		}
		out.events = append(out.events, ev)
		switch head.Type {
		case "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			out.final = &r
			_, _ = st.Write([]byte("data: [DONE]\n\n"))
			if err := st.Close(); err != nil {
				w.t.Errorf("stream rules: %v", err)
			}
			checkStreamShape(w.t, out.events)
			return &out
		}
	}
}

func (w *wsConn) turn(body string) *wsTurn {
	w.t.Helper()
	w.send(body)
	return w.read()
}

// ok asserts the turn ended with response.completed and returns the response.
func (tr *wsTurn) ok(t *testing.T) *responses.Response {
	t.Helper()
	if tr.err != nil {
		t.Fatalf("error event: %d %s %s", tr.err.Status, tr.err.Error.Code, tr.err.Error.Message)
	}
	if tr.final.Status != "completed" {
		t.Fatalf("status %s", tr.final.Status)
	}
	return tr.final
}

// wantError asserts the turn was answered by an error event with this status, code and param.
func (tr *wsTurn) wantError(t *testing.T, status int, code, param string) {
	t.Helper()
	if tr.err == nil {
		t.Fatalf("got %d events, want error %s", len(tr.raw), code)
	}
	p := ""
	if tr.err.Error.Param != nil {
		p = *tr.err.Error.Param
	}
	if tr.err.Status != status || tr.err.Error.Code != code || p != param {
		t.Fatalf("error %d %s param %q (%s), want %d %s param %q", tr.err.Status, tr.err.Error.Code, p, tr.err.Error.Message, status, code, param)
	}
}

const wsTool = `"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{}}}]`

// toolLoop runs a 10-step tool loop: nine function calls, each answered with its output and a
// nudge to call again, then the final answer. step sends one turn's body and returns the response.
func toolLoop(t testing.TB, store bool, step func(body string) *responses.Response) {
	t.Helper()
	r := step(fmt.Sprintf(`{"model":%q,"store":%t,%s,"input":"remember: the key is 7. call lookup"}`, harmony, store, wsTool))
	for i := 1; i < 10; i++ {
		var call *responses.ResponseOutputItemUnion
		for j := range r.Output {
			if r.Output[j].Type == "function_call" {
				call = &r.Output[j]
			}
		}
		if call == nil {
			t.Fatalf("step %d: no function call in %s", i, r.RawJSON())
		}
		input := fmt.Sprintf(`[{"type":"function_call_output","call_id":%q,"output":"result %d"}`, call.CallID, i)
		if i < 9 {
			input += `,{"role":"user","content":"call lookup"}`
		}
		r = step(fmt.Sprintf(`{"model":%q,"store":%t,%s,"previous_response_id":%q,"input":%s]}`, harmony, store, wsTool, r.ID, input))
	}
	// The last answer saw the whole chain: the first turn's fact and all nine tool outputs.
	if got := r.OutputText(); !strings.Contains(got, "9 tool outputs") || !strings.Contains(got, "Facts: the key is 7.") {
		t.Fatalf("final answer %q", got)
	}
}

func TestWebSocketToolLoopOnOneConnection(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		for _, stored := range []bool{false, true} {
			t.Run(fmt.Sprintf("store=%t", stored), func(t *testing.T) {
				w := openWS(t, g)
				var ids []string
				toolLoop(t, stored, func(body string) *responses.Response {
					r := w.turn(body).ok(t)
					ids = append(ids, r.ID)
					return r
				})
				// store:false left nothing in the store; store:true stored every turn.
				for _, id := range ids {
					_, err := g.client.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
					if found := err == nil; found != stored {
						t.Fatalf("response %s: stored %t, want %t (%v)", id, found, stored, err)
					}
				}
			})
		}
	})
}

func TestWebSocketStoreFalseStateIsLocalToItsConnection(t *testing.T) {
	g := newGateway(t, nil)
	w := openWS(t, g)
	first := w.turn(`{"model":"` + harmony + `","store":false,"input":"remember: owls hoot"}`).ok(t)
	// Same connection: continued from memory; only the new input was sent.
	second := w.turn(`{"model":"` + harmony + `","store":false,"previous_response_id":"` + first.ID + `","input":"what do you know?"}`).ok(t)
	if !strings.Contains(second.OutputText(), "Facts: owls hoot.") {
		t.Fatalf("continuation did not get the history: %q", second.OutputText())
	}
	// Another connection does not know it.
	other := openWS(t, g)
	other.turn(`{"model":"`+harmony+`","store":false,"previous_response_id":"`+first.ID+`","input":"again"}`).
		wantError(t, 400, "previous_response_not_found", "previous_response_id")
	// A continuation that fails (here vLLM answers 503) evicts what it continued: the retry is
	// previous_response_not_found, on this connection too.
	w.turn(`{"model":"`+harmony+`?status=503","store":false,"previous_response_id":"`+second.ID+`","input":"x"}`).
		wantError(t, 503, "upstream_unavailable", "")
	w.turn(`{"model":"`+harmony+`","store":false,"previous_response_id":"`+second.ID+`","input":"x"}`).
		wantError(t, 400, "previous_response_not_found", "previous_response_id")
	// The connection still serves turns, and the first response is still cached.
	w.turn(`{"model":"` + harmony + `","store":false,"previous_response_id":"` + first.ID + `","input":"and?"}`).ok(t)
}

// A warm-up ("generate":false, as Codex CLI sends first on a socket) is validated like any turn,
// runs no model, answers completed with no output, and can be continued like any response: from the
// connection's cache (store:false) or from the store (store:true, also on another connection).
func TestWebSocketWarmUpRunsNoModelAndCanBeContinued(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		for _, stored := range []bool{false, true} {
			t.Run(fmt.Sprintf("store=%t", stored), func(t *testing.T) {
				w := openWS(t, g)
				before := len(g.UpstreamRequests())
				warm := w.turn(fmt.Sprintf(`{"model":%q,"store":%t,"generate":false,"instructions":"be brief","input":"remember: owls hoot"}`, harmony, stored)).ok(t)
				if len(warm.Output) != 0 || warm.Usage.TotalTokens != 0 {
					t.Fatalf("warm-up output %d items, usage %+v", len(warm.Output), warm.Usage)
				}
				if n := len(g.UpstreamRequests()); n != before {
					t.Fatalf("the warm-up sent %d requests upstream", n-before)
				}
				// A warm-up is validated like any turn.
				w.turn(`{"model":"`+harmony+`","generate":false,"input":"x","previous_response_id":"resp_missing"}`).
					wantError(t, 400, "previous_response_not_found", "previous_response_id")
				next := w.turn(fmt.Sprintf(`{"model":%q,"store":%t,"previous_response_id":%q,"input":"what do you know?"}`, harmony, stored, warm.ID)).ok(t)
				if !strings.Contains(next.OutputText(), "Facts: owls hoot.") {
					t.Fatalf("the continuation did not get the warm-up's input: %q", next.OutputText())
				}
				// The model saw the warm-up's input once, and no answer to it.
				reqs := g.UpstreamRequests()
				if n := len(reqs) - before; n != 1 {
					t.Fatalf("%d upstream requests, want 1", n)
				}
				if c := strings.Count(string(reqs[len(reqs)-1]), "owls hoot"); c != 1 {
					t.Fatalf("the warm-up's input reached the model %d times", c)
				}
				_, err := g.client.Responses.Get(t.Context(), warm.ID, responsesGetParams())
				if found := err == nil; found != stored {
					t.Fatalf("warm-up stored %t, want %t (%v)", found, stored, err)
				}
				if stored { // from another connection too
					openWS(t, g).turn(`{"model":"` + harmony + `","previous_response_id":"` + warm.ID + `","input":"again?"}`).ok(t)
				}
			})
		}
	})
}

// Codex CLI sends "stream":true (and stream_options) in every response.create; they say what the
// socket does anyway, so the turn runs.
func TestWebSocketAcceptsTheNoOpMembersCodexSends(t *testing.T) {
	g := newGateway(t, nil)
	w := openWS(t, g)
	w.turn(`{"model":"` + harmony + `","store":false,"stream":true,"stream_options":{"include_obfuscation":false},"background":false,"input":"hi"}`).ok(t)
}

func TestWebSocketRefusesBadMessagesWithErrorEventsAndStaysOpen(t *testing.T) {
	g := newGateway(t, nil)
	w := openWS(t, g)
	for _, tc := range []struct {
		msg                string
		status             int
		code, param, label string
	}{
		{`{"type":"response.create","model":"m","input":"x","stream":false}`, 400, "unsupported_parameter", "stream", "stream false"},
		{`{"type":"response.create","model":"m","input":"x","background":true}`, 400, "unsupported_parameter", "background", "background"},
		{`{"model":"m","input":"x"}`, 400, "invalid_value", "type", "no type"},
		{`{"type":"response.cancel"}`, 400, "invalid_value", "type", "other type"},
		{`{"type":"response.create","input":"x"}`, 400, "missing_required_parameter", "model", "no model"},
		{`{"type":"response.create",`, 400, "invalid_json", "", "bad JSON"},
		{`{"type":"response.create","model":"m","input":"\u0000"}`, 400, "invalid_value", "input", "NUL"},
		{`{"type":"response.create","model":"` + harmony + `?status=429","input":"x"}`, 429, "rate_limit_exceeded", "", "upstream 429"},
	} {
		if err := w.c.Write(t.Context(), websocket.MessageText, []byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		tr := w.read()
		t.Run(tc.label, func(t *testing.T) { tr.wantError(t, tc.status, tc.code, tc.param) })
	}
	if err := w.c.Write(t.Context(), websocket.MessageBinary, []byte(`{"type":"response.create"}`)); err != nil {
		t.Fatal(err)
	}
	w.read().wantError(t, 400, "invalid_message", "")
	w.turn(`{"model":"` + harmony + `","input":"still here?"}`).ok(t)
}

func TestWebSocketUpgradeHasTheAuthOfHTTP(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{APIKeys: []string{"good-key"}}})
	for _, tc := range []struct {
		name   string
		suffix string
		hdr    []string
	}{
		{"no key", "", []string{"X-None", "1"}},
		{"wrong key", "", []string{"Authorization", "Bearer nope"}},
		{"key in the query string", "?api_key=good-key&key=good-key&access_token=good-key", []string{"X-None", "1"}},
	} {
		c, status, err := dialWS(t, wsURL(g)+tc.suffix, tc.hdr...)
		if err == nil {
			_ = c.CloseNow()
			t.Fatalf("%s: upgraded", tc.name)
		}
		if status != 401 {
			t.Fatalf("%s: %d %v", tc.name, status, err)
		}
	}
	c, _, err := dialWS(t, wsURL(g), "Authorization", "Bearer good-key")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.CloseNow()
	// A plain GET is told to upgrade, with the envelope.
	s, body, _ := rawDo(t, "GET", g.URL+"/responses", "", "Authorization", "Bearer good-key")
	if _, code, _, _ := envelope(t, body); s != 426 || code != "websocket_required" {
		t.Fatalf("plain GET: %d %s", s, body)
	}
	// Tenancy: a store:true response made on a socket belongs to the socket's key.
	g2 := newGateway(t, nil)
	w := openWS(t, g2)
	r := w.turn(`{"model":"` + harmony + `","input":"mine"}`).ok(t)
	s, _, _ = rawDo(t, "GET", g2.URL+"/responses/"+r.ID, "", "Authorization", "Bearer someone-else")
	if s != 404 {
		t.Fatalf("another tenant read a socket's response: %d", s)
	}
	if s, _, _ = rawDo(t, "GET", g2.URL+"/responses/"+r.ID, "", "Authorization", "Bearer test-key"); s != 200 {
		t.Fatalf("the socket's own tenant cannot read its response: %d", s)
	}
	// And another key's socket cannot continue it: foreign is unknown.
	c, _, err = dialWS(t, wsURL(g2), "Authorization", "Bearer someone-else")
	if err != nil {
		t.Fatal(err)
	}
	stranger := &wsConn{t: t, c: c}
	t.Cleanup(func() { _ = c.CloseNow() })
	stranger.turn(`{"model":"`+harmony+`","input":"x","previous_response_id":"`+r.ID+`"}`).
		wantError(t, 400, "previous_response_not_found", "previous_response_id")
}

func TestWebSocketOversizeMessageClosesWith1009(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{WSMaxMessageBytes: 4 << 10}})
	w := openWS(t, g)
	w.send(`{"model":"` + harmony + `","input":"` + strings.Repeat("x", 5<<10) + `"}`)
	_, _, err := w.c.Read(t.Context())
	if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
		t.Fatalf("close status %v (%v), want 1009", got, err)
	}
}

func TestWebSocketCreateDuringATurnIsQueuedAndCloseCancelsTheTurn(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g, watch := watchedGateway(t, newStore(t), server.Config{})
		w := openWS(t, g)
		// 200 tokens at 50 ms take the simulator 10 s.
		w.send(`{"model":"` + harmony + `?delay_ms=50&tokens=200","input":"hi"}`)
		var created struct{ Response struct{ ID string } }
		_ = json.Unmarshal(w.next(), &created)
		// The default lane runs its creates in order: a second create now waits its turn (it is
		// neither refused nor started).
		w.send(`{"model":"` + harmony + `","input":"me too"}`)
		for deltas := 0; deltas < 3; {
			msg := w.next()
			var ev wsError
			_ = json.Unmarshal(msg, &ev)
			switch {
			case ev.Type == "error":
				t.Fatalf("error event %s", msg)
			case strings.Contains(ev.Type, "delta"):
				deltas++
			case ev.Type == "response.created":
				t.Fatal("a second response started during the first")
			}
		}
		// Closing the socket mid-turn stops the upstream stream before its end and stores the
		// response as cancelled, as an HTTP disconnect does.
		_ = w.c.Close(websocket.StatusNormalClosure, "")
		watch.stoppedEarly(t, "after the client left")
		waitFor(t, 10*time.Second, "cancelled status", func() bool {
			r, err := g.client.Responses.Get(context.Background(), created.Response.ID, responses.ResponseGetParams{})
			return err == nil && r.Status == "cancelled"
		})
	})
}

func TestWebSocketNonReadingClientIsDropped(t *testing.T) {
	g, watch := watchedGateway(t, nil, server.Config{WriteTimeout: 200 * time.Millisecond, LeaseTTL: time.Minute})
	w := openWS(t, g)
	// A long answer the client never reads: once the socket's buffers are full a write blocks
	// past --write-timeout, and the gateway drops the client and stops the upstream.
	w.send(`{"model":"` + harmony + `?tokens=100000","input":"tell me everything"}`)
	watch.stoppedEarly(t, "for a client that does not read")
	waitFor(t, 10*time.Second, "the stream slot is released", func() bool { return g.Server.ActiveStreams() == 0 })
	// Stored with the true reason: the gateway dropped the client, which did not close the
	// socket (issue 38 item 8).
	tn := g.Server.TenantOf("test-key")
	var r *store.Response
	waitFor(t, 10*time.Second, "the dropped turn is stored", func() bool {
		ids, err := g.Store.(store.Admin).ResponseIDList(t.Context(), &store.ResponseIDListParams{Tenant: tn, Limit: 10})
		if err != nil || len(ids) != 1 {
			return false
		}
		r, _, err = g.Store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tn, ID: ids[0]})
		return err == nil && r.Status.Terminal()
	})
	if r.Status != "cancelled" || !strings.Contains(string(r.Error), engine.CodeWriteTimeout) {
		t.Fatalf("the dropped socket turn is stored %s %s, want cancelled with %s", r.Status, r.Error, engine.CodeWriteTimeout)
	}
}

func TestWebSocketHundredConcurrentConnections(t *testing.T) {
	g := newGateway(t, nil)
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c, _, err := dialWS(t, wsURL(g))
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = c.CloseNow() }()
			msg := fmt.Sprintf(`{"type":"response.create","model":%q,"store":false,"input":"remember: n=%d"}`, harmony, i)
			if err := c.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
				errs <- err
				return
			}
			for {
				_, b, err := c.Read(t.Context())
				if err != nil {
					errs <- err
					return
				}
				var ev struct {
					Type     string
					Response responses.Response
				}
				_ = json.Unmarshal(b, &ev)
				if ev.Type == "response.completed" {
					if !strings.Contains(ev.Response.OutputText(), fmt.Sprintf("n=%d.", i)) {
						errs <- fmt.Errorf("connection %d got another's answer: %q", i, ev.Response.OutputText())
					}
					return
				}
				if ev.Type == "error" || ev.Type == "response.failed" {
					errs <- errors.New(string(b))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWebSocketMaxStreamsCountsSocketTurns(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{MaxConcurrentStreams: 1}})
	w := openWS(t, g)
	w.send(`{"model":"` + harmony + `?stall=30s&stall_after=1","input":"hold the slot"}`)
	w.next() // response.created: the turn holds the only stream
	s, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"x","stream":true}`, "Authorization", "Bearer k")
	if _, code, _, _ := envelope(t, body); s != 503 || code != "too_many_streams" {
		t.Fatalf("HTTP stream beside a socket turn at --max-streams 1: %d %s", s, body)
	}
	w2 := openWS(t, g)
	w2.turn(`{"model":"`+harmony+`","input":"x"}`).wantError(t, 503, "too_many_streams", "")
}

func TestWebSocketShutdownClosesWithGoingAwayAfterTheDrain(t *testing.T) {
	g := newGateway(t, nil)
	w := openWS(t, g)
	w.send(`{"model":"` + harmony + `?delay_ms=20&tokens=20","input":"finish me"}`)
	w.next() // response.created: the turn is in flight when shutdown starts
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g.Server.Shutdown(ctx)
	}()
	// The drain lets the turn finish; only then does the close frame come.
	var last string
	for {
		_, b, err := w.c.Read(t.Context())
		if err != nil {
			if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
				t.Fatalf("closed with %v (%v), want 1001", got, err)
			}
			break
		}
		var ev struct{ Type string }
		_ = json.Unmarshal(b, &ev)
		last = ev.Type
	}
	if last != "response.completed" {
		t.Fatalf("last event before the close: %q", last)
	}
	<-done
}

func TestWebSocketIdleConnectionIsClosedWith1000(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{WSIdleTimeout: 300 * time.Millisecond}})
	w := openWS(t, g)
	// A turn resets the idle clock; after it, silence closes the connection cleanly.
	w.turn(`{"model":"` + harmony + `","input":"one turn"}`).ok(t)
	_, _, err := w.c.Read(t.Context())
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "idle timeout" {
		t.Fatalf("closed with %v, want 1000 idle timeout", err)
	}
}

func TestWebSocketConversationTurnsAreTheConversationsOverHTTP(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		_, body, _ := rawDo(t, "POST", g.URL+"/conversations", `{}`, "Authorization", "Bearer test-key")
		var conv struct{ ID string }
		if err := json.Unmarshal(body, &conv); err != nil || conv.ID == "" {
			t.Fatalf("conversation: %s", body)
		}
		w := openWS(t, g)
		w.turn(`{"model":"` + harmony + `","conversation":"` + conv.ID + `","input":"remember: bees dance"}`).ok(t)
		// The next turn, over HTTP, continues the conversation the socket turn appended to.
		r := g.create(t, `{"model":"`+harmony+`","conversation":"`+conv.ID+`","input":"what do you know?"}`)
		if !strings.Contains(r.OutputText(), "Facts: bees dance.") {
			t.Fatalf("the HTTP turn did not see the socket turn: %q", r.OutputText())
		}
		// And a socket turn sees both.
		last := w.turn(`{"model":"` + harmony + `","conversation":"` + conv.ID + `","input":"and now?"}`).ok(t)
		if !strings.Contains(last.OutputText(), "Seen 5 messages") {
			t.Fatalf("the socket turn did not see the conversation: %q", last.OutputText())
		}
	})
}
