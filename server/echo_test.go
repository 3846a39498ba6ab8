package server

import (
	"encoding/json"
	"testing"

	"github.com/respgate/respgate/wire"
)

// The echo completes what the client sent with the members the Open Responses schema requires,
// keeps what it sent as sent, and leaves out what the model was never given (docs/wire.md §7.1).
// Each case names the echo members it checks, as exact JSON.
func TestDecodeCreateEchoCompletesWhatTheClientSent(t *testing.T) {
	for _, tc := range []struct {
		name, members string
		want          map[string]string // echo member → its exact JSON; "-" means absent
	}{
		{"reasoning empty object", `"reasoning":{}`,
			map[string]string{"reasoning": `{"effort":null,"summary":null}`}},
		{"reasoning with summary only", `"reasoning":{"summary":"auto"}`,
			map[string]string{"reasoning": `{"summary":"auto","effort":null}`}},
		{"reasoning complete", `"reasoning":{"effort":"low","summary":"auto"}`,
			map[string]string{"reasoning": `{"effort":"low","summary":"auto"}`}},
		{"reasoning absent", ``, map[string]string{"reasoning": `null`}},
		{"text without format", `"text":{"verbosity":"low"}`,
			map[string]string{"text": `{"verbosity":"low","format":{"type":"text"}}`}},
		{"text with a json_schema format", `"text":{"format":{"type":"json_schema","name":"n","schema":{}}}`,
			map[string]string{"text": `{"format":{"type":"json_schema","name":"n","schema":{},"description":null,"strict":false}}`}},
		{"text with a complete json_schema format", `"text":{"format":{"type":"json_schema","name":"n","schema":{},"strict":true,"description":"d"}}`,
			map[string]string{"text": `{"format":{"type":"json_schema","name":"n","schema":{},"strict":true,"description":"d"}}`}},
		{"text with a json_object format", `"text":{"format":{"type":"json_object"}}`,
			map[string]string{"text": `{"format":{"type":"json_object"}}`}},
		{"function tool", `"tools":[{"type":"function","name":"f"}]`,
			map[string]string{"tools": `[{"description":null,"name":"f","parameters":null,"strict":null,"type":"function"}]`}},
		{"function tool with its members", `"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"},"strict":true}]`,
			map[string]string{"tools": `[{"description":"d","name":"f","parameters":{"type":"object"},"strict":true,"type":"function"}]`}},
		{"namespace tool keeps only its function tools", `"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"},{"type":"custom","name":"c"}]}]`,
			map[string]string{"tools": `[{"name":"ns","tools":[{"description":null,"name":"f","parameters":null,"strict":null,"type":"function"}],"type":"namespace"}]`}},
		{"hosted tool left out", `"tools":[{"type":"web_search"},{"type":"function","name":"f","strict":false}]`,
			map[string]string{"tools": `[{"description":null,"name":"f","parameters":null,"strict":false,"type":"function"}]`}},
		{"tool_choice sent", `"tool_choice":"required"`, map[string]string{"tool_choice": `"required"`}},
		{"optional members sent", `"instructions":"be brief","max_output_tokens":16,"max_tool_calls":2,"user":"u1","prompt_cache_retention":"24h","previous_response_id":"resp_1","metadata":{"k":"v"}`,
			map[string]string{"instructions": `"be brief"`, "max_output_tokens": `16`, "max_tool_calls": `2`, "user": `"u1"`,
				"prompt_cache_retention": `"24h"`, "previous_response_id": `"resp_1"`, "metadata": `{"k":"v"}`, "conversation": "-"}},
		{"optional members left out", ``,
			map[string]string{"instructions": `null`, "max_output_tokens": `null`, "user": "-", "prompt_cache_retention": "-",
				"previous_response_id": `null`, "conversation": "-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","input":"x"`
			if tc.members != "" {
				body += "," + tc.members
			}
			r, err := decodeCreate([]byte(body+"}"), 64)
			if err != nil {
				t.Fatal(err)
			}
			echo, err := wire.Marshal(r.echo)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(echo, &m); err != nil {
				t.Fatalf("echo %s: %v", echo, err)
			}
			for k, want := range tc.want {
				got, ok := m[k]
				switch {
				case want == "-" && ok:
					t.Errorf("echo %s = %s, want it absent", k, got)
				case want != "-" && string(got) != want:
					t.Errorf("echo %s = %s, want %s", k, got, want)
				}
			}
		})
	}
}
