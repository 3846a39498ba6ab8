package rehydrate

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// Stable error codes (the "code" member of the 400 envelope). Clients and tests match on them.
const (
	CodeEncryptedReasoning   = "encrypted_reasoning_unsupported"
	CodeItemIDConflict       = "item_id_conflict"
	CodeReferenceNotFound    = "item_reference_not_found"
	CodeOutputWithoutCall    = "function_call_output_without_call"
	CodeUnsupportedItemType  = "unsupported_item_type"
	CodeUnsupportedContent   = "unsupported_content_type"
	CodeEmptyInput           = "empty_input"
	CodeInvalidType          = "invalid_type"
	CodeInvalidValue         = "invalid_value"
	CodeMissingParameter     = "missing_required_parameter"
	CodeInvalidJSON          = "invalid_json"
	CodeReferenceNotStorable = "item_reference_not_storable"
	// CodeInvalidEncryptedContent: respgate's own encrypted_content that does not open (another
	// tenant's, modified, another item's, or under a retired or unknown key).
	CodeInvalidEncryptedContent = "invalid_encrypted_content"
)

const (
	defaultHistoryParam       = "previous_response_id"
	upstreamSupportedItemList = "message, reasoning, function_call, function_call_output and item_reference"
	storedSupportedItemList   = "message, reasoning, function_call and function_call_output"
)

// kind is what an item is, decided from its members (type, or role/id for the type-less forms).
type kind int

const (
	kindMessage kind = iota + 1
	kindReasoning
	kindFunctionCall
	kindFunctionCallOutput
	kindReference
	kindOther // any other type: storable verbatim, never sent upstream
)

// view is one item scanned once: the spans of the members rehydration reads, and the parts of its
// "content" and "output" arrays. Later duplicates of a key win, as in encoding/json and Python's
// json.
type view struct {
	b                                        []byte
	typ, id, role, content, status           jsonscan.Span
	callID, name, arguments, output, summary jsonscan.Span
	encrypted, namespace                     jsonscan.Span
	contentParts, outputParts                []part // when content / output is an array
	kind                                     kind
}

// part is one element of a content (or output) array: an object's members, or obj false for an
// element that is not an object.
type part struct {
	obj                                  bool
	typ, text, refusal, imageURL, detail jsonscan.Span
}

// scanItem validates b, which must be exactly one JSON object, in a single pass, recording the
// members rehydration reads and the parts of its content/output arrays. Everything projection
// later copies comes from these spans, so no byte is scanned twice. parts is scratch space for the
// parts (reused across items by Build); the view's part slices point into the returned slice.
func scanItem(b []byte, parts []part) (view, []part, error) {
	v := view{b: b}
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return v, parts, jsonscan.ErrSyntax
	}
	i++
	cs, ce, ps, pe := 0, 0, 0, 0
	for n := 0; ; n++ {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) {
			return v, parts, jsonscan.ErrSyntax
		}
		if b[i] == '}' {
			i++
			break
		}
		var m jsonscan.Member
		var err error
		m.Key, i, err = scanKey(b, i, n)
		if err != nil {
			return v, parts, err
		}
		key := keyBytes(b, m)
		var ve int
		var vf jsonscan.Flags
		if (string(key) == "content" || string(key) == "output") && i < len(b) && b[i] == '[' {
			start := len(parts)
			ve, vf, parts, err = scanParts(b, i, parts)
			if string(key) == "content" {
				cs, ce = start, len(parts)
			} else {
				ps, pe = start, len(parts)
			}
		} else {
			ve, vf, err = jsonscan.SkipValue(b, i, 1) // inside the item object
		}
		if err != nil {
			return v, parts, err
		}
		v.set(key, jsonscan.Span{S: i, E: ve, F: vf})
		i = ve
	}
	if jsonscan.SkipWS(b, i) != len(b) {
		return v, parts, jsonscan.ErrSyntax
	}
	if v.content.Kind(b) == '[' {
		v.contentParts = parts[cs:ce:ce]
	}
	if v.output.Kind(b) == '[' {
		v.outputParts = parts[ps:pe:pe]
	}
	return v, parts, nil
}

// scanKey scans the n-th member's comma (for n > 0), key and colon, starting at b[i], which is not
// whitespace. It returns the key's span and the index of the value, whitespace skipped.
func scanKey(b []byte, i, n int) (jsonscan.Span, int, error) {
	if n > 0 {
		if b[i] != ',' {
			return jsonscan.Span{}, i, jsonscan.ErrSyntax
		}
		i = jsonscan.SkipWS(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return jsonscan.Span{}, i, jsonscan.ErrSyntax
	}
	ke, kf, err := jsonscan.ScanString(b, i)
	if err != nil {
		return jsonscan.Span{}, i, err
	}
	k := jsonscan.Span{S: i, E: ke, F: kf}
	i = jsonscan.SkipWS(b, ke)
	if i >= len(b) || b[i] != ':' {
		return jsonscan.Span{}, i, jsonscan.ErrSyntax
	}
	return k, jsonscan.SkipWS(b, i+1), nil
}

// set records val as the value of the member named key, if rehydration reads it; a later duplicate
// overwrites an earlier one.
func (v *view) set(key []byte, val jsonscan.Span) {
	switch string(key) {
	case "type":
		v.typ = val
	case "id":
		v.id = val
	case "role":
		v.role = val
	case "content":
		v.content = val
	case "status":
		v.status = val
	case "call_id":
		v.callID = val
	case "name":
		v.name = val
	case "arguments":
		v.arguments = val
	case "output":
		v.output = val
	case "summary":
		v.summary = val
	case "encrypted_content":
		v.encrypted = val
	case "namespace":
		v.namespace = val
	}
}

// scanParts validates the array at b[i] (a member of the item object) and appends one part per
// element.
func scanParts(b []byte, i int, parts []part) (int, jsonscan.Flags, []part, error) {
	var flags jsonscan.Flags
	i = jsonscan.SkipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, 0, parts, nil
	}
	for {
		if i >= len(b) {
			return 0, 0, parts, jsonscan.ErrSyntax
		}
		var p part
		if b[i] == '{' {
			p.obj = true
			o := jsonscan.NewObj(b, i, 2) // inside the item and its array
			for {
				m, ok := o.Next()
				if !ok {
					break
				}
				flags |= m.Key.F | m.Val.F
				switch string(keyBytes(b, m)) {
				case "type":
					p.typ = m.Val
				case "text":
					p.text = m.Val
				case "refusal":
					p.refusal = m.Val
				case "image_url":
					p.imageURL = m.Val
				case "detail":
					p.detail = m.Val
				}
			}
			if err := o.Err(); err != nil {
				return 0, 0, parts, err
			}
			i = o.End()
		} else {
			e, f, err := jsonscan.SkipValue(b, i, 2)
			if err != nil {
				return 0, 0, parts, err
			}
			flags |= f
			i = e
		}
		parts = append(parts, p)
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) {
			return 0, 0, parts, jsonscan.ErrSyntax
		}
		switch b[i] {
		case ']':
			return i + 1, flags, parts, nil
		case ',':
			i = jsonscan.SkipWS(b, i+1)
		default:
			return 0, 0, parts, jsonscan.ErrSyntax
		}
	}
}

// where names an item in errors: an element of the client's input array (or of another array the
// caller names, e.g. "items[2]"), or a stored history item (whose param is the request member that
// brought the history in).
type where struct {
	prefix string // "input" or the caller's name; for history, the history param
	idx    int
	hist   bool
	ref    bool   // resolved from an item_reference
	id     string // the item's id when known, for messages about stored items
}

// param is the error's param for the item, or for one of its members (path like ".content[0]").
// History items have no addressable index in the request, so their param is the request member
// that loaded them.
func (w where) param(path string) string {
	if w.hist {
		return w.prefix
	}
	if w.ref {
		path = "" // the stored item's members are not in the request
	}
	if w.idx < 0 {
		return w.prefix + path
	}
	return w.prefix + "[" + strconv.Itoa(w.idx) + "]" + path
}

// name is how a message refers to the item or one of its members.
func (w where) name(path string) string {
	var item string
	switch {
	case w.hist:
		item = fmt.Sprintf("stored item '%s' (from '%s')", w.id, w.prefix)
	case w.ref:
		item = fmt.Sprintf("item '%s' referenced by '%s'", w.id, w.param(""))
	default:
		return "'" + w.param(path) + "'"
	}
	if path == "" {
		return item
	}
	return "'" + path[1:] + "' of " + item
}

func (w where) invalidType(path, want string) error {
	return wire.Invalid(w.param(path), CodeInvalidType, "Invalid type for %s: expected %s.", w.name(path), want)
}

func (w where) missing(path string) error {
	return wire.Invalid(w.param(path), CodeMissingParameter, "Missing required parameter: %s.", w.name(path))
}

func (w where) invalidJSON() error {
	return wire.Invalid(w.param(""), CodeInvalidJSON, "Invalid JSON in %s.", w.name(""))
}

// classify decides the item's kind. Items without "type" are messages when they have a role, and
// item references when they have an id and no content (docs/wire.md §4: "type may be omitted").
func classify(v *view, w where) error {
	b := v.b
	if !v.typ.Absent(b) {
		if !v.typ.IsStr(b) {
			return w.invalidType(".type", "a string")
		}
		switch word(b, v.typ) {
		case wire.TypeMessage:
			v.kind = kindMessage
		case wire.TypeReasoning:
			v.kind = kindReasoning
		case wire.TypeFunctionCall:
			v.kind = kindFunctionCall
		case wire.TypeFunctionCallOutput:
			v.kind = kindFunctionCallOutput
		case wire.TypeItemReference:
			v.kind = kindReference
		default:
			v.kind = kindOther
		}
		return nil
	}
	switch {
	case v.role.Present():
		v.kind = kindMessage
	case v.id.Present() && !v.content.Present():
		v.kind = kindReference
	default:
		return wire.Invalid(w.param(".type"), CodeMissingParameter,
			"Missing required parameter: %s (an item needs a 'type', or a 'role' and 'content' for a message).",
			w.name(".type"))
	}
	return nil
}

// idOf returns the item's id ("" when absent or null). It reuses it.ID when that is the same
// string, so indexing stored items costs no allocation.
func idOf(it *wire.Item, v *view, w where) (string, error) {
	b := v.b
	if v.id.Absent(b) {
		return "", nil
	}
	if !v.id.IsStr(b) {
		return "", w.invalidType(".id", "a string")
	}
	if v.id.F&(jsonscan.Escaped|jsonscan.BadUTF8) == 0 && string(v.id.Inner(b)) == it.ID {
		return it.ID, nil
	}
	return str(b, v.id), nil
}

// words are the names rehydration switches on; word returns them without allocating.
var words = [...]string{
	wire.TypeMessage, wire.TypeReasoning, wire.TypeFunctionCall, wire.TypeFunctionCallOutput,
	wire.TypeItemReference, "user", "assistant", "system", "developer", "input_text", "output_text",
	"input_image", "input_file", "refusal", "reasoning_text", "summary_text", "function",
}

// word decodes a string value, returning the shared constant for the names in words (so switching
// on a stored item's type or role allocates nothing).
func word(b []byte, sp jsonscan.Span) string {
	if sp.F&(jsonscan.Escaped|jsonscan.BadUTF8) == 0 {
		raw := sp.Inner(b)
		for _, w := range words {
			if string(raw) == w {
				return w
			}
		}
	}
	return str(b, sp)
}

// checkRole validates a message's role and returns it.
func checkRole(v *view, w where) (string, error) {
	b := v.b
	if v.role.Absent(b) {
		return "", w.missing(".role")
	}
	if !v.role.IsStr(b) {
		return "", w.invalidType(".role", "a string")
	}
	r := word(b, v.role)
	switch r {
	case "user", "assistant", "system", "developer":
	default:
		return "", wire.Invalid(w.param(".role"), CodeInvalidValue,
			"Invalid value for %s: '%s'. Supported values are: 'user', 'assistant', 'system' and 'developer'.",
			w.name(".role"), wire.Clip(r))
	}
	return r, nil
}

// checkContent validates that a message has content that is a string or an array.
func checkContent(v *view, w where) error {
	b := v.b
	if v.content.Absent(b) {
		return w.missing(".content")
	}
	if k := v.content.Kind(b); k != '"' && k != '[' {
		return w.invalidType(".content", "a string or an array of content parts")
	}
	return nil
}

// Build reads every stored item of a conversation on every turn, so it cannot afford
// encoding/json (which scans each item twice and allocates for every value). It uses
// internal/jsonscan, the scanner every package that reads untrusted JSON shares (its package
// comment states the rules): an item is walked once, the members rehydration cares about are
// recorded as spans, and the projection copies string tokens verbatim (JSON in, JSON out: no
// unescape/re-escape round trip). What the scanner walks is validated, so the bytes projection
// copies are always well-formed JSON, even when the input is not. The helpers below read and copy
// the strings of those spans; strings are written with wire.AppendString.

// keyBytes returns the member's key, unescaped. Switch on string(keyBytes(b, m)): that conversion
// costs no allocation (the compiler compares in place), which matters because every member of
// every stored item goes through it on every turn.
func keyBytes(b []byte, m jsonscan.Member) []byte {
	if m.Key.Plain() {
		return m.Key.Inner(b)
	}
	var s string
	if json.Unmarshal(m.Key.Bytes(b), &s) != nil {
		return nil
	}
	return []byte(s)
}

// keyIs reports whether the member's key equals name, without allocating for plain keys.
func keyIs(b []byte, m jsonscan.Member, name string) bool {
	return string(keyBytes(b, m)) == name
}

// str decodes a string value as encoding/json would (invalid UTF-8 and lone surrogates become
// U+FFFD). Plain strings cost one allocation (the result); the others go through encoding/json.
func str(b []byte, sp jsonscan.Span) string {
	if sp.Plain() {
		return string(sp.Inner(b))
	}
	var s string
	_ = json.Unmarshal(sp.Bytes(b), &s) // sp was validated by the scanner
	return s
}

// strIs reports whether the string value at sp equals lit, without allocating for plain strings.
func strIs(b []byte, sp jsonscan.Span, lit string) bool {
	if !sp.IsStr(b) {
		return false
	}
	if sp.Plain() {
		return string(sp.Inner(b)) == lit
	}
	return str(b, sp) == lit
}

// appendStr appends the string token at sp as valid UTF-8 JSON: verbatim unless it holds invalid
// UTF-8, which is replaced by U+FFFD as encoding/json would when decoding it.
func appendStr(dst, b []byte, sp jsonscan.Span) []byte {
	if sp.F&jsonscan.BadUTF8 == 0 {
		return append(dst, sp.Bytes(b)...)
	}
	return wire.AppendString(dst, str(b, sp))
}

// appendStrInner appends the string at sp without its quotes (for joining several strings into one).
func appendStrInner(dst, b []byte, sp jsonscan.Span) []byte {
	if sp.F&jsonscan.BadUTF8 == 0 {
		return append(dst, sp.Inner(b)...)
	}
	q := wire.AppendString(nil, str(b, sp))
	return append(dst, q[1:len(q)-1]...)
}
