package server

import (
	"net/http"
	"strings"
	"testing"
)

func TestChatRequestsThatCannotBeTranslatedAre400sBeforeUpstreamAndStore(t *testing.T) {
	s, upstreamCalls := newIntakeServer(t, Config{})
	for _, c := range []struct{ body, param string }{
		{`{"model":"m","messages":[{"role":"user","content":"q"}],"n":3}`, "n"},
		{`{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0]"},
		{`{"model":"m","messages":[{"role":"user","content":"q"}],"temperature":9}`, "temperature"},
		// rehydrate refuses an output without its call; the param names the chat message.
		{`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"call_x","content":"o"}]}`, "messages[1]"},
		{`{"model":"m","messages":[{"role":"user","content":"q\u0000"}]}`, "messages[0].content"},
	} {
		rec, e := do(t, s, http.MethodPost, "/v1/chat/completions", c.body)
		if rec.Code != http.StatusBadRequest || deref(e.Param) != c.param {
			t.Errorf("%s: %d param %q (%s), want 400 param %s", c.body, rec.Code, deref(e.Param), e.Message, c.param)
		}
	}
	if n := upstreamCalls.Load(); n != 0 {
		t.Fatalf("%d upstream calls for invalid requests", n)
	}
}

// Two tool calls sharing an id (in one assistant message or two) are refused as a conflict
// before the upstream is called; ids used once each are served by translation.
func TestChatToolCallIDsSharedByTwoCallsAreAConflict(t *testing.T) {
	s, upstreamCalls := newIntakeServer(t, Config{})
	call := func(id, args string) string {
		return `{"id":"` + id + `","type":"function","function":{"name":"f","arguments":"` + args + `"}}`
	}
	for _, c := range []struct{ body, param string }{
		{`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[` + call("call_1", "{}") + `,` + call("call_1", `{\"a\":1}`) + `]}]}`,
			"messages[1].tool_calls[1].id"},
		{`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[` + call("call_1", "{}") + `]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"o"},{"role":"assistant","tool_calls":[` + call("call_1", "{}") + `]}]}`,
			"messages[3].tool_calls[0].id"},
	} {
		rec, e := do(t, s, http.MethodPost, "/v1/chat/completions", c.body)
		if rec.Code != http.StatusBadRequest || deref(e.Param) != c.param || deref(e.Code) != "tool_call_id_conflict" {
			t.Errorf("%s: %d %s, want 400 tool_call_id_conflict param %s", c.body, rec.Code, rec.Body, c.param)
		}
	}
	if n := upstreamCalls.Load(); n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

// More messages than the gateway takes: the error names 'messages', the chat request's member.
func TestChatTooManyMessagesNamesMessages(t *testing.T) {
	s, upstreamCalls := newIntakeServer(t, Config{MaxInputItems: 2})
	rec, e := do(t, s, http.MethodPost, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]}`)
	if rec.Code != http.StatusBadRequest || deref(e.Param) != "messages" || deref(e.Code) != "array_above_max_length" ||
		!strings.Contains(e.Message, "'messages'") || strings.Contains(e.Message, "input") {
		t.Fatalf("%d %s, want a 400 naming messages", rec.Code, rec.Body)
	}
	if n := upstreamCalls.Load(); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
}
