package chatbridge

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/respgate/respgate/wire"
)

// Record is one captured turn as the planner reads it (the store keeps it, store.ReplayRecord).
type Record struct {
	Start    string // chain digest before the assistant message
	End      string // chain digest including the predicted assistant envelope
	Envelope string // fingerprint of the predicted envelope
	// Parent is the End of the last record replayed in the request that produced this one ("":
	// none). A record can only be replayed after exactly that record: its own ancestry.
	Parent string
	// Payload fingerprints Items, so that two generations with one visible identity are told
	// apart (a conflict).
	Payload string
	Items   []wire.Item
	// Blocked: a conflict (two payloads for this End) or a failed turn at this Start made the
	// record unusable; it stays as a marker.
	Blocked bool
}

// Bytes is the size of the record's items.
func (r *Record) Bytes() int {
	n := 0
	for _, it := range r.Items {
		n += len(it.JSON)
	}
	return n
}

// PayloadOf fingerprints items (each length-prefixed).
func PayloadOf(items []wire.Item) string {
	h := sha256.New()
	h.Write([]byte(domain + "/payload\x00"))
	for _, it := range items {
		frame(h, it.JSON)
	}
	return sum(h)
}

// Plan is what replay does to one request (issue 18 item 4).
type Plan struct {
	// Replace maps the index of an assistant message to the original items that replace it.
	Replace map[int][]wire.Item
	// Last is the End of the last replaced record ("" none): the Parent of the record this turn
	// will leave.
	Last string
	// Used lists the End of every replaced record, in order (their use time is refreshed).
	Used []string
	// Hits, Misses and Conflicts count the assistant messages replaced, left as sent (no record,
	// a mismatch, incoherent ancestry, over budget) and left as sent because of a conflict
	// marker; Bytes is the size of the items replayed.
	Hits, Misses, Conflicts, Bytes int
}

// Candidates are the End digests of the history's assistant messages: the records to load.
func (h *History) Candidates(msgs []Message) []string {
	var out []string
	for k, m := range msgs {
		if m.Role == "assistant" {
			out = append(out, h.Digests[k+1])
		}
	}
	return out
}

// Plan matches msgs (identified by h) against records of h's scope. For each assistant message,
// in order, a record whose End equals the digest after the message, whose Start equals the digest
// before it, whose envelope fingerprint equals the message's and whose items still predict that
// envelope replaces it, provided the record's Parent is the last record replaced so far: earlier
// replaced messages must be its own recorded ancestry. An incoherent record stops replay there
// (later messages are sent as is); a blocked record (conflict) or a mismatch leaves that message
// as sent. maxBytes bounds the replayed items (0: unbounded); past it replay stops. User
// messages and tool results are never replaced.
func (h *History) Plan(msgs []Message, records []Record, maxBytes int) *Plan {
	byEnd := make(map[string]*Record, len(records))
	for i := range records {
		byEnd[records[i].End] = &records[i]
	}
	p := &Plan{Replace: map[int][]wire.Item{}}
	for k, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		r := byEnd[h.Digests[k+1]]
		switch {
		case r == nil:
			p.Misses++
			continue
		case r.Blocked:
			p.Conflicts++
			continue
		case r.Start != h.Digests[k] || r.Envelope != h.envelopes[k] || !predicts(r):
			p.Misses++
			continue
		case r.Parent != p.Last || maxBytes > 0 && p.Bytes+r.Bytes() > maxBytes:
			p.Misses += countAssistant(msgs[k:])
			return p
		}
		p.Replace[k] = r.Items
		p.Last = r.End
		p.Used = append(p.Used, r.End)
		p.Hits++
		p.Bytes += r.Bytes()
	}
	return p
}

func countAssistant(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// predicts reports whether r's items still predict the envelope it was stored under (a stored
// record that no longer does is corrupt and never replayed).
func predicts(r *Record) bool {
	env := Envelope(r.Items)
	h := History{lim: Limits{}.orDefaults()}
	v, err := wire.DecodeValue(env)
	if err != nil {
		return false
	}
	canon, err := h.canonical(canonMessage(v))
	return err == nil && fingerprint(canon) == r.Envelope
}

// Capture is the record a completed turn leaves: its output items under the identity of the
// history it answered (Start) followed by the envelope a client sends back for them (End).
// parent is Plan.Last of the request. ok is false when the envelope is over the limits.
func (h *History) Capture(items []wire.Item, parent string) (rec Record, ok bool) {
	end, fp, ok := h.extend(Envelope(items))
	if !ok {
		return Record{}, false
	}
	return Record{Start: h.Digests[len(h.Digests)-1], End: end, Envelope: fp, Parent: parent, Payload: PayloadOf(items), Items: items}, true
}

// Position is the digest of the whole incoming history: where this turn's answer goes (a failed
// turn blocks the older records there).
func (h *History) Position() string { return h.Digests[len(h.Digests)-1] }

// Envelope is the assistant message (JSON) a client sends back for items: the visible text,
// refusal and tool calls exactly as the chat completion showed them, without reasoning.
func Envelope(items []wire.Item) []byte {
	v := visibleOf(items)
	msg := map[string]any{"role": "assistant", "content": v.text}
	if v.refusal != "" {
		msg["refusal"] = v.refusal
	}
	if len(v.calls) > 0 {
		calls := make([]map[string]any, len(v.calls))
		for i, c := range v.calls {
			calls[i] = c.chat()
		}
		msg["tool_calls"] = calls
	}
	return marshal(msg)
}

// visible is what a chat completion shows of a turn's items.
type visible struct {
	text, refusal, reasoning string
	calls                    []toolCall
}

type toolCall struct{ id, name, arguments string }

func (c toolCall) chat() map[string]any {
	return map[string]any{"id": c.id, "type": "function", "function": map[string]string{"name": c.name, "arguments": c.arguments}}
}

// outputItem is the part of an output item visibleOf reads.
type outputItem struct {
	Type    string `json:"type"`
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Arguments string `json:"arguments"`
}

func visibleOf(items []wire.Item) visible {
	var v visible
	for _, it := range items {
		var o outputItem
		if json.Unmarshal(it.JSON, &o) != nil {
			continue
		}
		switch o.Type {
		case wire.TypeMessage:
			for _, c := range o.Content {
				switch c.Type {
				case wire.PartOutputText:
					v.text += c.Text
				case wire.PartRefusal:
					v.refusal += c.Refusal
				}
			}
		case wire.TypeReasoning:
			for _, c := range o.Content {
				if c.Type == wire.PartReasoningText {
					v.reasoning += c.Text
				}
			}
		case wire.TypeFunctionCall:
			v.calls = append(v.calls, toolCall{id: o.CallID, name: o.Name, arguments: o.Arguments})
		}
	}
	return v
}
