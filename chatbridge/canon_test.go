package chatbridge

import (
	"encoding/json"
	"strings"
	"testing"
)

func msgs(t testing.TB, raws ...string) []Message {
	t.Helper()
	out := make([]Message, len(raws))
	for i, r := range raws {
		var head struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal([]byte(r), &head); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		out[i] = Message{Role: head.Role, JSON: json.RawMessage(r)}
	}
	return out
}

var testScope = &Scope{Tenant: "t1", Model: "m", Tools: json.RawMessage(`[{"type":"function","function":{"name":"f"}}]`)}

// last is the chain digest after the whole history.
func last(t testing.TB, sc *Scope, raws ...string) string {
	t.Helper()
	h, ok := Identify(sc, msgs(t, raws...), Limits{})
	if !ok {
		t.Fatalf("Identify refused %v", raws)
	}
	return h.Position()
}

const user = `{"role":"user","content":"hi"}`

func TestCanonicalFormEquatesWhatTheIssueSaysIsEqual(t *testing.T) {
	for _, c := range []struct{ name, a, b string }{
		{"text as string or as text parts", `{"role":"assistant","content":"ab"}`,
			`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`},
		{"absent and null content", `{"role":"assistant"}`, `{"role":"assistant","content":null}`},
		{"absent and empty content", `{"role":"assistant"}`, `{"role":"assistant","content":""}`},
		{"absent content and no parts", `{"role":"assistant"}`, `{"role":"assistant","content":[]}`},
		{"absent tool_calls and []", `{"role":"assistant","content":"x"}`, `{"role":"assistant","content":"x","tool_calls":[]}`},
		{"absent tool_calls and null", `{"role":"assistant","content":"x"}`, `{"role":"assistant","content":"x","tool_calls":null}`},
		{"an index equal to the position", `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
			`{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"c2","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{"key order", `{"role":"assistant","content":"x","refusal":"no"}`, `{"refusal":"no","content":"x","role":"assistant"}`},
		{"null members and absent ones", `{"role":"assistant","content":"x"}`, `{"role":"assistant","content":"x","refusal":null,"audio":null}`},
		{"a user's single text part and its string", `{"role":"user","content":"ab"}`, `{"role":"user","content":[{"type":"text","text":"ab"}]}`},
		{"escapes spelled differently", `{"role":"assistant","content":"<a\u00e9>"}`, `{"role":"assistant","content":"\u003ca\u00e9\u003e"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if x, y := last(t, testScope, user, c.a), last(t, testScope, user, c.b); x != y {
				t.Fatalf("digests differ:\n%s\n%s", c.a, c.b)
			}
		})
	}
}

func TestCanonicalFormKeepsWhatChangesMeaning(t *testing.T) {
	call := func(id, args string) string {
		return `{"id":"` + id + `","type":"function","function":{"name":"f","arguments":` + args + `}}`
	}
	for _, c := range []struct{ name, a, b string }{
		{"edited text", `{"role":"assistant","content":"ab"}`, `{"role":"assistant","content":"ab "}`},
		{"reordered tool calls", `{"role":"assistant","tool_calls":[` + call("c1", `"{}"`) + `,` + call("c2", `"{}"`) + `]}`,
			`{"role":"assistant","tool_calls":[` + call("c2", `"{}"`) + `,` + call("c1", `"{}"`) + `]}`},
		{"an index other than the position", `{"role":"assistant","tool_calls":[` + call("c1", `"{}"`) + `]}`,
			`{"role":"assistant","tool_calls":[{"index":1,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{"arguments reformatted", `{"role":"assistant","tool_calls":[` + call("c1", `"{\"a\":1}"`) + `]}`,
			`{"role":"assistant","tool_calls":[` + call("c1", `"{\"a\": 1}"`) + `]}`},
		{"an unknown nested field", `{"role":"assistant","tool_calls":[` + call("c1", `"{}"`) + `]}`,
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","x":1,"function":{"name":"f","arguments":"{}"}}]}`},
		{"a number spelled differently", `{"role":"assistant","content":"x","x":1}`, `{"role":"assistant","content":"x","x":1.0}`},
		{"a user's several parts and their concatenation", `{"role":"user","content":"ab"}`,
			`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`},
		{"reasoning sent back", `{"role":"assistant","content":"x"}`, `{"role":"assistant","content":"x","reasoning_content":"r"}`},
		{"a tool message's name", `{"role":"tool","tool_call_id":"c1","content":"x"}`, `{"role":"tool","tool_call_id":"c1","content":"x","name":"f"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if x, y := last(t, testScope, user, c.a), last(t, testScope, user, c.b); x == y {
				t.Fatalf("digests equal:\n%s\n%s", c.a, c.b)
			}
		})
	}
}

func TestScopeSeparatesTenantsModelsToolsReasoningAndFormat(t *testing.T) {
	base := *testScope
	seen := map[string]string{last(t, &base, user): "base"}
	for name, change := range map[string]func(*Scope){
		"tenant":          func(s *Scope) { s.Tenant = "t2" },
		"model":           func(s *Scope) { s.Model = "m2" },
		"tools":           func(s *Scope) { s.Tools = nil },
		"reasoning":       func(s *Scope) { s.ReasoningEffort = "high" },
		"response format": func(s *Scope) { s.ResponseFormat = json.RawMessage(`{"type":"json_object"}`) },
	} {
		sc := base
		change(&sc)
		d := last(t, &sc, user)
		if prev, ok := seen[d]; ok {
			t.Errorf("changing the %s gives the digest of %s", name, prev)
		}
		seen[d] = name
	}
}

func TestDigestsAreRecordedAtEveryBoundaryAndArePrefixStable(t *testing.T) {
	a := msgs(t, user, `{"role":"assistant","content":"x"}`, `{"role":"user","content":"more"}`)
	h, ok := Identify(testScope, a, Limits{})
	if !ok || len(h.Digests) != 4 {
		t.Fatalf("ok=%v digests=%d, want 4", ok, len(h.Digests))
	}
	h2, _ := Identify(testScope, a[:2], Limits{})
	for k := range h2.Digests {
		if h.Digests[k] != h2.Digests[k] {
			t.Fatalf("digest %d depends on later messages", k)
		}
	}
}

func TestOverTheLimitsMeansNoIdentityNeverAnError(t *testing.T) {
	big := `{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}`
	if _, ok := Identify(testScope, msgs(t, big), Limits{MaxBytes: 1000}); ok {
		t.Fatal("a history over MaxBytes was identified")
	}
	deep := `{"role":"user","content":"x","x":` + strings.Repeat("[", 10) + strings.Repeat("]", 10) + `}`
	if _, ok := Identify(testScope, msgs(t, deep), Limits{MaxDepth: 5}); ok {
		t.Fatal("a history over MaxDepth was identified")
	}
	if _, ok := Identify(testScope, msgs(t, deep), Limits{}); !ok {
		t.Fatal("a history within the default limits was refused")
	}
}
