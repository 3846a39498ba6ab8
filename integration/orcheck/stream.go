package orcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Stream checks one text/event-stream body as it flows: each event against the schema, plus the
// rules of the Open Responses specification's streaming section and of the strict SDK helpers
// (docs/wire.md §5.1-5.4, §7.1):
//
//   - framing: every event's "event:" field equals its data's "type"; no "id:" field; one JSON
//     object per event; the stream ends with "data: [DONE]" after the terminal event;
//   - response.created first; sequence_number 0, 1, 2… without gaps; one response id throughout;
//   - items: output_item.added with dense output_index (0, 1, 2… in order), a non-null item with
//     status in_progress and a new id; every later event of an item names its output_index and id;
//     parts announced (content_part.added / reasoning_summary_part.added, dense per item) before
//     their deltas; nothing for an item after its output_item.done, whose status is completed or
//     incomplete; an incomplete item is the last one, and then the response is incomplete;
//   - exactly one terminal event (response.completed / .incomplete / .failed) whose response
//     status matches its type and whose output equals the items the stream closed, by id and
//     order; no event after it;
//   - no top-level "error" member except in an "error" event (openai-go aborts on it).
//
// Write feeds body bytes (in any chunking); Close ends the stream and returns every violation
// found. Safe for one writer.
type Stream struct {
	s   *Schema
	mu  sync.Mutex
	buf []byte

	event, data []byte // the event being read
	hasData     bool
	errs        []error
	n           int // events seen

	respID     string
	terminal   string
	done       bool // [DONE] seen
	items      []*streamItem
	incomplete bool
}

type streamItem struct {
	id     string
	parts  int
	sums   int
	closed bool
	status string
}

// NewStream starts checking one stream.
func (s *Schema) NewStream() *Stream { return &Stream{s: s} }

// Write feeds raw SSE bytes.
func (st *Stream) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.buf = append(st.buf, p...)
	for {
		i := bytes.IndexAny(st.buf, "\r\n")
		if i < 0 {
			break
		}
		line := st.buf[:i]
		next := i + 1
		if st.buf[i] == '\r' {
			if i+1 >= len(st.buf) {
				break // wait: the \n of a CRLF may follow
			}
			if st.buf[i+1] == '\n' {
				next++
			}
		}
		st.line(line)
		st.buf = st.buf[next:]
	}
	return len(p), nil
}

func (st *Stream) fail(format string, args ...any) {
	st.errs = append(st.errs, fmt.Errorf("event %d: "+format, append([]any{st.n}, args...)...))
}

func (st *Stream) line(l []byte) {
	switch {
	case len(l) == 0:
		st.dispatch()
	case l[0] == ':':
		// comment (keepalive)
	default:
		field, value := l, []byte(nil)
		if i := bytes.IndexByte(l, ':'); i >= 0 {
			field, value = l[:i], l[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			st.event = append(st.event[:0], value...)
		case "data":
			if st.hasData {
				st.fail("more than one data line in one event")
				st.data = append(st.data, '\n')
			}
			st.data = append(st.data, value...)
			st.hasData = true
		case "id":
			st.fail("SSE id field (Open Responses: servers do not use id)")
		case "retry":
		default:
			st.fail("unknown SSE field %q", field)
		}
	}
}

func (st *Stream) dispatch() {
	event, data, has := string(st.event), st.data, st.hasData
	st.event, st.data, st.hasData = st.event[:0], nil, false
	if !has {
		if event != "" {
			st.fail("event %q without data", event)
		}
		return
	}
	if string(data) == "[DONE]" {
		if st.terminal == "" {
			st.fail("[DONE] before a terminal event")
		}
		if st.done {
			st.fail("[DONE] twice")
		}
		st.done = true
		return
	}
	if st.done {
		st.fail("data after [DONE]")
	}
	st.check(event, data)
	st.n++
}

type envelope struct {
	Type           string          `json:"type"`
	SequenceNumber *int            `json:"sequence_number"`
	OutputIndex    *int            `json:"output_index"`
	ContentIndex   *int            `json:"content_index"`
	SummaryIndex   *int            `json:"summary_index"`
	ItemID         *string         `json:"item_id"`
	Item           json.RawMessage `json:"item"`
	Response       *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Output []struct {
			ID string `json:"id"`
		} `json:"output"`
	} `json:"response"`
}

func (st *Stream) check(event string, data []byte) {
	if err := st.s.Event(data); err != nil {
		st.errs = append(st.errs, fmt.Errorf("event %d: %w", st.n, err))
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return // reported by Event
	}
	var e envelope
	if err := json.Unmarshal(data, &e); err != nil {
		st.fail("%s: %v", event, err)
		return
	}
	st.checkHead(event, &e, top)
	switch e.Type {
	case "response.created", "response.queued", "response.in_progress":
		st.lifecycle(&e)
	case "response.completed", "response.incomplete", "response.failed":
		st.lifecycle(&e)
		st.terminal = e.Type
		st.closeStream(&e)
	case "response.output_item.added":
		st.added(&e)
	case "response.output_item.done":
		st.itemDone(&e)
	case "response.content_part.added", "response.reasoning_summary_part.added":
		st.partAdded(&e)
	case "error":
	default:
		st.partEvent(&e)
	}
}

// checkHead checks what every event must satisfy whatever its type: its SSE event name, no stray
// top-level error member, its sequence_number, response.created first and nothing after the terminal
// event.
func (st *Stream) checkHead(event string, e *envelope, top map[string]json.RawMessage) {
	if event != e.Type {
		st.fail("SSE event %q but data type %q (Open Responses: event MUST equal type)", event, e.Type)
	}
	if _, ok := top["error"]; ok && e.Type != "error" {
		st.fail("%s has a top-level error member (openai-go aborts the stream on it)", e.Type)
	}
	if e.SequenceNumber == nil || *e.SequenceNumber != st.n {
		st.fail("%s: sequence_number %v, want %d", e.Type, deref(e.SequenceNumber), st.n)
	}
	if st.n == 0 && e.Type != "response.created" {
		st.fail("first event is %s, want response.created", e.Type)
	}
	if st.terminal != "" {
		st.fail("%s after the terminal event %s", e.Type, st.terminal)
	}
}

// itemDone checks response.output_item.done: the announced id, a final status, and nothing after an
// incomplete item.
func (st *Stream) itemDone(e *envelope) {
	it := st.item(e, false)
	if it == nil {
		return
	}
	var item struct {
		ID     string  `json:"id"`
		Type   string  `json:"type"`
		Status *string `json:"status"`
	}
	_ = json.Unmarshal(e.Item, &item)
	if item.ID != it.id {
		st.fail("output_item.done item id %q, announced %q", item.ID, it.id)
	}
	if statusless(item.Type, item.Status) {
		it.closed = true
		return
	}
	if s := strOf(item.Status); s != "completed" && s != "incomplete" {
		st.fail("output_item.done with item status %q", strOf(item.Status))
	}
	if st.incomplete {
		st.fail("an item after an incomplete item (Open Responses: an incomplete item is the last)")
	}
	st.incomplete = strOf(item.Status) == "incomplete"
	it.closed, it.status = true, strOf(item.Status)
}

// partAdded checks a content_part.added or reasoning_summary_part.added: its index is dense from 0
// in its item.
func (st *Stream) partAdded(e *envelope) {
	it := st.item(e, true)
	if it == nil {
		return
	}
	sum := e.Type == "response.reasoning_summary_part.added"
	idx, count := e.ContentIndex, &it.parts
	if sum {
		idx, count = e.SummaryIndex, &it.sums
	}
	if idx == nil || *idx != *count {
		st.fail("%s index %v, want %d (dense, from 0 in each item)", e.Type, deref(idx), *count)
	}
	*count++
}

// partEvent checks any other event of an open item: the part it names was announced.
func (st *Stream) partEvent(e *envelope) {
	it := st.item(e, true)
	if it == nil {
		return
	}
	switch {
	case e.ContentIndex != nil && *e.ContentIndex >= it.parts:
		st.fail("%s for content part %d, only %d announced", e.Type, *e.ContentIndex, it.parts)
	case e.SummaryIndex != nil && *e.SummaryIndex >= it.sums:
		st.fail("%s for summary part %d, only %d announced", e.Type, *e.SummaryIndex, it.sums)
	}
}

func (st *Stream) lifecycle(e *envelope) {
	if e.Response == nil {
		return // reported by the schema
	}
	if st.respID == "" {
		st.respID = e.Response.ID
	} else if e.Response.ID != st.respID {
		st.fail("%s: response id %q, the stream's is %q", e.Type, e.Response.ID, st.respID)
	}
}

func (st *Stream) added(e *envelope) {
	if e.OutputIndex == nil || *e.OutputIndex != len(st.items) {
		st.fail("output_item.added at output_index %v, want %d (dense, in order)", deref(e.OutputIndex), len(st.items))
	}
	var item struct {
		ID     string  `json:"id"`
		Type   string  `json:"type"`
		Status *string `json:"status"`
	}
	if len(e.Item) == 0 || string(e.Item) == "null" || json.Unmarshal(e.Item, &item) != nil {
		st.fail("output_item.added without an item")
		st.items = append(st.items, &streamItem{})
		return
	}
	if !statusless(item.Type, item.Status) && strOf(item.Status) != "in_progress" {
		st.fail("output_item.added item status %q, want in_progress", strOf(item.Status))
	}
	for _, it := range st.items {
		if it.id == item.ID {
			st.fail("output_item.added repeats item id %q", item.ID)
		}
	}
	st.items = append(st.items, &streamItem{id: item.ID})
}

// item finds the announced item an event is about; open requires it not closed yet.
func (st *Stream) item(e *envelope, open bool) *streamItem {
	if e.OutputIndex == nil || *e.OutputIndex < 0 || *e.OutputIndex >= len(st.items) {
		st.fail("%s for output_index %v, which was not announced", e.Type, deref(e.OutputIndex))
		return nil
	}
	it := st.items[*e.OutputIndex]
	if e.ItemID != nil && *e.ItemID != it.id {
		st.fail("%s item_id %q, but output_index %d is item %q", e.Type, *e.ItemID, *e.OutputIndex, it.id)
	}
	if it.closed {
		st.fail("%s for item %d after its output_item.done", e.Type, *e.OutputIndex)
		return nil
	}
	return it
}

func (st *Stream) closeStream(e *envelope) {
	for i, it := range st.items {
		if !it.closed {
			st.fail("%s while item %d (%s) is still open", e.Type, i, it.id)
		}
	}
	if e.Response == nil {
		return
	}
	want := map[string]string{"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}[e.Type]
	if e.Response.Status != want {
		st.fail("%s carries status %q", e.Type, e.Response.Status)
	}
	if st.incomplete && e.Response.Status != "incomplete" && e.Response.Status != "failed" {
		st.fail("an item ended incomplete but the response is %s", e.Response.Status)
	}
	if len(e.Response.Output) != len(st.items) {
		st.fail("%s output has %d items, the stream had %d (the terminal event carries the full output)", e.Type, len(e.Response.Output), len(st.items))
		return
	}
	for i, o := range e.Response.Output {
		if o.ID != st.items[i].id {
			st.fail("%s output[%d] is %q, the stream's item %d is %q", e.Type, i, o.ID, i, st.items[i].id)
		}
	}
}

// Close ends the stream and returns every violation found, or nil.
func (st *Stream) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.buf) > 0 {
		st.line(st.buf)
		st.buf = nil
	}
	if st.hasData || len(st.event) > 0 {
		st.fail("the stream ended inside an event (no blank line after it)")
	}
	if st.n == 0 {
		st.fail("no events")
	}
	if st.terminal == "" {
		st.fail("the stream ended without a terminal event")
	} else if !st.done {
		st.fail("the stream ended without data: [DONE] (Open Responses: the terminal frame)")
	}
	return errors.Join(st.errs...)
}

// Events reports how many events were checked.
func (st *Stream) Events() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.n
}

func deref(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// statusless reports an item whose schema has no status member (CompactionBody: a compaction item
// is whole when it appears, e.g. automatic compaction's at the head of a turn's output) and that
// states none: the status rules of output_item.added/.done do not apply to it.
func statusless(typ string, status *string) bool {
	return typ == "compaction" && status == nil
}

func strOf(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
