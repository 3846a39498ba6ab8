package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// createRequest is a validated POST /v1/responses body (docs/wire.md §1.1): the typed request
// decoded once (rehydrate reads it), the members the turn lifecycle reads, and the echo.
type createRequest struct {
	body               *wire.CreateRequest
	Model              string
	Input              json.RawMessage
	PreviousResponseID string
	ConversationID     string
	Store              bool
	Stream             bool
	echo               echoFields
	// compactThreshold is the request's context_management compaction threshold in tokens
	// (0: none; server/context.go).
	compactThreshold int
	// warmUp: "generate":false, prepare the turn and run no model (engine.Spec.WarmUp).
	warmUp bool
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
	defaultText     = json.RawMessage(`{"format":{"type":"text"}}`)
	defaultToolAuto = json.RawMessage(`"auto"`)
)

// validMetadata validates a conversation's metadata (wire.DecodeMetadata); absent or null is {}.
func validMetadata(v json.RawMessage, param string) (json.RawMessage, error) {
	md, err := wire.DecodeMetadata(v, param)
	if err != nil {
		return nil, err
	}
	return orDefault(md, emptyObject), nil
}

// decodeCreate decodes and validates a create body: one jsontext pass (scanObject: syntax, UTF-8
// without NUL, nesting at most maxDepth) hands the top-level members to wire.DecodeCreateRequest,
// which types and validates them; rehydrate reads the result without validating it again. Every
// fault is a 400 with param, before any upstream call or write (docs/design.md §1 invariant 7).
// The request's members alias body.
func decodeCreate(body []byte, maxDepth int) (*createRequest, error) {
	members, err := scanCreate(body, maxDepth)
	if err != nil {
		return nil, err
	}
	return createFromMembers(members)
}

// scanCreate is scanObject for a create body (or a WebSocket response.create message).
func scanCreate(body []byte, maxDepth int) (map[string]json.RawMessage, error) {
	// A member may nest at most jsonscan.MaxDepth deep, whatever the configured limit: that is
	// the bound every JSON scanner here keeps, and rehydrate walks tools with one
	// (internal/jsonscan). The body object itself is one more level.
	return scanObject(body, min(maxDepth, jsonscan.MaxDepth+1))
}

// createFromMembers types and validates a create body's members (wire.DecodeCreateRequest).
func createFromMembers(members map[string]json.RawMessage) (*createRequest, error) {
	generate, err := generateMember(members)
	if err != nil {
		return nil, err
	}
	w, err := wire.DecodeCreateRequest(members)
	if err != nil {
		return nil, err
	}
	threshold, err := compactThreshold(members["context_management"])
	if err != nil {
		return nil, err
	}
	if !generate && w.Background {
		// A warm-up produces no model output to wait for (docs/clients.md).
		return nil, wire.Invalid("generate", "unsupported_parameter", "'generate': false cannot be combined with 'background': true.")
	}
	return &createRequest{body: w, Model: w.Model.Value, Input: w.Input, PreviousResponseID: w.PreviousResponseID,
		ConversationID: w.ConversationID, Store: w.Store, Stream: w.Stream, echo: newEcho(w), compactThreshold: threshold,
		warmUp: !generate}, nil
}

// generateMember reads a create body's "generate" member (OpenAI's "prepare request state without
// model output", docs/clients.md) and removes it: true or absent runs the model, false only
// prepares the turn (engine.Spec.WarmUp), over HTTP and WebSocket alike.
func generateMember(members map[string]json.RawMessage) (bool, error) {
	raw, sent := members["generate"]
	delete(members, "generate")
	if !sent || wire.IsNull(raw) {
		return true, nil
	}
	var generate bool
	if json.Unmarshal(raw, &generate) != nil {
		return false, wire.Invalid("generate", "invalid_type", "'generate' must be a boolean.")
	}
	return generate, nil
}

// newEcho builds the response object's request-derived members from the typed request, with
// OpenAI's defaults for what the client left out.
func newEcho(r *wire.CreateRequest) echoFields {
	e := echoFields{
		Background:           r.Background,
		Metadata:             orDefault(r.Metadata, emptyObject),
		Model:                r.Model.Value,
		ParallelToolCalls:    r.ParallelToolCalls.Value,
		PresencePenalty:      r.PresencePenalty,
		FrequencyPenalty:     r.FrequencyPenalty,
		PromptCacheKey:       r.PromptCacheKey,
		Reasoning:            jsonNull,
		SafetyIdentifier:     r.SafetyIdentifier,
		ServiceTier:          r.ServiceTier.Value,
		Store:                r.Store,
		Temperature:          r.Temperature.Value,
		Text:                 textEcho(r.Text),
		ToolChoice:           defaultToolAuto,
		Tools:                toolsEcho(r.Tools),
		TopLogprobs:          int(r.TopLogprobs.Value),
		TopP:                 r.TopP.Value,
		Truncation:           r.Truncation.Value,
		Instructions:         optional(r.Instructions),
		MaxOutputTokens:      optional(r.MaxOutputTokens),
		MaxToolCalls:         optional(r.MaxToolCalls),
		User:                 optional(r.User),
		PromptCacheRetention: nonEmpty(r.PromptCacheRetention),
		PreviousResponseID:   nonEmpty(r.PreviousResponseID),
	}
	if r.ConversationID != "" {
		e.Conversation = &conversationRef{ID: r.ConversationID}
	}
	if r.Reasoning != nil {
		e.Reasoning = withMissing(r.Reasoning.JSON, member{"effort", jsonNull}, member{"summary", jsonNull})
	}
	if r.ToolChoice != nil {
		e.ToolChoice = r.ToolChoice.JSON
	}
	return e
}

// optional is the echo of an optional member: null when it was not sent.
func optional[T any](o wire.Opt[T]) *T {
	if !o.Set() {
		return nil
	}
	v := o.Value
	return &v
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func orDefault(v, def json.RawMessage) json.RawMessage {
	if v == nil {
		return def
	}
	return v
}

// textEcho is the echo's "text": as sent, with a format (text by default) and a json_schema
// format completed (withJSONSchemaDefaults).
func textEcho(text json.RawMessage) json.RawMessage {
	if text == nil {
		return defaultText
	}
	return withJSONSchemaDefaults(withMissing(text, member{"format", json.RawMessage(`{"type":"text"}`)}))
}

// member is one object member withMissing adds: its name and JSON value.
type member struct {
	name  string
	value json.RawMessage
}

// withMissing returns the object obj with each of the given members added when it lacks it, so
// the echo has every member the Open Responses schema requires (its Reasoning needs effort and
// summary, its TextField format; docs/wire.md §7.1) whatever subset the client sent (Codex sends
// reasoning {"summary":"auto"} and text {"verbosity":"low"}). Members the client sent are kept as
// sent, in order.
func withMissing(obj json.RawMessage, add ...member) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || m == nil {
		return obj
	}
	out := bytes.TrimSpace(append(json.RawMessage(nil), obj...))
	out = bytes.TrimSpace(out[:len(out)-1]) // drop the closing brace (exactly one)
	n := len(m)
	for _, a := range add {
		if _, ok := m[a.name]; ok {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = wire.AppendString(out, a.name)
		out = append(out, ':')
		out = append(out, a.value...)
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
	t["format"] = withMissing(t["format"], member{"description", jsonNull}, member{"strict", json.RawMessage("false")})
	b, err := json.Marshal(t)
	if err != nil {
		return text
	}
	return b
}

// toolsEcho is the response's "tools": the tools the model was given, in the client's terms
// (OpenAI: "the tools that were available to the model"). Function tools, with description,
// parameters and strict present (null when not sent: the Open Responses FunctionTool requires
// the keys); namespace tools as sent, their function tools likewise completed. Tools vLLM cannot
// serve are not in it: under the drop policy the model never had them (the
// X-Respgate-Dropped-Tools header names them), under the reject policy there is no response.
func toolsEcho(tools []wire.Tool) json.RawMessage {
	if tools == nil {
		return wire.EmptyArray
	}
	fn := func(t wire.Tool) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(t.JSON, &m) // an object: wire.DecodeCreateRequest checked
		for _, k := range []string{"description", "parameters", "strict"} {
			if _, ok := m[k]; !ok {
				m[k] = jsonNull
			}
		}
		return m
	}
	out := make([]map[string]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		switch t.Type {
		case "function":
			out = append(out, fn(t))
		case "namespace":
			var m map[string]json.RawMessage
			_ = json.Unmarshal(t.JSON, &m)
			kept := make([]map[string]json.RawMessage, 0, len(t.Tools))
			for _, f := range t.Tools {
				if f.Type == "function" {
					kept = append(kept, fn(f))
				}
			}
			m["tools"], _ = json.Marshal(kept)
			out = append(out, m)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return wire.EmptyArray
	}
	return b
}

// spec is the engine's specification of the turn r asks for, from tenant tn.
func (r *createRequest) spec(tn string) (*engine.Spec, error) {
	echoJSON, err := wire.Marshal(r.echo)
	if err != nil {
		return nil, err
	}
	return &engine.Spec{Tenant: tn, Request: r.body, Input: r.Input, Model: r.Model, PreviousResponseID: r.PreviousResponseID,
		ConversationID: r.ConversationID, Store: r.Store, Stream: r.Stream, Background: r.echo.Background, Echo: echoJSON,
		CompactThreshold: r.compactThreshold, WarmUp: r.warmUp}, nil
}

// compactThreshold reads a request's context_management (OpenAI's shape: an array of entries,
// {"type":"compaction","compact_threshold":N}): the compaction entry's threshold in tokens, 0
// when there is none. A compaction entry without a threshold uses the deployment's.
func compactThreshold(raw json.RawMessage) (int, error) {
	if wire.IsNull(raw) {
		return 0, nil
	}
	var entries []map[string]json.RawMessage
	if json.Unmarshal(raw, &entries) != nil {
		return 0, wire.Invalid("context_management", "invalid_type", "Invalid type for 'context_management': expected an array of objects.")
	}
	n := 0
	for i, e := range entries {
		var typ string
		if json.Unmarshal(e["type"], &typ) != nil || typ != compact.TypeCompaction {
			return 0, wire.Invalid(fmt.Sprintf("context_management[%d].type", i), "invalid_value",
				"Invalid value for 'context_management[%d].type': the supported value is 'compaction'.", i)
		}
		if wire.IsNull(e["compact_threshold"]) {
			continue
		}
		if json.Unmarshal(e["compact_threshold"], &n) != nil || n < 1 {
			return 0, wire.Invalid(fmt.Sprintf("context_management[%d].compact_threshold", i), "invalid_value",
				"Invalid value for 'context_management[%d].compact_threshold': expected a positive integer (tokens).", i)
		}
	}
	return n, nil
}
