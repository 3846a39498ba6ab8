package accumulator

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// kind is an output item's type as far as the accumulator is concerned.
type kind uint8

const (
	kOther kind = iota // any type respgate does not rebuild: passed through with its id replaced
	kMessage
	kReasoning
	kFunctionCall
)

func kindOf(typ string) kind {
	switch typ {
	case wire.TypeMessage:
		return kMessage
	case wire.TypeReasoning:
		return kReasoning
	case wire.TypeFunctionCall:
		return kFunctionCall
	}
	return kOther
}

// pkind is a content part's type.
type pkind uint8

const (
	pOther pkind = iota // kept as its (compacted) JSON
	pOutputText
	pRefusal
	pReasoningText
	pSummaryText
)

func pkindOf(typ []byte) pkind {
	switch string(typ) {
	case "output_text":
		return pOutputText
	case "refusal":
		return pRefusal
	case "reasoning_text":
		return pReasoningText
	case "summary_text":
		return pSummaryText
	}
	return pOther
}

// itemKindFor is the item kind a part kind belongs to (for items first seen through a part event).
func itemKindFor(pk pkind) kind {
	if pk == pReasoningText || pk == pSummaryText {
		return kReasoning
	}
	return kMessage
}

// part is one content part (message content, reasoning content) or reasoning summary part.
type part struct {
	kind pkind
	up   int64  // upstream content_index / summary_index; -1 when it came from a whole item
	text []byte // output_text/reasoning_text/summary_text text, refusal refusal
	ann  []byte // output_text annotations: the array's elements, compacted, comma-separated
	nAnn int
	raw  []byte // pOther: the part object, compacted

	textDone bool // the client saw the *.done text event
	closed   bool // the client saw the part's done event
}

func (p *part) size() int { return len(p.text) + len(p.ann) + len(p.raw) }

// item is the accumulator's state for one output item, in the client's (dense) order.
type item struct {
	kind  kind
	typ   string // the item's type (upstream's spelling for kOther)
	id    string // minted
	qid   []byte // id as a JSON string token
	call  string // minted call_id (function_call)
	index int    // dense output_index
	up    int64  // upstream output_index, -1 if it had none

	role     string // message
	parts    []*part
	sums     []*part // reasoning summary
	maxPart  int64   // highest upstream content_index seen
	maxSum   int64   // highest upstream summary_index seen
	args     []byte  // function_call
	argsDone bool
	name     string                   // function_call, as upstream named it
	names    map[string]wire.ToolName // Options.ToolNames (function_call)
	enc      string                   // reasoning encrypted_content ("" = omitted)
	// reasoning content presentation: omitted when stated null, [] when stated as an empty array.
	contentNull, contentSet bool
	raw                     []byte // kOther: the latest item JSON, compacted
	rawStatus               string // kOther closed without a done item: the status to write

	size   int
	closed bool
	status wire.Status
	final  []byte // the item JSON the client saw in output_item.done
}

// clientName is the function call's name as the client declared its tool, and the namespace of
// that tool ("" for a top-level function tool).
func (it *item) clientName() (name, namespace string) {
	if tn, ok := it.names[it.name]; ok {
		return tn.Name, tn.Namespace
	}
	return it.name, ""
}

func (it *item) list(sum bool) *[]*part {
	if sum {
		return &it.sums
	}
	return &it.parts
}

// parsedItem is an item object from output_item.done, the terminal response or a non-streamed
// response. The has* flags record raw key presence: a key stated as null or [] still wins.
type parsedItem struct {
	typ    string
	kind   kind
	id     string
	status wire.Status

	hasRole, hasContent, contentNull, hasSummary, hasEnc, hasArgs, hasName bool

	role, name, enc string
	args            []byte
	content, sum    []*part
	raw             []byte // kOther
}

// parseItem decodes an item object. ok is false when it is not an object or a field respgate
// rebuilds has the wrong JSON type; the caller then keeps what it had (docs/design.md §4).
func parseItem(raw []byte) (p parsedItem, ok bool) {
	var content, summary []byte
	o := newObjIter(raw, 0)
	for k, v, more := o.next(); more; k, v, more = o.next() {
		var good bool
		switch string(k) {
		case "type":
			p.typ, good = strValue(v)
		case "id":
			p.id, good = strValue(v)
			good = good || jsonscan.IsNull(v)
		case "status":
			var st string
			st, good = strValue(v)
			p.status, good = wire.Status(st), good || jsonscan.IsNull(v)
		case "role":
			p.hasRole = true
			p.role, good = strValue(v)
			good = good || jsonscan.IsNull(v)
		case "content":
			p.hasContent, content, good = true, v, v[0] == '[' || jsonscan.IsNull(v)
			p.contentNull = jsonscan.IsNull(v)
		case "summary":
			p.hasSummary, summary, good = true, v, v[0] == '[' || jsonscan.IsNull(v)
		case "encrypted_content":
			p.hasEnc = true
			p.enc, good = strValue(v)
			good = good || jsonscan.IsNull(v)
		case "arguments":
			p.hasArgs = true
			var s string
			s, good = strValue(v)
			p.args = []byte(s)
			good = good || jsonscan.IsNull(v)
		case "name":
			p.hasName = true
			p.name, good = strValue(v)
			good = good || jsonscan.IsNull(v)
		default:
			good = true
		}
		if !good {
			return parsedItem{}, false
		}
	}
	// The type is copied into wire.Item.Type and stored beside the item's JSON, which is always
	// valid UTF-8; a type that is not would make the two disagree, so the item is malformed.
	if o.finish() != nil || p.typ == "" || !utf8.ValidString(p.typ) {
		return parsedItem{}, false
	}
	p.kind = kindOf(p.typ)
	switch p.kind {
	case kOther:
		p.raw = jsonscan.AppendCompact(nil, raw)
	case kMessage, kReasoning:
		var ok bool
		allowed := messagePart
		if p.kind == kReasoning {
			allowed = reasoningPart
		}
		if content != nil && !p.contentNull {
			if p.content, ok = parseParts(content, allowed); !ok {
				return parsedItem{}, false
			}
		}
		if p.kind == kReasoning && summary != nil && !jsonscan.IsNull(summary) {
			if p.sum, ok = parseParts(summary, summaryPart); !ok {
				return parsedItem{}, false
			}
		}
	}
	return p, true
}

// parseParts decodes a content or summary array. Part types allowed in the list are rebuilt;
// others are kept as their JSON.
func parseParts(arr []byte, allowed func(pkind) bool) ([]*part, bool) {
	parts := []*part{}
	a := newArrIter(arr)
	for v, more := a.next(); more; v, more = a.next() {
		p, ok := parsePart(v, allowed)
		if !ok {
			return nil, false
		}
		parts = append(parts, p)
	}
	return parts, a.err == nil
}

// parsePart decodes one part object; ok is false if it is not an object with a string type, or a
// rebuilt field has the wrong JSON type.
func parsePart(v []byte, allowed func(pkind) bool) (*part, bool) {
	p := &part{up: -1}
	var typ, text, refusal, ann []byte
	o := newObjIter(v, 1)
	for k, fv, m := o.next(); m; k, fv, m = o.next() {
		switch string(k) {
		case "type":
			typ = fv
		case "text":
			text = fv
		case "refusal":
			refusal = fv
		case "annotations":
			ann = fv
		}
	}
	if o.err != nil {
		return nil, false
	}
	tc, ok := jsonscan.StrContents(typ)
	if !ok {
		return nil, false
	}
	if p.kind = pkindOf(tc); !allowed(p.kind) {
		p.kind = pOther
	}
	field := text
	if p.kind == pRefusal {
		field = refusal
	}
	if p.kind == pOther {
		p.raw = jsonscan.AppendCompact(nil, v)
		return p, true
	}
	p.text = []byte{}
	if field != nil && !jsonscan.IsNull(field) {
		c, ok := jsonscan.StrContents(field)
		if !ok {
			return nil, false
		}
		p.text = jsonscan.AppendUnescaped(p.text, c)
	}
	if p.kind == pOutputText && ann != nil && !jsonscan.IsNull(ann) {
		if ann[0] != '[' {
			return nil, false
		}
		p.ann, p.nAnn = annElements(ann)
	}
	return p, true
}

func messagePart(k pkind) bool   { return k == pOutputText || k == pRefusal }
func reasoningPart(k pkind) bool { return k == pReasoningText }
func summaryPart(k pkind) bool   { return k == pSummaryText }

// annElements returns an annotations array's elements compacted and comma-separated.
func annElements(arr []byte) ([]byte, int) {
	var out []byte
	n := 0
	a := newArrIter(arr)
	for v, more := a.next(); more; v, more = a.next() {
		if n > 0 {
			out = append(out, ',')
		}
		out = jsonscan.AppendCompact(out, v)
		n++
	}
	return out, n
}

func partsSize(ps []*part) int {
	n := 0
	for _, p := range ps {
		n += p.size()
	}
	return n
}

// size approximates the bytes a parsed item holds, for the per-item limit.
func (p *parsedItem) size() int {
	return partsSize(p.content) + partsSize(p.sum) + len(p.args) + len(p.enc) + len(p.raw)
}

// appendPart appends a part object. empty renders the part as announced (no text yet).
func appendPart(b []byte, p *part, empty bool) []byte {
	text := p.text
	if empty {
		text = nil
	}
	switch p.kind {
	case pOutputText:
		b = append(b, `{"type":"output_text","text":`...)
		b = wire.AppendStringBytes(b, text)
		b = append(b, `,"annotations":[`...)
		if !empty {
			b = append(b, p.ann...)
		}
		// Open Responses requires logprobs on output_text (docs/wire.md §7.1).
		return append(b, `],"logprobs":[]}`...)
	case pRefusal:
		b = append(b, `{"type":"refusal","refusal":`...)
		b = wire.AppendStringBytes(b, text)
		return append(b, '}')
	case pReasoningText:
		b = append(b, `{"type":"reasoning_text","text":`...)
		b = wire.AppendStringBytes(b, text)
		return append(b, '}')
	case pSummaryText:
		b = append(b, `{"type":"summary_text","text":`...)
		b = wire.AppendStringBytes(b, text)
		return append(b, '}')
	}
	return append(b, p.raw...)
}

func appendParts(b []byte, ps []*part) []byte {
	b = append(b, '[')
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPart(b, p, false)
	}
	return append(b, ']')
}

// appendItem appends the item's JSON, rebuilt from state in a fixed field order (vLLM's stray
// fields never survive, docs/wire.md §6.5 quirk 7). !final renders the output_item.added form:
// status in_progress and zero values (Open Responses: all non-nullable fields filled).
func appendItem(b []byte, it *item, final bool) []byte {
	status := wire.StatusInProgress
	if final {
		status = it.status
	}
	switch it.kind {
	case kMessage:
		b = appendItemHead(b, it.qid, `message`, status, `content`)
		if final {
			b = appendParts(b, it.parts)
		} else {
			b = append(b, "[]"...)
		}
		b = append(b, `,"role":`...)
		role := it.role
		if role == "" {
			role = "assistant"
		}
		b = wire.AppendString(b, role)
		return append(b, '}')
	case kReasoning:
		b = appendItemHead(b, it.qid, `reasoning`, status, `summary`)
		if !final {
			return append(b, "[]}"...)
		}
		b = appendParts(b, it.sums)
		// Reasoning content and encrypted_content are optional but not nullable (docs/wire.md §7.1):
		// omit rather than send null.
		if !it.contentNull && (len(it.parts) > 0 || it.contentSet) {
			b = append(b, `,"content":`...)
			b = appendParts(b, it.parts)
		}
		if it.enc != "" {
			b = append(b, `,"encrypted_content":`...)
			b = wire.AppendString(b, it.enc)
		}
		return append(b, '}')
	case kFunctionCall:
		b = appendItemHead(b, it.qid, `function_call`, status, `arguments`)
		if final {
			b = wire.AppendStringBytes(b, it.args)
		} else {
			b = append(b, `""`...)
		}
		b = append(b, `,"call_id":`...)
		b = wire.AppendString(b, it.call)
		name, ns := it.clientName()
		b = append(b, `,"name":`...)
		b = wire.AppendString(b, name)
		if ns != "" {
			b = append(b, `,"namespace":`...)
			b = wire.AppendString(b, ns)
		}
		return append(b, '}')
	}
	if final {
		return rewriteOther(b, it.raw, it.qid, it.rawStatus)
	}
	return rewriteOther(b, it.raw, it.qid, "in_progress")
}

// appendItemHead appends the members every rebuilt item starts with, up to the key of its first
// own member: {"id":…,"type":typ,"status":status,"first":
func appendItemHead(b, qid []byte, typ string, status wire.Status, first string) []byte {
	b = append(b, `{"id":`...)
	b = append(b, qid...)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	b = append(b, `","status":"`...)
	b = append(b, status...)
	b = append(b, `","`...)
	b = append(b, first...)
	return append(b, `":`...)
}

// rewriteOther appends an item of a type respgate does not rebuild, member order kept, with its id
// replaced by the minted one and, when status != "", its status set (added at the end if absent:
// Open Responses requires a status on every item, docs/wire.md §7.1).
func rewriteOther(b, raw, qid []byte, status string) []byte {
	b = append(b, `{"id":`...)
	b = append(b, qid...)
	seen := false
	o := newObjIter(raw, 0)
	for k, v, more := o.next(); more; k, v, more = o.next() {
		if string(k) == "id" {
			continue
		}
		b = append(b, ',')
		b = wire.AppendString(b, jsonscan.BytesString(k))
		b = append(b, ':')
		if string(k) == "status" && status != "" {
			b = wire.AppendString(b, string(status))
			seen = true
			continue
		}
		b = jsonscan.AppendCompact(b, v)
	}
	if status != "" && !seen {
		b = append(b, `,"status":`...)
		b = wire.AppendString(b, string(status))
	}
	return append(b, '}')
}

// equalParts reports whether two part lists have the same kinds and texts.
func equalParts(a, b []*part) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].kind != b[i].kind || !bytes.Equal(a[i].text, b[i].text) || !bytes.Equal(a[i].raw, b[i].raw) {
			return false
		}
	}
	return true
}

// prefixParts reports whether every streamed part is a prefix of the part at the same position
// of an authoritative list: the check that a terminal item really is the item we were streaming.
func prefixParts(live, final []*part) bool {
	if len(live) > len(final) {
		return false
	}
	for i, p := range live {
		if p.kind != final[i].kind || !bytes.HasPrefix(final[i].text, p.text) {
			return false
		}
	}
	return true
}

func quote(s string) []byte { return wire.AppendString(nil, s) }

func itoa(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }

// The accumulator reads upstream events with internal/jsonscan, the scanner every package that
// reads untrusted JSON shares (its package comment states the rules), and writes strings with
// wire.AppendString. Most events are tiny deltas, so the hot path never decodes whole objects: it
// walks one object's top-level members and takes raw value spans, validated as they are walked.
// objIter and arrIter are that walk in the accumulator's raw-slice style.

// objIter walks the members of one JSON object. Keys are returned decoded (escaped keys are rare
// and cost an allocation); values are raw spans, already validated.
type objIter struct {
	d   []byte
	o   jsonscan.Obj
	err error
}

// newObjIter starts at the object in d; depth is the number of arrays and objects around it in
// the event (0 for the event itself), so nesting is bounded over the whole event.
func newObjIter(d []byte, depth int) objIter {
	return objIter{d: d, o: jsonscan.NewObj(d, 0, depth)}
}

func (o *objIter) next() (key, val []byte, ok bool) {
	m, ok := o.o.Next()
	if !ok {
		o.err = o.o.Err()
		return nil, nil, false
	}
	key = m.Key.Inner(o.d)
	if m.Key.F&jsonscan.Escaped != 0 {
		key = jsonscan.AppendUnescaped(nil, key) // rare: an escaped key
	}
	return key, m.Val.Bytes(o.d), true
}

// finish reports a syntax error met while iterating, in members the caller did not read, or
// trailing bytes after the object.
func (o *objIter) finish() error {
	o.err = o.o.Finish()
	return o.err
}

// arrIter walks the elements of a JSON array.
type arrIter struct {
	d   []byte
	a   jsonscan.Arr
	err error
}

// newArrIter starts at the array in d. d is always a value taken from an event that was validated
// as a whole when it was read, nesting bound included, so the walk counts depth from d itself.
func newArrIter(d []byte) arrIter { return arrIter{d: d, a: jsonscan.NewArr(d, 0, 0)} }

func (a *arrIter) next() ([]byte, bool) {
	sp, ok := a.a.Next()
	if !ok {
		a.err = a.a.Err()
		return nil, false
	}
	return sp.Bytes(a.d), true
}

// strValue decodes a string token into a new string.
func strValue(v []byte) (string, bool) {
	c, ok := jsonscan.StrContents(v)
	if !ok {
		return "", false
	}
	if bytes.IndexByte(c, '\\') < 0 {
		return string(c), true
	}
	return string(jsonscan.AppendUnescaped(nil, c)), true
}
