package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/jsonscan"
)

// A chat body's members may nest jsonscan.MaxDepth deep whatever MaxJSONDepth says (the body
// is one more level); one level more is a 400 nesting_too_deep.
func TestChatBodiesBoundMemberNesting(t *testing.T) {
	s, _ := newIntakeServer(t, Config{MaxJSONDepth: 1000})
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	body := func(n int) string {
		return `{"model":"m","messages":[{"role":"user","content":"q"}],"stop":` + deep(n) + `}`
	}
	if _, e := do(t, s, http.MethodPost, "/v1/chat/completions", body(jsonscan.MaxDepth)); deref(e.Code) == "nesting_too_deep" {
		t.Fatalf("a member at the limit: %s", e.Message)
	}
	if rec, e := do(t, s, http.MethodPost, "/v1/chat/completions", body(jsonscan.MaxDepth+1)); rec.Code != 400 || deref(e.Code) != "nesting_too_deep" {
		t.Fatalf("a member one level past: %d %s", rec.Code, rec.Body)
	}
}

// A 400 about the translated request names the chat message, in param and in the message.
func TestChatErrorsNameTheChatMessage(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	rec, e := do(t, s, http.MethodPost, "/v1/chat/completions",
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"tool","tool_call_id":"call_x","content":"o"}]}`)
	if rec.Code != 400 || deref(e.Param) != "messages[2]" || !strings.Contains(e.Message, "messages[2]") || strings.Contains(e.Message, "input[") {
		t.Fatalf("%d %s, want a 400 naming messages[2]", rec.Code, rec.Body)
	}
}

// Under the hidden exposure policy a chat completion carries no reasoning; under raw it does.
func TestChatCompletionShowsReasoningOnlyWhenExposed(t *testing.T) {
	for _, tc := range []struct {
		exposure ReasoningExposure
		shown    bool
	}{{ExposureRaw, true}, {ExposureHidden, false}} {
		s := newSimServer(t, Config{ReasoningExposure: tc.exposure}, nil)
		code, body := call(t, s, http.MethodPost, "/v1/chat/completions", `{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.exposure, code, body)
		}
		if shown := strings.Contains(body, `"reasoning_content":"`); shown != tc.shown {
			t.Fatalf("%s: reasoning shown=%v, want %v: %s", tc.exposure, shown, tc.shown, body)
		}
	}
}
