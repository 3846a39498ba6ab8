package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
)

// codexTools is the tool mix Codex CLI sends: function tools, a namespace tool holding function
// tools, and tools vLLM cannot serve (web_search, a custom grammar tool).
const codexTools = `[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}},
{"type":"namespace","name":"agents","description":"sub-agents","tools":[{"type":"function","name":"spawn","description":"start one","strict":false,"parameters":{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}}]},
{"type":"web_search","external_web_access":false},
{"type":"custom","name":"apply_patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}}]`

// The default tool policy: function tools pass, namespace tools reach vLLM flattened
// ("agents__spawn", vLLM's own flattening) and their calls come back in the client's terms in the
// stream, the response, storage and the next turn's replay; unservable tools are dropped, named
// in X-Respgate-Dropped-Tools and left out of the response's tools; unknown top-level members
// (client_metadata) are ignored.
func TestToolPolicyDropFlattensNamespacesAndDropsTheRest(t *testing.T) {
	g := newGateway(t, nil)
	body := `{"model":"` + harmony + `","input":"call agents__spawn please","tools":` + codexTools + `,"client_metadata":{"turn":"1"}}`
	code, raw, hdr := rawDo(t, "POST", g.URL+"/responses", body, "Authorization", "Bearer test-key")
	if code != 200 {
		t.Fatalf("status %d: %s", code, raw)
	}
	if got := hdr.Get("X-Respgate-Dropped-Tools"); got != "web_search,custom" {
		t.Errorf("X-Respgate-Dropped-Tools = %q", got)
	}
	var r struct {
		ID     string
		Tools  []map[string]any
		Output []map[string]any
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, tl := range r.Tools {
		types = append(types, tl["type"].(string))
	}
	if strings.Join(types, ",") != "function,namespace" {
		t.Errorf("response tools: %v", types)
	}
	var call map[string]any
	for _, it := range r.Output {
		if it["type"] == "function_call" {
			call = it
		}
	}
	if call == nil || call["name"] != "spawn" || call["namespace"] != "agents" {
		t.Fatalf("function call: %v", call)
	}
	up := g.UpstreamRequests()[0]
	var sent struct {
		Tools []struct{ Type, Name string }
	}
	_ = json.Unmarshal(up, &sent)
	var names []string
	for _, tl := range sent.Tools {
		names = append(names, tl.Type+":"+tl.Name)
	}
	if strings.Join(names, ",") != "function:exec_command,function:agents__spawn" {
		t.Errorf("tools sent to vLLM: %v", names)
	}
	if strings.Contains(string(up), "client_metadata") || strings.Contains(string(up), "web_search") {
		t.Errorf("vLLM was sent more than it serves: %s", up)
	}

	// The next turn replays the stored call under the flat name again, and its output.
	next := `{"model":"` + harmony + `","previous_response_id":"` + r.ID + `","tools":` + codexTools +
		`,"input":[{"type":"function_call_output","call_id":"` + call["call_id"].(string) + `","output":"spawned"}],"stream":true}`
	s := g.stream(t, next)
	if !strings.Contains(outputText(s.final), "Tool said: spawned") {
		t.Errorf("answer: %s", outputText(s.final))
	}
	input := upstreamInput(t, g.UpstreamRequests()[1])
	var replayed map[string]any
	for _, it := range input {
		if it["type"] == "function_call" {
			replayed = it
		}
	}
	if replayed == nil || replayed["name"] != "agents__spawn" {
		t.Errorf("replayed call: %v", replayed)
	}
}

// Under the reject policy a request with a tool vLLM cannot serve is a 400 naming it, and nothing
// is sent upstream or stored.
func TestToolPolicyRejectAnswers400(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{ToolPolicy: server.ToolPolicyReject}})
	code, raw, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"hi","tools":`+codexTools+`}`, "Authorization", "Bearer test-key")
	typ, ecode, param, msg := envelope(t, raw)
	if code != 400 || typ != "invalid_request_error" || ecode != "unsupported_tool_type" || param != "tools" || !strings.Contains(msg, "web_search") {
		t.Fatalf("%d %s %s %s %s", code, typ, ecode, param, msg)
	}
	if n := len(g.UpstreamRequests()); n != 0 {
		t.Fatalf("%d upstream requests", n)
	}
	// Function and namespace tools alone are served under either policy.
	code, raw, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"hi","tools":[{"type":"namespace","name":"a","tools":[{"type":"function","name":"b"}]}]}`, "Authorization", "Bearer test-key")
	if code != 200 {
		t.Fatalf("namespace tools under reject: %d %s", code, raw)
	}
}
