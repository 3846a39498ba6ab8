package accumulator

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// terminal is what respgate keeps of an upstream response object (terminal event or non-streamed
// body). vLLM's own response object is never forwarded (docs/wire.md §6.2).
type terminal struct {
	status     wire.Status
	err        *wire.ErrorObject
	incomplete json.RawMessage
	usage      json.RawMessage
	output     []*parsedItem // nil where an element was malformed
}

var defaultIncomplete = json.RawMessage(`{"reason":"max_output_tokens"}`)

// parseResponse decodes an upstream response object. evType is the terminal event's type, or ""
// for a non-streamed body.
func parseResponse(evType wire.EventType, raw []byte, opts *Options) (*terminal, error) {
	where := string(evType)
	if where == "" {
		where = "response"
	}
	t := &terminal{}
	var status wire.Status
	var errRaw, reason []byte
	if raw != nil && raw[0] == '{' {
		o := newObjIter(raw, 0)
		for k, v, more := o.next(); more; k, v, more = o.next() {
			switch string(k) {
			case "status":
				st, _ := strValue(v)
				status = wire.Status(st)
			case "output":
				if v[0] != '[' {
					if jsonscan.IsNull(v) {
						continue
					}
					return nil, fail(where, ErrMalformed, "output is not an array")
				}
				if len(v) > opts.MaxTotalBytes {
					return nil, fail(where, ErrLimit, "output over %d bytes", opts.MaxTotalBytes)
				}
				arr := newArrIter(v)
				for el, m := arr.next(); m; el, m = arr.next() {
					if len(t.output) >= opts.MaxItems {
						return nil, fail(where, ErrLimit, "more than %d output items", opts.MaxItems)
					}
					if len(el) > opts.MaxItemBytes {
						return nil, fail(where, ErrLimit, "output item over %d bytes", opts.MaxItemBytes)
					}
					var pi *parsedItem
					if p, ok := parseItem(el); ok {
						pi = &p
					}
					t.output = append(t.output, pi)
				}
			case "usage":
				t.usage = mapUsage(v)
			case "incomplete_details":
				if v[0] == '{' {
					reason = v
				}
			case "error":
				if v[0] == '{' {
					errRaw = v
				}
			}
		}
	} else if raw != nil && !jsonscan.IsNull(raw) {
		return nil, fail(where, ErrMalformed, "response is not an object")
	}
	t.status, t.err = normStatus(evType, status)
	if t.status == wire.StatusFailed && t.err == nil {
		t.err = &wire.ErrorObject{Code: wire.ErrServer, Message: msgFailed}
		if errRaw != nil {
			code, msg := errorMembers(errRaw, nil, nil)
			t.err = upstreamError(code, msg, msgFailed)
		}
	}
	if t.status == wire.StatusIncomplete {
		t.incomplete = incompleteDetails(reason)
	}
	return t, nil
}

// normStatus maps an upstream terminal to one of completed, incomplete, failed. vLLM sends
// response.completed whatever the status (docs/wire.md §6.5 quirk 4) and may say "cancelled"
// (harmony abort, §6.2).
func normStatus(evType wire.EventType, status wire.Status) (wire.Status, *wire.ErrorObject) {
	switch evType {
	case wire.EventFailed:
		return wire.StatusFailed, nil
	case wire.EventIncomplete:
		if status != wire.StatusFailed {
			return wire.StatusIncomplete, nil
		}
	}
	switch status {
	case wire.StatusCompleted, wire.StatusIncomplete, wire.StatusFailed:
		return status, nil
	case "":
		if evType == wire.EventCompleted {
			return wire.StatusCompleted, nil
		}
	case "cancelled":
		return wire.StatusFailed, &wire.ErrorObject{Code: wire.ErrServer, Message: msgCancelled}
	}
	return wire.StatusFailed, &wire.ErrorObject{Code: wire.ErrServer, Message: msgUnfinished}
}

// incompleteDetails keeps only a sane reason (vLLM only ever says max_output_tokens, §6.2).
func incompleteDetails(raw []byte) json.RawMessage {
	reason := "max_output_tokens"
	if raw != nil {
		o := newObjIter(raw, 1)
		for k, v, more := o.next(); more; k, v, more = o.next() {
			if string(k) == "reason" {
				if s, ok := strValue(v); ok && isCode(s) {
					reason = s
				}
			}
		}
	}
	return json.RawMessage(`{"reason":"` + reason + `"}`)
}

// isCode reports whether s looks like an error code or reason: [a-z0-9_.], 1..64 bytes.
func isCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// upstreamError builds a client-safe error from an upstream code (string, or vLLM's integer HTTP
// status, docs/wire.md §6.1) and message (control characters removed, length bounded).
func upstreamError(code, msg []byte, fallback string) *wire.ErrorObject {
	e := &wire.ErrorObject{Code: wire.ErrServer, Message: fallback}
	if s, ok := strValue(code); ok && isCode(s) {
		e.Code = s
	} else if n, ok, _ := jsonscan.Int(code); ok && n == 429 {
		e.Code = "rate_limit_exceeded"
	}
	if s, ok := strValue(msg); ok {
		if s = sanitizeMessage(s); s != "" {
			e.Message = s
		}
	}
	return e
}

const maxMessage = 512

func sanitizeMessage(s string) string {
	out := make([]byte, 0, min(len(s), maxMessage))
	for _, r := range s {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = ' '
		}
		if len(out)+utf8.RuneLen(r) > maxMessage {
			break
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out)
}

// mapUsage maps vLLM's usage (or a chat-style one) to OpenAI's shape (docs/wire.md §3, §6.2). A missing
// or non-object usage is nil (null).
func mapUsage(v []byte) json.RawMessage {
	if v[0] != '{' {
		return nil
	}
	var in, out, total, cached, reasoning int64
	var hasTotal bool
	o := newObjIter(v, 0)
	for k, fv, more := o.next(); more; k, fv, more = o.next() {
		switch string(k) {
		case "input_tokens", "prompt_tokens":
			in = count(fv)
		case "output_tokens", "completion_tokens":
			out = count(fv)
		case "total_tokens":
			total, hasTotal = count(fv), !jsonscan.IsNull(fv)
		case "input_tokens_details", "prompt_tokens_details":
			cached = member(fv, "cached_tokens")
		case "output_tokens_details", "completion_tokens_details":
			reasoning = member(fv, "reasoning_tokens")
		}
	}
	if !hasTotal {
		total = in + out
	}
	b := append([]byte(nil), `{"input_tokens":`...)
	b = strconv.AppendInt(b, in, 10)
	// cache_write_tokens is required in the SDK types and vLLM has no such count: send 0 (§3).
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, cached, 10)
	b = append(b, `,"cache_write_tokens":0},"output_tokens":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, reasoning, 10)
	b = append(b, `},"total_tokens":`...)
	b = strconv.AppendInt(b, total, 10)
	return append(b, '}')
}

func member(obj []byte, name string) int64 {
	if obj[0] != '{' {
		return 0
	}
	o := newObjIter(obj, 1)
	for k, v, more := o.next(); more; k, v, more = o.next() {
		if string(k) == name {
			return count(v)
		}
	}
	return 0
}

// count reads a token count: a non-negative integer (an integral float is accepted), else 0.
func count(v []byte) int64 {
	if n, ok, huge := jsonscan.Int(v); ok {
		if huge || n < 0 {
			return 0
		}
		return n
	}
	if f, err := strconv.ParseFloat(string(v), 64); err == nil && f >= 0 && f < 1<<53 {
		return int64(f)
	}
	return 0
}

// renderDefault renders the minimal valid response object.
func renderDefault(s *Snapshot) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"id":`...)
	b = wire.AppendString(b, s.ResponseID)
	b = append(b, `,"object":"response","created_at":`...)
	b = strconv.AppendInt(b, s.CreatedAt, 10)
	b = append(b, `,"status":`...)
	b = wire.AppendString(b, string(s.Status))
	b = append(b, `,"model":`...)
	b = wire.AppendString(b, s.Model)
	b = append(b, `,"output":`...)
	b = AppendOutput(b, s.Output)
	b = append(b, `,"usage":`...)
	b = appendRawOrNull(b, s.Usage)
	b = append(b, `,"error":`...)
	if s.Error != nil {
		b = append(b, `{"code":`...)
		b = wire.AppendString(b, s.Error.Code)
		b = append(b, `,"message":`...)
		b = wire.AppendString(b, s.Error.Message)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"incomplete_details":`...)
	b = appendRawOrNull(b, s.IncompleteDetails)
	return append(b, '}')
}

// AppendOutput appends items as a JSON array, for Render functions.
func AppendOutput(b []byte, items []wire.Item) []byte {
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendRawOrNull(b, it.JSON)
	}
	return append(b, ']')
}

func appendRawOrNull(b, raw []byte) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	return append(b, raw...)
}

// FromResponse normalises a NON-streamed vLLM response object (raw JSON) into a Result with the
// rules of the streamed path: minted ids (msg_, rs_, fc_, call_), item status normalised
// (null → completed; the last item of an incomplete response is incomplete), usage mapped to
// OpenAI's shape, vLLM's stray fields dropped, items rebuilt in the same field order. So the stored
// items equal what the streamed path produces for the same content, ids aside.
func FromResponse(opts Options, raw []byte) (*Result, error) {
	a := New(opts)
	if !jsonscan.Valid(raw) || raw[jsonscan.SkipWS(raw, 0)] != '{' {
		return nil, fmt.Errorf("accumulator: response: not a JSON object: %w", ErrMalformed)
	}
	t, err := parseResponse("", raw, &a.opts)
	if err != nil {
		return nil, err
	}
	r := &Result{Status: t.status, Usage: t.usage, Error: t.err, IncompleteDetails: t.incomplete}
	items := make([]*item, 0, len(t.output))
	for i, ti := range t.output {
		if ti == nil {
			return nil, fmt.Errorf("accumulator: response: output item %d is malformed: %w", i, ErrMalformed)
		}
		if ti.size() > a.opts.MaxItemBytes {
			return nil, fail("response", ErrLimit, "output item over %d bytes", a.opts.MaxItemBytes)
		}
		it, err := a.create("response", ti.kind, ti.typ, 0, false, nil)
		if err != nil {
			return nil, err
		}
		a.adopt(it, ti)
		it.parts, it.sums, _, _ = a.merge(it, ti)
		it.status = itemStatus(ti, i == len(t.output)-1, r.Status)
		a.finish(it)
		items = append(items, it)
	}
	r.Output = a.output(items) // Options.Prepend first
	return r, nil
}

// errorMembers reads the code and message of an error object (raw JSON), keeping code and msg for
// members it lacks.
func errorMembers(obj, code, msg []byte) ([]byte, []byte) {
	o := newObjIter(obj, 1)
	for k, v, more := o.next(); more; k, v, more = o.next() {
		switch string(k) {
		case "code":
			code = v
		case "message":
			msg = v
		}
	}
	return code, msg
}
