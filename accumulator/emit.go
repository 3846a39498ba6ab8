package accumulator

import (
	"strconv"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// Client event builders. Each builds the event's JSON in a.buf (reused) and frames it with
// wire.Event.AppendSSE. Every event carries the next sequence_number, so the numbers are dense
// across Start, Feed, Close and Terminal (docs/wire.md §5.1).

func (a *Accumulator) head(typ wire.EventType) []byte {
	b := append(a.buf[:0], `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, a.seq, 10)
	a.seq++
	return b
}

func (a *Accumulator) emit(dst []byte, typ wire.EventType, b []byte) []byte {
	b = append(b, '}')
	a.buf = b
	if a.opts.Observe != nil {
		a.opts.Observe(a.seq-1, typ, b)
	}
	return wire.Event{Type: typ, Data: b}.AppendSSE(dst)
}

func appendLoc(b []byte, it *item) []byte {
	b = append(b, `,"item_id":`...)
	b = append(b, it.qid...)
	b = append(b, `,"output_index":`...)
	return itoa(b, it.index)
}

func appendPartIndex(b []byte, sum bool, i int) []byte {
	if sum {
		b = append(b, `,"summary_index":`...)
	} else {
		b = append(b, `,"content_index":`...)
	}
	return itoa(b, i)
}

func (a *Accumulator) emitItemAdded(dst []byte, it *item) []byte {
	b := a.head(wire.EventItemAdded)
	b = append(b, `,"output_index":`...)
	b = itoa(b, it.index)
	b = append(b, `,"item":`...)
	b = appendItem(b, it, false)
	return a.emit(dst, wire.EventItemAdded, b)
}

// emitWhole emits output_item.added or .done of an item the gateway gives whole (Options.Prepend).
func (a *Accumulator) emitWhole(dst []byte, typ wire.EventType, index int, raw []byte) []byte {
	b := a.head(typ)
	b = append(b, `,"output_index":`...)
	b = itoa(b, index)
	b = append(b, `,"item":`...)
	b = jsonscan.AppendCompact(b, raw)
	return a.emit(dst, typ, b)
}

func (a *Accumulator) emitItemDone(dst []byte, it *item) []byte {
	b := a.head(wire.EventItemDone)
	b = append(b, `,"output_index":`...)
	b = itoa(b, it.index)
	b = append(b, `,"item":`...)
	if a.hides(it) {
		b = wire.AppendHiddenReasoning(b, it.id, string(it.status), it.enc)
	} else {
		b = append(b, it.final...)
	}
	return a.emit(dst, wire.EventItemDone, b)
}

// emitPart emits content_part.added/.done (reasoning_text parts included: vLLM's
// reasoning_part.* become content_part.*, docs/wire.md §6.5 quirk 1) or reasoning_summary_part.*.
func (a *Accumulator) emitPart(dst []byte, it *item, p *part, i int, sum bool, edge partEdge) []byte {
	if a.hides(it) {
		return dst
	}
	done := edge == partClosing
	typ := wire.EventPartAdded
	switch {
	case sum && done:
		typ = wire.EventSummaryDone
	case sum:
		typ = wire.EventSummaryAdded
	case done:
		typ = wire.EventPartDone
	}
	b := a.partHead(typ, it, sum, i)
	b = append(b, `,"part":`...)
	b = appendPart(b, p, !done)
	return a.emit(dst, typ, b)
}

// partEdge says which end of a part an event marks.
type partEdge uint8

const (
	partOpening partEdge = iota // *.part.added
	partClosing                 // *.part.done
)

// textEvents names the delta and done events of each kind of text part.
var textEvents = [...]struct{ delta, done wire.EventType }{
	pOutputText:    {wire.EventTextDelta, wire.EventTextDone},
	pRefusal:       {wire.EventRefusalDelta, wire.EventRefusalDone},
	pReasoningText: {wire.EventReasoningDelta, wire.EventReasoningDone},
	pSummaryText:   {wire.EventSummaryDelta, wire.EventSummaryTextDone},
}

// partHead starts an event about part i of it: type, sequence number, item location and the
// part's index (summary_index for summary parts, content_index otherwise).
func (a *Accumulator) partHead(typ wire.EventType, it *item, sum bool, i int) []byte {
	b := a.head(typ)
	b = appendLoc(b, it)
	return appendPartIndex(b, sum, i)
}

// emitDelta emits a text delta; tok is the delta as a JSON string token.
func (a *Accumulator) emitDelta(dst []byte, it *item, pk pkind, i int, tok []byte) []byte {
	if a.hides(it) {
		return dst
	}
	typ := textEvents[pk].delta
	b := a.partHead(typ, it, pk == pSummaryText, i)
	b = append(b, `,"delta":`...)
	b = append(b, tok...)
	if pk == pOutputText {
		b = append(b, `,"logprobs":[]`...)
	}
	return a.emit(dst, typ, b)
}

func (a *Accumulator) emitTextDone(dst []byte, it *item, pk pkind, i int, text []byte) []byte {
	if a.hides(it) {
		return dst
	}
	typ, field := textEvents[pk].done, `,"text":`
	if pk == pRefusal {
		field = `,"refusal":`
	}
	b := a.partHead(typ, it, pk == pSummaryText, i)
	b = append(b, field...)
	b = wire.AppendStringBytes(b, text)
	if pk == pOutputText {
		b = append(b, `,"logprobs":[]`...)
	}
	return a.emit(dst, typ, b)
}

func (a *Accumulator) emitArgsDelta(dst []byte, it *item, tok []byte) []byte {
	b := a.head(wire.EventArgsDelta)
	b = appendLoc(b, it)
	b = append(b, `,"delta":`...)
	b = append(b, tok...)
	return a.emit(dst, wire.EventArgsDelta, b)
}

func (a *Accumulator) emitArgsDone(dst []byte, it *item) []byte {
	b := a.head(wire.EventArgsDone)
	b = appendLoc(b, it)
	b = append(b, `,"arguments":`...)
	b = wire.AppendStringBytes(b, it.args)
	name, _ := it.clientName()
	b = append(b, `,"name":`...)
	b = wire.AppendString(b, name)
	return a.emit(dst, wire.EventArgsDone, b)
}

func (a *Accumulator) emitAnnotation(dst []byte, it *item, ci, ai int, ann []byte) []byte {
	b := a.head(wire.EventAnnotation)
	b = appendLoc(b, it)
	b = appendPartIndex(b, false, ci)
	b = append(b, `,"annotation_index":`...)
	b = itoa(b, ai)
	b = append(b, `,"annotation":`...)
	b = jsonscan.AppendCompact(b, ann)
	return a.emit(dst, wire.EventAnnotation, b)
}

// emitResponse emits response.created/in_progress or a terminal event carrying the rendered
// response object.
func (a *Accumulator) emitResponse(dst []byte, typ wire.EventType, s *Snapshot) []byte {
	obj := a.opts.Render(s)
	if !jsonscan.Valid(obj) {
		obj = renderDefault(s) // a broken renderer must not break the stream
	}
	b := a.head(typ)
	b = append(b, `,"response":`...)
	b = jsonscan.AppendCompact(b, obj) // one SSE data line, whatever the renderer produced
	return a.emit(dst, typ, b)
}
