// Package accumulator is respgate's streaming core (docs/design.md §4). It consumes the events of one
// upstream vLLM Responses stream and produces (a) the normalised client event stream, framed as
// SSE, and (b) the final complete output items, usage and status that the server stores.
//
// It owns the reconciliation rules (done events and the terminal response override deltas; items
// keyed by output_index; respgate's own ids everywhere) and the normalisation that makes vLLM's
// dialect acceptable to strict SDK helpers (docs/wire.md §5, §6.5). It is pure: no I/O, no goroutines,
// no clock, no knowledge of the store. Every index and size from upstream is untrusted input.
package accumulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/respgate/respgate/wire"
)

// Defaults for the Options limits.
const (
	DefaultMaxItems     = 4096
	DefaultMaxItemBytes = 16 << 20
)

// Errors Feed wraps (test with errors.Is). Their text never contains upstream content.
var (
	// ErrMalformed: an event respgate needs is not valid JSON or a field has the wrong type.
	ErrMalformed = errors.New("malformed upstream event")
	// ErrIndex: a negative, huge or out-of-order output_index / content_index / summary_index.
	ErrIndex = errors.New("invalid upstream index")
	// ErrLimit: more items or parts than Options.MaxItems, or more bytes than MaxItemBytes (one
	// item) or MaxTotalBytes (the response).
	ErrLimit = errors.New("upstream output over the limit")
	// ErrUpstream: the upstream sent an error event.
	ErrUpstream = errors.New("upstream reported an error")
)

// maxIndex is the largest index accepted from upstream. Indices are mapped by first-seen order,
// so a sparse index costs nothing; a larger one is nonsense and rejected.
const maxIndex = 1<<31 - 1

// Options configures an Accumulator. The zero value is usable: every field has a default.
type Options struct {
	// NewID mints ids (msg_, rs_, fc_, call_, item_…); default wire.NewID. Tests pass a
	// deterministic one.
	NewID func(prefix string) string
	// Render builds the client-facing response object (JSON) for response.created/in_progress
	// and the terminal event from a Snapshot. The server supplies one that adds the request echo;
	// the default renders a minimal valid object {"id","object","created_at","status","model",
	// "output","usage","error","incomplete_details"}. Its result is compacted onto one line; an
	// invalid result is replaced by the default rendering.
	Render func(s *Snapshot) []byte
	// ResponseID is respgate's response id (resp_…), passed in Snapshots. Default: minted.
	ResponseID string
	// Model and CreatedAt (unix seconds) are passed in Snapshots for the renderer.
	Model     string
	CreatedAt int64
	// MaxItems bounds output items, and content and summary parts over all items (default 4096);
	// beyond it the stream fails.
	MaxItems int
	// MaxItemBytes bounds one item's accumulated text, arguments and JSON (default 16 MiB);
	// beyond it the stream fails.
	MaxItemBytes int
	// MaxTotalBytes bounds the whole response's accumulated text, arguments and JSON (default
	// 4×MaxItemBytes), so that MaxItems×MaxItemBytes is never the real bound.
	MaxTotalBytes int
	// ToolNames maps the flat names under which namespaced function tools were sent to vLLM
	// ("<namespace>__<name>", see rehydrate.Result.ToolNames) back to what the client declared. A
	// function call of such a tool reaches the client as {"name": Name, "namespace": Namespace},
	// as OpenAI and vLLM itself answer it; other names pass unchanged. Nil: no mapping.
	ToolNames map[string]wire.ToolName
	// Observe, when set, sees every client event as it is built: its sequence_number, type and
	// JSON data (only valid during the call; copy it to keep it). The server logs events with it
	// so a stream can be replayed exactly.
	Observe func(seq int64, typ wire.EventType, data []byte)
	// Reasoning decides what clients see of reasoning items (zero: everything, as upstream sent
	// it; docs/reasoning.md).
	Reasoning ReasoningOptions
	// Prepend are complete items the gateway itself puts at the head of the output, before the
	// model's: the compaction item of automatic compaction (docs/compaction.md §6), as OpenAI
	// starts such a turn's output with it. Each is announced and closed (output_item.added and
	// .done, its JSON as given) right after response.in_progress, at output_index 0, 1, …; the
	// model's items follow at the next indices. They lead every Result.Output, also of a failed
	// stream: the client saw them. Each item's JSON must be a valid object with its id and type.
	Prepend []wire.Item
}

// ReasoningOptions are the server's reasoning policies as the accumulator applies them.
type ReasoningOptions struct {
	// Seal, when set, mints the encrypted_content of every finished reasoning item from its
	// content parts (the JSON array of the stored item's "content", [] when it has none). The
	// stored item and the client's both carry it, in place of upstream's. An empty result leaves
	// the item without encrypted_content.
	Seal func(itemID string, content []byte) string
	// Hide keeps reasoning text from the client: no reasoning_text or summary events, and
	// output_item.done carries the item without content and with an empty summary
	// (wire.AppendHiddenReasoning; Seal should be set so the client can still continue).
	// Result.Output keeps the plaintext. Sequence numbers and indices stay dense.
	Hide bool
}

// Snapshot is the state a Render function renders into a response object.
type Snapshot struct {
	ResponseID string
	Model      string
	CreatedAt  int64
	Status     wire.Status
	Output     []wire.Item // never nil
	// Usage is the OpenAI-shaped usage object, nil for null.
	Usage json.RawMessage
	// Error is set only when Status is "failed".
	Error *wire.ErrorObject
	// IncompleteDetails is {"reason":…} when Status is "incomplete", else nil for null.
	IncompleteDetails json.RawMessage
}

// Result is what a stream (or a non-streamed response) amounts to: what the server stores.
type Result struct {
	Status wire.Status `json:"status"`
	Output []wire.Item `json:"output"`
	// Usage is OpenAI-shaped, nil if upstream sent none.
	Usage             json.RawMessage   `json:"usage"`
	Error             *wire.ErrorObject `json:"error"`
	IncompleteDetails json.RawMessage   `json:"incomplete_details"`
	// Dropped counts upstream events dropped: unknown and vendor events, duplicates, and events
	// for items or parts that were already closed.
	Dropped int `json:"dropped"`
}

// Accumulator turns one upstream stream into the client stream and the final Result. Use one per
// response. Not safe for concurrent use. The zero value is ready (with default Options).
//
// The client stream it writes: response.created (sequence_number 0) and response.in_progress from
// Start, then the added and done events of Options.Prepend's items; from Feed, every item announced (output_item.added, content_part.added — synthesised
// where vLLM skipped them) before its deltas, with dense 0-based output_index and per-item
// content_index; from Close, the done events of whatever upstream left open; from Terminal,
// exactly one terminal event. sequence_number runs 0..n without gaps across all four.
type Accumulator struct {
	opts Options

	inited, started, done, closed, terminated bool

	seq     int64
	items   []*item
	byOI    map[int64]*item
	byID    map[string]*item
	maxOI   int64
	last    *item
	dropped int
	parts   int // content and summary parts, all items
	total   int // bytes held, all items (Options.MaxTotalBytes)

	err     error             // sticky: the first Feed error
	failure *wire.ErrorObject // the upstream's own error (error event)
	term    *terminal         // the upstream terminal event
	res     *Result

	env env
	buf []byte // event JSON under construction
	tmp []byte // unescaped text
}

// New returns an Accumulator for one response.
func New(opts Options) *Accumulator {
	a := &Accumulator{opts: opts}
	a.init()
	return a
}

func (a *Accumulator) init() {
	if a.inited {
		return
	}
	a.inited = true
	if a.opts.NewID == nil {
		a.opts.NewID = wire.NewID
	}
	if a.opts.Render == nil {
		a.opts.Render = renderDefault
	}
	if a.opts.MaxItems <= 0 {
		a.opts.MaxItems = DefaultMaxItems
	}
	if a.opts.MaxItemBytes <= 0 {
		a.opts.MaxItemBytes = DefaultMaxItemBytes
	}
	if a.opts.MaxTotalBytes <= 0 {
		a.opts.MaxTotalBytes = math.MaxInt
		if a.opts.MaxItemBytes <= math.MaxInt/4 {
			a.opts.MaxTotalBytes = 4 * a.opts.MaxItemBytes
		}
	}
	if a.opts.ResponseID == "" {
		a.opts.ResponseID = a.opts.NewID(wire.PrefixResponse)
	}
	a.byOI = map[int64]*item{}
	a.byID = map[string]*item{}
	a.maxOI = -1
}

// Start appends response.created and response.in_progress (status in_progress, empty output).
// Feed, Close and Terminal call it if the caller did not.
func (a *Accumulator) Start(dst []byte) []byte {
	a.init()
	if a.started {
		return dst
	}
	a.started = true
	s := a.snapshot(wire.StatusInProgress, []wire.Item{})
	dst = a.emitResponse(dst, wire.EventCreated, &s)
	dst = a.emitResponse(dst, wire.EventInProgress, &s)
	for i, it := range a.opts.Prepend {
		dst = a.emitWhole(dst, wire.EventItemAdded, i, it.JSON)
		dst = a.emitWhole(dst, wire.EventItemDone, i, it.JSON)
	}
	return dst
}

// output is the Result.Output of items: the prepended items, then the model's.
func (a *Accumulator) output(items []*item) []wire.Item {
	out := make([]wire.Item, 0, len(a.opts.Prepend)+len(items))
	out = append(out, a.opts.Prepend...)
	for _, it := range items {
		out = append(out, wire.Item{ID: it.id, Type: it.typ, JSON: it.final})
	}
	return out
}

func (a *Accumulator) snapshot(status wire.Status, out []wire.Item) Snapshot {
	if out == nil {
		out = []wire.Item{}
	}
	return Snapshot{ResponseID: a.opts.ResponseID, Model: a.opts.Model, CreatedAt: a.opts.CreatedAt,
		Status: status, Output: out}
}

// Done reports whether the upstream terminal event has been fed.
func (a *Accumulator) Done() bool { return a.done }

// Feed consumes one upstream event and appends the normalised client SSE frames it produces to
// dst. ev.Data may be reused by the caller once Feed returns. Feed never appends a terminal event.
// After an upstream terminal event Done is true and further events are ignored.
//
// A returned error means the upstream stream is unusable (malformed event, impossible index,
// over a limit, an upstream error event); it is sticky. The frames returned with it are
// consistent and must be written too; the caller then calls Close(dst, err).
func (a *Accumulator) Feed(dst []byte, ev wire.Event) ([]byte, error) {
	a.init()
	dst = a.Start(dst)
	if a.closed || a.done {
		return dst, nil
	}
	if a.err != nil {
		return dst, a.err
	}
	typ := ev.Type
	if typ == "" || typ == "message" {
		// The SSE event field is optional; the JSON "type" is what SDKs dispatch on.
		t, ok := jsonType(ev.Data)
		if !ok {
			return dst, a.setErr(fmt.Errorf("accumulator: event without a type: %w", ErrMalformed))
		}
		typ = t
	}
	dst, err := a.feed(dst, typ, ev.Data)
	if err != nil {
		return dst, a.setErr(err)
	}
	return dst, nil
}

func (a *Accumulator) setErr(err error) error {
	if a.err == nil {
		a.err = err
	}
	return err
}

func jsonType(d []byte) (wire.EventType, bool) {
	o := newObjIter(d, 0)
	for k, v, more := o.next(); more; k, v, more = o.next() {
		if string(k) == "type" {
			s, ok := strValue(v)
			return wire.EventType(s), ok
		}
	}
	return "", false
}

func (a *Accumulator) feed(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	if on, ok := handlers[typ]; ok {
		return on(a, dst, typ, d)
	}
	switch typ {
	case wire.EventCreated, wire.EventInProgress, wire.EventQueued:
		// Ours went out in Start; vLLM's response object is never forwarded (docs/wire.md §6.2).
		return dst, nil
	}
	// Unknown and vendor events: the TS helper throws on them (docs/wire.md §5.4), so drop them.
	a.dropped++
	return dst, nil
}

// handler handles one upstream event type.
type handler func(a *Accumulator, dst []byte, typ wire.EventType, d []byte) ([]byte, error)

// handlers routes every event type the accumulator understands to its handler; vLLM's
// reasoning_part.* are content_part.* by another name.
var handlers = map[wire.EventType]handler{
	wire.EventTextDelta:              textEvent((*Accumulator).onDelta, pOutputText),
	wire.EventReasoningDelta:         textEvent((*Accumulator).onDelta, pReasoningText),
	wire.EventSummaryDelta:           textEvent((*Accumulator).onDelta, pSummaryText),
	wire.EventRefusalDelta:           textEvent((*Accumulator).onDelta, pRefusal),
	wire.EventTextDone:               textEvent((*Accumulator).onTextDone, pOutputText),
	wire.EventReasoningDone:          textEvent((*Accumulator).onTextDone, pReasoningText),
	wire.EventSummaryTextDone:        textEvent((*Accumulator).onTextDone, pSummaryText),
	wire.EventRefusalDone:            textEvent((*Accumulator).onTextDone, pRefusal),
	wire.EventArgsDelta:              argsEvent(false),
	wire.EventArgsDone:               argsEvent(true),
	wire.EventPartAdded:              partEvent(false, partOpening),
	wire.EventVLLMReasoningPartAdded: partEvent(false, partOpening),
	wire.EventPartDone:               partEvent(false, partClosing),
	wire.EventVLLMReasoningPartDone:  partEvent(false, partClosing),
	wire.EventSummaryAdded:           partEvent(true, partOpening),
	wire.EventSummaryDone:            partEvent(true, partClosing),
	wire.EventItemAdded:              (*Accumulator).onItemAdded,
	wire.EventItemDone:               (*Accumulator).onItemDone,
	wire.EventAnnotation:             (*Accumulator).onAnnotation,
	wire.EventCompleted:              (*Accumulator).onTerminal,
	wire.EventIncomplete:             (*Accumulator).onTerminal,
	wire.EventFailed:                 (*Accumulator).onTerminal,
	wire.EventError:                  (*Accumulator).onError,
}

func textEvent(on func(*Accumulator, []byte, wire.EventType, []byte, pkind) ([]byte, error), pk pkind) handler {
	return func(a *Accumulator, dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
		return on(a, dst, typ, d, pk)
	}
}

func argsEvent(done bool) handler {
	return func(a *Accumulator, dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
		return a.onArgs(dst, typ, d, done)
	}
}

func partEvent(sum bool, edge partEdge) handler {
	return func(a *Accumulator, dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
		return a.onPart(dst, typ, d, sum, edge)
	}
}

// Safe messages for failures respgate detects itself.
const (
	msgEnded         = "The upstream model server ended the stream before the response completed."
	msgBroken        = "The upstream model server stream failed before the response completed."
	msgInvalid       = "The upstream model server sent an invalid event."
	msgLimit         = "The upstream model server's output exceeded a size limit."
	msgUpstreamError = "The upstream model server reported an error."
	msgCancelled     = "The upstream model server cancelled the response."
	msgUnfinished    = "The upstream model server returned an unfinished response."
	msgFailed        = "The upstream model server failed the response."
)

func (a *Accumulator) failureFor(err error) *wire.ErrorObject {
	switch {
	case errors.Is(err, ErrUpstream) && a.failure != nil:
		return a.failure
	case errors.Is(err, ErrLimit):
		return &wire.ErrorObject{Code: wire.ErrServer, Message: msgLimit}
	}
	return &wire.ErrorObject{Code: wire.ErrServer, Message: msgInvalid}
}

// Close ends the stream: it appends the synthesised done events for every open part and item and
// returns the final Result. Pass cause == nil after an upstream terminal event. If the upstream
// ended without one (cause == nil && !Done()), or cause != nil, or Feed failed, the Result is
// status "failed" with Error{Code:"server_error", Message: a safe message}, and the partial items
// are kept; an item cut short gets status "incomplete". Calling Close again returns the same Result
// and appends nothing.
func (a *Accumulator) Close(dst []byte, cause error) ([]byte, *Result) {
	a.init()
	if a.res != nil {
		return dst, a.res
	}
	dst = a.Start(dst)
	r := &Result{}
	t := a.term
	switch {
	case a.err != nil:
		r.Status, r.Error = wire.StatusFailed, a.failureFor(a.err)
	case cause != nil:
		r.Status, r.Error = wire.StatusFailed, &wire.ErrorObject{Code: wire.ErrServer, Message: msgBroken}
	case !a.done || t == nil:
		r.Status, r.Error = wire.StatusFailed, &wire.ErrorObject{Code: wire.ErrServer, Message: msgEnded}
	default:
		r.Status, r.Error, r.IncompleteDetails = t.status, t.err, t.incomplete
	}
	if t != nil {
		r.Usage = t.usage
	}
	adopt := t != nil && r.Status != wire.StatusFailed
	openStatus := wire.StatusIncomplete // an item cut short
	if r.Status == wire.StatusCompleted {
		openStatus = wire.StatusCompleted // upstream declared it complete
	}
	for i, it := range a.items {
		var ti *parsedItem
		if adopt && i < len(t.output) {
			ti = t.output[i]
		}
		if ti != nil && (ti.kind != it.kind || it.kind == kOther && ti.typ != it.typ) {
			ti = nil
		}
		if it.closed {
			if ti != nil {
				a.reconcileClosed(it, ti)
			}
			continue
		}
		if ti != nil && !consistent(it, ti) {
			ti = nil
		}
		dst = a.closeItem(dst, it, ti, openStatus)
	}
	if adopt {
		// Items only the terminal response has (an upstream that streamed nothing for them).
		for j := len(a.items); j < len(t.output); j++ {
			ti := t.output[j]
			if ti == nil {
				continue
			}
			it, err := a.create(wire.EventCompleted, ti.kind, ti.typ, 0, false, nil)
			if err != nil {
				break
			}
			a.adopt(it, ti)
			dst = a.emitItemAdded(dst, it)
			dst = a.closeItem(dst, it, ti, itemStatus(ti, j == len(t.output)-1, r.Status))
		}
	}
	r.Output = a.output(a.items)
	r.Dropped = a.dropped
	a.res, a.closed = r, true
	return dst, r
}

// reconcileClosed applies the terminal response to an item already closed by its done event: the
// terminal's encrypted_content wins when it is non-empty and everything else is equal (docs/design.md §4).
func (a *Accumulator) reconcileClosed(it *item, ti *parsedItem) {
	if it.kind != kReasoning || !ti.hasEnc || ti.enc == "" || ti.enc == it.enc {
		return
	}
	if !equalParts(it.parts, ti.content) || !equalParts(it.sums, ti.sum) {
		return
	}
	if a.opts.Reasoning.Seal != nil {
		return // respgate's own blob stands
	}
	it.enc = ti.enc
	a.finish(it)
}

// finish renders the item's final JSON (what is stored), minting its encrypted_content first when
// the options say so.
func (a *Accumulator) finish(it *item) {
	if it.kind == kReasoning && a.opts.Reasoning.Seal != nil {
		it.enc = a.opts.Reasoning.Seal(it.id, appendParts(nil, it.parts))
	}
	it.final = appendItem(nil, it, true)
}

// hides reports whether the client sees none of it's text (a reasoning item, hidden).
func (a *Accumulator) hides(it *item) bool { return a.opts.Reasoning.Hide && it.kind == kReasoning }

// consistent reports whether a terminal item can be the item we were streaming: everything we
// streamed is a prefix of what it states.
func consistent(it *item, ti *parsedItem) bool {
	switch it.kind {
	case kMessage:
		return !ti.hasContent || prefixParts(it.parts, ti.content)
	case kReasoning:
		return (!ti.hasContent || prefixParts(it.parts, ti.content)) && (!ti.hasSummary || prefixParts(it.sums, ti.sum))
	case kFunctionCall:
		return !ti.hasArgs || bytes.HasPrefix(ti.args, it.args)
	}
	return true
}

// itemStatus is the status of an item known only from a whole response (terminal extras and
// FromResponse): completed, except that the last item of an incomplete response is the one that
// was cut (vLLM marks every item completed, docs/wire.md §6.2).
func itemStatus(ti *parsedItem, last bool, respStatus wire.Status) wire.Status {
	if ti.status == wire.StatusIncomplete || last && respStatus == wire.StatusIncomplete {
		return wire.StatusIncomplete
	}
	return wire.StatusCompleted
}

// Terminal appends the one terminal event for r: response.completed, response.incomplete or
// response.failed chosen by r.Status (anything but completed and incomplete is failed), carrying
// the full output. The caller may change r.Status and r.Error first (e.g. to "failed" when storing
// failed). r == nil means Close's Result; Close is called first if it was not. A second call
// appends nothing. It does not append [DONE]; the caller does.
func (a *Accumulator) Terminal(dst []byte, r *Result) []byte {
	a.init()
	if a.terminated {
		return dst
	}
	if !a.closed {
		var res *Result
		dst, res = a.Close(dst, nil)
		if r == nil {
			r = res
		}
	}
	if r == nil {
		r = a.res
	}
	a.terminated = true
	s := a.snapshot(r.Status, r.Output)
	s.Usage = r.Usage
	typ := wire.EventCompleted
	switch r.Status {
	case wire.StatusCompleted:
	case wire.StatusIncomplete:
		typ = wire.EventIncomplete
		s.IncompleteDetails = r.IncompleteDetails
		if s.IncompleteDetails == nil {
			s.IncompleteDetails = defaultIncomplete
		}
	default:
		typ, s.Status = wire.EventFailed, wire.StatusFailed
		s.Error = r.Error
		if s.Error == nil {
			s.Error = &wire.ErrorObject{Code: wire.ErrServer, Message: msgFailed}
		}
	}
	return a.emitResponse(dst, typ, &s)
}

// AtBoundary reports whether the stream stands between output items: every item announced so far
// is closed (or none was) and no terminal event has come. Cutting the stream here leaves nothing
// half-said: no text cut mid-sentence, no function call without its arguments (steering,
// engine.Steer).
func (a *Accumulator) AtBoundary() bool {
	if a.done || a.closed {
		return false
	}
	for _, it := range a.items {
		if !it.closed {
			return false
		}
	}
	return true
}
