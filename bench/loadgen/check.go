package loadgen

import (
	"encoding/json"
	"fmt"
	"strings"
)

// maxSeq bounds the sequence numbers the Checker tracks (a larger one is a malformed event), so a
// hostile stream cannot make it allocate without bound.
const maxSeq = 1 << 22

// maxProblems is how many problem descriptions a CheckResult keeps.
const maxProblems = 5

// CheckResult is the verdict on one event stream. Counts are events, except Truncated.
type CheckResult struct {
	// Events counts the JSON events received ([DONE] not included); Deltas those whose type ends
	// in ".delta".
	Events int `json:"events"`
	Deltas int `json:"deltas"`
	// Lost: sequence numbers below the highest one received that never arrived.
	Lost int `json:"lost"`
	// Reordered: events that arrived after one with a higher sequence number, or after the
	// terminal event.
	Reordered int `json:"reordered"`
	// Duplicated: events whose sequence number had already arrived, and terminal events beyond
	// the first.
	Duplicated int `json:"duplicated"`
	// Truncated: the stream ended without its terminal event, inside a frame, or with a read
	// error.
	Truncated bool `json:"truncated"`
	// Unannounced: deltas whose item_id no response.output_item.added announced before them.
	Unannounced int `json:"unannounced"`
	// Mismatch: item parts whose deltas do not add up to the terminal response's output.
	Mismatch int `json:"mismatch"`
	// Invalid: events that are not JSON objects with a type and a sequence_number, or data after
	// [DONE].
	Invalid int `json:"invalid"`
	// Status is the terminal response's status ("" if none arrived); WrongStatus is set when it
	// differs from Checker.ExpectStatus.
	Status      string `json:"status,omitempty"`
	WrongStatus bool   `json:"wrong_status,omitempty"`
	// Done reports that "data: [DONE]" ended the stream.
	Done bool `json:"done"`
	// ResponseID is the id response.created announced.
	ResponseID string `json:"response_id,omitempty"`
	// OutputBytes is the size of the text and arguments the deltas carried (what a gateway
	// accumulates for the stream).
	OutputBytes int `json:"output_bytes"`
	// Terminal is the terminal event's response object (Checker.KeepTerminal).
	Terminal []byte `json:"-"`
	// Problems describes the first few problems.
	Problems []string `json:"problems,omitempty"`
}

// OK reports that the stream was whole and valid.
func (r *CheckResult) OK() bool {
	return r.Lost == 0 && r.Reordered == 0 && r.Duplicated == 0 && !r.Truncated && r.Unannounced == 0 &&
		r.Mismatch == 0 && r.Invalid == 0 && !r.WrongStatus
}

func (r *CheckResult) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

type partKey struct {
	item string
	part int64 // content_index; -1 for function-call arguments
}

// Checker validates one OpenAI Responses event stream as it arrives (both vLLM's stream with
// quirks off and respgate's normalised stream satisfy it):
//   - every event is a JSON object with a "type" and a "sequence_number"; sequence numbers are
//     dense from 0 in arrival order (gaps are lost events, repeats duplicates, late arrivals
//     reordered);
//   - exactly one terminal event (response.completed, .incomplete or .failed) and it is the last,
//     optionally followed by "data: [DONE]" and nothing else;
//   - every delta's item_id was announced by a response.output_item.added before it;
//   - the text and argument deltas of each item part add up to that part in the terminal
//     response's output.
//
// Feed it every event, then call Finish. Not safe for concurrent use; one Checker per stream.
type Checker struct {
	// ExpectStatus, when set, is the status the terminal response must have.
	ExpectStatus string
	// RequireDone demands "data: [DONE]" after the terminal event (respgate sends it; vLLM
	// does not).
	RequireDone bool
	// KeepTerminal keeps a copy of the terminal response in CheckResult.Terminal.
	KeepTerminal bool

	res       CheckResult
	seen      []bool
	top       int64 // highest sequence number received, -1 before any
	terminal  bool
	announced map[string]bool
	parts     map[partKey][]byte
	f         eventFields
}

// NewChecker returns a Checker ready for a stream.
func NewChecker(expectStatus string, requireDone bool) *Checker {
	return &Checker{ExpectStatus: expectStatus, RequireDone: requireDone, top: -1}
}

func isTerminal(typ string) bool {
	return typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
}

// Feed checks one SSE event: name is its "event:" field (may be empty), data its data. It
// returns the event's type ("" if unreadable, "[DONE]" for the end marker).
func (c *Checker) Feed(name string, data []byte) string {
	if string(data) == "[DONE]" {
		c.feedDone()
		return "[DONE]"
	}
	typ, seq, ok := c.readHead(name, data)
	if !ok {
		return typ
	}
	c.sequence(seq, typ)

	r, f := &c.res, &c.f
	if c.terminal && !isTerminal(typ) {
		// Anything after the terminal event is out of place (a second terminal event is
		// counted as duplicated below).
		r.Reordered++
		r.problem("%s (seq %d) after the terminal event", typ, seq)
	}
	switch {
	case typ == "response.created":
		r.ResponseID, _ = jsonString(member(f.response, "id"))
	case typ == "response.output_item.added":
		if id, ok := jsonString(member(f.item, "id")); ok {
			if c.announced == nil {
				c.announced = make(map[string]bool, 4)
			}
			c.announced[id] = true
		}
	case strings.HasSuffix(typ, ".delta"):
		c.delta(typ, seq)
	case isTerminal(typ):
		c.terminate(typ, seq)
	}
	return typ
}

// feedDone checks the "data: [DONE]" end marker: once, and after the terminal event.
func (c *Checker) feedDone() {
	r := &c.res
	if r.Done {
		r.Duplicated++
		r.problem("second [DONE]")
	} else if !c.terminal {
		r.Reordered++
		r.problem("[DONE] before the terminal event")
	}
	r.Done = true
}

// readHead counts the event in data and scans it into c.f, returning its type and sequence number.
// ok is false when the event is unreadable (typ is then "") or its sequence number is bad.
func (c *Checker) readHead(name string, data []byte) (typ string, seq int64, ok bool) {
	r := &c.res
	if r.Done {
		r.Invalid++
		r.problem("event after [DONE]")
	}
	r.Events++
	if err := scanEvent(data, &c.f); err != nil {
		r.Invalid++
		r.problem("event %d: not a JSON object", r.Events)
		return "", 0, false
	}
	f := &c.f
	typ, ok = jsonString(f.typ)
	if !ok {
		r.Invalid++
		r.problem("event %d: no type", r.Events)
		return "", 0, false
	}
	if name != "" && name != typ {
		r.Invalid++
		r.problem("event %d: SSE event %q carries type %q", r.Events, name, typ)
	}
	seq, ok = jsonInt(f.seq)
	if !ok || seq < 0 || seq >= maxSeq {
		r.Invalid++
		r.problem("event %d (%s): bad sequence_number %q", r.Events, typ, f.seq)
		return typ, 0, false
	}
	return typ, seq, true
}

// delta checks a delta event against the items announced so far and adds its text or arguments to
// its item part.
func (c *Checker) delta(typ string, seq int64) {
	r, f := &c.res, &c.f
	r.Deltas++
	id, _ := jsonString(f.itemID)
	if !c.announced[id] {
		r.Unannounced++
		r.problem("%s (seq %d) for unannounced item %q", typ, seq, id)
	}
	var k partKey
	switch typ {
	case "response.output_text.delta", "response.reasoning_text.delta":
		ci, _ := jsonInt(f.contentIndex)
		k = partKey{id, ci}
	case "response.function_call_arguments.delta":
		k = partKey{id, -1}
	default:
		return
	}
	if c.parts == nil {
		c.parts = make(map[partKey][]byte, 4)
	}
	b, ok := appendJSONString(c.parts[k], f.delta)
	if !ok {
		r.Invalid++
		r.problem("%s (seq %d): delta is not a string", typ, seq)
	}
	c.parts[k] = b
}

// terminate checks a terminal event: the first one ends the stream and is compared with the
// deltas; any other is a duplicate.
func (c *Checker) terminate(typ string, seq int64) {
	r, f := &c.res, &c.f
	if c.terminal {
		r.Duplicated++
		r.problem("second terminal event %s (seq %d)", typ, seq)
		return
	}
	c.terminal = true
	if c.KeepTerminal {
		r.Terminal = append([]byte(nil), f.response...)
	}
	c.checkTerminal(f.response)
}

func (c *Checker) sequence(seq int64, typ string) {
	r := &c.res
	if int(seq) >= len(c.seen) {
		n := max(64, 2*len(c.seen), int(seq)+1)
		s := make([]bool, n)
		copy(s, c.seen)
		c.seen = s
	}
	switch {
	case c.seen[seq]:
		r.Duplicated++
		r.problem("%s: sequence_number %d again", typ, seq)
		return
	case seq < c.top:
		r.Reordered++
		r.problem("%s: sequence_number %d after %d", typ, seq, c.top)
	}
	c.seen[seq] = true
	if seq > c.top {
		c.top = seq
	}
}

// terminalResponse is the part of the terminal response the Checker compares.
type terminalResponse struct {
	Status string `json:"status"`
	Output []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Arguments string `json:"arguments"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
}

func (c *Checker) checkTerminal(raw []byte) {
	r := &c.res
	var resp terminalResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		r.Invalid++
		r.problem("terminal event: response is not readable: %v", err)
		return
	}
	r.Status = resp.Status
	if c.ExpectStatus != "" && resp.Status != c.ExpectStatus {
		r.WrongStatus = true
		r.problem("terminal status %q, want %q", resp.Status, c.ExpectStatus)
	}
	final := make(map[partKey]string, len(c.parts))
	for _, it := range resp.Output {
		if it.Type == "function_call" {
			final[partKey{it.ID, -1}] = it.Arguments
		}
		for i, p := range it.Content {
			if p.Type == "output_text" || p.Type == "reasoning_text" {
				final[partKey{it.ID, int64(i)}] = p.Text
			}
		}
	}
	for k, got := range c.parts {
		want, ok := final[k]
		switch {
		case !ok:
			r.Mismatch++
			r.problem("deltas of item %q part %d are not in the terminal output", k.item, k.part)
		case want != string(got):
			r.Mismatch++
			r.problem("item %q part %d: deltas add up to %d bytes, terminal output has %d", k.item, k.part, len(got), len(want))
		}
	}
}

// Finish ends the stream: readErr is the error that ended the body (nil or io.EOF for a clean
// end) and partial reports bytes of an unfinished frame. It returns the verdict.
func (c *Checker) Finish(readErr error, partial bool) CheckResult {
	r := &c.res
	for _, b := range c.parts {
		r.OutputBytes += len(b)
	}
	for s := int64(0); s < c.top; s++ {
		if !c.seen[s] {
			r.Lost++
		}
	}
	if r.Lost > 0 {
		r.problem("%d sequence numbers below %d never arrived", r.Lost, c.top)
	}
	switch {
	case readErr != nil:
		r.Truncated = true
		r.problem("stream ended with %v", readErr)
	case partial:
		r.Truncated = true
		r.problem("stream ended inside a frame")
	case !c.terminal:
		r.Truncated = true
		r.problem("stream ended without a terminal event after %d events", r.Events)
	case c.RequireDone && !r.Done:
		r.Truncated = true
		r.problem("stream ended without [DONE]")
	}
	return *r
}
