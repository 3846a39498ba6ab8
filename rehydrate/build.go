package rehydrate

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// Params is the input of Build. Build reads it and never changes it, nor the bytes of its items.
type Params struct {
	// History is the stored items in order: for a chain, each ancestor's input then output, oldest
	// first; for a conversation, its items by sequence. They are replayed before Input.
	History []wire.Item
	// HistoryParam is the request member that brought History in, used as the param of errors
	// about history items: "previous_response_id" (the default when empty) or "conversation".
	HistoryParam string
	// Input is the new input as ParseInput returned it.
	Input []wire.Item
	// Request is the client's top-level request members, already validated by the server. Only an
	// allowlist of them is forwarded (see Build).
	Request map[string]json.RawMessage
	// Lookup resolves the ids ReferencedIDs returned; nil when there are none.
	Lookup Lookup
	// NewID mints ids for input items that lack one; nil means wire.NewID.
	NewID func(prefix string) string
}

// Stats are telemetry counters of one Build. They never hold content.
type Stats struct {
	Items             int // items in the upstream input
	Bytes             int // size of Body
	ReasoningReplayed int // reasoning items sent with their plaintext
	ReasoningBytes    int // size of the reasoning text sent, as JSON-escaped bytes
	EncryptedDropped  int // items sent whose non-empty encrypted_content was stripped
	DuplicatesDropped int // exact duplicates (same id, same projection) sent once
	ReasoningSkipped  int // reasoning items without plaintext content (and no encrypted_content), not sent
	EmptySkipped      int // messages without content ("" or no parts), not sent
}

// Result is the output of Build.
type Result struct {
	// Body is the vLLM-bound JSON request.
	Body []byte
	// Input is the new input items to store, in order: normalised (ids assigned; see NormalizeAt),
	// references replaced by the items they resolve to, exact duplicates of earlier items left out.
	// Items not sent upstream because they hold nothing (an empty message, a reasoning item with
	// only a summary) are still stored: storage is lossless, only the upstream copy is projected.
	Input []wire.Item
	// DroppedTools lists, once each, the types of tools in "tools" (and of a hosted-tool
	// "tool_choice") that were not forwarded because vLLM serves only function tools. The server
	// decides whether that is acceptable.
	DroppedTools []string
	// ToolNames maps the flat name of every function tool declared inside a namespace tool, as it
	// was sent to vLLM ("<namespace>__<name>", NamespaceSeparator), to the client's namespace and
	// name, so function calls can be answered in the client's terms. Nil without namespace tools.
	ToolNames map[string]wire.ToolName
	Stats     Stats
}

// Build turns stored history plus a new request into the vLLM-bound request body (docs/design.md §5,
// docs/wire.md §1.1 and §6.4). It is pure: no I/O, nothing cached across calls, its inputs untouched.
//
// Upstream input is History in order, then Input, each item projected to the allowlisted shape
// vLLM accepts (see project.go). Reasoning is replayed from its plaintext content; encrypted_content
// never crosses; a reasoning item with only encrypted_content is a 400, unless respgate already has
// an item with its id (in History, or through Lookup), whose plaintext is then used. Items are
// deduplicated by id, comparing what vLLM would receive (the projection): an item whose id was
// already sent with the same projection is dropped (and not stored again), whatever its status,
// encrypted_content or SDK fields; the same id with a different projection is a 400. Within History
// such a pair is replayed as stored. item_reference items are resolved against the items already
// sent, then through Lookup. A function_call_output needs its function_call earlier.
//
// Top-level members sent: model, instructions (the current request's only), stream (the client's,
// default false), store:false, tools (function tools, and the function tools of namespace tools
// under flat names; see Result.ToolNames), tool_choice (not a hosted-tool one),
// reasoning (effort only), include (values vLLM accepts, minus reasoning.encrypted_content: respgate
// never sends encrypted reasoning back, so there is nothing to ask vLLM for), parallel_tool_calls,
// max_output_tokens, max_tool_calls, text, truncation, temperature, top_p, top_logprobs, metadata,
// user, service_tier, and vLLM's sampling extras top_k, repetition_penalty, seed, stop, ignore_eos,
// logit_bias, structured_outputs, skip_special_tokens, include_stop_str_in_output. Null members are
// omitted (vLLM rejects null for some, e.g. tool_choice). Everything else stays behind: among
// others previous_response_id, conversation, background, stream_options, prompt, prompt_cache_*,
// safety_identifier, client_metadata, and vLLM extras that are operator policy rather than client
// choice (request_id, priority, cache_salt, vllm_xargs, mm_processor_kwargs,
// enable_response_messages, previous_input_messages).
//
// Client faults are *wire.APIError (400). Any other error means stored data is corrupt (a history or
// referenced item that is not JSON) and is the server's fault. Build keeps no state between calls
// and is safe for concurrent use.
func Build(p *Params) (*Result, error) {
	if p == nil {
		p = &Params{}
	}
	if len(p.History) == 0 && len(p.Input) == 0 {
		return nil, wire.Invalid("input", CodeEmptyInput,
			"The request has no input: send at least one input item, or continue a response or conversation that has items.")
	}
	bd := &builder{newID: p.NewID, lookup: p.Lookup}
	if bd.newID == nil {
		bd.newID = wire.NewID
	}
	histParam := p.HistoryParam
	if histParam == "" {
		histParam = defaultHistoryParam
	}
	size := 256
	for i := range p.History {
		size += len(p.History[i].JSON)
	}
	for i := range p.Input {
		size += len(p.Input[i].JSON) + 96
	}
	for _, raw := range p.Request {
		size += len(raw)
	}
	bd.buf = make([]byte, 0, size)
	n := len(p.History) + len(p.Input)
	bd.ids = make(map[string]prior, n)
	bd.calls = make(map[string]struct{})
	res := &Result{}

	bd.buf = append(bd.buf, '{')
	if err := bd.request(p.Request, res); err != nil {
		return nil, err
	}
	bd.buf = append(bd.buf, `,"input":[`...)
	for i := range p.History {
		if err := bd.addHistory(&p.History[i], histParam); err != nil {
			return nil, err
		}
	}
	for i := range p.Input {
		if err := bd.addInput(&p.Input[i], i, res); err != nil {
			return nil, err
		}
	}
	bd.buf = append(bd.buf, "]}"...)

	res.Body = bd.buf
	res.Stats = bd.stats
	res.Stats.Items = bd.items
	res.Stats.Bytes = len(bd.buf)
	return res, nil
}

// builder holds the state of one Build.
type builder struct {
	buf    []byte
	newID  func(string) string
	lookup Lookup
	ids    map[string]prior    // item id → its projection in buf
	calls  map[string]struct{} // call_ids of the function_calls sent so far
	parts  []part              // scratch for scanItem, reused across history items
	items  int
	stats  Stats
}

// prior is where an item's projection sits in buf (empty for an item that was skipped).
type prior struct{ s, e int }

func (bd *builder) addHistory(it *wire.Item, param string) error {
	var v view
	var err error
	v, bd.parts, err = scanItem(it.JSON, bd.parts[:0])
	if err != nil {
		return fmt.Errorf("rehydrate: read stored item %q (%s history): %w", it.ID, param, err)
	}
	w := where{prefix: param, hist: true, id: it.ID}
	if err := classify(&v, w); err != nil {
		return err
	}
	id, err := idOf(it, &v, w)
	if err != nil {
		return err
	}
	w.id = id
	if v.kind == kindReference || v.kind == kindOther {
		return unsupportedItem(&v, w)
	}
	_, err = bd.add(&v, w, id)
	return err
}

func (bd *builder) addInput(it *wire.Item, i int, res *Result) error {
	w := where{prefix: "input", idx: i}
	v, _, err := scanItem(it.JSON, nil)
	if err != nil {
		return w.invalidJSON()
	}
	if err := classify(&v, w); err != nil {
		return err
	}
	b := v.b
	switch v.kind {
	case kindOther:
		return unsupportedItem(&v, w)
	case kindReference:
		if err := stringMember(b, v.id, w, "id", -1, ""); err != nil {
			return err
		}
		id := str(b, v.id)
		if _, ok := bd.ids[id]; ok {
			// Already sent (history, or earlier in this input): a duplicate by definition.
			bd.stats.DuplicatesDropped++
			return nil
		}
		if bd.lookup != nil {
			if ref, ok := bd.lookup.LookupItem(id); ok {
				return bd.addResolved(ref, id, i, res)
			}
		}
		return wire.Invalid(w.param(""), CodeReferenceNotFound,
			"Item '%s' referenced by %s was not found.", clip(id), w.name(""))
	case kindReasoning:
		// A reasoning item replayed without its plaintext (only encrypted_content or a summary, as
		// some SDKs send them back): if respgate has the item, it is the same item, so replay what
		// respgate stored instead of rejecting it (or replaying nothing).
		if v.id.IsStr(b) && !hasPlaintext(&v) {
			id := str(b, v.id)
			if _, ok := bd.ids[id]; ok {
				bd.stats.DuplicatesDropped++
				return nil
			}
			if bd.lookup != nil {
				if ref, ok := bd.lookup.LookupItem(id); ok && isReasoningWithText(ref) {
					return bd.addResolved(ref, id, i, res)
				}
			}
		}
	}
	clientID, err := idOf(it, &v, w)
	if err != nil {
		return err
	}
	w.id = clientID
	norm, err := normalizeView(*it, &v, bd.newID, w)
	if err != nil {
		return err
	}
	nv := v
	if len(norm.JSON) != len(it.JSON) || &norm.JSON[0] != &it.JSON[0] {
		if nv, _, err = scanItem(norm.JSON, nil); err != nil {
			return fmt.Errorf("rehydrate: rescan normalised input[%d]: %w", i, err) // a bug, not a client fault
		}
		nv.kind = v.kind
	}
	dup, err := bd.add(&nv, w, norm.ID)
	if err != nil {
		return err
	}
	if !dup {
		res.Input = append(res.Input, norm)
	}
	return nil
}

func isReasoningWithText(it wire.Item) bool {
	v, _, err := scanItem(it.JSON, nil)
	return err == nil && strIs(v.b, v.typ, wire.TypeReasoning) && hasPlaintext(&v)
}

// addResolved adds the stored item that input[i] (a reference to id) resolved to.
func (bd *builder) addResolved(ref wire.Item, refID string, i int, res *Result) error {
	w := where{prefix: "input", idx: i, ref: true, id: refID}
	v, _, err := scanItem(ref.JSON, nil)
	if err != nil {
		return fmt.Errorf("rehydrate: read stored item %q referenced by input[%d]: %w", refID, i, err)
	}
	if err := classify(&v, w); err != nil {
		return err
	}
	if v.kind == kindReference || v.kind == kindOther {
		return unsupportedItem(&v, w)
	}
	id, err := idOf(&ref, &v, w)
	if err != nil {
		return err
	}
	if id == "" {
		id = refID
	}
	dup, err := bd.add(&v, w, id)
	if err != nil {
		return err
	}
	if !dup {
		res.Input = append(res.Input, ref)
	}
	return nil
}

// add projects one classified item after the ones already in buf and dedupes it by id. dup reports
// an exact duplicate, which was dropped.
func (bd *builder) add(v *view, w where, id string) (dup bool, err error) {
	mark := len(bd.buf)
	if bd.items > 0 {
		bd.buf = append(bd.buf, ',')
	}
	start := len(bd.buf)
	st, err := bd.project(v, w, id)
	if err != nil {
		return false, err
	}
	end := len(bd.buf)
	if id != "" {
		if p, ok := bd.ids[id]; ok {
			if bytes.Equal(bd.buf[p.s:p.e], bd.buf[start:end]) {
				bd.buf = bd.buf[:mark]
				bd.stats.DuplicatesDropped++
				return true, nil
			}
			if !w.hist {
				bd.buf = bd.buf[:mark]
				where := "in " + w.name("")
				if w.ref {
					where = "referenced by '" + w.param("") + "'"
				}
				return false, wire.Invalid(w.param(""), CodeItemIDConflict,
					"Item '%s' %s has the same id as an earlier item but different content; an id must always name the same item.",
					clip(id), where)
			}
			// Two stored items with one id and different content: the store holds both, so
			// both are replayed, in order.
		} else {
			bd.ids[id] = prior{start, end}
		}
	}
	switch st.skip {
	case skipEmptyMessage:
		bd.stats.EmptySkipped++
		bd.buf = bd.buf[:mark]
		return false, nil
	case skipReasoningNoText:
		bd.stats.ReasoningSkipped++
		bd.buf = bd.buf[:mark]
		return false, nil
	}
	bd.items++
	if st.reasoning {
		bd.stats.ReasoningReplayed++
		bd.stats.ReasoningBytes += st.rbytes
	}
	if st.encDropped {
		bd.stats.EncryptedDropped++
	}
	return false, nil
}

// includeAllowed is vLLM's include Literal (protocol.py), minus reasoning.encrypted_content
// (respgate never replays encrypted reasoning, so asking for it only stores unusable blobs); the
// two web_search_call.* values OpenAI accepts would make vLLM answer 400.
var includeAllowed = map[string]bool{
	"code_interpreter_call.outputs":         true,
	"computer_call_output.output.image_url": true,
	"file_search_call.results":              true,
	"message.input_image.image_url":         true,
	"message.output_text.logprobs":          true,
}

// passThrough are the members forwarded verbatim (when present and not null), in body order.
var passThrough = [...]string{
	"parallel_tool_calls", "max_output_tokens", "max_tool_calls", "text", "truncation",
	"temperature", "top_p", "top_logprobs", "metadata", "user", "service_tier",
	// vLLM sampling extras (docs/wire.md §1.1).
	"top_k", "repetition_penalty", "seed", "stop", "ignore_eos", "logit_bias", "structured_outputs",
	"skip_special_tokens", "include_stop_str_in_output",
}

// value returns a request member that is present and not null, validated and trimmed.
func value(req map[string]json.RawMessage, name string) ([]byte, span, error) {
	raw, ok := req[name]
	if !ok {
		return nil, span{}, nil
	}
	if skipWS(raw, 0) == len(raw) {
		return nil, span{}, nil
	}
	sp, err := jsonscan.Scan(raw)
	if err != nil {
		return nil, span{}, wire.Invalid(name, CodeInvalidJSON, "Invalid JSON in '%s'.", name)
	}
	if sp.Kind(raw) == 'n' {
		return nil, span{}, nil
	}
	return raw, sp, nil
}

// request writes the forwarded top-level members (without a trailing comma).
func (bd *builder) request(req map[string]json.RawMessage, res *Result) error {
	n := 0
	key := func(name string) {
		if n > 0 {
			bd.buf = append(bd.buf, ',')
		}
		n++
		bd.buf = append(bd.buf, '"')
		bd.buf = append(bd.buf, name...)
		bd.buf = append(bd.buf, `":`...)
	}
	copyMember := func(name string) error {
		raw, sp, err := value(req, name)
		if err != nil || sp.E == 0 {
			return err
		}
		key(name)
		bd.buf = appendValue(bd.buf, raw, sp)
		return nil
	}

	if err := copyMember("model"); err != nil {
		return err
	}
	raw, sp, err := value(req, "instructions")
	if err != nil {
		return err
	}
	if sp.E != 0 {
		if !sp.IsStr(raw) {
			return wire.Invalid("instructions", CodeInvalidType, "Invalid type for 'instructions': expected a string.")
		}
		key("instructions")
		bd.buf = appendStr(bd.buf, raw, sp)
	}
	raw, sp, err = value(req, "stream")
	if err != nil {
		return err
	}
	key("stream")
	if sp.E != 0 && string(raw[sp.S:sp.E]) == "true" {
		bd.buf = append(bd.buf, "true"...)
	} else {
		bd.buf = append(bd.buf, "false"...)
	}
	key("store")
	bd.buf = append(bd.buf, "false"...)

	// tools: function tools verbatim, namespace tools flattened (tools.go), the rest dropped.
	raw, sp, err = value(req, "tools")
	if err != nil {
		return err
	}
	if sp.E != 0 {
		if err := bd.tools(raw, sp, res, key); err != nil {
			return err
		}
	}

	// tool_choice: the string forms, and the function / allowed_tools objects.
	raw, sp, err = value(req, "tool_choice")
	if err != nil {
		return err
	}
	if sp.E != 0 {
		typ, isObj := toolType(raw, sp)
		switch {
		case isObj && typ == "function" && bd.toolChoiceFunction(raw, sp, key):
		case sp.IsStr(raw), isObj && (typ == "function" || typ == "allowed_tools"):
			key("tool_choice")
			bd.buf = appendValue(bd.buf, raw, sp)
		case isObj:
			res.dropTool(typ)
		}
	}

	// reasoning: effort only (vLLM ignores summary and never writes summaries).
	raw, sp, err = value(req, "reasoning")
	if err != nil {
		return err
	}
	if sp.Kind(raw) == '{' {
		o := newObjIter(raw, sp.S)
		var effort span
		for {
			m, ok := o.Next()
			if !ok {
				break
			}
			if keyIs(raw, m, "effort") {
				effort = m.Val
			}
		}
		if effort.IsStr(raw) {
			key("reasoning")
			bd.buf = append(bd.buf, `{"effort":`...)
			bd.buf = appendStr(bd.buf, raw, effort)
			bd.buf = append(bd.buf, '}')
		}
	}

	// include: filtered to what vLLM accepts.
	raw, sp, err = value(req, "include")
	if err != nil {
		return err
	}
	if sp.Kind(raw) == '[' {
		kept := 0
		it := newArrIter(raw, sp)
		for {
			vs, ok := it.Next()
			if !ok {
				break
			}
			if !vs.IsStr(raw) || !includeAllowed[str(raw, vs)] {
				continue
			}
			if kept == 0 {
				key("include")
				bd.buf = append(bd.buf, '[')
			} else {
				bd.buf = append(bd.buf, ',')
			}
			kept++
			bd.buf = appendStr(bd.buf, raw, vs)
		}
		if kept > 0 {
			bd.buf = append(bd.buf, ']')
		}
	}

	for _, name := range passThrough {
		if err := copyMember(name); err != nil {
			return err
		}
	}
	return nil
}

// toolType returns the "type" of a tool (or tool_choice) object, and whether sp is an object.
func toolType(b []byte, sp span) (string, bool) {
	if sp.Kind(b) != '{' {
		return "", false
	}
	o := newObjIter(b, sp.S)
	var typ span
	for {
		m, ok := o.Next()
		if !ok {
			break
		}
		if keyIs(b, m, "type") {
			typ = m.Val
		}
	}
	if !typ.IsStr(b) {
		return "", true
	}
	return word(b, typ), true
}

func (r *Result) dropTool(typ string) {
	if typ == "" {
		typ = "(no type)"
	}
	if !contains(r.DroppedTools, typ) {
		r.DroppedTools = append(r.DroppedTools, typ)
	}
}

// appendValue appends a validated value verbatim, unless it holds invalid UTF-8, which is
// re-encoded through encoding/json (replacing it with U+FFFD).
func appendValue(dst, b []byte, sp span) []byte {
	if sp.F&strBadUTF8 == 0 {
		return append(dst, b[sp.S:sp.E]...)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(b[sp.S:sp.E]))
	d.UseNumber() // keep numbers exactly as sent
	if d.Decode(&v) != nil {
		return append(dst, "null"...)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return append(dst, "null"...)
	}
	return append(dst, out...)
}
