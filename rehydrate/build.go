package rehydrate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/seal"
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
	// Request is the client's request as wire.DecodeCreateRequest decoded and validated it; Build
	// does not validate it again. Only an allowlist of its members is forwarded (see Build). Nil
	// means a request with none of them.
	Request *wire.CreateRequest
	// Lookup resolves the ids ReferencedIDs returned; nil when there are none.
	Lookup Lookup
	// NewID mints ids for input items that lack one; nil means wire.NewID.
	NewID func(prefix string) string
	// Keys opens respgate's own encrypted_content (seal.IsSealed) of reasoning items, sealed for
	// Tenant; the plaintext it sealed is replayed in place. Nil: such blobs are treated as
	// foreign ciphertext.
	Keys   *seal.Ring
	Tenant string
	// ReasoningContext is the request's effective reasoning.context: wire.ContextCurrentTurn
	// leaves out every reasoning item an assistant message follows (docs/reasoning.md); anything
	// else replays all reasoning.
	ReasoningContext string
	// Prepared is the projection of the first Prepared.Len() items of History, as an earlier
	// Build returned it (Result.History) for a history that began with the same items: Build
	// then projects only the rest. One made for another HistoryParam, Keys or Tenant, or longer
	// than History, is not used. Nil: every item of History is projected.
	Prepared *History
	// Buf, when its capacity holds the body, is where Build writes Result.Body (from its start),
	// instead of a new allocation: a caller that reuses its buffers spares a large body the
	// zeroing and first-touch page faults of fresh memory. The caller must not use Buf while it
	// uses Result.Body. Nil: Build allocates.
	Buf []byte
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
	SealedOpened      int // reasoning items whose respgate encrypted_content was opened
	ReasoningDropped  int // reasoning items left out by reasoning.context current_turn
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
	// History is the projection of Params.History, for a later Build of a history that begins
	// with the same items (Params.Prepared); nil when History is empty.
	History *History
}

// History is stored history projected once: the vLLM-bound form of its items, and what Build
// needs to know of them to add more (their ids and projections, the function calls, the
// reasoning a current_turn request leaves out). A chain cache keeps one per chain head, so a
// continuation projects only what is new (docs/scaling.md, "The chain cache"). It is immutable:
// a Build that needs a longer one makes a copy.
type History struct {
	n      int // items of Params.History it covers
	param  string
	keys   *seal.Ring
	tenant string
	// The state of a builder that has projected those items, positions relative to the start of
	// the input array (prior, sentReasoning, drop).
	buf                 []byte
	ids                 map[string]prior
	calls               map[string]struct{}
	items               int
	stats               Stats
	sentReasoning, drop []prior
}

// Len is the number of history items h covers (0 for nil).
func (h *History) Len() int {
	if h == nil {
		return 0
	}
	return h.n
}

// Size is about the bytes h holds: its projection and its indexes.
func (h *History) Size() int64 {
	if h == nil {
		return 0
	}
	return int64(cap(h.buf) + (len(h.ids)+len(h.calls))*historyEntryOverhead + (len(h.sentReasoning)+len(h.drop))*16)
}

// historyEntryOverhead is counted per id and call id on top of the projection (map entry, key).
const historyEntryOverhead = 64

// prepare returns the projection of all of p.History: p.Prepared when it covers it, else a copy
// of p.Prepared (when usable) or a new one, with the rest of the items projected.
func prepare(p *Params, param string, newID func(string) string) (*History, error) {
	h := p.Prepared
	if h == nil || h.n > len(p.History) || h.param != param || h.keys != p.Keys || h.tenant != p.Tenant {
		h = &History{param: param, keys: p.Keys, tenant: p.Tenant}
	}
	if h.n == len(p.History) {
		return h, nil
	}
	size := len(h.buf)
	for i := h.n; i < len(p.History); i++ {
		size += len(p.History[i].JSON)
	}
	bd := &builder{newID: newID, keys: p.Keys, tenant: p.Tenant, items: h.items, stats: h.stats,
		buf: append(make([]byte, 0, size), h.buf...), ids: make(map[string]prior, len(h.ids)+len(p.History)-h.n),
		calls: make(map[string]struct{}, len(h.calls)), sentReasoning: slices.Clone(h.sentReasoning), drop: slices.Clone(h.drop)}
	maps.Copy(bd.ids, h.ids)
	maps.Copy(bd.calls, h.calls)
	for i := h.n; i < len(p.History); i++ {
		if err := bd.addHistory(&p.History[i], param); err != nil {
			return nil, err
		}
	}
	return &History{n: len(p.History), param: param, keys: p.Keys, tenant: p.Tenant, buf: bd.buf, ids: bd.ids, calls: bd.calls,
		items: bd.items, stats: bd.stats, sentReasoning: bd.sentReasoning, drop: bd.drop}, nil
}

// Build turns stored history plus a new request into the vLLM-bound request body (docs/design.md §5,
// docs/wire.md §1.1 and §6.4). It is pure: no I/O, nothing cached across calls, its inputs untouched
// (a caller may keep Result.History and hand it back as Params.Prepared).
//
// Upstream input is History in order, then Input, each item projected to the allowlisted shape
// vLLM accepts (see project.go). Reasoning is replayed from its plaintext content; encrypted_content
// never crosses. respgate's own encrypted_content (seal.IsSealed) is opened with Keys for Tenant
// and its plaintext replayed in place (it must agree with the item's content, if any; a blob that
// does not open is a 400 invalid_encrypted_content). A reasoning item with only foreign
// encrypted_content is a 400, unless respgate already has an item with its id (in History, or
// through Lookup), whose plaintext is then used. With ReasoningContext current_turn, reasoning
// items an assistant message follows are left out of the body (not of Result.Input). Items are
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
// The request is the one wire.DecodeCreateRequest typed and validated (its members' shapes, tools
// included); Build does not check it again. What it checks of it needs the flattening: two tools
// that reach vLLM under one name (tools.go).
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
	newID := p.NewID
	if newID == nil {
		newID = wire.NewID
	}
	histParam := p.HistoryParam
	if histParam == "" {
		histParam = defaultHistoryParam
	}
	bd := &builder{newID: newID, lookup: p.Lookup, keys: p.Keys, tenant: p.Tenant,
		currentTurn: p.ReasoningContext == wire.ContextCurrentTurn}
	size := 256 + requestSize(p.Request)
	for i := range p.History {
		size += len(p.History[i].JSON)
	}
	for i := range p.Input {
		size += len(p.Input[i].JSON) + 96
	}
	if cap(p.Buf) >= size {
		bd.buf = p.Buf[:0]
	} else {
		bd.buf = make([]byte, 0, size)
	}
	res := &Result{}

	bd.buf = append(bd.buf, '{')
	if err := bd.request(p.Request, res); err != nil {
		return nil, err
	}
	bd.buf = append(bd.buf, `,"input":[`...)
	bd.inputStart = len(bd.buf)
	hist, err := prepare(p, histParam, newID)
	if err != nil {
		return nil, err
	}
	if len(p.History) > 0 {
		res.History = hist
	}
	bd.continueFrom(hist, len(p.Input))
	for i := range p.Input {
		if err := bd.addInput(&p.Input[i], i, res); err != nil {
			return nil, err
		}
	}
	bd.dropEarlierReasoning()
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
	// members counts the top-level members written (for the commas between them).
	members int
	stats   Stats
	keys    *seal.Ring
	tenant  string
	// currentTurn: reasoning.context current_turn. sentReasoning holds the spans (leading comma
	// included) of the reasoning items sent since the last assistant message; drop those an
	// assistant message followed. inputStart is where the input array's elements begin.
	currentTurn         bool
	sentReasoning, drop []prior
	inputStart          int
	// base is the projected history buf began with (continueFrom), at baseOff.
	base    *History
	baseOff int
}

// prior is where an item's projection sits in buf (empty for an item that was skipped).
type prior struct{ s, e int }

// continueFrom appends the projected history h at the end of buf (the start of the input array)
// and takes on its state; its ids and calls are read through base (prior, knownCall), so the
// items added now go to maps of their own and h is left unchanged.
func (bd *builder) continueFrom(h *History, inputs int) {
	bd.base, bd.baseOff = h, len(bd.buf)
	bd.buf = append(bd.buf, h.buf...)
	bd.ids = make(map[string]prior, inputs)
	bd.calls = make(map[string]struct{})
	bd.items, bd.stats = h.items, h.stats
	bd.sentReasoning = shifted(h.sentReasoning, bd.baseOff)
	bd.drop = shifted(h.drop, bd.baseOff)
}

func shifted(ps []prior, off int) []prior {
	out := make([]prior, len(ps))
	for i, p := range ps {
		out[i] = prior{p.s + off, p.e + off}
	}
	return out
}

// prior returns where the item with the id was projected, if one was.
func (bd *builder) prior(id string) (prior, bool) {
	if p, ok := bd.ids[id]; ok {
		return p, true
	}
	if bd.base != nil {
		if p, ok := bd.base.ids[id]; ok {
			return prior{p.s + bd.baseOff, p.e + bd.baseOff}, true
		}
	}
	return prior{}, false
}

// knownCall reports whether a function_call with the call_id was projected.
func (bd *builder) knownCall(id []byte) bool {
	if _, ok := bd.calls[string(id)]; ok {
		return true
	}
	if bd.base != nil {
		_, ok := bd.base.calls[string(id)]
		return ok
	}
	return false
}

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

// addReference adds the stored item an item_reference names (input[i]), or nothing when it was
// sent already (a duplicate by definition); a reference not found is a 400.
func (bd *builder) addReference(v *view, w where, i int, res *Result) error {
	b := v.b
	if err := stringMember(b, v.id, w, "id", -1, ""); err != nil {
		return err
	}
	id := str(b, v.id)
	if _, ok := bd.prior(id); ok {
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
		"Item '%s' referenced by %s was not found.", wire.Clip(id), w.name(""))
}

// addStoredReasoning handles a reasoning item replayed without its plaintext (only
// encrypted_content or a summary, as some SDKs send them back): if respgate has the item, it is
// the same item, so what respgate stored is replayed instead of rejecting it (or replaying
// nothing). done reports that the item was handled (added, or dropped as a duplicate). An item
// carrying respgate's own encrypted_content is opened instead (project.go).
func (bd *builder) addStoredReasoning(v *view, i int, res *Result) (done bool, err error) {
	b := v.b
	if !v.id.IsStr(b) || hasPlaintext(v) || ownBlob(v) {
		return false, nil
	}
	id := str(b, v.id)
	if _, ok := bd.prior(id); ok {
		bd.stats.DuplicatesDropped++
		return true, nil
	}
	if bd.lookup != nil {
		if ref, ok := bd.lookup.LookupItem(id); ok && isReasoningWithText(ref) {
			return true, bd.addResolved(ref, id, i, res)
		}
	}
	return false, nil
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
	switch v.kind {
	case kindOther:
		return unsupportedItem(&v, w)
	case kindReference:
		return bd.addReference(&v, w, i, res)
	case kindReasoning:
		if done, err := bd.addStoredReasoning(&v, i, res); done {
			return err
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
	if dup {
		return nil
	}
	if v.kind == kindReasoning && ownBlob(&nv) {
		// Stored with the plaintext its blob holds, so that replaying this history never
		// depends on the key that sealed it (add has opened it already).
		if opened, ok, err := OpenSealed(norm, bd.keys, bd.tenant, w.param("")); err == nil && ok {
			norm = opened
		}
	}
	res.Input = append(res.Input, norm)
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
		if p, ok := bd.prior(id); ok {
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
					wire.Clip(id), where)
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
		bd.sentReasoning = append(bd.sentReasoning, prior{mark, len(bd.buf)})
	}
	if st.assistant {
		bd.drop, bd.sentReasoning = append(bd.drop, bd.sentReasoning...), bd.sentReasoning[:0]
	}
	if st.opened {
		bd.stats.SealedOpened++
	}
	if st.encDropped {
		bd.stats.EncryptedDropped++
	}
	return false, nil
}

// dropEarlierReasoning applies reasoning.context current_turn: the reasoning items an assistant
// message followed are cut out of the input array (the harmony format's guidance for gpt-oss,
// and what vLLM's own store does for previous_response_id: reasoning of a turn that ended in a
// final answer is not shown to the model again). The reasoning of the active tool loop stays.
func (bd *builder) dropEarlierReasoning() {
	if !bd.currentTurn || len(bd.drop) == 0 {
		return
	}
	out, last := bd.buf[:bd.drop[0].s], bd.drop[0].s
	for _, d := range bd.drop {
		out = append(out, bd.buf[last:d.s]...)
		last = d.e
		bd.items--
		bd.stats.ReasoningReplayed--
		bd.stats.ReasoningDropped++
	}
	out = append(out, bd.buf[last:]...)
	// The first element left may have kept the comma that separated it from a dropped one.
	if len(out) > bd.inputStart && out[bd.inputStart] == ',' {
		out = append(out[:bd.inputStart], out[bd.inputStart+1:]...)
	}
	bd.buf = out
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

// namedJSON is one member forwarded as the client sent it.
type namedJSON struct {
	name string
	json json.RawMessage
}

// passThrough are the members forwarded verbatim (when sent and not null), in this order.
func passThrough(r *wire.CreateRequest) [20]namedJSON {
	x := &r.Sampling
	return [...]namedJSON{
		{"parallel_tool_calls", r.ParallelToolCalls.JSON}, {"max_output_tokens", r.MaxOutputTokens.JSON},
		{"max_tool_calls", r.MaxToolCalls.JSON}, {"text", r.Text}, {"truncation", r.Truncation.JSON},
		{"temperature", r.Temperature.JSON}, {"top_p", r.TopP.JSON}, {"top_logprobs", r.TopLogprobs.JSON},
		{"metadata", r.Metadata}, {"user", r.User.JSON}, {"service_tier", r.ServiceTier.JSON},
		// vLLM sampling extras (docs/wire.md §1.1).
		{"top_k", x.TopK}, {"repetition_penalty", x.RepetitionPenalty}, {"seed", x.Seed}, {"stop", x.Stop},
		{"ignore_eos", x.IgnoreEOS}, {"logit_bias", x.LogitBias}, {"structured_outputs", x.StructuredOutputs},
		{"skip_special_tokens", x.SkipSpecialTokens}, {"include_stop_str_in_output", x.IncludeStopStrInOutput},
	}
}

// requestSize is about the size of the request members Build forwards, for sizing its buffer.
func requestSize(r *wire.CreateRequest) int {
	if r == nil {
		return 0
	}
	n := len(r.Model.JSON) + len(r.Instructions.JSON)
	for _, t := range r.Tools {
		n += len(t.JSON)
	}
	if r.ToolChoice != nil {
		n += len(r.ToolChoice.JSON)
	}
	for _, m := range passThrough(r) {
		n += len(m.json)
	}
	return n
}

// key writes the name of the next top-level member (after a comma unless it is the first).
func (bd *builder) key(name string) {
	if bd.members > 0 {
		bd.buf = append(bd.buf, ',')
	}
	bd.members++
	bd.buf = append(bd.buf, '"')
	bd.buf = append(bd.buf, name...)
	bd.buf = append(bd.buf, `":`...)
}

// forward writes a member as sent, unless it was not sent (or was null).
func (bd *builder) forward(name string, v json.RawMessage) {
	if v == nil {
		return
	}
	bd.key(name)
	bd.buf = appendRaw(bd.buf, v)
}

// request writes the forwarded top-level members (without a trailing comma).
func (bd *builder) request(r *wire.CreateRequest, res *Result) error {
	if r == nil {
		r = &wire.CreateRequest{}
	}
	bd.forward("model", r.Model.JSON)
	bd.forward("instructions", r.Instructions.JSON)
	bd.key("stream")
	bd.buf = strconv.AppendBool(bd.buf, r.Stream)
	bd.key("store")
	bd.buf = append(bd.buf, "false"...)
	// tools: function tools verbatim, namespace tools flattened (tools.go), the rest dropped.
	if err := bd.tools(r.Tools, res); err != nil {
		return err
	}
	bd.toolChoice(r.ToolChoice, res)
	// reasoning: effort only (vLLM ignores summary and never writes summaries).
	if r.Reasoning != nil && r.Reasoning.Effort != nil {
		bd.key("reasoning")
		bd.buf = append(bd.buf, `{"effort":`...)
		bd.buf = wire.AppendString(bd.buf, *r.Reasoning.Effort)
		bd.buf = append(bd.buf, '}')
	}
	// include: filtered to what vLLM accepts.
	kept := 0
	for _, v := range r.Include {
		if !includeAllowed[v] {
			continue
		}
		if kept == 0 {
			bd.key("include")
			bd.buf = append(bd.buf, '[')
		} else {
			bd.buf = append(bd.buf, ',')
		}
		kept++
		bd.buf = wire.AppendString(bd.buf, v)
	}
	if kept > 0 {
		bd.buf = append(bd.buf, ']')
	}
	for _, m := range passThrough(r) {
		bd.forward(m.name, m.json)
	}
	return nil
}

// toolChoice writes tool_choice: the string forms, and the function / allowed_tools objects (a
// forced function of a namespace tool under its flat name); a hosted-tool one is dropped.
func (bd *builder) toolChoice(tc *wire.ToolChoice, res *Result) {
	switch {
	case tc == nil:
	case tc.Type == "function" && tc.Namespace != nil && *tc.Namespace != "" && tc.Name != nil:
		bd.key("tool_choice")
		bd.buf = append(bd.buf, `{"type":"function","name":`...)
		bd.buf = wire.AppendString(bd.buf, *tc.Namespace+NamespaceSeparator+*tc.Name)
		bd.buf = append(bd.buf, '}')
	case tc.Mode != "", tc.Type == "function", tc.Type == "allowed_tools":
		bd.forward("tool_choice", tc.JSON)
	default:
		res.dropTool(tc.Type)
	}
}

func (r *Result) dropTool(typ string) {
	if typ == "" {
		typ = "(no type)"
	}
	if !slices.Contains(r.DroppedTools, typ) {
		r.DroppedTools = append(r.DroppedTools, typ)
	}
}

// appendValue appends a validated value verbatim, unless it holds invalid UTF-8, which is
// re-encoded through encoding/json (replacing it with U+FFFD).
func appendValue(dst, b []byte, sp jsonscan.Span) []byte {
	if sp.F&jsonscan.BadUTF8 == 0 {
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
