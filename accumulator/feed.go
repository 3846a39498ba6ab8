package accumulator

import (
	"bytes"
	"fmt"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// Feed's event handlers. Each parses the event's envelope with the scanner (no full decode), checks
// indices and limits before it changes anything, then synthesises whatever upstream skipped and
// emits the normalised events.

func fail[T ~string](typ T, sentinel error, format string, args ...any) error {
	return fmt.Errorf("accumulator: %s: %s: %w", typ, fmt.Sprintf(format, args...), sentinel)
}

// env holds the members of the current event that the handlers read, as raw spans into its data.
type env struct {
	oi, ci, si          int64
	hasOI, hasCI, hasSI bool
	itemID              []byte // raw contents of item_id
	delta, text         []byte
	refusal, args, name []byte
	item, part          []byte
	response, ann       []byte
	errObj, code, msg   []byte
}

func (a *Accumulator) parseEnv(typ wire.EventType, d []byte) error {
	e := &a.env
	*e = env{}
	o := newObjIter(d, 0)
	var err error
	for k, v, more := o.next(); more; k, v, more = o.next() {
		switch string(k) {
		case "output_index":
			e.oi, e.hasOI, err = index(typ, "output_index", v)
		case "content_index":
			e.ci, e.hasCI, err = index(typ, "content_index", v)
		case "summary_index":
			e.si, e.hasSI, err = index(typ, "summary_index", v)
		case "item_id":
			e.itemID, _ = jsonscan.StrContents(v)
		case "delta":
			e.delta = v
		case "text":
			e.text = v
		case "refusal":
			e.refusal = v
		case "arguments":
			e.args = v
		case "name":
			e.name = v
		case "item":
			e.item = v
		case "part":
			e.part = v
		case "response":
			e.response = v
		case "annotation":
			e.ann = v
		case "error":
			e.errObj = v
		case "code":
			e.code = v
		case "message":
			e.msg = v
		}
		if err != nil {
			return err
		}
	}
	if o.finish() != nil {
		return fail(typ, ErrMalformed, "invalid JSON")
	}
	return nil
}

func index(typ wire.EventType, field string, v []byte) (int64, bool, error) {
	if jsonscan.IsNull(v) {
		return 0, false, nil
	}
	n, ok, huge := jsonscan.Int(v)
	switch {
	case !ok:
		return 0, false, fail(typ, ErrMalformed, "%s is not an integer", field)
	case n < 0:
		return 0, false, fail(typ, ErrIndex, "%s %d is negative", field, n)
	case huge || n > maxIndex:
		return 0, false, fail(typ, ErrIndex, "%s is huge", field)
	}
	return n, true, nil
}

// locate finds the item an event addresses by upstream output_index (vLLM's ids are not stable:
// harmony reuses a stale id for a done-only item, docs/wire.md §6.5 quirks 3 and 8), falling back to
// the upstream id when the event has no index. nil, nil means a new item.
func (a *Accumulator) locate(typ wire.EventType, up int64, hasUp bool, upID []byte) (*item, error) {
	if hasUp {
		if it := a.last; it != nil && it.up == up {
			return it, nil
		}
		if it, ok := a.byOI[up]; ok {
			a.last = it
			return it, nil
		}
		if up <= a.maxOI {
			return nil, fail(typ, ErrIndex, "new output_index %d after %d: items out of order", up, a.maxOI)
		}
		return nil, nil
	}
	if len(upID) > 0 {
		return a.byID[string(upID)], nil
	}
	return nil, fail(typ, ErrMalformed, "event names no output item")
}

// create mints ids for a new item (at its first sight, docs/wire.md §8.1) and appends it.
func (a *Accumulator) create(typ wire.EventType, k kind, itemType string, up int64, hasUp bool, upID []byte) (*item, error) {
	if len(a.items) >= a.opts.MaxItems {
		return nil, fail(typ, ErrLimit, "more than %d output items", a.opts.MaxItems)
	}
	it := &item{kind: k, typ: itemType, index: len(a.opts.Prepend) + len(a.items), up: -1, maxPart: -1, maxSum: -1}
	it.id = a.opts.NewID(wire.PrefixForType(itemType))
	it.qid = quote(it.id)
	if k == kFunctionCall {
		// vLLM's streamed call_id differs from its final one (docs/wire.md §6.5 quirk 3): the item owns
		// one minted call_id, whatever upstream says.
		it.call = a.opts.NewID(wire.PrefixCallID)
		it.names = a.opts.ToolNames
	}
	if hasUp {
		it.up = up
		a.byOI[up] = it
		a.maxOI = up
	}
	if len(upID) > 0 {
		if _, dup := a.byID[string(upID)]; !dup {
			a.byID[string(upID)] = it
		}
	}
	a.items = append(a.items, it)
	a.last = it
	return it, nil
}

func typeName(k kind) string {
	switch k {
	case kMessage:
		return wire.TypeMessage
	case kReasoning:
		return wire.TypeReasoning
	case kFunctionCall:
		return wire.TypeFunctionCall
	}
	return ""
}

// locatePart finds a part by upstream index within an item, mapping indices by first-seen order
// (harmony never resets content_index between items, docs/wire.md §6.5 quirk 2). nil means new.
func (a *Accumulator) locatePart(typ wire.EventType, it *item, sum bool, idx int64, has bool) (*part, int, error) {
	ps := *it.list(sum)
	if !has {
		if len(ps) > 0 {
			return ps[len(ps)-1], len(ps) - 1, nil
		}
		return nil, 0, nil
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].up == idx {
			return ps[i], i, nil
		}
	}
	max, field := it.maxPart, "content_index"
	if sum {
		max, field = it.maxSum, "summary_index"
	}
	if idx <= max {
		return nil, 0, fail(typ, ErrIndex, "new %s %d after %d: parts out of order", field, idx, max)
	}
	if a.parts >= a.opts.MaxItems {
		return nil, 0, fail(typ, ErrLimit, "more than %d content parts", a.opts.MaxItems)
	}
	return nil, len(ps), nil
}

func (a *Accumulator) addPart(it *item, sum bool, pk pkind, idx int64, has bool) (*part, int) {
	l := it.list(sum)
	p := &part{kind: pk, up: -1}
	a.parts++
	if has {
		p.up = idx
		if sum {
			it.maxSum = idx
		} else {
			it.maxPart = idx
		}
	}
	*l = append(*l, p)
	return p, len(*l) - 1
}

func (a *Accumulator) checkSize(typ wire.EventType, it *item, n int) error {
	cur := 0
	if it != nil {
		cur = it.size
	}
	if cur+n > a.opts.MaxItemBytes {
		return fail(typ, ErrLimit, "output item over %d bytes", a.opts.MaxItemBytes)
	}
	if a.total+n > a.opts.MaxTotalBytes {
		return fail(typ, ErrLimit, "output over %d bytes", a.opts.MaxTotalBytes)
	}
	return nil
}

// grow accounts n more (or, negative, fewer) bytes held for it.
func (a *Accumulator) grow(it *item, n int) {
	it.size += n
	a.total += n
}

// ensure creates (and announces) the item and part an event addresses when upstream skipped their
// added events (docs/wire.md §6.5 quirk 8).
func (a *Accumulator) ensure(dst []byte, typ wire.EventType, it *item, p *part, pos int, k kind, sum bool, pk pkind) ([]byte, *item, *part, int, error) {
	e := &a.env
	if it == nil {
		var err error
		if it, err = a.create(typ, k, typeName(k), e.oi, e.hasOI, e.itemID); err != nil {
			return dst, nil, nil, 0, err
		}
		dst = a.emitItemAdded(dst, it)
	}
	if p == nil {
		idx, has := e.ci, e.hasCI
		if sum {
			idx, has = e.si, e.hasSI
		}
		p, pos = a.addPart(it, sum, pk, idx, has)
		dst = a.emitPart(dst, it, p, pos, sum, partOpening)
	}
	return dst, it, p, pos, nil
}

// find resolves the item and part of a part-level event and checks that they fit pk.
// skip means the event is late (its item or part is already closed) and is dropped.
func (a *Accumulator) find(typ wire.EventType, pk pkind, sum bool) (it *item, p *part, pos int, skip bool, err error) {
	e := &a.env
	if it, err = a.locate(typ, e.oi, e.hasOI, e.itemID); err != nil || it == nil {
		return it, nil, 0, false, err
	}
	if it.closed {
		return it, nil, 0, true, nil
	}
	if (sum && it.kind != kReasoning) || (!sum && pk != pOther && it.kind != itemKindFor(pk)) || it.kind == kFunctionCall || it.kind == kOther {
		return nil, nil, 0, false, fail(typ, ErrMalformed, "event for a %s item", typeName(it.kind))
	}
	idx, has := e.ci, e.hasCI
	if sum {
		idx, has = e.si, e.hasSI
	}
	if p, pos, err = a.locatePart(typ, it, sum, idx, has); err != nil {
		return nil, nil, 0, false, err
	}
	if p != nil && pk != pOther && p.kind != pk {
		return nil, nil, 0, false, fail(typ, ErrMalformed, "event for a different part type")
	}
	return it, p, pos, false, nil
}

// unescaped returns the decoded contents of a string token, in a.tmp when it had escapes.
func (a *Accumulator) unescaped(c []byte) []byte {
	if bytes.IndexByte(c, '\\') < 0 {
		return c
	}
	a.tmp = jsonscan.AppendUnescaped(a.tmp[:0], c)
	return a.tmp
}

// onDelta handles output_text/refusal/reasoning_text/reasoning_summary_text deltas: the hot path.
// Reasoning text goes to the item's content parts, summary text to its summary parts, never mixed.
func (a *Accumulator) onDelta(dst []byte, typ wire.EventType, d []byte, pk pkind) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	tok := a.env.delta
	c, ok := jsonscan.StrContents(tok)
	if !ok {
		return dst, fail(typ, ErrMalformed, "delta is not a string")
	}
	sum := pk == pSummaryText
	it, p, pos, live, err := a.findText(typ, pk)
	if err != nil || !live {
		return dst, err
	}
	text := a.unescaped(c)
	if err := a.checkSize(typ, it, len(text)); err != nil {
		return dst, err
	}
	if dst, it, p, pos, err = a.ensure(dst, typ, it, p, pos, itemKindFor(pk), sum, pk); err != nil {
		return dst, err
	}
	p.text = append(p.text, text...) // byte-joined: a rune split across deltas joins back
	a.grow(it, len(text))
	// The delta token is forwarded as upstream wrote it (already validated, one line).
	return a.emitDelta(dst, it, pk, pos, tok), nil
}

// findText finds the text part an event names. live is false when the event comes after the part's
// done (the done text is authoritative) or names a part that is skipped: the event is dropped.
func (a *Accumulator) findText(typ wire.EventType, pk pkind) (it *item, p *part, pos int, live bool, err error) {
	it, p, pos, skip, err := a.find(typ, pk, pk == pSummaryText)
	if err != nil {
		return nil, nil, 0, false, err
	}
	if skip || p != nil && (p.textDone || p.closed) {
		a.dropped++
		return nil, nil, 0, false, nil
	}
	return it, p, pos, true, nil
}

// onTextDone handles output_text/refusal/reasoning_text/reasoning_summary_text done events: their
// text replaces the part's accumulated deltas.
func (a *Accumulator) onTextDone(dst []byte, typ wire.EventType, d []byte, pk pkind) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	tok := a.env.text
	if pk == pRefusal {
		tok = a.env.refusal
	}
	c, ok := jsonscan.StrContents(tok)
	if !ok && tok != nil {
		return dst, fail(typ, ErrMalformed, "text is not a string")
	}
	sum := pk == pSummaryText
	it, p, pos, live, err := a.findText(typ, pk)
	if err != nil || !live {
		return dst, err
	}
	var text []byte
	if ok {
		text = a.unescaped(c)
		old := 0
		if p != nil {
			old = len(p.text)
		}
		if err := a.checkSize(typ, it, len(text)-old); err != nil {
			return dst, err
		}
	}
	if dst, it, p, pos, err = a.ensure(dst, typ, it, p, pos, itemKindFor(pk), sum, pk); err != nil {
		return dst, err
	}
	if ok {
		a.grow(it, len(text)-len(p.text))
		p.text = append(p.text[:0], text...)
	}
	p.textDone = true
	return a.emitTextDone(dst, it, pk, pos, p.text), nil
}

// onPart handles content_part.* (and vLLM's reasoning_part.*, rewritten to content_part.*) and
// reasoning_summary_part.*. Only part types the SDK unions know reach the client: a part event
// without a valid part of such a type is dropped (a done one still closes the part it names).
func (a *Accumulator) onPart(dst []byte, typ wire.EventType, d []byte, sum bool, edge partEdge) ([]byte, error) {
	done := edge == partClosing
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	var pp *part
	if raw := a.env.part; raw != nil && raw[0] == '{' {
		if pp, _ = parsePart(raw, partAllowed(sum, typ)); pp != nil && pp.kind == pOther {
			pp = nil
		}
	}
	pk := pOther // find: any part type
	if pp != nil {
		pk = pp.kind
	}
	it, p, pos, skip, err := a.find(typ, pk, sum)
	if err != nil {
		return dst, err
	}
	if skip || p == nil && pp == nil || p != nil && (!done || p.closed) {
		a.dropped++ // late, duplicate, or nothing usable
		return dst, nil
	}
	if pp != nil {
		old := 0
		if p != nil && p.kind == pp.kind {
			old = p.size()
		}
		if err := a.checkSize(typ, it, pp.size()-old); err != nil {
			return dst, err
		}
	}
	k := itemKindFor(pk)
	if sum || typ == wire.EventVLLMReasoningPartAdded || typ == wire.EventVLLMReasoningPartDone {
		k = kReasoning
	}
	if dst, it, p, pos, err = a.ensure(dst, typ, it, p, pos, k, sum, pk); err != nil {
		return dst, err
	}
	if !done {
		return dst, nil
	}
	if pp != nil && pp.kind == p.kind { // the done part's text and annotations win over deltas
		a.grow(it, pp.size()-p.size())
		p.text = pp.text
		if pp.nAnn > 0 || p.kind != pOutputText {
			p.ann, p.nAnn = pp.ann, pp.nAnn
		}
	}
	if !p.textDone {
		dst = a.emitTextDone(dst, it, p.kind, pos, p.text)
		p.textDone = true
	}
	p.closed = true
	return a.emitPart(dst, it, p, pos, sum, partClosing), nil
}

// partAllowed is the part-type filter for a part event: the kinds it may carry are rebuilt,
// anything else is kept as raw JSON.
func partAllowed(sum bool, typ wire.EventType) func(pkind) bool {
	switch {
	case sum:
		return summaryPart
	case typ == wire.EventVLLMReasoningPartAdded || typ == wire.EventVLLMReasoningPartDone:
		return reasoningPart
	}
	return notSummaryPart
}

func notSummaryPart(k pkind) bool { return k != pSummaryText }

// onArgs handles function_call_arguments.delta and .done.
func (a *Accumulator) onArgs(dst []byte, typ wire.EventType, d []byte, done bool) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	e := &a.env
	tok := e.delta
	if done {
		tok = e.args
	}
	c, ok := jsonscan.StrContents(tok)
	if !ok {
		return dst, fail(typ, ErrMalformed, "arguments are not a string")
	}
	var name string
	if done && e.name != nil && !jsonscan.IsNull(e.name) {
		if name, ok = strValue(e.name); !ok {
			return dst, fail(typ, ErrMalformed, "name is not a string")
		}
	}
	it, err := a.locate(typ, e.oi, e.hasOI, e.itemID)
	if err != nil {
		return dst, err
	}
	if it != nil && it.kind != kFunctionCall {
		return dst, fail(typ, ErrMalformed, "event for a %s item", typeName(it.kind))
	}
	if it != nil && (it.closed || it.argsDone) {
		a.dropped++
		return dst, nil
	}
	text := a.unescaped(c)
	old := 0
	if it != nil && done {
		old = len(it.args)
	}
	if err := a.checkSize(typ, it, len(text)-old); err != nil {
		return dst, err
	}
	if it == nil {
		if it, err = a.create(typ, kFunctionCall, wire.TypeFunctionCall, e.oi, e.hasOI, e.itemID); err != nil {
			return dst, err
		}
		it.name = name
		dst = a.emitItemAdded(dst, it)
	}
	if !done {
		it.args = append(it.args, text...)
		a.grow(it, len(text))
		return a.emitArgsDelta(dst, it, tok), nil
	}
	a.grow(it, len(text)-len(it.args))
	it.args = append(it.args[:0], text...)
	if name != "" {
		it.name = name
	}
	it.argsDone = true
	return a.emitArgsDone(dst, it), nil
}

// onAnnotation handles output_text.annotation.added, renumbering its indices.
func (a *Accumulator) onAnnotation(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	ann := a.env.ann
	if ann == nil || ann[0] != '{' {
		return dst, fail(typ, ErrMalformed, "annotation is not an object")
	}
	it, p, pos, skip, err := a.find(typ, pOutputText, false)
	if err != nil {
		return dst, err
	}
	if skip || p != nil && p.closed {
		a.dropped++
		return dst, nil
	}
	if err := a.checkSize(typ, it, len(ann)+1); err != nil {
		return dst, err
	}
	if dst, it, p, pos, err = a.ensure(dst, typ, it, p, pos, kMessage, false, pOutputText); err != nil {
		return dst, err
	}
	n := len(p.ann)
	if p.nAnn > 0 {
		p.ann = append(p.ann, ',')
	}
	p.ann = jsonscan.AppendCompact(p.ann, ann)
	a.grow(it, len(p.ann)-n)
	p.nAnn++
	return a.emitAnnotation(dst, it, pos, p.nAnn-1, ann), nil
}

// itemEvent parses the envelope of an output_item.added/done event and its item (ok false: the
// item is absent or malformed), refusing an item over MaxItemBytes.
func (a *Accumulator) itemEvent(typ wire.EventType, d []byte) (parsedItem, bool, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return parsedItem{}, false, err
	}
	if len(a.env.item) > a.opts.MaxItemBytes {
		return parsedItem{}, false, fail(typ, ErrLimit, "output item over %d bytes", a.opts.MaxItemBytes)
	}
	pi, ok := parseItem(a.env.item)
	return pi, ok, nil
}

// onItemAdded announces an item. An added for an item already known (created by an earlier
// delta) is a duplicate and dropped.
func (a *Accumulator) onItemAdded(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	pi, ok, err := a.itemEvent(typ, d)
	if err != nil {
		return dst, err
	}
	e := &a.env
	if !ok { // Open Responses allows item:null here; later events create the item
		a.dropped++
		return dst, nil
	}
	upID := e.itemID
	if len(upID) == 0 {
		upID = []byte(pi.id)
	}
	it, err := a.locate(typ, e.oi, e.hasOI, upID)
	if err != nil {
		return dst, err
	}
	if it != nil {
		a.dropped++
		return dst, nil
	}
	if it, err = a.create(typ, pi.kind, pi.typ, e.oi, e.hasOI, upID); err != nil {
		return dst, err
	}
	a.adopt(it, &pi)
	return a.emitItemAdded(dst, it), nil
}

// adopt takes an announcing item's descriptive fields (role, name, or the whole JSON of a type
// respgate does not rebuild).
func (a *Accumulator) adopt(it *item, pi *parsedItem) {
	switch it.kind {
	case kMessage:
		it.role = pi.role
	case kFunctionCall:
		it.name = pi.name
	case kOther:
		it.raw = pi.raw
		a.grow(it, len(pi.raw)-it.size)
	}
}

// onItemDone closes an item. A successfully parsed done item is authoritative for the fields it
// states; a malformed one keeps the delta-derived state (docs/design.md §4).
func (a *Accumulator) onItemDone(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	pi, ok, err := a.itemEvent(typ, d)
	if err != nil {
		return dst, err
	}
	e := &a.env
	upID := e.itemID
	if len(upID) == 0 && ok {
		upID = []byte(pi.id)
	}
	it, err := a.locate(typ, e.oi, e.hasOI, upID)
	if err != nil {
		return dst, err
	}
	if it != nil && it.closed || it == nil && !ok {
		a.dropped++ // a duplicate done, or a malformed one for an item never seen
		return dst, nil
	}
	if ok && (pi.kind != it.kindOr(pi.kind) || pi.kind == kOther && it != nil && pi.typ != it.typ) {
		ok = false // a done of another type than the item streamed: not this item's truth
	}
	if ok {
		if err := a.checkSize(typ, nil, pi.size()); err != nil {
			return dst, err
		}
		a.total += pi.size()
	}
	if it == nil { // a completed item with no output_item.added is still kept
		if it, err = a.create(typ, pi.kind, pi.typ, e.oi, e.hasOI, upID); err != nil {
			return dst, err
		}
		a.adopt(it, &pi)
		dst = a.emitItemAdded(dst, it)
	}
	var src *parsedItem
	status := wire.StatusCompleted // normalises vLLM's status:null (docs/wire.md §6.2)
	if ok {
		src = &pi
		if pi.status == wire.StatusIncomplete {
			status = wire.StatusIncomplete
		}
	}
	return a.closeItem(dst, it, src, status), nil
}

func (it *item) kindOr(k kind) kind {
	if it == nil {
		return k
	}
	return it.kind
}

// merge applies an authoritative item to it: every field src states (even as null or []) wins;
// omitted fields keep the accumulated state. It returns the final part lists and whether each
// was stated.
func (a *Accumulator) merge(it *item, src *parsedItem) (parts, sums []*part, overP, overS bool) {
	parts, sums = it.parts, it.sums
	if src == nil {
		return
	}
	switch it.kind {
	case kMessage:
		if src.hasRole && src.role != "" {
			it.role = src.role
		}
		if src.hasContent {
			parts, overP = src.content, true
		}
	case kReasoning:
		if src.hasSummary {
			sums, overS = src.sum, true
		}
		if src.hasContent {
			parts, overP = src.content, true
			it.contentNull, it.contentSet = src.contentNull, !src.contentNull
		}
		if src.hasEnc {
			it.enc = src.enc
		}
	case kFunctionCall:
		if src.hasArgs {
			it.args = src.args
		}
		if src.hasName {
			it.name = src.name
		}
	case kOther:
		it.raw = src.raw
	}
	return
}

// closeItem merges src (nil: keep the accumulated state), closes every open part with the
// synthesised done events upstream skipped, and emits output_item.done.
func (a *Accumulator) closeItem(dst []byte, it *item, src *parsedItem, status wire.Status) []byte {
	streamedArgs := len(it.args) > 0
	parts, sums, overP, overS := a.merge(it, src)
	dst = a.closeParts(dst, it, false, parts, overP)
	dst = a.closeParts(dst, it, true, sums, overS)
	if it.kind == kFunctionCall && !it.argsDone {
		if !streamedArgs && len(it.args) > 0 {
			a.tmp = wire.AppendStringBytes(a.tmp[:0], it.args)
			dst = a.emitArgsDelta(dst, it, a.tmp)
		}
		dst = a.emitArgsDone(dst, it) // vLLM's simple path skips it for empty arguments (quirk 6)
		it.argsDone = true
	}
	it.parts, it.sums = parts, sums
	it.status = status
	if it.kind == kOther && src == nil {
		it.rawStatus = string(status) // a type we pass through, cut short: its own status would say in_progress
	}
	it.closed = true
	a.finish(it)
	return a.emitItemDone(dst, it)
}

// closeParts closes the item's open parts of one list, with the authoritative text when final
// states a part of the same type at that position, and announces and closes final's further
// parts so that the client stream describes the whole item. Parts of types outside the SDK unions
// stay in the item but get no events, so event indices stay dense.
func (a *Accumulator) closeParts(dst []byte, it *item, sum bool, final []*part, over bool) []byte {
	live := *it.list(sum)
	for i, lp := range live {
		if lp.closed {
			continue
		}
		src := lp
		if over && i < len(final) && final[i].kind == lp.kind {
			src = final[i]
		}
		if !lp.textDone {
			dst = a.emitTextDone(dst, it, lp.kind, i, src.text)
			lp.textDone = true
		}
		dst = a.emitPart(dst, it, src, i, sum, partClosing)
		lp.closed = true
	}
	if !over {
		return dst
	}
	ci := len(live)
	for _, fp := range final[min(len(live), len(final)):] {
		if fp.kind == pOther {
			continue
		}
		dst = a.emitPart(dst, it, fp, ci, sum, partOpening)
		if len(fp.text) > 0 {
			a.tmp = wire.AppendStringBytes(a.tmp[:0], fp.text)
			dst = a.emitDelta(dst, it, fp.kind, ci, a.tmp)
		}
		dst = a.emitTextDone(dst, it, fp.kind, ci, fp.text)
		dst = a.emitPart(dst, it, fp, ci, sum, partClosing)
		fp.textDone, fp.closed = true, true
		ci++
	}
	return dst
}

// onTerminal records the upstream terminal event. vLLM always sends response.completed, even for
// status incomplete (docs/wire.md §6.5 quirk 4); the status inside decides.
func (a *Accumulator) onTerminal(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	t, err := parseResponse(typ, a.env.response, &a.opts)
	if err != nil {
		return dst, err
	}
	a.term = t
	a.done = true
	return dst, nil
}

// onError records an upstream error event: the stream has failed (docs/wire.md §6.5 quirk 5).
func (a *Accumulator) onError(dst []byte, typ wire.EventType, d []byte) ([]byte, error) {
	if err := a.parseEnv(typ, d); err != nil {
		return dst, err
	}
	e := &a.env
	code, msg := e.code, e.msg
	if e.errObj != nil && e.errObj[0] == '{' { // Open Responses' nested form
		code, msg = errorMembers(e.errObj, code, msg)
	}
	a.failure = upstreamError(code, msg, msgUpstreamError)
	return dst, fmt.Errorf("accumulator: upstream error event (code %s): %w", a.failure.Code, ErrUpstream)
}
