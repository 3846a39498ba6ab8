package server

import (
	"net/http"
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
