package chatbridge

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func decodeBody(t testing.TB, body string) (*Request, error) {
	t.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &members); err != nil {
		t.Fatal(err)
	}
	return Decode(members)
}

func translate(t testing.TB, body string) (map[string]json.RawMessage, error) {
	t.Helper()
	r, err := decodeBody(t, body)
	if err != nil {
		return nil, err
	}
	tr, err := r.ToResponses(nil)
	if err != nil {
		return nil, err
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(tr.Body, &out); err != nil {
		t.Fatalf("translation is not JSON: %v\n%s", err, tr.Body)
	}
	return out, nil
}

func TestTranslationToResponses(t *testing.T) {
	for _, c := range []struct{ name, body, member, want string }{
		{"system and user messages", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:x"}}]}]}`,
			"input", `[{"content":"be brief","role":"system","type":"message"},{"content":[{"text":"hi","type":"input_text"},{"detail":"auto","image_url":"data:x","type":"input_image"}],"role":"user","type":"message"}]`},
		{"an assistant tool loop with reasoning sent back", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"c","reasoning_content":"r","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"o"}]}]}`,
			"input", `[{"content":"q","role":"user","type":"message"},{"content":[{"text":"r","type":"reasoning_text"}],"summary":[],"type":"reasoning"},{"content":[{"annotations":[],"text":"c","type":"output_text"}],"role":"assistant","status":"completed","type":"message"},{"arguments":"{}","call_id":"call_1","name":"f","status":"completed","type":"function_call"},{"call_id":"call_1","output":"o","type":"function_call_output"}]`},
		{"an assistant message with vLLM's newer reasoning field", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"c","reasoning":"r2"},{"role":"user","content":"q2"}]}`,
			"input", `[{"content":"q","role":"user","type":"message"},{"content":[{"text":"r2","type":"reasoning_text"}],"summary":[],"type":"reasoning"},{"content":[{"annotations":[],"text":"c","type":"output_text"}],"role":"assistant","status":"completed","type":"message"},{"content":"q2","role":"user","type":"message"}]`},
		{"reasoning_content wins over reasoning", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"c","reasoning_content":"r1","reasoning":"r2"}]}`,
			"input", `[{"content":"q","role":"user","type":"message"},{"content":[{"text":"r1","type":"reasoning_text"}],"summary":[],"type":"reasoning"},{"content":[{"annotations":[],"text":"c","type":"output_text"}],"role":"assistant","status":"completed","type":"message"}]`},
		{"an empty reasoning field adds no item", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"c","reasoning":""}]}`,
			"input", `[{"content":"q","role":"user","type":"message"},{"content":[{"annotations":[],"text":"c","type":"output_text"}],"role":"assistant","status":"completed","type":"message"}]`},
		{"a refusal sent back", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"refusal":"no"}]}`,
			"input", `[{"content":"q","role":"user","type":"message"},{"content":[{"refusal":"no","type":"refusal"}],"role":"assistant","status":"completed","type":"message"}]`},
		{"store is false upstream", `{"model":"m","messages":[{"role":"user","content":"q"}]}`, "store", `false`},
		{"function tools", `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}]}`,
			"tools", `[{"name":"f","parameters":{"type":"object"},"strict":true,"type":"function"}]`},
		{"a forced function", `{"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
			"tool_choice", `{"name":"f","type":"function"}`},
		{"tool_choice mode", `{"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":"required"}`, "tool_choice", `"required"`},
		{"json_schema", `{"model":"m","messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}`,
			"text", `{"format":{"name":"n","schema":{"type":"object"},"type":"json_schema"}}`},
		{"max_completion_tokens", `{"model":"m","messages":[{"role":"user","content":"q"}],"max_completion_tokens":7}`, "max_output_tokens", `7`},
		{"max_tokens", `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":9}`, "max_output_tokens", `9`},
		{"reasoning_effort", `{"model":"m","messages":[{"role":"user","content":"q"}],"reasoning_effort":"low"}`, "reasoning", `{"effort":"low"}`},
		{"sampling as sent", `{"model":"m","messages":[{"role":"user","content":"q"}],"temperature":1.0,"seed":3}`, "temperature", `1.0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := translate(t, c.body)
			if err != nil {
				t.Fatal(err)
			}
			got := canonicalString(t, out[c.member])
			if got != canonicalString(t, json.RawMessage(c.want)) {
				t.Fatalf("%s = %s\nwant %s", c.member, got, c.want)
			}
		})
	}
}

func canonicalString(t testing.TB, raw json.RawMessage) string {
	t.Helper()
	v, err := wire.DecodeValue(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	w := canonWriter{budget: 1 << 20, maxDepth: 64}
	if err := w.value(v, 0); err != nil {
		t.Fatal(err)
	}
	return string(w.dst)
}

func TestUntranslatableMembersAreA400NamingThem(t *testing.T) {
	const q = `"messages":[{"role":"user","content":"q"}]`
	for _, c := range []struct{ body, param string }{
		{`{"messages":[{"role":"user","content":"q"}]}`, "model"},
		{`{"model":"m","messages":[]}`, "messages"},
		{`{"model":"m",` + q + `,"n":2}`, "n"},
		{`{"model":"m",` + q + `,"logprobs":true}`, "logprobs"},
		{`{"model":"m",` + q + `,"audio":{"voice":"x"}}`, "audio"},
		{`{"model":"m",` + q + `,"functions":[{"name":"f"}]}`, "functions"},
		{`{"model":"m",` + q + `,"store":true}`, "store"},
		{`{"model":"m",` + q + `,"stream_options":{"include_usage":true}}`, "stream_options"},
		{`{"model":"m",` + q + `,"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0]"},
		{`{"model":"m",` + q + `,"tool_choice":"sometimes"}`, "tool_choice"},
		{`{"model":"m",` + q + `,"response_format":{"type":"yaml"}}`, "response_format.type"},
		{`{"model":"m",` + q + `,"max_tokens":0}`, "max_tokens"},
		{`{"model":"m",` + q + `,"max_tokens":5,"max_completion_tokens":6}`, "max_completion_tokens"},
		{`{"model":"m","messages":[{"role":"function","content":"x"}]}`, "messages[0].role"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio"}]}]}`, "messages[0].content[0].type"},
		{`{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id"},
		{`{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content"},
		{`{"model":"m","messages":[{"role":"user","content":42}]}`, "messages[0].content"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom"}]}]}`, "messages[0].tool_calls[0]"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f"}},{"id":"c","type":"function","function":{"name":"g"}}]}]}`, "messages[0].tool_calls[1].id"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"c","content":"o"},{"role":"assistant","tool_calls":[{"id":"d","type":"function","function":{"name":"f"}},{"id":"c","type":"function","function":{"name":"f"}}]}]}`, "messages[2].tool_calls[1].id"},
	} {
		t.Run(c.param, func(t *testing.T) {
			_, err := translate(t, c.body)
			var ae *wire.APIError
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.param {
				t.Fatalf("error %v, want a 400 with param %s", err, c.param)
			}
		})
	}
}

func TestMessageParamNamesTheMessage(t *testing.T) {
	origin := []int{0, 1, 1, 1, 2}
	for in, want := range map[string]string{"input[3].arguments": "messages[1]", "input[4]": "messages[2]", "tools": "tools", "input[9]": "messages", "input": "messages"} {
		if got := MessageParam(in, origin); got != want {
			t.Errorf("MessageParam(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestCompletionAndChunksShowWhatTheItemsSay(t *testing.T) {
	o := &Outcome{Status: wire.StatusCompleted, Items: turnItems(t, "a"),
		Usage: json.RawMessage(`{"input_tokens":3,"output_tokens":5,"total_tokens":8,"output_tokens_details":{"reasoning_tokens":2}}`)}
	m := &Meta{ID: "chatcmpl-1", Created: 7, Model: "m"}
	var got struct {
		Choices []struct {
			Message struct {
				Content          *string
				ReasoningContent string            `json:"reasoning_content"`
				ToolCalls        []json.RawMessage `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			Completion int `json:"completion_tokens"`
			Details    struct {
				Reasoning int `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		}
	}
	b := AppendCompletion(nil, m, o, ExposeRaw)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	c := got.Choices[0]
	if *c.Message.Content != "Calling f." || c.Message.ReasoningContent != "think a" || len(c.Message.ToolCalls) != 1 ||
		c.FinishReason != "tool_calls" || got.Usage.Completion != 5 || got.Usage.Details.Reasoning != 2 {
		t.Fatalf("completion %s", b)
	}
	if strings.Contains(string(AppendCompletion(nil, m, o, ExposeHidden)), "think a") {
		t.Fatal("hidden exposure shows reasoning")
	}

	ch := Chunker{Meta: *m, IncludeUsage: true}
	for _, e := range []struct {
		typ  wire.EventType
		data string
	}{
		{wire.EventCreated, `{}`},
		{wire.EventReasoningDelta, `{"output_index":0,"delta":"think "}`},
		{wire.EventReasoningDone, `{"output_index":0,"text":"think a"}`},
		{wire.EventTextDelta, `{"output_index":1,"delta":"Calling f."}`},
		{wire.EventItemAdded, `{"output_index":2,"item":{"type":"function_call","call_id":"call_a","name":"f","arguments":""}}`},
		{wire.EventItemDone, `{"output_index":2,"item":{"type":"function_call","call_id":"call_a","name":"f","arguments":"{\"q\":\"a\"}"}}`},
	} {
		ch.Event(e.typ, []byte(e.data))
	}
	ch.Finish(o, nil)
	frames := strings.Split(strings.TrimSuffix(string(ch.Take(nil)), "\n\n"), "\n\n")
	want := []string{`"role":"assistant"`, `"reasoning_content":"think "`, `"reasoning_content":"a"`, `"content":"Calling f."`,
		`"tool_calls":[{"function":{"arguments":"","name":"f"},"id":"call_a","index":0,"type":"function"}]`,
		`"tool_calls":[{"function":{"arguments":"{\"q\":\"a\"}"},"index":0}]`, `"finish_reason":"tool_calls"`, `"choices":[],"usage":{`, `[DONE]`}
	if len(frames) != len(want) {
		t.Fatalf("%d frames, want %d:\n%s", len(frames), len(want), strings.Join(frames, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(frames[i], w) {
			t.Errorf("frame %d = %s\nwant it to contain %s", i, frames[i], w)
		}
	}
}
