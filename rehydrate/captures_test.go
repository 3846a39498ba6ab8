package rehydrate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// loadCapture reads a real client's request body from testdata/captures and parses its input.
func loadCapture(t testing.TB, name string) (*wire.CreateRequest, []wire.Item) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "captures", name))
	if err != nil {
		t.Fatal(err)
	}
	req := mustRequest(t, string(raw))
	in, err := ParseInput(req.Input)
	if err != nil {
		t.Fatalf("ParseInput: %v", err)
	}
	return req, in
}

// Requests real clients sent go through ParseInput and Build and come out as sensible vLLM bodies.
func TestRealClientCaptures(t *testing.T) {
	t.Run("codex turn 1", func(t *testing.T) {
		req, in := loadCapture(t, "codex-0.171-turn1.json")
		res := mustBuild(t, &Params{Input: in, Request: req})
		m := members(t, res.Body)
		for _, k := range []string{"client_metadata", "prompt_cache_key", "include", "reasoning"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s forwarded", k) // include held only reasoning.encrypted_content; reasoning only a summary
			}
		}
		if string(m["stream"]) != "true" || string(m["store"]) != "false" || string(m["model"]) != `"fake-model"` {
			t.Errorf("stream %s store %s model %s", m["stream"], m["store"], m["model"])
		}
		if !slices.Equal(res.DroppedTools, []string{"web_search"}) {
			t.Errorf("DroppedTools = %v", res.DroppedTools)
		}
		var tools []struct{ Type, Name string }
		if err := json.Unmarshal(m["tools"], &tools); err != nil {
			t.Fatal(err)
		}
		// 7 top-level function tools and the 5 function tools of the multi_agent_v1 namespace,
		// flattened the way vLLM flattens them.
		if len(tools) != 12 {
			t.Errorf("%d function tools forwarded, want 12", len(tools))
		}
		for _, tl := range tools {
			if tl.Type != "function" {
				t.Errorf("tool %s of type %s forwarded", tl.Name, tl.Type)
			}
			if tn, ok := res.ToolNames[tl.Name]; ok && (tn.Namespace != "multi_agent_v1" || "multi_agent_v1__"+tn.Name != tl.Name) {
				t.Errorf("ToolNames[%s] = %+v", tl.Name, tn)
			}
		}
		if len(res.ToolNames) != 5 || res.ToolNames["multi_agent_v1__close_agent"] != (wire.ToolName{Namespace: "multi_agent_v1", Name: "close_agent"}) {
			t.Errorf("ToolNames = %v", res.ToolNames)
		}
		got := upstreamInput(t, res.Body)
		if len(got) != 4 || !strings.HasPrefix(got[0], `{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a coding agent`) {
			t.Errorf("input: %d items, first %.80s", len(got), got[0])
		}
		// Codex's client ids (msg_<uuid>) are kept for storage, not sent.
		if res.Input[3].ID != "msg_01a22bb5-142f-7be1-999d-f2f65c86ac10" || strings.Contains(string(res.Body), "msg_01a22bb5") {
			t.Errorf("stored id %s", res.Input[3].ID)
		}
	})

	t.Run("codex turn 2 after a tool call", func(t *testing.T) {
		req, in := loadCapture(t, "codex-0.171-turn2-after-tool.json")
		res := mustBuild(t, &Params{Input: in, Request: req})
		got := upstreamInput(t, res.Body)
		if len(got) != 7 {
			t.Fatalf("%d items, want 7", len(got))
		}
		want := []string{
			`{"type":"reasoning","id":"rs_af3e1f6d3e44d3688161f482","summary":[],"content":[{"type":"reasoning_text","text":"The user wants a short greeting. I will reply briefly."}]}`,
			`{"type":"function_call","call_id":"call_51031fcb9688e1de4fa6843e","name":"exec_command","arguments":"{\"cmd\":\"echo hello-from-fake-tool\"}"}`,
		}
		if got[4] != want[0] || got[5] != want[1] {
			t.Errorf("got\n%s\n%s", got[4], got[5])
		}
		if !strings.HasPrefix(got[6], `{"type":"function_call_output","call_id":"call_51031fcb9688e1de4fa6843e","output":"Chunk ID: 134f1f\n`) {
			t.Errorf("got %s", got[6])
		}
		if bytes.Contains(res.Body, []byte("encrypted_content")) || bytes.Contains(res.Body, []byte("gAAAA-fake-encrypted")) {
			t.Error("encrypted_content went upstream")
		}
		if st := res.Stats; st.EncryptedDropped != 1 || st.ReasoningReplayed != 1 || st.Items != 7 {
			t.Errorf("stats %+v", st)
		}
		// The stored copy is lossless: fco_ client id, encrypted blob and all.
		if res.Input[6].ID != "fco_01a22bb5-15de-7413-9ede-59e3737324ae" || !bytes.Contains(res.Input[4].JSON, []byte("gAAAA-fake-encrypted")) {
			t.Errorf("stored %s / %s", res.Input[6].ID, res.Input[4].JSON)
		}

		// The same turn with "encrypted_content": null, as Codex sends when it has no blob.
		var items []map[string]any
		if err := json.Unmarshal(req.Input, &items); err != nil {
			t.Fatal(err)
		}
		items[4]["encrypted_content"] = nil
		raw, _ := json.Marshal(items)
		res2 := mustBuild(t, &Params{Input: mustInput(t, string(raw)), Request: req})
		if g := upstreamInput(t, res2.Body); g[4] != want[0] || res2.Stats.EncryptedDropped != 0 {
			t.Errorf("null encrypted_content: %s %+v", g[4], res2.Stats)
		}
	})

	t.Run("codex with a known model", func(t *testing.T) {
		req, in := loadCapture(t, "codex-0.171-known-model.json")
		res := mustBuild(t, &Params{Input: in, Request: req})
		m := members(t, res.Body)
		if compact(t, m["reasoning"]) != `{"effort":"medium"}` || compact(t, m["text"]) != `{"verbosity":"low"}` {
			t.Errorf("reasoning %s text %s", m["reasoning"], m["text"])
		}
		if !slices.Equal(res.DroppedTools, []string{"custom", "tool_search", "web_search"}) {
			t.Errorf("DroppedTools = %v", res.DroppedTools)
		}
	})

	t.Run("agents sdk with previous_response_id", func(t *testing.T) {
		req, in := loadCapture(t, "agents-0.20-previous-response-id-turn2.json")
		// Alone, the output has no call: vLLM (harmony) would fail on it, so respgate answers 400.
		ae := buildErr(t, &Params{Input: in, Request: req})
		checkErr(t, ae, "function_call_output_without_call", "input[0]", "")
		// With the stored chain it continues.
		hist := mustItems(t,
			`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}],"status":"completed"}`,
			`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"Call get_weather."}],"status":"completed"}`,
			`{"id":"fc_1","type":"function_call","call_id":"call_f71c6cffbd002968562a92a7","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}`,
		)
		res := mustBuild(t, &Params{History: hist, Input: in, Request: req})
		got := upstreamInput(t, res.Body)
		if len(got) != 4 || got[3] != `{"type":"function_call_output","call_id":"call_f71c6cffbd002968562a92a7","output":"Sunny and 21C in Paris"}` {
			t.Errorf("got %v", got)
		}
		m := members(t, res.Body)
		if _, ok := m["previous_response_id"]; ok {
			t.Error("previous_response_id forwarded")
		}
		if _, ok := m["include"]; ok {
			t.Error("empty include forwarded")
		}
		if len(res.Input) != 1 || !strings.HasPrefix(res.Input[0].ID, "fco_") {
			t.Errorf("stored %v", res.Input)
		}
	})

	t.Run("agents sdk replaying reasoning and tools", func(t *testing.T) {
		req, in := loadCapture(t, "agents-0.20-reasoning-tool-replay.json")
		res := mustBuild(t, &Params{Input: in, Request: req})
		got := upstreamInput(t, res.Body)
		want := []string{
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"What is the weather in Paris?"}]}`,
			`{"type":"reasoning","id":"rs_c69dba46937d5ae72c5c7a48","summary":[],"content":[{"type":"reasoning_text","text":"The user wants a short greeting. I will reply briefly."}]}`,
			`{"type":"function_call","call_id":"call_8e61f0f6d82d02a4e616cdc2","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}`,
			`{"type":"function_call_output","call_id":"call_8e61f0f6d82d02a4e616cdc2","output":"Sunny and 21C in Paris"}`,
		}
		if !slices.Equal(got, want) {
			t.Errorf("got\n%s", strings.Join(got, "\n"))
		}
		if compact(t, members(t, res.Body)["instructions"]) != `"Answer using the get_weather tool."` {
			t.Error("instructions lost")
		}
	})

	t.Run("ai sdk item_reference to reasoning", func(t *testing.T) {
		req, in := loadCapture(t, "aisdk-6.0-item-reference-step2.json")
		ids := ReferencedIDs(in)
		if !slices.Equal(ids, []string{"rs_edaf74d8fa6a214609c36b6f"}) {
			t.Fatalf("ReferencedIDs = %v", ids)
		}
		// What respgate stored for step 1's output reasoning.
		stored := mustItem(t, `{"id":"rs_edaf74d8fa6a214609c36b6f","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"I should call get_weather for Paris."}],"status":"completed"}`)
		res := mustBuild(t, &Params{Input: in, Request: req, Lookup: MapLookup{ids[0]: stored}})
		got := upstreamInput(t, res.Body)
		if len(got) != 4 || got[1] != `{"type":"reasoning","id":"rs_edaf74d8fa6a214609c36b6f","summary":[],"content":[{"type":"reasoning_text","text":"I should call get_weather for Paris."}]}` {
			t.Errorf("got %v", got)
		}
		if res.Stats.ReasoningReplayed != 1 || len(res.Input) != 4 || !bytes.Equal(res.Input[1].JSON, stored.JSON) {
			t.Errorf("stats %+v stored %v", res.Stats, res.Input)
		}
		// Without the stored item: a clear 400, not a silent drop.
		ae := buildErr(t, &Params{Input: in, Request: req})
		checkErr(t, ae, "item_reference_not_found", "input[1]", "Item 'rs_edaf74d8fa6a214609c36b6f' referenced by 'input[1]' was not found.")
	})
}
