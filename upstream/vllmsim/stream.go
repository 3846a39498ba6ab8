package vllmsim

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/respgate/respgate/wire"
)

// emitter writes SSE frames the way vLLM's _convert_stream_to_sse_events does
// ("event: T\ndata: JSON\n\n", one write each), flushing every frame and applying the request's
// faults. Frames are built in one reused buffer, so a delta costs no allocation. Not safe for
// concurrent use.
type emitter struct {
	ctx       context.Context
	w         http.ResponseWriter
	rc        *http.ResponseController
	f         *fault
	timer     *time.Timer
	buf       []byte
	item      []byte // scratch for a done item
	typ       string
	dataStart int       // offset of the JSON in buf
	seq       int       // the next sequence_number
	frames    int       // frames written, malformed ones included
	next      time.Time // when the next delta is due (delay_ms)
	stalled   bool
	malformed bool          // the malformed frame was written
	prefill   time.Duration // waited once, before the first delta (the time to first token)
}

func newEmitter(w http.ResponseWriter, r *http.Request, f *fault) *emitter {
	return &emitter{ctx: r.Context(), w: w, rc: http.NewResponseController(w), f: f, buf: make([]byte, 0, 512)}
}

// stop releases the timer.
func (e *emitter) stop() {
	if e.timer != nil {
		e.timer.Stop()
	}
}

// sleep waits d or until the client goes away.
func (e *emitter) sleep(d time.Duration) error {
	if e.timer == nil {
		e.timer = time.NewTimer(d)
	} else {
		e.timer.Reset(d)
	}
	select {
	case <-e.ctx.Done():
		e.timer.Stop()
		return e.ctx.Err()
	case <-e.timer.C:
		return nil
	}
}

// begin starts the frame of an event of type typ. The caller then appends the JSON fields that sort
// before sequence_number, calls seqField, appends any field that sorts after it (a done event's
// "text"), and calls end; delta events use delta and send instead.
func (e *emitter) begin(typ string) {
	e.typ = typ
	e.buf = append(e.buf[:0], "event: "...)
	e.buf = append(e.buf, typ...)
	e.buf = append(e.buf, "\ndata: "...)
	e.dataStart = len(e.buf)
}

func (e *emitter) seqField() {
	e.buf = append(e.buf, `"sequence_number":`...)
	e.buf = appendInt(e.buf, e.seq)
	e.buf = append(e.buf, ',')
}

// end closes the JSON with the type and the frame, and sends it.
func (e *emitter) end() error {
	e.finish()
	return e.send(false)
}

// finish appends the "type" member, which sorts last, and the frame's end.
func (e *emitter) finish() {
	e.buf = append(e.buf, `"type":"`...)
	e.buf = append(e.buf, e.typ...)
	e.buf = append(e.buf, "\"}\n\n"...)
}

// dataLen is the length of the data line's JSON of the frame in buf.
func (e *emitter) dataLen() int { return len(e.buf) - e.dataStart - len("\n\n") }

// malformedFrame is a delta cut short: its data is not valid JSON.
const malformedFrame = "event: response.output_text.delta\ndata: {\"content_index\":0,\"delta\":\"\n\n"

// send writes the frame in buf; a delta is paced by delay_ms first.
func (e *emitter) send(delta bool) error {
	if delta && e.prefill > 0 {
		d := e.prefill
		e.prefill = 0
		if err := e.sleep(d); err != nil {
			return err
		}
	}
	if delta && e.f.delay > 0 {
		// Pace by deadline, not by sleeping delay after each write, so that write time does not
		// add up; a stream that fell behind resumes at the pace instead of bursting.
		now := time.Now()
		if e.next.IsZero() {
			e.next = now
		}
		if e.next = e.next.Add(e.f.delay); e.next.Before(now) {
			e.next = now
		}
		if d := e.next.Sub(now); d > 0 {
			if err := e.sleep(d); err != nil {
				return err
			}
		}
	}
	if !e.malformed && e.f.malformedAfter >= 0 && e.frames == e.f.malformedAfter {
		e.malformed = true
		if err := e.write([]byte(malformedFrame)); err != nil {
			return err
		}
	}
	if err := e.write(e.buf); err != nil {
		return err
	}
	e.seq++
	return nil
}

// write writes one frame and flushes it, stalling or cutting the connection where the fault says.
func (e *emitter) write(frame []byte) error {
	if e.f.stall > 0 && !e.stalled && e.frames == e.f.stallAfter {
		e.stalled = true
		if err := e.sleep(e.f.stall); err != nil {
			return err
		}
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	if e.f.errorAfter >= 0 && e.frames == e.f.errorAfter {
		_, _ = e.w.Write(errorFrame())
		_ = e.rc.Flush()
		panic(http.ErrAbortHandler) // vLLM drops the connection after a generation error
	}
	if e.f.cutInside >= 0 && e.frames == e.f.cutInside {
		_, _ = e.w.Write(frame[:len(frame)/2])
		_ = e.rc.Flush()
		panic(http.ErrAbortHandler) // net/http closes the connection mid-frame
	}
	if _, err := e.w.Write(frame); err != nil {
		return err
	}
	if err := e.rc.Flush(); err != nil {
		return err
	}
	e.frames++
	if e.f.cutAfter >= 0 && e.frames == e.f.cutAfter {
		panic(http.ErrAbortHandler) // net/http closes the connection without a terminal chunk
	}
	return nil
}

// stream answers a streaming request (responses_stream_generator in responses/serving.py). It returns
// when the stream ends, a write fails or the client goes away.
func (t *turn) stream(w http.ResponseWriter, r *http.Request) {
	e := newEmitter(w, r, t.f)
	e.prefill = t.prefill
	defer e.stop()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if e.rc.Flush() != nil {
		return
	}
	if t.f.cutAfter == 0 {
		panic(http.ErrAbortHandler) // cut_after=0: headers, then nothing
	}
	_ = t.writeEvents(e)
}

func (t *turn) writeEvents(e *emitter) error {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		e.begin(typ)
		e.buf = append(e.buf, `{"response":`...)
		e.buf = t.appendResponse(e.buf, false)
		e.buf = append(e.buf, ',')
		e.seqField()
		if err := e.end(); err != nil {
			return err
		}
	}
	ci := -1 // harmony's StreamingState.current_content_index, never reset (quirk content_index)
	var prev itemKind
	for idx, it := range t.items {
		if it.kind != kindCall {
			ci++
		}
		contentIndex := 0
		if t.harmony && t.has(QuirkContentIndex) {
			contentIndex = ci
		}
		var err error
		switch it.kind {
		case kindReasoning:
			err = t.streamReasoning(e, idx, contentIndex, it)
		case kindMessage:
			err = t.streamMessage(e, idx, contentIndex, it, prev == kindReasoning)
		case kindCall:
			err = t.streamCall(e, idx, it)
		}
		if err != nil {
			return err
		}
		prev = it.kind
	}
	// Always response.completed in vLLM, even when incomplete (docs/wire.md §6.5 quirk 4).
	typ := "response.completed"
	if t.incomplete && !t.has(QuirkTerminal) {
		typ = "response.incomplete"
	}
	e.begin(typ)
	e.buf = append(e.buf, `{"response":`...)
	e.buf = t.appendResponse(e.buf, true)
	e.buf = append(e.buf, ',')
	e.seqField()
	return e.end()
}

// lazyAdded reports whether harmony skips the added events of this item: vLLM emits them on the first
// non-empty delta only (emit_text_delta_events), and an older build skipped them for the message after
// reasoning (agentic-api#66).
func (t *turn) lazyAdded(it *outItem, afterReasoning bool) bool {
	return t.harmony && t.has(QuirkAdded) && (len(it.tokens) == 0 || (it.kind == kindMessage && afterReasoning))
}

// keepsDone reports whether the item's done events are written: harmony writes none for the item cut
// by max_output_tokens (docs/wire.md §6.5 quirk 8); the parser path closes it anyway (close_current).
func (t *turn) keepsDone(it *outItem) bool {
	return !(it.cut && t.harmony && t.has(QuirkTruncate))
}

func (t *turn) partEvent(done bool) string {
	switch {
	case t.has(QuirkReasoningPart) && done:
		return "response.reasoning_part.done"
	case t.has(QuirkReasoningPart):
		return "response.reasoning_part.added"
	case done:
		return "response.content_part.done"
	}
	return "response.content_part.added"
}

// appendPartHead appends "content_index","item_id","output_index" of a content event.
func appendPartHead(b []byte, ci int, id string, idx int) []byte {
	b = append(b, `{"content_index":`...)
	b = appendInt(b, ci)
	b = append(b, `,"item_id":`...)
	b = wire.AppendString(b, id)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, idx)
	return append(b, ',')
}

func (t *turn) itemAdded(e *emitter, idx int, item func([]byte) []byte) error {
	e.begin("response.output_item.added")
	e.buf = append(e.buf, `{"item":`...)
	e.buf = item(e.buf)
	e.buf = append(e.buf, `,"output_index":`...)
	e.buf = appendInt(e.buf, idx)
	e.buf = append(e.buf, ',')
	e.seqField()
	return e.end()
}

// itemDone writes output_item.done with item, built in e.item.
func (t *turn) itemDone(e *emitter, idx int, item []byte) error {
	e.item = item[:0]
	e.begin("response.output_item.done")
	e.buf = append(e.buf, `{"item":`...)
	e.buf = append(e.buf, item...)
	e.buf = append(e.buf, `,"output_index":`...)
	e.buf = appendInt(e.buf, idx)
	e.buf = append(e.buf, ',')
	e.seqField()
	return e.end()
}

// textDone writes a *.done event whose "text" sorts after sequence_number.
func (t *turn) textDone(e *emitter, typ string, ci int, id string, idx int, logprobs bool, it *outItem) error {
	e.begin(typ)
	e.buf = append(e.buf, `{"content_index":`...)
	e.buf = appendInt(e.buf, ci)
	e.buf = append(e.buf, `,"item_id":`...)
	e.buf = wire.AppendString(e.buf, id)
	if logprobs {
		e.buf = append(e.buf, `,"logprobs":[]`...)
	}
	e.buf = append(e.buf, `,"output_index":`...)
	e.buf = appendInt(e.buf, idx)
	e.buf = append(e.buf, ',')
	e.seqField()
	e.buf = append(e.buf, `"text":`...)
	e.buf = it.appendText(e.buf)
	e.buf = append(e.buf, ',')
	return e.end()
}

// deltas writes one delta event per token: head+token+tail, the tail holding the fields after
// "delta". The first token of the huge= item is resized so that its data is exactly f.huge bytes.
func (t *turn) deltas(e *emitter, typ string, it *outItem, head, tail []byte) error {
	for j, tok := range it.tokens {
		if j == 0 && it == t.hugeItem {
			// The placeholder token becomes "x"*(k-1) + " ", k chosen for the exact size.
			e.delta(typ, head, "", tail)
			k := max(2, t.f.huge-e.dataLen())
			tok = strings.Repeat("x", k-1) + " "
			it.tokens[0], it.esc = tok, nil
		}
		e.delta(typ, head, tok, tail)
		if err := e.send(true); err != nil {
			return err
		}
	}
	return nil
}

// delta builds the frame of a delta event in buf.
func (e *emitter) delta(typ string, head []byte, tok string, tail []byte) {
	e.begin(typ)
	e.buf = append(e.buf, head...)
	e.buf = wire.AppendString(e.buf, tok)
	e.buf = append(e.buf, tail...)
	e.seqField()
	e.finish()
}

func (t *turn) streamReasoning(e *emitter, idx, ci int, it *outItem) error {
	id := it.streamID
	if !t.lazyAdded(it, false) {
		err := t.itemAdded(e, idx, func(b []byte) []byte {
			return t.appendReasoningItem(b, id, nil, `"in_progress"`)
		})
		if err != nil {
			return err
		}
		e.begin(t.partEvent(false))
		e.buf = appendPartHead(e.buf, ci, id, idx)
		e.buf = append(e.buf, `"part":{"text":"","type":"reasoning_text"},`...)
		e.seqField()
		if err := e.end(); err != nil {
			return err
		}
	}
	if more, err := t.streamText(e, ci, idx, it, false); !more || err != nil {
		return err
	}
	e.begin(t.partEvent(true))
	e.buf = appendPartHead(e.buf, ci, id, idx)
	e.buf = append(e.buf, `"part":{"text":`...)
	e.buf = it.appendText(e.buf)
	e.buf = append(e.buf, `,"type":"reasoning_text"},`...)
	e.seqField()
	if err := e.end(); err != nil {
		return err
	}
	status := `"` + t.streamStatus(it) + `"`
	return t.itemDone(e, idx, t.appendReasoningItem(e.item[:0], id, it, status))
}

// streamText streams the deltas of it's text part ci and its done event: output_text when output
// (with logprobs), reasoning_text otherwise. more is false when the truncation quirk ends the item
// here, without its done events.
func (t *turn) streamText(e *emitter, ci, idx int, it *outItem, output bool) (more bool, err error) {
	id := it.streamID
	delta, done, logprobs := "response.reasoning_text.delta", "response.reasoning_text.done", ""
	if output {
		delta, done, logprobs = "response.output_text.delta", "response.output_text.done", `,"logprobs":[]`
	}
	head := append(appendInt([]byte(`{"content_index":`), ci), `,"delta":`...)
	tail := wire.AppendString([]byte(`,"item_id":`), id)
	tail = append(appendInt(append(append(tail, logprobs...), `,"output_index":`...), idx), ',')
	if err := t.deltas(e, delta, it, head, tail); err != nil {
		return false, err
	}
	if !t.keepsDone(it) {
		return false, nil
	}
	return true, t.textDone(e, done, ci, id, idx, output, it)
}

func (t *turn) streamMessage(e *emitter, idx, ci int, it *outItem, afterReasoning bool) error {
	id := it.streamID
	if !t.lazyAdded(it, afterReasoning) {
		err := t.itemAdded(e, idx, func(b []byte) []byte {
			b = append(b, `{"id":`...)
			b = wire.AppendString(b, id)
			return append(b, `,"content":[],"role":"assistant","status":"in_progress","type":"message"}`...)
		})
		if err != nil {
			return err
		}
		e.begin("response.content_part.added")
		e.buf = appendPartHead(e.buf, ci, id, idx)
		e.buf = append(e.buf, `"part":{"annotations":[],"text":"","type":"output_text","logprobs":[]},`...)
		e.seqField()
		if err := e.end(); err != nil {
			return err
		}
	}
	if more, err := t.streamText(e, ci, idx, it, true); !more || err != nil {
		return err
	}
	e.begin("response.content_part.done")
	e.buf = appendPartHead(e.buf, ci, id, idx)
	e.buf = append(e.buf, `"part":`...)
	e.buf = t.appendOutputText(e.buf, it)
	e.buf = append(e.buf, ',')
	e.seqField()
	if err := e.end(); err != nil {
		return err
	}
	status := `"` + t.streamStatus(it) + `"`
	return t.itemDone(e, idx, t.appendMessageItem(e.item[:0], id, it, status, true))
}

func (t *turn) streamCall(e *emitter, idx int, it *outItem) error {
	id, callID := it.streamID, it.streamCallID
	if !t.lazyAdded(it, false) {
		err := t.itemAdded(e, idx, func(b []byte) []byte {
			b = append(b, `{"arguments":"","call_id":`...)
			b = wire.AppendString(b, callID)
			b = append(b, `,"name":`...)
			b = wire.AppendString(b, it.name)
			b = append(b, `,"type":"function_call","id":`...)
			b = wire.AppendString(b, id)
			return append(b, `,"status":"in_progress"}`...)
		})
		if err != nil {
			return err
		}
	}
	tail := wire.AppendString([]byte(`,"item_id":`), id)
	tail = append(appendInt(append(tail, `,"output_index":`...), idx), ',')
	if err := t.deltas(e, "response.function_call_arguments.delta", it, []byte(`{"delta":`), tail); err != nil {
		return err
	}
	if !t.keepsDone(it) {
		return nil
	}
	// The parser path sends arguments.done only after a non-empty delta (emit_simple_tool_call_done).
	if t.harmony || !t.has(QuirkArgsDone) || len(it.tokens) > 0 {
		e.begin("response.function_call_arguments.done")
		e.buf = append(e.buf, `{"arguments":`...)
		e.buf = it.appendText(e.buf)
		e.buf = append(e.buf, `,"item_id":`...)
		e.buf = wire.AppendString(e.buf, id)
		e.buf = append(e.buf, `,"name":`...)
		e.buf = wire.AppendString(e.buf, it.name)
		e.buf = append(e.buf, `,"output_index":`...)
		e.buf = appendInt(e.buf, idx)
		e.buf = append(e.buf, ',')
		e.seqField()
		if err := e.end(); err != nil {
			return err
		}
	}
	stray := -1
	if t.harmony && t.has(QuirkStray) {
		stray = idx
	}
	status := `"` + t.streamStatus(it) + `"`
	return t.itemDone(e, idx, t.appendCallItem(e.item[:0], it, id, callID, status, stray))
}
