package chatbridge

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"slices"
	"strconv"
	"strings"

	"github.com/respgate/respgate/wire"
)

// Limits bound the canonical form of one request (scope and history together). Over a bound the
// request gets no replay and leaves no record; it is never an error (docs/chat-completions.md).
// The limits are part of the scope, so changing them never matches old records by accident.
type Limits struct {
	// MaxBytes bounds the canonical bytes of the scope and every message (default 32 MiB).
	MaxBytes int
	// MaxDepth bounds the JSON nesting of the scope's members and of each message (default 64).
	MaxDepth int
}

func (l Limits) orDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = 32 << 20
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 64
	}
	return l
}

// domain tags every digest, so they can never be confused with another SHA-256 use.
const domain = "respgate.chat-replay.v1"

var errOverLimit = errors.New("chatbridge: canonical form over its limits")

// Scope separates histories whose model context differs although their messages are equal
// (issue 18 item 2). Transport details (stream, stream_options) and per-turn settings
// (tool_choice, sampling) are not part of it.
type Scope struct {
	Tenant          string          // the tenant fingerprint (an HMAC, never a key)
	Model           string          // the model as requested
	Tools           json.RawMessage // "tools" as sent (nil: none)
	ReasoningEffort string          // "reasoning_effort" as sent ("" none)
	ResponseFormat  json.RawMessage // "response_format" as sent (nil: none)
}

// History is the identity of an incoming visible history: the scope digest and the SHA-256 chain
// digest at every message boundary. Build it with Identify.
type History struct {
	// Scope is the scope's own digest (hex); records are kept per scope.
	Scope string
	// Digests has len(messages)+1 entries: Digests[k] is the chain digest (hex) of the scope and
	// the first k messages.
	Digests []string
	// envelopes[k] is the fingerprint of message k's canonical form.
	envelopes []string
	h         hash.Hash // the chain's state after every message
	lim       Limits
	used      int // canonical bytes so far
}

// canonWriter appends canonical JSON within a byte budget and a depth bound.
type canonWriter struct {
	dst      []byte
	budget   int
	maxDepth int
}

// value appends v's canonical form: object members sorted by name, members whose value is null
// left out (absent and null are the same), arrays in order, strings escaped by
// wire.AppendString, numbers exactly as sent.
func (w *canonWriter) value(v any, depth int) error {
	if depth > w.maxDepth {
		return errOverLimit
	}
	switch x := v.(type) {
	case nil:
		w.dst = append(w.dst, "null"...)
	case bool:
		w.dst = strconv.AppendBool(w.dst, x)
	case json.Number:
		w.dst = append(w.dst, x...)
	case string:
		w.dst = wire.AppendString(w.dst, x)
	case []any:
		w.dst = append(w.dst, '[')
		for i, e := range x {
			if i > 0 {
				w.dst = append(w.dst, ',')
			}
			if err := w.value(e, depth+1); err != nil {
				return err
			}
		}
		w.dst = append(w.dst, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k, e := range x {
			if e != nil {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		w.dst = append(w.dst, '{')
		for i, k := range keys {
			if i > 0 {
				w.dst = append(w.dst, ',')
			}
			w.dst = append(wire.AppendString(w.dst, k), ':')
			if err := w.value(x[k], depth+1); err != nil {
				return err
			}
		}
		w.dst = append(w.dst, '}')
	}
	if len(w.dst) > w.budget {
		return errOverLimit
	}
	return nil
}

// canonMessage normalises a decoded message (issue 18 item 2): content that is absent, null,
// "" or [] is ""; an array of plain text parts is its text (an assistant's parts concatenated;
// another role's only when there is exactly one part, since vLLM joins several with newlines);
// for an assistant, absent or null tool_calls equal [] and a tool call's index equal to its
// position is dropped. Everything else, unknown members included, is hashed as sent; tool-call
// arguments are strings and stay exactly as sent.
func canonMessage(v any) any {
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	assistant := obj["role"] == "assistant"
	obj["content"] = canonContent(obj["content"], assistant)
	if !assistant {
		return obj
	}
	calls, _ := obj["tool_calls"].([]any)
	if calls != nil && len(calls) == 0 {
		delete(obj, "tool_calls") // [] equals absent; null is left out by the writer
		return obj
	}
	for i, c := range calls {
		call, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if n, ok := call["index"].(json.Number); ok && string(n) == strconv.Itoa(i) {
			delete(call, "index")
		}
	}
	return obj
}

func canonContent(c any, concat bool) any {
	switch x := c.(type) {
	case nil:
		return ""
	case []any:
		if len(x) == 0 {
			return ""
		}
		texts, ok := plainTexts(x)
		if ok && (concat || len(x) == 1) {
			return strings.Join(texts, "")
		}
	}
	return c
}

// plainTexts returns the texts of parts when every part is exactly {"type":"text","text":…}
// (null members aside).
func plainTexts(parts []any) ([]string, bool) {
	texts := make([]string, len(parts))
	for i, p := range parts {
		m, ok := p.(map[string]any)
		if !ok || m["type"] != "text" {
			return nil, false
		}
		t, ok := m["text"].(string)
		if !ok {
			return nil, false
		}
		for k, v := range m {
			if k != "type" && k != "text" && v != nil {
				return nil, false
			}
		}
		texts[i] = t
	}
	return texts, true
}

// canonical returns raw's canonical form under the history's remaining budget.
func (h *History) canonical(v any) ([]byte, error) {
	w := canonWriter{budget: h.lim.MaxBytes - h.used, maxDepth: h.lim.MaxDepth}
	if err := w.value(v, 0); err != nil {
		return nil, err
	}
	h.used += len(w.dst)
	return w.dst, nil
}

// frame writes b to h with its unsigned 64-bit big-endian length first.
func frame(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

func sum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

// fingerprint is the digest of one canonical message on its own (the envelope fingerprint).
func fingerprint(canon []byte) string {
	h := sha256.New()
	h.Write([]byte(domain + "/envelope\x00"))
	frame(h, canon)
	return sum(h)
}

// scopeValue is the scope as one JSON value for the canonical writer.
func scopeValue(sc *Scope, lim Limits) (map[string]any, error) {
	v := map[string]any{
		"tenant":           sc.Tenant,
		"model":            sc.Model,
		"reasoning_effort": sc.ReasoningEffort,
		"limits":           []any{json.Number(strconv.Itoa(lim.MaxBytes)), json.Number(strconv.Itoa(lim.MaxDepth))},
	}
	for k, raw := range map[string]json.RawMessage{"tools": sc.Tools, "response_format": sc.ResponseFormat} {
		if len(raw) == 0 {
			continue
		}
		d, err := wire.DecodeValue(raw)
		if err != nil {
			return nil, err
		}
		v[k] = d
	}
	return v, nil
}

// Identify computes the identity of msgs under sc. ok is false when the canonical form is over
// lim or a message is not valid JSON: such a history is neither replayed nor captured.
func Identify(sc *Scope, msgs []Message, lim Limits) (h *History, ok bool) {
	h = &History{lim: lim.orDefaults(), h: sha256.New(), Digests: make([]string, 0, len(msgs)+1), envelopes: make([]string, 0, len(msgs))}
	sv, err := scopeValue(sc, h.lim)
	if err != nil {
		return nil, false
	}
	scope, err := h.canonical(sv)
	if err != nil {
		return nil, false
	}
	h.Scope = scopeDigest(scope)
	h.h.Write([]byte(domain + "\x00"))
	frame(h.h, scope)
	h.Digests = append(h.Digests, sum(h.h))
	for _, m := range msgs {
		v, err := wire.DecodeValue(m.JSON)
		if err != nil {
			return nil, false
		}
		canon, err := h.canonical(canonMessage(v))
		if err != nil {
			return nil, false
		}
		frame(h.h, canon)
		h.Digests = append(h.Digests, sum(h.h))
		h.envelopes = append(h.envelopes, fingerprint(canon))
	}
	return h, true
}

func scopeDigest(canon []byte) string {
	s := sha256.New()
	s.Write([]byte(domain + "/scope\x00"))
	frame(s, canon)
	return sum(s)
}

// extend returns the chain digest of the history followed by the message env (JSON), and env's
// fingerprint, without changing h. ok is false when env is over the limits.
func (h *History) extend(env []byte) (end, fp string, ok bool) {
	v, err := wire.DecodeValue(env)
	if err != nil {
		return "", "", false
	}
	canon, err := h.canonical(canonMessage(v))
	if err != nil {
		return "", "", false
	}
	c := h.h.(hash.Cloner)
	next, err := c.Clone()
	if err != nil {
		return "", "", false
	}
	frame(next, canon)
	return sum(next), fingerprint(canon), true
}
