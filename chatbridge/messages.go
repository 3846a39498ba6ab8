package chatbridge

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/respgate/respgate/wire"
)

// chatMessage is the part of a chat message the translation reads.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Refusal          *string         `json:"refusal"`
	ToolCalls        []chatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	FunctionCall     json.RawMessage `json:"function_call"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
}

// translateMessage turns message i into Responses input items (docs/chat-completions.md):
// system, developer and user messages into messages; an assistant message into its reasoning
// (reasoning_content, when the client sent it back), its message (text, refusal) and one
// function_call per tool call, in that order; a tool message into a function_call_output.
func translateMessage(i int, m Message) ([]json.RawMessage, error) {
	p := fmt.Sprintf("messages[%d]", i)
	var cm chatMessage
	if err := json.Unmarshal(m.JSON, &cm); err != nil {
		return nil, wire.Invalid(p, "invalid_type", "'%s' has a member of the wrong type.", p)
	}
	text, parts, err := content(cm.Content, p)
	if err != nil {
		return nil, err
	}
	switch m.Role {
	case "assistant":
		return assistantItems(&cm, p, text, parts)
	case "tool":
		if cm.ToolCallID == "" {
			return nil, wire.Invalid(p+".tool_call_id", "missing_required_parameter", "'%s.tool_call_id' is required.", p)
		}
		joined, err := onlyText(text, parts, p)
		if err != nil {
			return nil, err
		}
		return []json.RawMessage{marshal(map[string]string{"type": wire.TypeFunctionCallOutput, "call_id": cm.ToolCallID, "output": joined})}, nil
	}
	if text == nil && parts == nil {
		return nil, wire.Invalid(p+".content", "missing_required_parameter", "'%s.content' is required.", p)
	}
	msg := map[string]any{"type": wire.TypeMessage, "role": m.Role}
	if text != nil {
		msg["content"] = *text
	} else {
		in, err := inputParts(parts, p, m.Role == "user")
		if err != nil {
			return nil, err
		}
		msg["content"] = in
	}
	return []json.RawMessage{marshal(msg)}, nil
}

// content reads a message's content: a string, or an array of parts (nil, nil when absent or null).
func content(raw json.RawMessage, p string) (*string, []chatPart, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return &s, nil, nil
	}
	var parts []chatPart
	if json.Unmarshal(raw, &parts) != nil {
		return nil, nil, wire.Invalid(p+".content", "invalid_type", "'%s.content' must be a string or an array of content parts.", p)
	}
	return nil, parts, nil
}

func onlyText(text *string, parts []chatPart, p string) (string, error) {
	if text != nil {
		return *text, nil
	}
	var b strings.Builder
	for j, part := range parts {
		if part.Type != "text" {
			return "", wire.Invalid(fmt.Sprintf("%s.content[%d].type", p, j), "invalid_value",
				"'%s.content[%d]' must be a text part here.", p, j)
		}
		b.WriteString(part.Text)
	}
	return b.String(), nil
}

// inputParts translates text parts (and, for a user, image parts) into Responses input parts.
func inputParts(parts []chatPart, p string, user bool) ([]map[string]string, error) {
	out := make([]map[string]string, 0, len(parts))
	for j, part := range parts {
		switch {
		case part.Type == "text":
			out = append(out, map[string]string{"type": "input_text", "text": part.Text})
		case part.Type == "image_url" && user && part.ImageURL != nil:
			detail := part.ImageURL.Detail
			if detail == "" {
				detail = "auto"
			}
			out = append(out, map[string]string{"type": "input_image", "image_url": part.ImageURL.URL, "detail": detail})
		default:
			return nil, wire.Invalid(fmt.Sprintf("%s.content[%d].type", p, j), "invalid_value",
				"Content part type '%s' in '%s' cannot be served by this gateway.", part.Type, p)
		}
	}
	return out, nil
}

func assistantItems(cm *chatMessage, p string, text *string, parts []chatPart) ([]json.RawMessage, error) {
	if len(cm.FunctionCall) > 0 && string(cm.FunctionCall) != "null" {
		return nil, wire.Invalid(p+".function_call", "unsupported_parameter", "'function_call' is deprecated and not supported; use 'tool_calls'.")
	}
	var out []json.RawMessage
	reasoning := cm.ReasoningContent
	if reasoning == nil {
		reasoning = cm.Reasoning // vLLM's newer spelling
	}
	if reasoning != nil && *reasoning != "" {
		out = append(out, marshal(map[string]any{"type": wire.TypeReasoning, "summary": []any{},
			"content": []map[string]string{{"type": wire.PartReasoningText, "text": *reasoning}}}))
	}
	var msgParts []map[string]any
	if text != nil && *text != "" {
		msgParts = append(msgParts, map[string]any{"type": wire.PartOutputText, "text": *text, "annotations": []any{}})
	}
	for j, part := range parts {
		switch part.Type {
		case "text":
			msgParts = append(msgParts, map[string]any{"type": wire.PartOutputText, "text": part.Text, "annotations": []any{}})
		case "refusal":
			msgParts = append(msgParts, map[string]any{"type": wire.PartRefusal, "refusal": part.Refusal})
		default:
			return nil, wire.Invalid(fmt.Sprintf("%s.content[%d].type", p, j), "invalid_value",
				"Content part type '%s' cannot be in an assistant message.", part.Type)
		}
	}
	if cm.Refusal != nil && *cm.Refusal != "" {
		msgParts = append(msgParts, map[string]any{"type": wire.PartRefusal, "refusal": *cm.Refusal})
	}
	if len(msgParts) > 0 {
		out = append(out, marshal(map[string]any{"type": wire.TypeMessage, "role": "assistant", "status": "completed", "content": msgParts}))
	}
	for j, tc := range cm.ToolCalls {
		if tc.Type != "function" || tc.ID == "" || tc.Function.Name == "" {
			return nil, wire.Invalid(fmt.Sprintf("%s.tool_calls[%d]", p, j), "invalid_value",
				"'%s.tool_calls[%d]' must be a function call with an id and a name.", p, j)
		}
		out = append(out, marshal(map[string]string{"type": wire.TypeFunctionCall, "call_id": tc.ID,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments, "status": "completed"}))
	}
	return out, nil
}
