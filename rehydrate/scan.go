package rehydrate

import (
	"encoding/json"

	"github.com/respgate/respgate/internal/jsonscan"
)

// Build reads every stored item of a conversation on every turn, so it cannot afford
// encoding/json (which scans each item twice and allocates for every value). It uses
// internal/jsonscan, the scanner every package that reads untrusted JSON shares (its package
// comment states the rules: RFC 8259 syntax, nesting bounded by jsonscan.MaxDepth, invalid UTF-8
// accepted and flagged, no allocation): an item is walked once, the members rehydration cares about
// are recorded as spans, and the projection copies string tokens verbatim (JSON in, JSON out: no
// unescape/re-escape round trip). What the scanner walks is validated, so the bytes projection
// copies are always well-formed JSON, even when the input is not. This file adapts the scanner.

// span is the position of one JSON value inside a byte slice and the flags of its strings.
type span = jsonscan.Span

// member is one object member: the key's string token (quotes included) and the value.
type member = jsonscan.Member

// String flags, OR-ed over every string inside a value.
const (
	strEscaped = jsonscan.Escaped // contains a backslash escape
	strBadUTF8 = jsonscan.BadUTF8 // contains bytes that are not valid UTF-8
)

func skipWS(b []byte, i int) int { return jsonscan.SkipWS(b, i) }

// newObjIter walks the object at b[i], a value already validated (so depth counts from it).
func newObjIter(b []byte, i int) jsonscan.Obj { return jsonscan.NewObj(b, i, 0) }

// keyBytes returns the member's key, unescaped. Switch on string(keyBytes(b, m)): that conversion
// costs no allocation (the compiler compares in place), which matters because every member of
// every stored item goes through it on every turn.
func keyBytes(b []byte, m member) []byte {
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
func keyIs(b []byte, m member, name string) bool {
	return string(keyBytes(b, m)) == name
}

// str decodes a string value as encoding/json would (invalid UTF-8 and lone surrogates become
// U+FFFD). Plain strings cost one allocation (the result); the others go through encoding/json.
func str(b []byte, sp span) string {
	if sp.Plain() {
		return string(sp.Inner(b))
	}
	var s string
	_ = json.Unmarshal(sp.Bytes(b), &s) // sp was validated by the scanner
	return s
}

// strIs reports whether the string value at sp equals lit, without allocating for plain strings.
func strIs(b []byte, sp span, lit string) bool {
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
func appendStr(dst, b []byte, sp span) []byte {
	if sp.F&strBadUTF8 == 0 {
		return append(dst, sp.Bytes(b)...)
	}
	return appendQuoted(dst, str(b, sp))
}

// appendStrInner appends the string at sp without its quotes (for joining several strings into one).
func appendStrInner(dst, b []byte, sp span) []byte {
	if sp.F&strBadUTF8 == 0 {
		return append(dst, sp.Inner(b)...)
	}
	q := appendQuoted(nil, str(b, sp))
	return append(dst, q[1:len(q)-1]...)
}

// appendQuoted appends s as a JSON string.
func appendQuoted(dst []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals; invalid UTF-8 becomes U+FFFD
	return append(dst, q...)
}

// scanTop checks that b is one JSON object, optionally surrounded by space, and returns an iterator
// over its members.
func scanTop(b []byte) jsonscan.Obj { return jsonscan.NewObj(b, 0, 0) }
