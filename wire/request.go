package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Opt is an optional request member: Value is what it decoded to (the default when the member was
// absent or null) and JSON the member as sent, trimmed (nil when absent or null). The vLLM-bound
// copy forwards JSON, so vLLM receives the client's spelling (1.0 stays 1.0, escapes stay
// escapes) and the echo reads Value.
type Opt[T any] struct {
	Value T
	JSON  json.RawMessage
}

// Set reports whether the member was sent and not null.
func (o Opt[T]) Set() bool { return o.JSON != nil }

// Reasoning is the request's "reasoning" object. JSON is the object as sent. Context is
// respgate's reasoning.context (ContextAllTurns or ContextCurrentTurn; nil when not sent).
type Reasoning struct {
	Effort  *string
	Summary *string
	Context *string
	JSON    json.RawMessage
}

// Values of reasoning.context: which stored reasoning is replayed to the model (docs/reasoning.md).
const (
	// ContextAllTurns replays every reasoning item (the default).
	ContextAllTurns = "all_turns"
	// ContextCurrentTurn replays only the reasoning of the active tool loop: a reasoning item
	// followed by an assistant message is left out (harmony's guidance for gpt-oss).
	ContextCurrentTurn = "current_turn"
)

// IncludeEncryptedReasoning is the include value that asks for reasoning items' encrypted_content.
const IncludeEncryptedReasoning = "reasoning.encrypted_content"

// Includes reports whether the request's include lists v.
func (r *CreateRequest) Includes(v string) bool {
	for _, x := range r.Include {
		if x == v {
			return true
		}
	}
	return false
}

// Tool is one element of the request's "tools". JSON is the element as sent. Name is the
// function's (or the namespace's) name; Tools are a namespace tool's tools (docs/wire.md §1.1).
type Tool struct {
	Type  string
	Name  string
	Tools []Tool
	JSON  json.RawMessage
}

// ToolChoice is the request's "tool_choice": Mode for the string forms (none, auto, required),
// Type (and, for a function, Name and Namespace when they are strings) for the object forms.
// JSON is the value as sent.
type ToolChoice struct {
	Mode      string
	Type      string
	Name      *string
	Namespace *string
	JSON      json.RawMessage
}

// SamplingExtras are vLLM's sampling parameters beyond OpenAI's (docs/wire.md §1.1), as sent (nil
// when absent or null). They are not validated here: vLLM validates them.
type SamplingExtras struct {
	TopK, RepetitionPenalty, Seed, Stop, IgnoreEOS, LogitBias, StructuredOutputs json.RawMessage
	SkipSpecialTokens, IncludeStopStrInOutput                                    json.RawMessage
}

// CreateRequest is a POST /v1/responses body (docs/wire.md §1.1), decoded and validated once by
// DecodeCreateRequest. The server builds the response's echo from it and rehydrate the vLLM-bound
// copy; neither decodes the body again. Members alias the body the caller decoded: keep it alive
// and unchanged while the request is in use.
type CreateRequest struct {
	Model              Opt[string]
	Input              json.RawMessage // as sent; rehydrate.ParseInput reads it
	Instructions       Opt[string]
	PreviousResponseID string
	ConversationID     string
	Store              bool // default true
	Stream             bool
	Background         bool
	ParallelToolCalls  Opt[bool] // default true
	MaxOutputTokens    Opt[int64]
	MaxToolCalls       Opt[int64]
	Temperature        Opt[float64] // default 1
	TopP               Opt[float64] // default 1
	TopLogprobs        Opt[int64]
	PresencePenalty    float64
	FrequencyPenalty   float64
	Truncation         Opt[string] // default "disabled"
	ServiceTier        Opt[string] // default "auto"
	User               Opt[string]
	SafetyIdentifier   *string
	PromptCacheKey     *string
	// PromptCacheRetention is "" when not sent.
	PromptCacheRetention string
	Metadata             json.RawMessage // an object of at most 16 string pairs; nil when not sent
	Reasoning            *Reasoning
	Text                 json.RawMessage // an object; nil when not sent
	Tools                []Tool
	ToolChoice           *ToolChoice
	Include              []string
	Sampling             SamplingExtras
}

// DecodeCreateRequest decodes and validates the top-level members of a create body. members must
// be valid JSON values (the server's one jsontext pass has also checked UTF-8, NUL and depth).
// Every fault is a 400 *APIError whose param names the member (docs/design.md §1 invariant 7).
// Unknown members are ignored, as OpenAI and vLLM do (Codex sends client_metadata).
func DecodeCreateRequest(members map[string]json.RawMessage) (*CreateRequest, error) {
	m := requestMembers(members)
	r := &CreateRequest{Input: members["input"]}
	for _, step := range [...]func(*CreateRequest) error{
		m.decodeContinuation, m.decodeModes, m.decodeSampling, m.decodeIdentifiers, m.decodeObjects,
	} {
		if err := step(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// requestMembers are a body's top-level members; its methods decode one member each.
type requestMembers map[string]json.RawMessage

// get returns a member that was sent and is not null, trimmed; nil otherwise.
func (m requestMembers) get(k string) json.RawMessage {
	v := bytes.TrimSpace(m[k])
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

// decodeContinuation reads model, instructions, and what the request continues.
func (m requestMembers) decodeContinuation(r *CreateRequest) error {
	var err error
	if r.Model, err = m.str("model"); err != nil {
		return err
	}
	if r.Model.Value == "" {
		return Invalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if r.Instructions, err = m.str("instructions"); err != nil {
		return err
	}
	p, err := m.str("previous_response_id")
	if err != nil {
		return err
	}
	r.PreviousResponseID = p.Value
	if c := m.get("conversation"); c != nil {
		var id string
		if json.Unmarshal(c, &id) != nil {
			var ref struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(c, &ref) != nil || ref.ID == "" {
				return Invalid("conversation", "invalid_type", "'conversation' must be a conversation id or an object with an 'id'.")
			}
			id = ref.ID
		}
		if id == "" {
			return Invalid("conversation", "invalid_value", "'conversation' must not be empty.")
		}
		r.ConversationID = id
	}
	if r.PreviousResponseID != "" && r.ConversationID != "" {
		return Invalid("previous_response_id", "invalid_parameter_combination",
			"'previous_response_id' cannot be used in conjunction with 'conversation'.")
	}
	return nil
}

// decodeModes reads store, stream and background, and refuses what the gateway cannot serve.
func (m requestMembers) decodeModes(r *CreateRequest) error {
	store, err := m.boolean("store", true)
	if err != nil {
		return err
	}
	stream, err := m.boolean("stream", false)
	if err != nil {
		return err
	}
	background, err := m.boolean("background", false)
	if err != nil {
		return err
	}
	r.Store, r.Stream, r.Background = store.Value, stream.Value, background.Value
	if r.Background {
		if !r.Store {
			return Invalid("background", "invalid_parameter_combination", "Background mode requires 'store' to be true.")
		}
	}
	if m.get("stream_options") != nil && !r.Stream {
		return Invalid("stream_options", "invalid_parameter_combination", "'stream_options' is only allowed when 'stream' is true.")
	}
	if m.get("prompt") != nil {
		return Invalid("prompt", "unsupported_parameter", "Prompt templates are not supported by this gateway.")
	}
	return nil
}

// decodeSampling reads the numeric and enumerated generation settings, and vLLM's extras.
func (m requestMembers) decodeSampling(r *CreateRequest) error {
	var err error
	if r.ParallelToolCalls, err = m.boolean("parallel_tool_calls", true); err != nil {
		return err
	}
	if r.MaxOutputTokens, err = m.integer("max_output_tokens", 1, 1<<31); err != nil {
		return err
	}
	if r.MaxToolCalls, err = m.integer("max_tool_calls", 0, 1<<31); err != nil {
		return err
	}
	if r.Temperature, err = m.number("temperature", numRange{0, 2, 1}); err != nil {
		return err
	}
	if r.TopP, err = m.number("top_p", numRange{0, 1, 1}); err != nil {
		return err
	}
	if r.TopLogprobs, err = m.integer("top_logprobs", 0, 20); err != nil {
		return err
	}
	pp, err := m.number("presence_penalty", numRange{-2, 2, 0})
	if err != nil {
		return err
	}
	fp, err := m.number("frequency_penalty", numRange{-2, 2, 0})
	if err != nil {
		return err
	}
	r.PresencePenalty, r.FrequencyPenalty = pp.Value, fp.Value
	if r.Truncation, err = m.enum("truncation", "disabled", "auto", "disabled"); err != nil {
		return err
	}
	if r.ServiceTier, err = m.enum("service_tier", "auto", "auto", "default", "flex", "scale", "priority"); err != nil {
		return err
	}
	r.Sampling = SamplingExtras{
		TopK: m.get("top_k"), RepetitionPenalty: m.get("repetition_penalty"), Seed: m.get("seed"), Stop: m.get("stop"),
		IgnoreEOS: m.get("ignore_eos"), LogitBias: m.get("logit_bias"), StructuredOutputs: m.get("structured_outputs"),
		SkipSpecialTokens: m.get("skip_special_tokens"), IncludeStopStrInOutput: m.get("include_stop_str_in_output"),
	}
	return nil
}

// decodeIdentifiers reads user, safety_identifier and the prompt cache settings.
func (m requestMembers) decodeIdentifiers(r *CreateRequest) error {
	var err error
	if r.User, err = m.str("user"); err != nil {
		return err
	}
	sid, err := m.str("safety_identifier")
	if err != nil {
		return err
	}
	if sid.Set() {
		if len(sid.Value) > 64 {
			return Invalid("safety_identifier", "string_above_max_length", "'safety_identifier' must be at most 64 characters.")
		}
		r.SafetyIdentifier = &sid.Value
	}
	pck, err := m.str("prompt_cache_key")
	if err != nil {
		return err
	}
	if pck.Set() {
		r.PromptCacheKey = &pck.Value
	}
	pcr, err := m.enum("prompt_cache_retention", "", "in_memory", "24h")
	r.PromptCacheRetention = pcr.Value
	return err
}

// decodeObjects reads metadata, reasoning, text, tools, tool_choice and include.
func (m requestMembers) decodeObjects(r *CreateRequest) error {
	var err error
	if r.Metadata, err = m.metadata(); err != nil {
		return err
	}
	if r.Reasoning, err = m.reasoning(); err != nil {
		return err
	}
	if t := m.get("text"); t != nil {
		var obj map[string]json.RawMessage
		if json.Unmarshal(t, &obj) != nil {
			return Invalid("text", "invalid_type", "'text' must be an object.")
		}
		r.Text = t
	}
	if r.Tools, err = m.tools(); err != nil {
		return err
	}
	if r.ToolChoice, err = m.toolChoice(); err != nil {
		return err
	}
	r.Include, err = m.include()
	return err
}

// member decodes the member k as a T; absent, it is def. what names T in the error
// ("a string").
func member[T any](m requestMembers, k string, def T, what string) (Opt[T], error) {
	v := m.get(k)
	if v == nil {
		return Opt[T]{Value: def}, nil
	}
	var x T
	if json.Unmarshal(v, &x) != nil {
		return Opt[T]{}, Invalid(k, "invalid_type", "'%s' must be %s.", k, what)
	}
	return Opt[T]{Value: x, JSON: v}, nil
}

func (m requestMembers) str(k string) (Opt[string], error) { return member(m, k, "", "a string") }

func (m requestMembers) boolean(k string, def bool) (Opt[bool], error) {
	return member(m, k, def, "a boolean")
}

func (m requestMembers) integer(k string, lo, hi int64) (Opt[int64], error) {
	o, err := member(m, k, int64(0), "an integer")
	if err == nil && o.JSON != nil && (o.Value < lo || o.Value > hi) {
		return Opt[int64]{}, Invalid(k, "invalid_value", "'%s' must be between %d and %d.", k, lo, hi)
	}
	return o, err
}

// numRange is the accepted range of a number member and its default.
type numRange struct{ lo, hi, def float64 }

func (m requestMembers) number(k string, rg numRange) (Opt[float64], error) {
	o, err := member(m, k, rg.def, "a number")
	if err == nil && o.JSON != nil && (o.Value < rg.lo || o.Value > rg.hi) {
		return Opt[float64]{}, Invalid(k, "invalid_value", "'%s' must be between %g and %g.", k, rg.lo, rg.hi)
	}
	return o, err
}

func (m requestMembers) enum(k, def string, allowed ...string) (Opt[string], error) {
	v := m.get(k)
	if v == nil {
		return Opt[string]{Value: def}, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil && oneOf(s, allowed...) {
		return Opt[string]{Value: s, JSON: v}, nil
	}
	return Opt[string]{}, Invalid(k, "invalid_value", "'%s' must be one of: %s.", k, strings.Join(allowed, ", "))
}

func (m requestMembers) metadata() (json.RawMessage, error) {
	return DecodeMetadata(m.get("metadata"), "metadata")
}

// DecodeMetadata validates a "metadata" member (of a response or a conversation) against OpenAI's
// limits: an object of at most 16 pairs, keys ≤ 64 characters, string values ≤ 512 characters.
// It returns v, or nil when v is absent or null; faults are 400s naming param.
func DecodeMetadata(v json.RawMessage, param string) (json.RawMessage, error) {
	v = requestMembers{param: v}.get(param)
	if v == nil {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, Invalid(param, "invalid_type", "'%s' must be an object of string values.", param)
	}
	if len(obj) > 16 {
		return nil, Invalid(param, "object_above_max_properties", "'%s' may have at most 16 pairs.", param)
	}
	for k, raw := range obj {
		if utf8.RuneCountInString(k) > 64 {
			return nil, Invalid(param, "string_above_max_length", "'%s' keys must be at most 64 characters.", param)
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, Invalid(param, "invalid_type", "'%s' values must be strings.", param)
		}
		if utf8.RuneCountInString(s) > 512 {
			return nil, Invalid(param, "string_above_max_length", "'%s' values must be at most 512 characters.", param)
		}
	}
	return v, nil
}

func (m requestMembers) reasoning() (*Reasoning, error) {
	v := m.get("reasoning")
	if v == nil {
		return nil, nil
	}
	var r struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
		Context *string `json:"context"`
	}
	if json.Unmarshal(v, &r) != nil {
		return nil, Invalid("reasoning", "invalid_type", "'reasoning' must be an object.")
	}
	if r.Effort != nil && !oneOf(*r.Effort, "none", "minimal", "low", "medium", "high", "xhigh", "max") {
		return nil, Invalid("reasoning.effort", "invalid_value", "'reasoning.effort' must be one of: none, minimal, low, medium, high, xhigh, max.")
	}
	if r.Summary != nil && !oneOf(*r.Summary, "auto", "concise", "detailed") {
		return nil, Invalid("reasoning.summary", "invalid_value", "'reasoning.summary' must be one of: auto, concise, detailed.")
	}
	if r.Context != nil && !oneOf(*r.Context, ContextAllTurns, ContextCurrentTurn) {
		return nil, Invalid("reasoning.context", "invalid_value", "'reasoning.context' must be one of: %s, %s.", ContextAllTurns, ContextCurrentTurn)
	}
	return &Reasoning{Effort: r.Effort, Summary: r.Summary, Context: r.Context, JSON: v}, nil
}

func (m requestMembers) toolChoice() (*ToolChoice, error) {
	v := m.get("tool_choice")
	if v == nil {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if !oneOf(s, "none", "auto", "required") {
			return nil, Invalid("tool_choice", "invalid_value", "'tool_choice' must be none, auto, required or an object.")
		}
		return &ToolChoice{Mode: s, JSON: v}, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil || requestMembers(obj).get("type") == nil {
		return nil, Invalid("tool_choice", "invalid_type", "'tool_choice' must be a string or an object with a 'type'.")
	}
	tc := &ToolChoice{JSON: v}
	_ = json.Unmarshal(obj["type"], &tc.Type) // a type that is not a string stays "" ("(no type)")
	tc.Name, tc.Namespace = optionalString(obj["name"]), optionalString(obj["namespace"])
	return tc, nil
}

// optionalString returns the string v holds, or nil when v is absent or not a string.
func optionalString(v json.RawMessage) *string {
	var s string
	if v == nil || json.Unmarshal(v, &s) != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil
	}
	return &s
}

var knownInclude = map[string]bool{
	"file_search_call.results": true, "web_search_call.results": true, "web_search_call.action.sources": true,
	"message.input_image.image_url": true, "computer_call_output.output.image_url": true,
	"code_interpreter_call.outputs": true, "reasoning.encrypted_content": true, "message.output_text.logprobs": true,
}

func (m requestMembers) include() ([]string, error) {
	v := m.get("include")
	if v == nil {
		return nil, nil
	}
	var list []string
	if json.Unmarshal(v, &list) != nil {
		return nil, Invalid("include", "invalid_type", "'include' must be an array of strings.")
	}
	for i, s := range list {
		if !knownInclude[s] {
			return nil, Invalid("include", "invalid_value", "include[%d] is not a supported value.", i)
		}
	}
	return list, nil
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}
