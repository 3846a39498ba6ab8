package chatbridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/respgate/respgate/wire"
)

// Message is one element of a request's "messages": its role and its JSON object as sent.
type Message struct {
	Role string
	JSON json.RawMessage
}

// Request is a decoded, validated POST /v1/chat/completions body. Members alias the body.
type Request struct {
	Model        string
	Messages     []Message
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	m            map[string]json.RawMessage
}

// unsupported are members respgate cannot translate to a Responses request; each is a 400 naming
// it when sent with a value other than its harmless one (docs/chat-completions.md).
var unsupported = []struct{ name, harmless string }{
	{"n", "1"}, {"logprobs", "false"}, {"top_logprobs", ""}, {"audio", ""}, {"prediction", ""},
	{"functions", ""}, {"function_call", ""}, {"web_search_options", ""}, {"store", "false"},
	{"modalities", `["text"]`},
}

func get(m map[string]json.RawMessage, k string) json.RawMessage {
	v := bytes.TrimSpace(m[k])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

// Decode validates a chat body's top-level members (valid JSON values, as the server's scan
// leaves them). Every fault is a 400 *wire.APIError whose param names the member.
func Decode(members map[string]json.RawMessage) (*Request, error) {
	r := &Request{m: members}
	if json.Unmarshal(get(members, "model"), &r.Model) != nil || r.Model == "" {
		return nil, wire.Invalid("model", "missing_required_parameter", "Missing required parameter: 'model' (a string).")
	}
	var raws []json.RawMessage
	if json.Unmarshal(get(members, "messages"), &raws) != nil || len(raws) == 0 {
		return nil, wire.Invalid("messages", "invalid_value", "'messages' must be a non-empty array of messages.")
	}
	for i, raw := range raws {
		var head struct {
			Role string `json:"role"`
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &head) != nil {
			return nil, wire.Invalid(fmt.Sprintf("messages[%d]", i), "invalid_type", "'messages[%d]' must be an object with a string 'role'.", i)
		}
		switch head.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, wire.Invalid(fmt.Sprintf("messages[%d].role", i), "invalid_value",
				"Unsupported role '%s' in 'messages[%d]': use system, developer, user, assistant or tool.", head.Role, i)
		}
		r.Messages = append(r.Messages, Message{Role: head.Role, JSON: raw})
	}
	if err := uniqueToolCallIDs(r.Messages); err != nil {
		return nil, err
	}
	for _, u := range unsupported {
		if v := get(members, u.name); v != nil && string(v) != u.harmless {
			return nil, wire.Invalid(u.name, "unsupported_parameter", "'%s' is not supported by this gateway's chat completions.", u.name)
		}
	}
	if v := get(members, "stream"); v != nil && json.Unmarshal(v, &r.Stream) != nil {
		return nil, wire.Invalid("stream", "invalid_type", "'stream' must be a boolean.")
	}
	if so := get(members, "stream_options"); so != nil {
		if !r.Stream {
			return nil, wire.Invalid("stream_options", "invalid_parameter_combination", "'stream_options' is only allowed when 'stream' is true.")
		}
		var o struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if json.Unmarshal(so, &o) != nil {
			return nil, wire.Invalid("stream_options", "invalid_type", "'stream_options' must be an object.")
		}
		r.IncludeUsage = o.IncludeUsage != nil && *o.IncludeUsage
	}
	return r, nil
}

// Scope is the request's replay scope for the tenant.
func (r *Request) Scope(tenant string) *Scope {
	var effort string
	_ = json.Unmarshal(get(r.m, "reasoning_effort"), &effort)
	return &Scope{Tenant: tenant, Model: r.Model, Tools: get(r.m, "tools"), ReasoningEffort: effort, ResponseFormat: get(r.m, "response_format")}
}

// passed are members forwarded to the Responses request under the same name: OpenAI's sampling
// and identification members, and vLLM's sampling extras (docs/wire.md §1.1). wire validates them.
var passed = []string{"temperature", "top_p", "presence_penalty", "frequency_penalty", "parallel_tool_calls", "user",
	"metadata", "service_tier", "safety_identifier", "prompt_cache_key", "top_k", "repetition_penalty", "seed",
	"stop", "ignore_eos", "logit_bias", "skip_special_tokens", "include_stop_str_in_output"}

// Translation is a chat request translated to a Responses create body.
type Translation struct {
	// Body is the Responses request (store:false), for the server's ordinary create path.
	Body []byte
	// Origin maps each input item of Body to the index of the message it came from, so an
	// error about input[k] can name messages[Origin[k]] (MessageParam).
	Origin []int
}

// ToResponses translates r into a Responses create body. replace maps a message index to the
// items that stand for it (Plan.Replace): those messages are not translated. Members that
// cannot be translated are a 400 naming them.
func (r *Request) ToResponses(replace map[int][]wire.Item) (*Translation, error) {
	t := &Translation{}
	b := append([]byte(nil), `{"model":`...)
	b = wire.AppendString(b, r.Model)
	b = append(b, `,"store":false,"stream":`...)
	b = strconv.AppendBool(b, r.Stream)
	b = append(b, `,"input":[`...)
	n := 0
	for i, m := range r.Messages {
		items, ok := replace[i]
		var raws []json.RawMessage
		if ok {
			for _, it := range items {
				raws = append(raws, it.JSON)
			}
		} else {
			var err error
			if raws, err = translateMessage(i, m); err != nil {
				return nil, err
			}
		}
		for _, raw := range raws {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, raw...)
			t.Origin = append(t.Origin, i)
			n++
		}
	}
	b = append(b, ']')
	b, err := r.appendSettings(b)
	if err != nil {
		return nil, err
	}
	t.Body = append(b, '}')
	return t, nil
}

// appendSettings appends the translated members other than messages.
func (r *Request) appendSettings(b []byte) ([]byte, error) {
	for _, name := range passed {
		if v := get(r.m, name); v != nil {
			b = appendMember(b, name, v)
		}
	}
	maxTokens, err := r.maxTokens()
	if err != nil {
		return nil, err
	}
	if maxTokens != nil {
		b = appendMember(b, "max_output_tokens", maxTokens)
	}
	if v := get(r.m, "reasoning_effort"); v != nil {
		var effort string
		if json.Unmarshal(v, &effort) != nil {
			return nil, wire.Invalid("reasoning_effort", "invalid_type", "'reasoning_effort' must be a string.")
		}
		b = appendMember(b, "reasoning", marshal(map[string]string{"effort": effort}))
	}
	for _, c := range []struct {
		from, to string
		conv     func(json.RawMessage) (json.RawMessage, error)
	}{{"tools", "tools", tools}, {"tool_choice", "tool_choice", toolChoice}, {"response_format", "text", responseFormat}} {
		v := get(r.m, c.from)
		if v == nil {
			continue
		}
		out, err := c.conv(v)
		if err != nil {
			return nil, err
		}
		b = appendMember(b, c.to, out)
	}
	return b, nil
}

func appendMember(b []byte, name string, v json.RawMessage) []byte {
	b = append(wire.AppendString(append(b, ','), name), ':')
	return append(b, v...)
}

// maxTokens is max_completion_tokens, else the deprecated max_tokens (both: they must agree).
func (r *Request) maxTokens() (json.RawMessage, error) {
	var out json.RawMessage
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		v := get(r.m, name)
		if v == nil {
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 1 || n > 1<<31 {
			return nil, wire.Invalid(name, "invalid_value", "'%s' must be an integer between 1 and %d.", name, int64(1)<<31)
		}
		if out != nil && string(out) != string(v) {
			return nil, wire.Invalid(name, "invalid_parameter_combination", "'max_tokens' and 'max_completion_tokens' disagree; send one of them.")
		}
		out = v
	}
	return out, nil
}

// marshal encodes v without HTML escaping (prompts often hold <, > and &).
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // only maps, slices and strings of ours: never fails
	return bytes.TrimRight(b.Bytes(), "\n")
}

// functionRef is {"type":"function","function":{"name":…}} as chat writes a tool or a choice.
type functionRef struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description json.RawMessage `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      json.RawMessage `json:"strict"`
	} `json:"function"`
}

func (f *functionRef) valid() bool {
	return f.Type == "function" && f.Function != nil && f.Function.Name != ""
}

// tools turns chat function tools into Responses function tools.
func tools(v json.RawMessage) (json.RawMessage, error) {
	var in []functionRef
	if json.Unmarshal(v, &in) != nil {
		return nil, wire.Invalid("tools", "invalid_type", "'tools' must be an array of function tools.")
	}
	out := make([]map[string]json.RawMessage, len(in))
	for i, t := range in {
		if !t.valid() {
			return nil, wire.Invalid(fmt.Sprintf("tools[%d]", i), "unsupported_tool_type",
				"'tools[%d]' must be {\"type\":\"function\",\"function\":{\"name\":…}}; other tool types cannot be served.", i)
		}
		o := map[string]json.RawMessage{"type": json.RawMessage(`"function"`), "name": marshal(t.Function.Name)}
		for k, x := range map[string]json.RawMessage{"description": t.Function.Description, "parameters": t.Function.Parameters, "strict": t.Function.Strict} {
			if x != nil && string(x) != "null" {
				o[k] = x
			}
		}
		out[i] = o
	}
	return marshal(out), nil
}

// toolChoice turns a chat tool_choice into the Responses one.
func toolChoice(v json.RawMessage) (json.RawMessage, error) {
	var mode string
	if json.Unmarshal(v, &mode) == nil {
		if mode != "none" && mode != "auto" && mode != "required" {
			return nil, wire.Invalid("tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or a function.")
		}
		return v, nil
	}
	var f functionRef
	if json.Unmarshal(v, &f) == nil && f.valid() {
		return marshal(map[string]string{"type": "function", "name": f.Function.Name}), nil
	}
	var at struct {
		Type         string `json:"type"`
		AllowedTools struct {
			Mode  string        `json:"mode"`
			Tools []functionRef `json:"tools"`
		} `json:"allowed_tools"`
	}
	if json.Unmarshal(v, &at) == nil && at.Type == "allowed_tools" {
		names := make([]map[string]string, 0, len(at.AllowedTools.Tools))
		for _, t := range at.AllowedTools.Tools {
			if !t.valid() {
				return nil, wire.Invalid("tool_choice", "invalid_value", "'tool_choice.allowed_tools.tools' may list function tools only.")
			}
			names = append(names, map[string]string{"type": "function", "name": t.Function.Name})
		}
		return marshal(map[string]any{"type": "allowed_tools", "mode": at.AllowedTools.Mode, "tools": names}), nil
	}
	return nil, wire.Invalid("tool_choice", "invalid_value", "'tool_choice' must be none, auto, required, a function or allowed_tools.")
}

// responseFormat turns response_format into the Responses "text" member.
func responseFormat(v json.RawMessage) (json.RawMessage, error) {
	var f struct {
		Type       string                     `json:"type"`
		JSONSchema map[string]json.RawMessage `json:"json_schema"`
	}
	if json.Unmarshal(v, &f) != nil {
		return nil, wire.Invalid("response_format", "invalid_type", "'response_format' must be an object.")
	}
	switch f.Type {
	case "text", "json_object":
		return marshal(map[string]any{"format": map[string]string{"type": f.Type}}), nil
	case "json_schema":
		if f.JSONSchema == nil {
			return nil, wire.Invalid("response_format.json_schema", "missing_required_parameter", "'response_format.json_schema' is required.")
		}
		format := map[string]json.RawMessage{"type": json.RawMessage(`"json_schema"`)}
		for k, x := range f.JSONSchema {
			format[k] = x
		}
		return marshal(map[string]any{"format": format}), nil
	}
	return nil, wire.Invalid("response_format.type", "invalid_value", "'response_format.type' must be text, json_object or json_schema.")
}

// uniqueToolCallIDs refuses a tool call id that two tool calls of the history share (in one
// assistant message or in two): each tool message answers one call by its id, so vLLM would be
// handed two function_calls one output cannot tell apart (issue 38 item 14). A 400
// tool_call_id_conflict naming the second one.
func uniqueToolCallIDs(msgs []Message) error {
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		var calls struct {
			ToolCalls []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if json.Unmarshal(m.JSON, &calls) != nil {
			continue // translateMessage names the member of the wrong type
		}
		for j, tc := range calls.ToolCalls {
			if tc.ID == "" {
				continue
			}
			if seen[tc.ID] {
				return wire.Invalid(fmt.Sprintf("messages[%d].tool_calls[%d].id", i, j), "tool_call_id_conflict",
					"Tool call id '%s' in 'messages[%d].tool_calls[%d]' is the id of an earlier tool call; each tool call needs its own id.",
					wire.Clip(tc.ID), i, j)
			}
			seen[tc.ID] = true
		}
	}
	return nil
}

// MessageParam rewrites a param about the translated input ("input[3].content") to the message
// it came from ("messages[2]"), so a 400 from the Responses path names what the client sent.
func MessageParam(param string, origin []int) string {
	if param == "input" {
		return "messages" // a fault of the whole input (too many items) is one of the messages
	}
	rest, ok := strings.CutPrefix(param, "input[")
	if !ok {
		return param
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return param
	}
	k, err := strconv.Atoi(rest[:end])
	if err != nil || k < 0 || k >= len(origin) {
		return "messages"
	}
	return fmt.Sprintf("messages[%d]", origin[k])
}
