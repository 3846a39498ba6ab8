package rehydrate

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/respgate/respgate/wire"
)

// Namespace tools (Codex CLI) reach vLLM as function tools named "<ns>__<name>", as vLLM flattens
// them itself; their calls are named the same way in replayed input, and a forced tool_choice of a
// namespaced tool follows.
func TestNamespaceToolsAreFlattened(t *testing.T) {
	req := mustRequest(t, `{"model":"m",
		"tools":[{"type":"namespace","name":"agents","description":"d","tools":[
			{"type":"function","name":"spawn","description":"s","strict":false,"parameters":{"type":"object","properties":{"task":{"type":"string"}}}},
			{"type":"custom","name":"free"},
			{"type":"function","name":"close","parameters":{"type":"object"}}]},
			{"type":"function","name":"plain"}],
		"tool_choice":{"type":"function","name":"spawn","namespace":"agents"}}`)
	in := mustInput(t, `[{"role":"user","content":"go"},
		{"type":"function_call","call_id":"c1","name":"spawn","namespace":"agents","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":"ok"}]`)
	res := mustBuild(t, &Params{Input: in, Request: req})
	m := members(t, res.Body)
	wantTools := `[{"type":"function","name":"agents__spawn","description":"s","strict":false,"parameters":{"type":"object","properties":{"task":{"type":"string"}}}},` +
		`{"type":"function","name":"agents__close","parameters":{"type":"object"}},{"type":"function","name":"plain"}]`
	if got := compact(t, m["tools"]); got != wantTools {
		t.Errorf("tools\n got %s\nwant %s", got, wantTools)
	}
	if got := compact(t, m["tool_choice"]); got != `{"type":"function","name":"agents__spawn"}` {
		t.Errorf("tool_choice %s", got)
	}
	if got := upstreamInput(t, res.Body)[1]; got != `{"type":"function_call","call_id":"c1","name":"agents__spawn","arguments":"{}"}` {
		t.Errorf("function_call upstream: %s", got)
	}
	if !slices.Equal(res.DroppedTools, []string{"custom"}) {
		t.Errorf("DroppedTools = %v", res.DroppedTools)
	}
	if len(res.ToolNames) != 2 || res.ToolNames["agents__close"] != (wire.ToolName{Namespace: "agents", Name: "close"}) {
		t.Errorf("ToolNames = %v", res.ToolNames)
	}
	// The stored input keeps the client's form: namespace and name as sent.
	var fc struct{ Name, Namespace string }
	if err := json.Unmarshal(res.Input[1].JSON, &fc); err != nil || fc.Name != "spawn" || fc.Namespace != "agents" {
		t.Errorf("stored function_call %s", res.Input[1].JSON)
	}
}

// buildFromBody decodes a request as the server does and builds it with input "hi": the fault of
// whichever step refuses it, or nil.
func buildFromBody(t *testing.T, body string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	req, err := wire.DecodeCreateRequest(m)
	if err != nil {
		return err
	}
	_, err = Build(&Params{Input: mustInput(t, `"hi"`), Request: req})
	return err
}

// A namespace tool's shape is checked when the request is decoded, name conflicts when the tools
// are flattened: either way a 400 naming the tool.
func TestToolPolicyFaults(t *testing.T) {
	for name, c := range map[string]struct{ tools, param, code string }{
		"flat name collides with a function tool": {
			`[{"type":"function","name":"a__b"},{"type":"namespace","name":"a","tools":[{"type":"function","name":"b"}]}]`,
			"tools", CodeToolNameConflict},
		"two function tools with one name": {
			`[{"type":"function","name":"x"},{"type":"function","name":"x"}]`, "tools", CodeToolNameConflict},
		"namespace without a name": {
			`[{"type":"namespace","tools":[{"type":"function","name":"b"}]}]`, "tools[0].name", CodeMissingParameter},
		"namespace without tools": {
			`[{"type":"namespace","name":"a"}]`, "tools[0].tools", CodeInvalidType},
		"nested function without a name": {
			`[{"type":"namespace","name":"a","tools":[{"type":"function"}]}]`, "tools[0].tools[0].name", CodeMissingParameter},
	} {
		t.Run(name, func(t *testing.T) {
			err := buildFromBody(t, `{"model":"m","tools":`+c.tools+`}`)
			var ae *wire.APIError
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.param || ae.Code != c.code {
				t.Fatalf("err = %v (%+v), want 400 %s %s", err, ae, c.param, c.code)
			}
		})
	}
	// A namespace member that is not a string on a function_call is a client fault too.
	_, err := Build(&Params{Input: mustInput(t, `[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"n","namespace":7,"arguments":"{}"}]`)})
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != CodeInvalidType {
		t.Fatalf("namespace 7: %v", err)
	}
}
