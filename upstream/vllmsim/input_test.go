package vllmsim

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// vllmErr asserts r is vLLM's error envelope with the given status, type, param (nil for null) and a
// message containing msg.
func vllmErr(t *testing.T, r reply, status int, typ string, param any, msg string) {
	t.Helper()
	e := decode(t, r.raw)
	inner, ok := e["error"].(map[string]any)
	if r.status != status || !ok || inner["type"] != typ || inner["param"] != param || !has(inner, "param") ||
		num(inner["code"]) != status || !strings.Contains(str(inner["message"]), msg) {
		t.Errorf("got %d %s; want %d type %q param %v message containing %q", r.status, r.raw, status, typ, param, msg)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestInputRejections(t *testing.T) {
	srv, _ := newServer(t, Options{})
	encrypted := `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"plain"}],"encrypted_content":"gAAAA"}]`
	cases := []struct {
		name   string
		body   string
		status int
		typ    string
		param  any
		msg    string
	}{
		{"parser refuses encrypted reasoning", body(ParserModel, false, encrypted),
			400, "BadRequestError", nil, "Encrypted content is not supported."},
		{"harmony needs the call before its output", body(HarmonyModel, true, `"input":[{"role":"user","content":"hi"},`+
			`{"type":"function_call_output","call_id":"call_9","output":"x"},`+
			`{"type":"function_call","call_id":"call_9","name":"f","arguments":"{}"}]`),
			400, "BadRequestError", nil, "No call message found for call_9"},
		{"harmony refuses unknown item types", body(HarmonyModel, false, `"input":[{"type":"item_reference","id":"rs_1"},{"role":"user","content":"hi"}]`),
			400, "BadRequestError", nil, "Unknown input type: item_reference"},
		{"input is required", body(HarmonyModel, false),
			400, "Bad Request", "body.input", "Field required"},
		{"input null is missing", body(ParserModel, false, `"input":null`),
			400, "Bad Request", "body.input", "Field required"},
		{"input must be a string or a list", body(ParserModel, false, `"input":42`),
			400, "Bad Request", "body.input", "list"},
		{"wrong field type", body(ParserModel, false, `"input":"hi","stream":"yes"`),
			400, "Bad Request", "body.stream", "valid"},
		{"invalid JSON", `{"model":`, 400, "Bad Request", "body", "JSON decode error"},
		{"unknown model", body("gpt-4o", false, `"input":"hi"`),
			404, "NotFoundError", "model", "The model `gpt-4o` does not exist."},
		{"unknown model with faults names the base", body("gpt-4o?delay_ms=1", false, `"input":"hi"`),
			404, "NotFoundError", "model", "The model `gpt-4o` does not exist."},
		{"previous_response_id is never found", body(ParserModel, true, `"input":"hi","previous_response_id":"resp_123"`),
			404, "invalid_request_error", "response_id", "Response with id 'resp_123' not found."},
		{"harmony supports only auto/none tool_choice", body(HarmonyModel, false, traceTools, `"input":"hi","tool_choice":"required"`),
			501, "NotImplementedError", nil, "Only 'auto' or 'none' tool_choice is supported in response API with Harmony"},
		{"harmony forced function is 501 too", body(HarmonyModel, false, traceTools, `"input":"hi","tool_choice":{"type":"function","name":"get_time"}`),
			501, "NotImplementedError", nil, "Harmony"},
		{"max_output_tokens must be positive", body(ParserModel, false, `"input":"hi","max_output_tokens":0`),
			400, "BadRequestError", nil, "max_tokens must be at least 1, got 0."},
		{"prompt longer than the context, parser path: the renderer's wording", body(ParserModel, false, `"input":"`+strings.Repeat("w ", 200)+`"`),
			400, "BadRequestError", "input_tokens",
			"This model's maximum context length is 100 tokens. However, your request has 206 input tokens. Please reduce the length of the input messages."},
		{"prompt longer than the context, harmony: the responses path's wording", body(HarmonyModel, false, `"input":"`+strings.Repeat("w ", 200)+`"`),
			400, "invalid_request_error", "input", "The engine prompt length 206 exceeds the max_model_len 100. Please reduce prompt."},
	}
	t.Run("the body must be declared JSON", func(t *testing.T) {
		for _, ct := range []string{"", "application/x-www-form-urlencoded", "text/plain"} {
			vllmErr(t, post(t, srv, body(HarmonyModel, false, `"input":"hi"`), "Content-Type", ct),
				400, "Bad Request", nil, "Unsupported Media Type: Only 'application/json' is allowed")
		}
		if r := post(t, srv, body(HarmonyModel, false, `"input":"hi"`), "Content-Type", "Application/JSON; charset=utf-8"); r.status != 200 {
			t.Errorf("status %d with a charset", r.status)
		}
	})
	srvSmall, _ := newServer(t, Options{MaxModelLen: 100})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := srv
			if strings.HasPrefix(c.name, "prompt longer") {
				s = srvSmall
			}
			vllmErr(t, post(t, s, c.body), c.status, c.typ, c.param, c.msg)
		})
	}
}

func TestInputAccepted(t *testing.T) {
	srv, _ := newServer(t, Options{})
	cases := []struct {
		name, body, want string
	}{
		{"harmony ignores encrypted_content and reads the content",
			body(HarmonyModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"plain words"}],"encrypted_content":"gAAAA"}]`),
			`Prior reasoning: "plain words".`},
		{"harmony skips reasoning without content",
			body(HarmonyModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"sum"}],"encrypted_content":"gAAAA"}]`),
			`Prior reasoning: none.`},
		{"harmony joins every reasoning content",
			body(HarmonyModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"one"},{"type":"reasoning_text","text":"two"}]}]`),
			`Prior reasoning: "one two".`},
		{"parser reads the first content only",
			body(ParserModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"sum"}],"content":[{"type":"reasoning_text","text":"one"},{"type":"reasoning_text","text":"two"}]}]`),
			`Prior reasoning: "one".`},
		{"parser falls back to the first summary",
			body(ParserModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"sum one"},{"type":"summary_text","text":"sum two"}]}]`),
			`Prior reasoning: "sum one".`},
		{"parser accepts an empty encrypted_content",
			body(ParserModel, false, `"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"r"}],"encrypted_content":""}]`),
			`Prior reasoning: "r".`},
		{"parser passes unknown items through",
			body(ParserModel, false, `"input":[{"type":"item_reference","id":"rs_1"},{"role":"user","content":"hi"}]`),
			`Thinking about "hi".`},
		{"unknown fields and store are accepted",
			body(HarmonyModel, false, `"input":"hi","store":true,"client_metadata":{"a":1},"x_vendor":[1,2]`),
			`Thinking about "hi".`},
		{"a missing model is the first served model",
			`{"input":"hi"}`, `Thinking about "hi".`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, srv, c.body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			if got := outputTexts(decode(t, r.raw)); !strings.Contains(got[0], c.want) {
				t.Errorf("reasoning %q, want it to contain %q", got[0], c.want)
			}
		})
	}
}

// TestAnswerFormat checks the documented, input-dependent answer.
func TestAnswerFormat(t *testing.T) {
	srv, _ := newServer(t, Options{})
	tools := traceTools
	cases := []struct {
		name  string
		model string
		extra []string
		want  []string // outputTexts of the final response
	}{
		{"string input", HarmonyModel, []string{`"input":"Hello there"`}, []string{
			`reasoning:Thinking about "Hello there". Prior reasoning: none.`,
			`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"history with facts and reasoning", ParserModel, []string{`"input":[` +
			`{"role":"system","content":"Be brief."},` +
			`{"role":"user","content":[{"type":"input_text","text":"Remember: the code is 42.\nAlso remember: tea > coffee"}]},` +
			`{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"  A   very long line of prior reasoning that goes on and on"}]},` +
			`{"role":"assistant","content":[{"type":"output_text","text":"Noted."}]},` +
			`{"type":"message","role":"user","content":"And now?"}]`}, []string{
			`reasoning:Thinking about "And now?". Prior reasoning: "A very long line of prior reasoning that".`,
			`message:Seen 4 messages, 1 reasoning items, 0 tool outputs. Facts: the code is 42; tea > coffee.`}},
		{"harmony drops an empty developer message", HarmonyModel, []string{`"input":[{"role":"developer","content":""},{"role":"user","content":"x"}]`}, []string{
			`reasoning:Thinking about "x". Prior reasoning: none.`,
			`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"tool outputs after the last user message are echoed", HarmonyModel, []string{tools, `"input":[` +
			`{"role":"user","content":"call get_weather and get_time"},` +
			`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},` +
			`{"type":"function_call","call_id":"c2","name":"get_time","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c1","output":"sunny"},` +
			`{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"noon"}]}]`}, []string{
			`reasoning:Thinking about "call get_weather and get_time". Prior reasoning: none.`,
			`message:Seen 1 messages, 0 reasoning items, 2 tool outputs. Facts: none. Tool said: sunny; noon.`}},
		{"call <name> triggers that tool", HarmonyModel, []string{tools, `"input":"Please call get_time in UTC"`}, []string{
			`reasoning:Thinking about "Please call get_time in UTC". Prior reasoning: none.`,
			`call:get_time{"zone":"Please call get_time in UTC"}`}},
		{"call needs a word boundary", HarmonyModel, []string{tools, `"input":"call get_timezone"`}, []string{
			`reasoning:Thinking about "call get_timezone". Prior reasoning: none.`,
			`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"use tools calls every tool in parallel, parser preamble", ParserModel, []string{tools, `"input":"use tools"`}, []string{
			`reasoning:Thinking about "use tools". Prior reasoning: none.`,
			`message:Calling get_weather, get_time.`,
			`call:get_weather{"city":"use tools"}`,
			`call:get_time{"zone":"use tools"}`}},
		{"parallel_tool_calls false keeps the first", ParserModel, []string{tools, `"input":"use tools","parallel_tool_calls":false`}, []string{
			`reasoning:Thinking about "use tools". Prior reasoning: none.`,
			`message:Calling get_weather.`,
			`call:get_weather{"city":"use tools"}`}},
		{"tool_choice none answers in text", ParserModel, []string{tools, `"input":"use tools","tool_choice":"none"`}, []string{
			`reasoning:Thinking about "use tools". Prior reasoning: none.`,
			`message:Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none.`}},
		{"tool_choice required calls the first tool", ParserModel, []string{tools, `"input":"hello","tool_choice":"required"`}, []string{
			`reasoning:Thinking about "hello". Prior reasoning: none.`,
			`message:Calling get_weather.`,
			`call:get_weather{"city":"hello"}`}},
		{"a forced function", ParserModel, []string{tools, `"input":"hello","tool_choice":{"type":"function","name":"get_time"}`}, []string{
			`reasoning:Thinking about "hello". Prior reasoning: none.`,
			`message:Calling get_time.`,
			`call:get_time{"zone":"hello"}`}},
		{"a tool without required parameters gets query", HarmonyModel, []string{`"tools":[{"type":"function","name":"search"}],"input":"call search\tnow"`}, []string{
			`reasoning:Thinking about "call search now". Prior reasoning: none.`,
			`call:search{"query":"call search now"}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, srv, body(c.model, false, c.extra...))
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			if got := outputTexts(decode(t, r.raw)); !slices.Equal(got, c.want) {
				t.Errorf("output\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	srv, _ := newServer(t, Options{})
	// 3 + instructions (2 words) + 2 items × 3 + words ("one two three" + "four") = 15.
	resp := decode(t, post(t, srv, body(HarmonyModel, false, `"instructions":"Be brief.","input":[{"role":"user","content":"one two three"},{"role":"user","content":"four"}]`)).raw)
	u := resp["usage"].(map[string]any)
	reasoning := len(strings.Fields(str(get(resp, "output", 0, "content", 0, "text"))))
	answer := len(strings.Fields(str(get(resp, "output", 1, "content", 0, "text"))))
	if num(u["input_tokens"]) != 15 || num(u["output_tokens"]) != reasoning+answer ||
		num(get(u, "output_tokens_details", "reasoning_tokens")) != reasoning || num(u["total_tokens"]) != 15+reasoning+answer ||
		num(get(u, "input_tokens_details", "cached_tokens")) != 0 {
		t.Errorf("usage %v (reasoning %d, answer %d words)", u, reasoning, answer)
	}
	if num(resp["max_output_tokens"]) != 131072-15 {
		t.Errorf("max_output_tokens %v, want the rest of the context", resp["max_output_tokens"])
	}
}

func TestTokenize(t *testing.T) {
	for in, want := range map[string][]string{
		"a b  c":        {"a ", "b  ", "c"},
		"  lead trail ": {"  lead ", "trail "},
		"one":           {"one"},
		"":              nil,
		"x\ny\tz":       {"x\n", "y\t", "z"},
	} {
		if got := tokenize(in); !slices.Equal(got, want) {
			t.Errorf("tokenize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStringsAndFloatsAsPydanticWritesThem: the simulator's strings (wire.AppendString) and floats
// come out as vLLM's pydantic models write them.
func TestStringsAndFloatsAsPydanticWritesThem(t *testing.T) {
	for in, want := range map[string]string{
		`plain <&> é`:       `"plain <&> é"`,
		"q\"b\\n\n\t\x01\b": `"q\"b\\n\n\t\u0001\b"`,
		"bad\xffutf8":       "\"bad\uFFFDutf8\"",
		"\u2028":            "\"\u2028\"",
	} {
		if got := string(wire.AppendString(nil, in)); got != want {
			t.Errorf("wire.AppendString(%q) = %s, want %s", in, got, want)
		}
	}
	for f, want := range map[float64]string{1: "1.0", 0.7: "0.7", 0: "0.0", 1e-5: "1e-05", 2.5e16: "2.5e+16"} {
		if got := string(appendPyFloat(nil, f)); got != want {
			t.Errorf("appendPyFloat(%v) = %s, want %s", f, got, want)
		}
	}
}
