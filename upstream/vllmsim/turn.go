package vllmsim

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/respgate/respgate/wire"
)

// turn is one POST /v1/responses being answered: the generated items and everything needed to render
// them as vLLM would. Not safe for concurrent use.
type turn struct {
	sim        *Sim
	model      Model
	harmony    bool
	req        *createRequest
	f          *fault
	q          Quirks
	respID     string
	createdAt  int64
	items      []*outItem
	incomplete bool
	limit      int      // effective max_output_tokens
	hugeItem   *outItem // the item whose first token is the huge= placeholder

	inputTokens, outputTokens, reasoningTokens int
	// cachedTokens are the input tokens the prefix cache held; prefill is the time to the first
	// token they leave (Options.PrefillBase, PrefillPerToken).
	cachedTokens int
	prefill      time.Duration
	// reportedInput is the usage.input_tokens reported (the input_tokens= fault), else inputTokens.
	reportedInput int
}

func newTurn(s *Sim, m Model, req *createRequest, c *conversation, f *fault, ids idgen) *turn {
	t := &turn{sim: s, model: m, harmony: m.Dialect == Harmony, req: req, f: f, q: f.quirks}
	t.respID = ids.hex("resp_") // vLLM: request_id, default f"resp_{random_uuid()}"
	if req.RequestID != nil && *req.RequestID != "" {
		t.respID = *req.RequestID
	}
	t.createdAt = s.opts.Now().Unix()
	t.inputTokens = 3 + len(strings.Fields(req.instructions())) + 3*c.items + c.words
	t.reportedInput = t.inputTokens
	if s.cache != nil {
		toks := make([]uint32, 0, 3+len(c.tokens)+16)
		toks = append(toks, framing[:]...) // the 3 tokens of the turn's own framing
		for _, w := range strings.Fields(req.instructions()) {
			toks = append(toks, tokenOf(w))
		}
		t.cachedTokens = s.cache.use(append(toks, c.tokens...))
	}
	t.prefill = s.opts.prefill(t.inputTokens, t.cachedTokens)
	if f.delay == 0 {
		f.delay = s.opts.DecodePerToken
	}
	if f.inputTokens > 0 {
		t.reportedInput = f.inputTokens
	}

	// vLLM's effective max_tokens: what is left of the context, capped by max_output_tokens
	// (get_max_tokens in serve/utils/api_utils.py); the fault caps it like the request would.
	t.limit = s.opts.MaxModelLen - t.inputTokens
	if req.MaxOutputTokens != nil {
		t.limit = min(t.limit, *req.MaxOutputTokens)
	}
	if f.maxOutputTokens > 0 {
		t.limit = min(t.limit, f.maxOutputTokens)
	}
	var items []*outItem
	items, t.hugeItem = planItems(m.Dialect, req, c, f)
	t.items, t.incomplete = truncate(items, t.limit)
	for _, it := range t.items {
		t.outputTokens += len(it.tokens)
		if it.kind == kindReasoning {
			t.reasoningTokens += len(it.tokens)
		}
		t.assignIDs(it, ids)
	}
	return t
}

func (t *turn) has(q Quirks) bool { return t.q&q != 0 }

// assignIDs gives it its stream and final ids (docs/wire.md §6.5 quirk 3). With the ids quirk the harmony
// stream uses msg_ for reasoning and message and the parser stream bare UUIDs, and the final response
// is rebuilt with new ids (responses/harmony.py, responses/utils.py build_response_output_items).
func (t *turn) assignIDs(it *outItem, ids idgen) {
	prefix := "msg_"
	switch it.kind {
	case kindReasoning:
		prefix = "rs_"
	case kindCall:
		prefix = "fc_"
	}
	if !t.has(QuirkIDs) {
		it.streamID = ids.hex(prefix)
		it.finalID = it.streamID
		if it.kind == kindCall {
			it.streamCallID = ids.hex("call_")
			it.finalCallID = it.streamCallID
		}
		return
	}
	switch {
	case t.harmony && it.kind == kindCall:
		it.streamID, it.streamCallID = ids.hex("fc_"), ids.hex("call_")
	case t.harmony:
		it.streamID = ids.hex("msg_")
	default:
		it.streamID = ids.uuid()
		if it.kind == kindCall {
			it.streamCallID = ids.hex("call_")
		}
	}
	switch {
	case t.harmony && it.kind == kindCall:
		u := ids.hex("") // harmony: fc_<uuid> and call_<same uuid>
		it.finalID, it.finalCallID = "fc_"+u, "call_"+u
	case it.kind == kindCall:
		// The tool parser's id; vLLM's default make_tool_call_id is "chatcmpl-tool-<hex>".
		it.finalID, it.finalCallID = ids.hex("fc_"), ids.hex("chatcmpl-tool-")
	default:
		it.finalID = ids.hex(prefix)
	}
}

// streamStatus is an item's status in its output_item.done event.
func (t *turn) streamStatus(it *outItem) string {
	if it.cut && !t.has(QuirkStatus) {
		return "incomplete"
	}
	return "completed"
}

// finalStatus is an item's status in the final response: null for reasoning (both paths) and
// harmony function calls, "completed" even for a cut item (docs/wire.md §6.2, I #57998).
func (t *turn) finalStatus(it *outItem) string {
	if t.has(QuirkStatus) {
		if it.kind == kindReasoning || (t.harmony && it.kind == kindCall) {
			return "null"
		}
		return `"completed"`
	}
	if it.cut {
		return `"incomplete"`
	}
	return `"completed"`
}

func (t *turn) status() string {
	if t.incomplete {
		return "incomplete"
	}
	return "completed"
}

// appendResponse appends the response object: in progress (no output, no usage) or final.
func (t *turn) appendResponse(b []byte, final bool) []byte {
	h := responseHead{final: final, status: "in_progress", incomplete: "null"}
	if final {
		h.status = t.status()
	}
	if final && t.incomplete {
		h.incomplete = `{"reason":"max_output_tokens"}`
	}
	if t.has(QuirkFields) {
		return t.appendVLLMResponse(b, h)
	}
	return t.appendOpenAIResponse(b, h)
}

// responseHead is what appendResponse decides once for either field set: whether the response is final,
// its status and its incomplete_details.
type responseHead struct {
	final      bool
	status     string
	incomplete string // raw JSON
}

// appendVLLMResponse appends the response with vLLM's own field set (the fields quirk).
func (t *turn) appendVLLMResponse(b []byte, h responseHead) []byte {
	r := t.req
	// ResponsesResponse in responses/protocol.py, in its field order (docs/wire.md §6.2).
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, t.respID)
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, t.createdAt, 10)
	b = append(b, `,"incomplete_details":`...)
	b = append(b, h.incomplete...)
	b = append(b, `,"instructions":`...)
	b = appendRaw(b, r.Instructions, "null")
	b = append(b, `,"metadata":`...)
	b = appendRaw(b, r.Metadata, "null")
	b = append(b, `,"model":`...)
	b = wire.AppendString(b, t.model.Name)
	b = append(b, `,"object":"response","output":`...)
	b = t.appendOutput(b, h.final)
	b = append(b, `,"parallel_tool_calls":`...)
	b = appendBool(b, r.ParallelToolCalls == nil || *r.ParallelToolCalls)
	b = append(b, `,"temperature":`...)
	b = appendPyFloat(b, floatOr(r.Temperature, 1))
	b = append(b, `,"tool_choice":`...)
	b = appendRaw(b, nonNull(r.ToolChoice), `"auto"`)
	b = append(b, `,"tools":`...)
	b = appendRaw(b, nonNull(r.Tools), "[]")
	b = append(b, `,"top_p":`...)
	b = appendPyFloat(b, floatOr(r.TopP, 1))
	b = append(b, `,"background":false,"max_output_tokens":`...)
	b = appendInt(b, t.limit)
	b = append(b, `,"max_tool_calls":`...)
	b = appendRaw(b, r.MaxToolCalls, "null")
	b = append(b, `,"previous_response_id":null,"prompt":null,"reasoning":`...)
	b = appendRaw(b, r.Reasoning, "null")
	b = append(b, `,"service_tier":`...)
	b = appendRaw(b, nonNull(r.ServiceTier), `"auto"`)
	b = append(b, `,"status":"`...)
	b = append(b, h.status...)
	b = append(b, `","text":`...)
	b = appendRaw(b, r.Text, "null")
	b = append(b, `,"top_logprobs":null,"truncation":`...)
	b = appendRaw(b, nonNull(r.Truncation), `"disabled"`)
	b = append(b, `,"usage":`...)
	b = t.appendUsage(b, h.final)
	b = append(b, `,"user":`...)
	b = appendRaw(b, r.User, "null")
	return append(b, `,"input_messages":null,"output_messages":null}`...)
}

// appendOpenAIResponse appends the response with OpenAI's field set (docs/wire.md §3).
func (t *turn) appendOpenAIResponse(b []byte, h responseHead) []byte {
	r := t.req
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, t.respID)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, t.createdAt, 10)
	b = append(b, `,"status":"`...)
	b = append(b, h.status...)
	b = append(b, `","background":false,"completed_at":`...)
	if h.final && !t.incomplete {
		b = strconv.AppendInt(b, t.sim.opts.Now().Unix(), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"error":null,"incomplete_details":`...)
	b = append(b, h.incomplete...)
	b = append(b, `,"instructions":`...)
	b = appendRaw(b, r.Instructions, "null")
	b = append(b, `,"max_output_tokens":`...)
	switch {
	case t.f.maxOutputTokens > 0 || r.MaxOutputTokens != nil:
		b = appendInt(b, t.limit)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"max_tool_calls":`...)
	b = appendRaw(b, r.MaxToolCalls, "null")
	b = append(b, `,"model":`...)
	b = wire.AppendString(b, t.model.Name)
	b = append(b, `,"output":`...)
	b = t.appendOutput(b, h.final)
	b = append(b, `,"parallel_tool_calls":`...)
	b = appendBool(b, r.ParallelToolCalls == nil || *r.ParallelToolCalls)
	b = append(b, `,"presence_penalty":0.0,"frequency_penalty":0.0,"previous_response_id":null,"prompt_cache_key":`...)
	b = appendRaw(b, r.PromptCacheKey, "null")
	b = append(b, `,"reasoning":`...)
	b = appendRaw(b, r.Reasoning, "null")
	b = append(b, `,"safety_identifier":null,"service_tier":`...)
	b = appendRaw(b, nonNull(r.ServiceTier), `"auto"`)
	b = append(b, `,"store":false,"temperature":`...)
	b = appendPyFloat(b, floatOr(r.Temperature, 1))
	b = append(b, `,"text":`...)
	b = appendRaw(b, nonNull(r.Text), `{"format":{"type":"text"}}`)
	b = append(b, `,"tool_choice":`...)
	b = appendRaw(b, nonNull(r.ToolChoice), `"auto"`)
	b = append(b, `,"tools":`...)
	b = appendRaw(b, nonNull(r.Tools), "[]")
	b = append(b, `,"top_logprobs":0,"top_p":`...)
	b = appendPyFloat(b, floatOr(r.TopP, 1))
	b = append(b, `,"truncation":`...)
	b = appendRaw(b, nonNull(r.Truncation), `"disabled"`)
	b = append(b, `,"usage":`...)
	b = t.appendUsage(b, h.final)
	b = append(b, `,"user":`...)
	b = appendRaw(b, r.User, "null")
	b = append(b, `,"metadata":`...)
	b = appendRaw(b, nonNull(r.Metadata), "{}")
	return append(b, '}')
}

func floatOr(f *float64, def float64) float64 {
	if f == nil {
		return def
	}
	return *f
}

// nonNull drops an explicit null so that the default is echoed instead, as pydantic's defaults do for
// fields that are not Optional.
func nonNull(raw []byte) []byte {
	if isNull(raw) {
		return nil
	}
	return raw
}

// appendUsage appends usage: null until the end; vLLM's ResponseUsage with its per-turn arrays
// (harmony reports one turn, SimpleContext none), or OpenAI's shape.
func (t *turn) appendUsage(b []byte, final bool) []byte {
	if !final {
		return append(b, "null"...)
	}
	b = append(b, `{"input_tokens":`...)
	b = appendInt(b, t.reportedInput)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = appendInt(b, t.cachedTokens)
	if t.has(QuirkFields) {
		if t.harmony {
			b = append(b, `,"input_tokens_per_turn":[`...)
			b = appendInt(b, t.reportedInput)
			b = append(b, `],"cached_tokens_per_turn":[`...)
			b = appendInt(b, t.cachedTokens)
			b = append(b, ']')
		} else {
			b = append(b, `,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]`...)
		}
	}
	b = append(b, `},"output_tokens":`...)
	b = appendInt(b, t.outputTokens)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = appendInt(b, t.reasoningTokens)
	if t.has(QuirkFields) {
		if t.harmony {
			b = append(b, `,"tool_output_tokens":0,"output_tokens_per_turn":[`...)
			b = appendInt(b, t.outputTokens)
			b = append(b, `],"tool_output_tokens_per_turn":[0]`...)
		} else {
			b = append(b, `,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]`...)
		}
	}
	b = append(b, `},"total_tokens":`...)
	b = appendInt(b, t.reportedInput+t.outputTokens)
	return append(b, '}')
}

// appendOutput appends the output array: empty while in progress, else the final items.
func (t *turn) appendOutput(b []byte, final bool) []byte {
	b = append(b, '[')
	if final {
		for i, it := range t.items {
			if i > 0 {
				b = append(b, ',')
			}
			b = t.appendFinalItem(b, it)
		}
	}
	return append(b, ']')
}

func (t *turn) appendFinalItem(b []byte, it *outItem) []byte {
	switch it.kind {
	case kindReasoning:
		return t.appendReasoningItem(b, it.finalID, it, t.finalStatus(it))
	case kindMessage:
		return t.appendMessageItem(b, it.finalID, it, t.finalStatus(it), false)
	default:
		return t.appendCallItem(b, it, it.finalID, it.finalCallID, t.finalStatus(it), -1)
	}
}

// appendReasoningItem appends a ResponseReasoningItem with the text of it (nil: without content, as
// announced); status is raw JSON ("null" or a quoted string). vLLM dumps the unset optionals as
// content:null and encrypted_content:null (quirk nulls).
func (t *turn) appendReasoningItem(b []byte, id string, it *outItem, status string) []byte {
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, id)
	b = append(b, `,"summary":[],"type":"reasoning","content":`...)
	switch {
	case it != nil:
		b = append(b, `[{"text":`...)
		b = it.appendText(b)
		b = append(b, `,"type":"reasoning_text"}]`...)
	case t.has(QuirkNulls):
		b = append(b, "null"...)
	default:
		b = append(b, "[]"...)
	}
	if t.has(QuirkNulls) {
		b = append(b, `,"encrypted_content":null`...)
	}
	b = append(b, `,"status":`...)
	b = append(b, status...)
	return append(b, '}')
}

// appendOutputText appends a done output_text part; vLLM leaves its logprobs unset (null).
func (t *turn) appendOutputText(b []byte, it *outItem) []byte {
	b = append(b, `{"annotations":[],"text":`...)
	b = it.appendText(b)
	if t.has(QuirkNulls) {
		return append(b, `,"type":"output_text","logprobs":null}`...)
	}
	return append(b, `,"type":"output_text","logprobs":[]}`...)
}

// appendMessageItem appends a done assistant message; streamDone adds the parser path's stray
// summary:[] (emit_simple_content_done).
func (t *turn) appendMessageItem(b []byte, id string, it *outItem, status string, streamDone bool) []byte {
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, id)
	b = append(b, `,"content":[`...)
	if len(it.tokens) > 0 || !streamDone || t.harmony {
		b = t.appendOutputText(b, it)
	}
	b = append(b, `],"role":"assistant","status":`...)
	b = append(b, status...)
	b = append(b, `,"type":"message"`...)
	if streamDone && !t.harmony && t.has(QuirkStray) {
		b = append(b, `,"summary":[]`...)
	}
	return append(b, '}')
}

// appendCallItem appends a done function call; strayIndex >= 0 adds harmony's stray item_id,
// output_index and sequence_number:-1 (emit_function_call_done_events).
func (t *turn) appendCallItem(b []byte, it *outItem, id, callID, status string, strayIndex int) []byte {
	b = append(b, `{"arguments":`...)
	b = it.appendText(b)
	b = append(b, `,"call_id":`...)
	b = wire.AppendString(b, callID)
	b = append(b, `,"name":`...)
	b = wire.AppendString(b, it.name)
	b = append(b, `,"type":"function_call","id":`...)
	b = wire.AppendString(b, id)
	b = append(b, `,"status":`...)
	b = append(b, status...)
	if strayIndex >= 0 {
		b = append(b, `,"item_id":`...)
		b = wire.AppendString(b, id)
		b = append(b, `,"output_index":`...)
		b = appendInt(b, strayIndex)
		b = append(b, `,"sequence_number":-1`...)
	}
	return append(b, '}')
}

// respond answers a non-streaming request with the final response object.
func (t *turn) respond(w http.ResponseWriter, r *http.Request) {
	e := newEmitter(w, r, t.f)
	defer e.stop()
	if t.f.stall > 0 && e.sleep(t.f.stall) != nil {
		return
	}
	if d := t.prefill + t.f.delay*time.Duration(t.outputTokens); d > 0 && e.sleep(d) != nil {
		return
	}
	if t.f.cutAfter >= 0 {
		panic(http.ErrAbortHandler) // close before any byte of the answer
	}
	if t.f.errorAfter >= 0 {
		writeError(w, generationError()) // responses_full_generator raises it: a 500
		return
	}
	body := t.appendResponse(nil, true)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	switch {
	case t.f.cutInside >= 0:
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		_ = e.rc.Flush()
		panic(http.ErrAbortHandler)
	case t.f.malformedAfter >= 0:
		body = body[:len(body)/2]
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
