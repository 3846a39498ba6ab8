package chatbridge

import (
	"encoding/json"
	"strconv"

	"github.com/respgate/respgate/wire"
)

// Exposure says how reasoning reaches a chat client: the gateway's reasoning exposure policy
// (--reasoning-exposure raw|hidden, docs/reasoning.md).
type Exposure uint8

const (
	// ExposeRaw shows reasoning as vLLM's chat endpoint does: reasoning_content on the message
	// and on deltas, never as visible text.
	ExposeRaw Exposure = iota
	// ExposeHidden never shows reasoning (it is still captured and replayed).
	ExposeHidden
)

// Meta are the completion's identifying members.
type Meta struct {
	ID      string // chatcmpl-…
	Created int64  // unix seconds
	Model   string
}

// Outcome is what a turn amounted to (the accumulator's Result, as far as chat shows it).
type Outcome struct {
	Status            wire.Status
	Items             []wire.Item
	Usage             json.RawMessage // Responses-shaped; nil: none
	IncompleteDetails json.RawMessage
}

// FinishReason is the chat finish_reason for o.
func (o *Outcome) FinishReason() string {
	if o.Status == wire.StatusIncomplete {
		var d struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(o.IncompleteDetails, &d)
		if d.Reason == "content_filter" {
			return "content_filter"
		}
		return "length"
	}
	if len(visibleOf(o.Items).calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// usage converts a Responses usage object to the chat one (nil when there is none).
func usage(u json.RawMessage) json.RawMessage {
	var r struct {
		In    int64 `json:"input_tokens"`
		Out   int64 `json:"output_tokens"`
		Total int64 `json:"total_tokens"`
		InDet struct {
			Cached int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutDet struct {
			Reasoning int64 `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	}
	if len(u) == 0 || string(u) == "null" || json.Unmarshal(u, &r) != nil {
		return nil
	}
	return marshal(map[string]any{"prompt_tokens": r.In, "completion_tokens": r.Out, "total_tokens": r.Total,
		"prompt_tokens_details":     map[string]int64{"cached_tokens": r.InDet.Cached},
		"completion_tokens_details": map[string]int64{"reasoning_tokens": r.OutDet.Reasoning}})
}

func appendHead(b []byte, m *Meta, object string) []byte {
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, m.ID)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, m.Created, 10)
	b = append(b, `,"model":`...)
	return wire.AppendString(b, m.Model)
}

func appendStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return wire.AppendString(b, s)
}

// AppendCompletion appends the chat.completion object for a finished turn.
func AppendCompletion(dst []byte, m *Meta, o *Outcome, x Exposure) []byte {
	v := visibleOf(o.Items)
	dst = appendHead(dst, m, "chat.completion")
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	dst = appendStringOrNull(dst, v.text)
	dst = append(dst, `,"refusal":`...)
	dst = appendStringOrNull(dst, v.refusal)
	if x == ExposeRaw && v.reasoning != "" {
		dst = append(dst, `,"reasoning_content":`...)
		dst = wire.AppendString(dst, v.reasoning)
	}
	if len(v.calls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range v.calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, marshal(c.chat())...)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = wire.AppendString(dst, o.FinishReason())
	dst = append(dst, `}],"usage":`...)
	dst = wire.AppendRaw(dst, usage(o.Usage))
	return append(dst, '}')
}

// Chunker turns the accumulator's normalised client events into chat.completion.chunk frames
// (docs/chat-completions.md): a first chunk with the role, then reasoning_content, content,
// refusal and tool_calls deltas (each tool call with its index, its id and name in its first
// delta), then, from Finish, the chunk with finish_reason, the usage chunk when asked for, and
// data: [DONE]. Frames accumulate until Take. Not safe for concurrent use.
type Chunker struct {
	Meta         Meta
	IncludeUsage bool
	Exposure     Exposure

	buf     []byte
	calls   map[int64]int    // output_index → tool call index
	sent    map[int64]string // output_index → text/arguments sent so far
	nCalls  int
	started bool
}

// event is the part of a client event the chunker reads.
type event struct {
	OutputIndex int64  `json:"output_index"`
	Delta       string `json:"delta"`
	Text        string `json:"text"`
	Arguments   string `json:"arguments"`
	Item        *struct {
		Type      string `json:"type"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"item"`
}

// Event consumes one client event (the accumulator's Options.Observe).
func (c *Chunker) Event(typ wire.EventType, data []byte) {
	if c.calls == nil {
		c.calls, c.sent = map[int64]int{}, map[int64]string{}
	}
	if !c.started {
		c.started = true
		c.chunk(map[string]any{"role": "assistant", "content": ""}, "")
	}
	var e event
	switch typ {
	case wire.EventReasoningDelta, wire.EventTextDelta, wire.EventRefusalDelta, wire.EventArgsDelta,
		wire.EventReasoningDone, wire.EventTextDone, wire.EventItemAdded, wire.EventItemDone:
		if json.Unmarshal(data, &e) != nil {
			return
		}
	default:
		return
	}
	switch typ {
	case wire.EventItemAdded:
		if e.Item != nil && e.Item.Type == wire.TypeFunctionCall {
			k := c.nCalls
			c.nCalls++
			c.calls[e.OutputIndex] = k
			c.chunk(map[string]any{"tool_calls": []map[string]any{{"index": k, "id": e.Item.CallID, "type": "function",
				"function": map[string]string{"name": e.Item.Name, "arguments": ""}}}}, "")
		}
	case wire.EventItemDone:
		if e.Item != nil && e.Item.Type == wire.TypeFunctionCall {
			c.rest(typ, e.OutputIndex, e.Item.Arguments)
		}
	case wire.EventReasoningDone, wire.EventTextDone:
		c.rest(typ, e.OutputIndex, e.Text)
	default:
		c.delta(typ, e.OutputIndex, e.Delta)
	}
}

// rest sends what a done event holds beyond the deltas already sent (an upstream that sent a
// done without deltas, docs/wire.md §6.5 quirk 6).
func (c *Chunker) rest(typ wire.EventType, oi int64, full string) {
	sent := c.sent[oi]
	if len(full) <= len(sent) || full[:len(sent)] != sent {
		return
	}
	switch typ {
	case wire.EventReasoningDone:
		typ = wire.EventReasoningDelta
	case wire.EventTextDone:
		typ = wire.EventTextDelta
	default:
		typ = wire.EventArgsDelta
	}
	c.delta(typ, oi, full[len(sent):])
}

func (c *Chunker) delta(typ wire.EventType, oi int64, d string) {
	if d == "" {
		return
	}
	c.sent[oi] += d
	switch typ {
	case wire.EventReasoningDelta:
		if c.Exposure == ExposeRaw {
			c.chunk(map[string]any{"reasoning_content": d}, "")
		}
	case wire.EventTextDelta:
		c.chunk(map[string]any{"content": d}, "")
	case wire.EventRefusalDelta:
		c.chunk(map[string]any{"refusal": d}, "")
	case wire.EventArgsDelta:
		if k, ok := c.calls[oi]; ok {
			c.chunk(map[string]any{"tool_calls": []map[string]any{{"index": k, "function": map[string]string{"arguments": d}}}}, "")
		}
	}
}

// chunk appends one chunk frame with delta and, when set, finish_reason.
func (c *Chunker) chunk(delta map[string]any, finish string) {
	b := appendHead(append(c.buf, "data: "...), &c.Meta, "chat.completion.chunk")
	b = append(b, `,"choices":[{"index":0,"delta":`...)
	b = append(b, marshal(delta)...)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = appendStringOrNull(b, finish)
	b = append(b, `}]`...)
	if c.IncludeUsage {
		b = append(b, `,"usage":null`...)
	}
	c.buf = append(b, "}\n\n"...)
}

// Finish appends the final chunk for o (finish_reason), the usage chunk when IncludeUsage, and
// [DONE]. A failed turn is instead an error frame (the SDKs raise it) and [DONE].
func (c *Chunker) Finish(o *Outcome, failure *wire.ErrorObject) {
	if o.Status == wire.StatusFailed || o.Status == wire.StatusCancelled {
		if failure == nil {
			failure = &wire.ErrorObject{Code: "server_error", Message: "The response failed."}
		}
		body := wire.ErrorBody{Message: failure.Message, Type: wire.ErrServer}
		if failure.Code != "" {
			code := failure.Code
			body.Code = &code
		}
		c.buf = append(append(c.buf, "data: "...), marshal(map[string]any{"error": body})...)
		c.buf = append(append(c.buf, "\n\n"...), wire.DoneFrame...)
		return
	}
	if !c.started {
		c.Event("", nil)
	}
	c.chunk(map[string]any{}, o.FinishReason())
	if c.IncludeUsage {
		b := appendHead(append(c.buf, "data: "...), &c.Meta, "chat.completion.chunk")
		b = append(b, `,"choices":[],"usage":`...)
		b = wire.AppendRaw(b, usage(o.Usage))
		c.buf = append(b, "}\n\n"...)
	}
	c.buf = append(c.buf, wire.DoneFrame...)
}

// Take appends the frames built so far to dst and forgets them.
func (c *Chunker) Take(dst []byte) []byte {
	dst = append(dst, c.buf...)
	c.buf = c.buf[:0]
	return dst
}
