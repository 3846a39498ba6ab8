package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/respgate/respgate/wire"
)

// createRequest is the part of a POST /v1/responses body the simulator reads. Fields it does not name
// are accepted and ignored, as vLLM's OpenAIBaseModel (extra="allow") does (docs/wire.md §6.1). Echoed
// fields stay raw so that the response repeats what the client sent.
type createRequest struct {
	Model              *string         `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       json.RawMessage `json:"instructions"`
	Stream             *bool           `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	PreviousResponseID *string         `json:"previous_response_id"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              json.RawMessage `json:"tools"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Metadata           json.RawMessage `json:"metadata"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Text               json.RawMessage `json:"text"`
	Truncation         json.RawMessage `json:"truncation"`
	User               json.RawMessage `json:"user"`
	ServiceTier        json.RawMessage `json:"service_tier"`
	MaxToolCalls       json.RawMessage `json:"max_tool_calls"`
	PromptCacheKey     json.RawMessage `json:"prompt_cache_key"`
	RequestID          *string         `json:"request_id"` // vLLM uses it as the response id
}

// decodeRequest decodes body, answering like vLLM's pydantic validation when it is not a valid request.
func decodeRequest(body []byte) (*createRequest, *vllmError) {
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, validationError("body."+typeErr.Field, "type_error", "Input should be a valid "+typeErr.Type.String())
		}
		return nil, jsonInvalid()
	}
	if isNull(req.Input) {
		return nil, validationError("body.input", "missing", "Field required")
	}
	return &req, nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func (r *createRequest) stream() bool { return r.Stream != nil && *r.Stream }

// instructions returns the instructions text ("" when absent or not a string).
func (r *createRequest) instructions() string {
	var s string
	if isNull(r.Instructions) || json.Unmarshal(r.Instructions, &s) != nil {
		return ""
	}
	return s
}

// toolChoice is the request's tool_choice: "auto", "none", "required", or a forced function name.
type toolChoice struct {
	mode string // auto, none, required, function, other
	name string // for mode "function"
}

func (r *createRequest) toolChoice() toolChoice {
	if isNull(r.ToolChoice) {
		return toolChoice{mode: "auto"}
	}
	var s string
	if json.Unmarshal(r.ToolChoice, &s) == nil {
		return toolChoice{mode: s}
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(r.ToolChoice, &obj) == nil && obj.Type == "function" && obj.Name != "" {
		return toolChoice{mode: "function", name: obj.Name}
	}
	return toolChoice{mode: "other"}
}

// functionTool is a function tool of the request: its name, description and parameters schema
// (toolcall.go builds the arguments from it). topic marks a tool selected because the user's
// message is about what it names rather than by an explicit trigger.
type functionTool struct {
	name        string
	description string
	params      json.RawMessage
	topic       bool
}

func (r *createRequest) functionTools() []functionTool {
	if isNull(r.Tools) {
		return nil
	}
	var tools []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal(r.Tools, &tools) != nil {
		return nil
	}
	var out []functionTool
	for _, t := range tools {
		if t.Type != "function" || t.Name == "" {
			continue
		}
		ft := functionTool{name: t.Name, params: t.Parameters}
		if t.Description != nil {
			ft.description = *t.Description
		}
		out = append(out, ft)
	}
	return out
}

// inputItem is one input item, with the fields any supported type uses.
type inputItem struct {
	Type             *string         `json:"type"`
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	CallID           string          `json:"call_id"`
	Name             string          `json:"name"`
	Arguments        string          `json:"arguments"`
	Output           json.RawMessage `json:"output"`
	Summary          []textPart      `json:"summary"`
	EncryptedContent *string         `json:"encrypted_content"`
}

type textPart struct {
	Text    *string `json:"text"`
	Refusal *string `json:"refusal"`
}

func (p textPart) text() string {
	switch {
	case p.Text != nil:
		return *p.Text
	case p.Refusal != nil:
		return *p.Refusal
	}
	return ""
}

// joinText returns a string content, or the texts of a parts array joined with "\n".
func joinText(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []textPart
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.text()
	}
	return strings.Join(texts, "\n")
}

// conversation is what the model "saw": the input after vLLM's conversion for the dialect.
type conversation struct {
	messages    int // message items that reached the model
	reasoning   int // reasoning items that reached the model
	toolOutputs int
	userTexts   []string
	lastUser    string
	lastReason  *string // text of the last reasoning item that reached the model
	toolSaid    []string
	words       int // whitespace-separated words of every input text
	items       int
	// tokens are the input's simulated tokens in order (3 of framing per item, then a token per
	// word), as hashes, for the prefix cache; collected only when tokens is non-nil at the start.
	tokens []uint32
}

// framing are the 3 tokens each input item costs (tokenize.go counts them too).
var framing = [3]uint32{tokenOf("<|start|>"), tokenOf("<|message|>"), tokenOf("<|end|>")}

// item counts one more input item.
func (c *conversation) item() {
	c.items++
	if c.tokens != nil {
		c.tokens = append(c.tokens, framing[:]...)
	}
}

// text counts the words of an input text.
func (c *conversation) text(s string) {
	if c.tokens == nil {
		c.words += len(strings.Fields(s))
		return
	}
	for _, w := range strings.Fields(s) {
		c.words++
		c.tokens = append(c.tokens, tokenOf(w))
	}
}

// readInput converts input like vLLM does for dialect d (docs/wire.md §6.4), rejecting what vLLM rejects.
// With tokens set, it also lists the input's simulated tokens (conversation.tokens).
func readInput(d Dialect, input json.RawMessage, tokens bool) (*conversation, *vllmError) {
	c := &conversation{}
	if tokens {
		c.tokens = make([]uint32, 0, 256)
	}
	var s string
	if json.Unmarshal(input, &s) == nil {
		c.messages = 1 // a string input is one user message
		c.item()
		c.text(s)
		c.addUser(s)
		return c, nil
	}
	var raws []json.RawMessage
	if json.Unmarshal(input, &raws) != nil {
		return nil, validationError("body.input", "list_type", "Input should be a valid list")
	}
	r := inputReader{d: d, c: c, calls: make(map[string]bool), lastUserAt: -1}
	for i, raw := range raws {
		var it inputItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, validationError("body.input", "model_type", "Input should be a valid input item")
		}
		if err := r.read(i, &it); err != nil {
			return nil, err
		}
	}
	c.collectToolSaid(raws, r.lastUserAt)
	return c, nil
}

// inputReader is readInput's state while it walks an input array.
type inputReader struct {
	d          Dialect
	c          *conversation
	calls      map[string]bool // call_ids of the function_call items seen so far (harmony)
	lastUserAt int             // index of the last user message, -1 if none
}

// read adds the input item at index i to the conversation.
func (r *inputReader) read(i int, it *inputItem) *vllmError {
	c, d := r.c, r.d
	typ := wire.TypeMessage
	if it.Type != nil {
		typ = *it.Type
	}
	c.item()
	switch typ {
	case wire.TypeMessage:
		text := joinText(it.Content)
		c.text(text)
		if d == Harmony && (it.Role == "system" || it.Role == "developer") && text == "" {
			return nil // harmony drops an empty system/developer message (harmony.py)
		}
		c.messages++
		if it.Role == "user" || it.Role == "" {
			c.addUser(text)
			r.lastUserAt = i
		}
	case wire.TypeReasoning:
		text, ok, err := inputReasoningText(d, it)
		if err != nil {
			return err
		}
		c.text(text)
		if ok {
			c.reasoning++
			c.lastReason = &text
		}
	case wire.TypeFunctionCall:
		r.calls[it.CallID] = true
		c.text(it.Arguments)
	case wire.TypeFunctionCallOutput:
		if d == Harmony && !r.calls[it.CallID] {
			return badRequest("No call message found for %s", it.CallID)
		}
		c.toolOutputs++
		c.text(joinText(it.Output))
	default:
		if d == Harmony {
			return badRequest("Unknown input type: %s", typ)
		}
		// The parser path hands other items to the chat template unchanged; they carry no
		// text the simulated model reads.
	}
	return nil
}

// inputReasoningText is the text a reasoning input item gives the model in dialect d, and whether the item
// reaches the model at all.
func inputReasoningText(d Dialect, it *inputItem) (string, bool, *vllmError) {
	var parts []textPart
	_ = json.Unmarshal(it.Content, &parts)
	if d == Harmony {
		// Harmony joins every content text into the analysis channel; summary and
		// encrypted_content are ignored; no content means the item is skipped (harmony.py).
		if len(parts) == 0 {
			return "", false, nil
		}
		texts := make([]string, len(parts))
		for j, p := range parts {
			texts[j] = p.text()
		}
		return strings.Join(texts, "\n"), true, nil
	}
	// The chat-template path: encrypted content is refused, then content[0], then
	// summary[0] (construct_chat_messages_with_tool_call in responses/utils.py).
	if it.EncryptedContent != nil && *it.EncryptedContent != "" {
		return "", false, badRequest("Encrypted content is not supported.")
	}
	switch {
	case len(parts) > 0:
		return parts[0].text(), true, nil
	case len(it.Summary) > 0:
		return it.Summary[0].text(), true, nil
	}
	return "", true, nil
}

// collectToolSaid records what the tools said when the input ends with tool outputs: every output after
// the last user message (at lastUserAt, -1 if none), to be echoed.
func (c *conversation) collectToolSaid(raws []json.RawMessage, lastUserAt int) {
	n := len(raws)
	if n == 0 || itemType(raws[n-1]) != wire.TypeFunctionCallOutput {
		return
	}
	for _, raw := range raws[lastUserAt+1:] {
		if itemType(raw) != wire.TypeFunctionCallOutput {
			continue
		}
		var it inputItem
		_ = json.Unmarshal(raw, &it)
		c.toolSaid = append(c.toolSaid, joinText(it.Output))
	}
}

func (c *conversation) addUser(text string) {
	c.userTexts = append(c.userTexts, text)
	c.lastUser = text
}

func itemType(raw json.RawMessage) string {
	var head struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(raw, &head) != nil || head.Type == nil {
		return wire.TypeMessage
	}
	return *head.Type
}
