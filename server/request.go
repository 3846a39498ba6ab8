package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/respgate/respgate/wire"
)

// createRequest is a validated POST /v1/responses body (docs/wire.md §1.1).
type createRequest struct {
	raw                map[string]json.RawMessage // every top-level member as sent (rehydrate projects it)
	Model              string
	Input              json.RawMessage
	PreviousResponseID string
	ConversationID     string
	Store              bool
	Stream             bool
	echo               echoFields
}

// echoFields are the response object's request-derived members, with OpenAI's defaults filled in.
// They are stored verbatim as the response's echo (store.Response.Echo).
type echoFields struct {
	Background           bool             `json:"background"`
	Conversation         *conversationRef `json:"conversation,omitempty"`
	Instructions         *string          `json:"instructions"`
	MaxOutputTokens      *int64           `json:"max_output_tokens"`
	MaxToolCalls         *int64           `json:"max_tool_calls"`
	Metadata             json.RawMessage  `json:"metadata"`
	Model                string           `json:"model"`
	ParallelToolCalls    bool             `json:"parallel_tool_calls"`
	PresencePenalty      float64          `json:"presence_penalty"`
	FrequencyPenalty     float64          `json:"frequency_penalty"`
	PreviousResponseID   *string          `json:"previous_response_id"`
	PromptCacheKey       *string          `json:"prompt_cache_key"`
	PromptCacheRetention *string          `json:"prompt_cache_retention,omitempty"`
	Reasoning            json.RawMessage  `json:"reasoning"`
	SafetyIdentifier     *string          `json:"safety_identifier"`
	ServiceTier          string           `json:"service_tier"`
	Store                bool             `json:"store"`
	Temperature          float64          `json:"temperature"`
	Text                 json.RawMessage  `json:"text"`
	ToolChoice           json.RawMessage  `json:"tool_choice"`
	Tools                json.RawMessage  `json:"tools"`
	TopLogprobs          int              `json:"top_logprobs"`
	TopP                 float64          `json:"top_p"`
	Truncation           string           `json:"truncation"`
	User                 *string          `json:"user,omitempty"`
}

type conversationRef struct {
	ID string `json:"id"`
}

var (
	jsonNull        = json.RawMessage("null")
	emptyObject     = json.RawMessage("{}")
	emptyArray      = json.RawMessage("[]")
	defaultText     = json.RawMessage(`{"format":{"type":"text"}}`)
	defaultToolAuto = json.RawMessage(`"auto"`)
)

func isNull(r json.RawMessage) bool { return len(r) == 0 || bytes.Equal(r, jsonNull) }

// decodeCreate decodes and validates a create body (scanObject first, so every string is valid
// UTF-8 without NUL and nesting is at most maxDepth). Every fault is a 400 with param, before any
// upstream call or write (docs/design.md §1 invariant 7). Unknown top-level members are ignored, as
// OpenAI and vLLM do (Codex sends client_metadata). The request's members alias body.
func decodeCreate(body []byte, maxDepth int) (*createRequest, error) {
	raw, err := scanObject(body, maxDepth)
	if err != nil {
		return nil, err
	}
	r := &createRequest{raw: raw}
	e := &r.echo

	if r.Model, err = reqString(raw, "model", true); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, wire.Invalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	e.Model = r.Model
	r.Input = raw["input"]
	if e.Instructions, err = optString(raw, "instructions"); err != nil {
		return nil, err
	}
	if p, err := optString(raw, "previous_response_id"); err != nil {
		return nil, err
	} else if p != nil && *p != "" {
		r.PreviousResponseID = *p
		e.PreviousResponseID = p
	}
	if c := raw["conversation"]; !isNull(c) {
		var id string
		if json.Unmarshal(c, &id) != nil {
			var ref conversationRef
			if json.Unmarshal(c, &ref) != nil || ref.ID == "" {
				return nil, wire.Invalid("conversation", "invalid_type", "'conversation' must be a conversation id or an object with an 'id'.")
			}
			id = ref.ID
		}
		if id == "" {
			return nil, wire.Invalid("conversation", "invalid_value", "'conversation' must not be empty.")
		}
		r.ConversationID = id
		e.Conversation = &conversationRef{ID: id}
	}
	if r.PreviousResponseID != "" && r.ConversationID != "" {
		return nil, wire.Invalid("previous_response_id", "invalid_parameter_combination",
			"'previous_response_id' cannot be used in conjunction with 'conversation'.")
	}
	if r.Store, err = optBool(raw, "store", true); err != nil {
		return nil, err
	}
	e.Store = r.Store
	if r.Stream, err = optBool(raw, "stream", false); err != nil {
		return nil, err
	}
	if e.Background, err = optBool(raw, "background", false); err != nil {
		return nil, err
	}
	if e.Background {
		if !r.Store {
			return nil, wire.Invalid("background", "invalid_parameter_combination", "Background mode requires 'store' to be true.")
		}
		return nil, wire.Invalid("background", "unsupported_parameter", "Background mode is not supported by this gateway.")
	}
	if so := raw["stream_options"]; !isNull(so) && !r.Stream {
		return nil, wire.Invalid("stream_options", "invalid_parameter_combination", "'stream_options' is only allowed when 'stream' is true.")
	}
	if p := raw["prompt"]; !isNull(p) {
		return nil, wire.Invalid("prompt", "unsupported_parameter", "Prompt templates are not supported by this gateway.")
	}
	if e.ParallelToolCalls, err = optBool(raw, "parallel_tool_calls", true); err != nil {
		return nil, err
	}
	if e.MaxOutputTokens, err = optInt(raw, "max_output_tokens", 1, 1<<31); err != nil {
		return nil, err
	}
	if e.MaxToolCalls, err = optInt(raw, "max_tool_calls", 0, 1<<31); err != nil {
		return nil, err
	}
	if e.Temperature, err = optNumber(raw, "temperature", 0, 2, 1); err != nil {
		return nil, err
	}
	if e.TopP, err = optNumber(raw, "top_p", 0, 1, 1); err != nil {
		return nil, err
	}
	if tl, err := optInt(raw, "top_logprobs", 0, 20); err != nil {
		return nil, err
	} else if tl != nil {
		e.TopLogprobs = int(*tl)
	}
	if e.PresencePenalty, err = optNumber(raw, "presence_penalty", -2, 2, 0); err != nil {
		return nil, err
	}
	if e.FrequencyPenalty, err = optNumber(raw, "frequency_penalty", -2, 2, 0); err != nil {
		return nil, err
	}
	if e.Truncation, err = optEnum(raw, "truncation", "disabled", "auto", "disabled"); err != nil {
		return nil, err
	}
	if e.ServiceTier, err = optEnum(raw, "service_tier", "auto", "auto", "default", "flex", "scale", "priority"); err != nil {
		return nil, err
	}
	for _, k := range []string{"user", "safety_identifier", "prompt_cache_key"} {
		v, err := optString(raw, k)
		if err != nil {
			return nil, err
		}
		if v != nil && k == "safety_identifier" && len(*v) > 64 {
			return nil, wire.Invalid(k, "string_above_max_length", "'%s' must be at most 64 characters.", k)
		}
		switch k {
		case "user":
			e.User = v
		case "safety_identifier":
			e.SafetyIdentifier = v
		case "prompt_cache_key":
			e.PromptCacheKey = v
		}
	}
	if v, err := optEnum(raw, "prompt_cache_retention", "", "in_memory", "24h"); err != nil {
		return nil, err
	} else if v != "" {
		e.PromptCacheRetention = &v
	}
	if e.Metadata, err = validMetadata(raw["metadata"], "metadata"); err != nil {
		return nil, err
	}
	if e.Reasoning, err = validReasoning(raw["reasoning"]); err != nil {
		return nil, err
	}
	if e.Text, err = validObject(raw["text"], "text", defaultText); err != nil {
		return nil, err
	}
	e.Text = withMembers(e.Text, "format", json.RawMessage(`{"type":"text"}`))
	e.Text = withJSONSchemaDefaults(e.Text)
	if e.Tools, err = validTools(raw["tools"]); err != nil {
		return nil, err
	}
	if e.ToolChoice, err = validToolChoice(raw["tool_choice"]); err != nil {
		return nil, err
	}
	if inc := raw["include"]; !isNull(inc) {
		var list []string
		if json.Unmarshal(inc, &list) != nil {
			return nil, wire.Invalid("include", "invalid_type", "'include' must be an array of strings.")
		}
		for i, v := range list {
			if !knownInclude[v] {
				return nil, wire.Invalid("include", "invalid_value", "include[%d] is not a supported value.", i)
			}
		}
	}
	return r, nil
}

var knownInclude = map[string]bool{
	"file_search_call.results": true, "web_search_call.results": true, "web_search_call.action.sources": true,
	"message.input_image.image_url": true, "computer_call_output.output.image_url": true,
	"code_interpreter_call.outputs": true, "reasoning.encrypted_content": true, "message.output_text.logprobs": true,
}

func reqString(raw map[string]json.RawMessage, k string, required bool) (string, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		if required {
			return "", wire.Invalid(k, "missing_required_parameter", "Missing required parameter: '%s'.", k)
		}
		return "", nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", wire.Invalid(k, "invalid_type", "'%s' must be a string.", k)
	}
	return s, nil
}

func optString(raw map[string]json.RawMessage, k string) (*string, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return nil, wire.Invalid(k, "invalid_type", "'%s' must be a string.", k)
	}
	return &s, nil
}

func optBool(raw map[string]json.RawMessage, k string, def bool) (bool, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		return def, nil
	}
	var b bool
	if json.Unmarshal(v, &b) != nil {
		return def, wire.Invalid(k, "invalid_type", "'%s' must be a boolean.", k)
	}
	return b, nil
}

func optInt(raw map[string]json.RawMessage, k string, lo, hi int64) (*int64, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		return nil, nil
	}
	var n int64
	if json.Unmarshal(v, &n) != nil {
		return nil, wire.Invalid(k, "invalid_type", "'%s' must be an integer.", k)
	}
	if n < lo || n > hi {
		return nil, wire.Invalid(k, "invalid_value", "'%s' must be between %d and %d.", k, lo, hi)
	}
	return &n, nil
}

func optNumber(raw map[string]json.RawMessage, k string, lo, hi, def float64) (float64, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		return def, nil
	}
	var n float64
	if json.Unmarshal(v, &n) != nil {
		return def, wire.Invalid(k, "invalid_type", "'%s' must be a number.", k)
	}
	if n < lo || n > hi {
		return def, wire.Invalid(k, "invalid_value", "'%s' must be between %g and %g.", k, lo, hi)
	}
	return n, nil
}

func optEnum(raw map[string]json.RawMessage, k, def string, allowed ...string) (string, error) {
	v, ok := raw[k]
	if !ok || isNull(v) {
		return def, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		for _, a := range allowed {
			if s == a {
				return s, nil
			}
		}
	}
	return def, wire.Invalid(k, "invalid_value", "'%s' must be one of: %s.", k, strings.Join(allowed, ", "))
}

func validObject(v json.RawMessage, param string, def json.RawMessage) (json.RawMessage, error) {
	if isNull(v) {
		return def, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return nil, wire.Invalid(param, "invalid_type", "'%s' must be an object.", param)
	}
	return v, nil
}

// validMetadata enforces OpenAI's limits: at most 16 pairs, keys ≤ 64 characters, string values
// ≤ 512 characters.
func validMetadata(v json.RawMessage, param string) (json.RawMessage, error) {
	if isNull(v) {
		return emptyObject, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return nil, wire.Invalid(param, "invalid_type", "'%s' must be an object of string values.", param)
	}
	if len(m) > 16 {
		return nil, wire.Invalid(param, "object_above_max_properties", "'%s' may have at most 16 pairs.", param)
	}
	for k, raw := range m {
		if utf8.RuneCountInString(k) > 64 {
			return nil, wire.Invalid(param, "string_above_max_length", "'%s' keys must be at most 64 characters.", param)
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, wire.Invalid(param, "invalid_type", "'%s' values must be strings.", param)
		}
		if utf8.RuneCountInString(s) > 512 {
			return nil, wire.Invalid(param, "string_above_max_length", "'%s' values must be at most 512 characters.", param)
		}
	}
	return v, nil
}

// withMembers returns the object obj with each of the given members (name, value pairs) added
// when it lacks it, so the echo has every member the Open Responses schema requires (its
// Reasoning needs effort and summary, its TextField format; docs/wire.md §7.1) whatever subset the
// client sent (Codex sends reasoning {"summary":"auto"} and text {"verbosity":"low"}). Members
// the client sent are kept as sent, in order.
func withMembers(obj json.RawMessage, kv ...any) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		return obj
	}
	out := bytes.TrimSpace(append(json.RawMessage(nil), obj...))
	out = bytes.TrimSpace(out[:len(out)-1]) // drop the closing brace (exactly one)
	n := len(m)
	for i := 0; i+1 < len(kv); i += 2 {
		name := kv[i].(string)
		if _, ok := m[name]; ok {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		k, _ := json.Marshal(name)
		out = append(out, k...)
		out = append(out, ':')
		switch v := kv[i+1].(type) {
		case json.RawMessage:
			out = append(out, v...)
		default:
			b, _ := json.Marshal(v)
			out = append(out, b...)
		}
	}
	return append(out, '}')
}

// withJSONSchemaDefaults completes a json_schema text format in the echo with OpenAI's defaults
// for what the client left out (description null, strict false), which the Open Responses
// JsonSchemaResponseFormat requires as keys.
func withJSONSchemaDefaults(text json.RawMessage) json.RawMessage {
	var t map[string]json.RawMessage
	var f struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(text, &t) != nil || json.Unmarshal(t["format"], &f) != nil || f.Type != "json_schema" {
		return text
	}
	t["format"] = withMembers(t["format"], "description", jsonNull, "strict", json.RawMessage("false"))
	b, err := json.Marshal(t)
	if err != nil {
		return text
	}
	return b
}

func validReasoning(v json.RawMessage) (json.RawMessage, error) {
	if isNull(v) {
		return jsonNull, nil
	}
	var r struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	}
	if json.Unmarshal(v, &r) != nil {
		return nil, wire.Invalid("reasoning", "invalid_type", "'reasoning' must be an object.")
	}
	if r.Effort != nil && !oneOf(*r.Effort, "none", "minimal", "low", "medium", "high", "xhigh", "max") {
		return nil, wire.Invalid("reasoning.effort", "invalid_value", "'reasoning.effort' must be one of: none, minimal, low, medium, high, xhigh, max.")
	}
	if r.Summary != nil && !oneOf(*r.Summary, "auto", "concise", "detailed") {
		return nil, wire.Invalid("reasoning.summary", "invalid_value", "'reasoning.summary' must be one of: auto, concise, detailed.")
	}
	return withMembers(v, "effort", jsonNull, "summary", jsonNull), nil
}

func validTools(v json.RawMessage) (json.RawMessage, error) {
	if isNull(v) {
		return emptyArray, nil
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(v, &tools) != nil {
		return nil, wire.Invalid("tools", "invalid_type", "'tools' must be an array of tool objects.")
	}
	for i, t := range tools {
		var typ string
		if json.Unmarshal(t["type"], &typ) != nil || typ == "" {
			return nil, wire.Invalid("tools", "invalid_value", "tools[%d]: missing 'type'.", i)
		}
		if typ == "function" {
			var name string
			if json.Unmarshal(t["name"], &name) != nil || name == "" {
				return nil, wire.Invalid("tools", "invalid_value", "tools[%d]: a function tool needs a 'name'.", i)
			}
		}
	}
	return toolsEcho(tools), nil
}

// toolsEcho is the response's "tools": the tools the model was given, in the client's terms
// (OpenAI: "the tools that were available to the model"). Function tools, with description,
// parameters and strict present (null when not sent: the Open Responses FunctionTool requires
// the keys); namespace tools as sent, their function tools likewise completed. Tools vLLM cannot
// serve are not in it: under the drop policy the model never had them (the
// X-Respgate-Dropped-Tools header names them), under the reject policy there is no response.
func toolsEcho(tools []map[string]json.RawMessage) json.RawMessage {
	fn := func(t map[string]json.RawMessage) map[string]json.RawMessage {
		for _, k := range []string{"description", "parameters", "strict"} {
			if _, ok := t[k]; !ok {
				t[k] = jsonNull
			}
		}
		return t
	}
	out := make([]map[string]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		var typ string
		_ = json.Unmarshal(t["type"], &typ)
		switch typ {
		case "function":
			out = append(out, fn(t))
		case "namespace":
			var inner []map[string]json.RawMessage
			if json.Unmarshal(t["tools"], &inner) != nil {
				continue // rehydrate answers the 400
			}
			kept := make([]map[string]json.RawMessage, 0, len(inner))
			for _, f := range inner {
				var ft string
				if json.Unmarshal(f["type"], &ft) == nil && ft == "function" {
					kept = append(kept, fn(f))
				}
			}
			t["tools"], _ = json.Marshal(kept)
			out = append(out, t)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return emptyArray
	}
	return b
}

func validToolChoice(v json.RawMessage) (json.RawMessage, error) {
	if isNull(v) {
		return defaultToolAuto, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if !oneOf(s, "none", "auto", "required") {
			return nil, wire.Invalid("tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or an object.")
		}
		return v, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || isNull(m["type"]) {
		return nil, wire.Invalid("tool_choice", "invalid_type", "'tool_choice' must be a string or an object with a 'type'.")
	}
	return v, nil
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}
