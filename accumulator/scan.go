package accumulator

import (
	"bytes"

	"github.com/respgate/respgate/internal/jsonscan"
)

// The accumulator reads upstream events with internal/jsonscan, the scanner every package that
// reads untrusted JSON shares (its package comment states the rules: RFC 8259 syntax, nesting
// bounded by jsonscan.MaxDepth, invalid UTF-8 accepted and flagged, no allocation). Most events
// are tiny deltas, so the hot path never decodes whole objects: it walks one object's top-level
// members and takes raw value spans, validated as they are walked. This file adapts the scanner
// to the accumulator's raw-slice style.

// validJSON reports whether d is exactly one JSON value (surrounding white space allowed).
func validJSON(d []byte) bool { return jsonscan.Valid(d) }

func skipWS(d []byte, i int) int { return jsonscan.SkipWS(d, i) }

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

// isNull reports whether a raw value is the literal null.
func isNull(v []byte) bool { return jsonscan.IsNull(v) }

// strContents returns the raw contents of a string token (escapes undecoded).
func strContents(v []byte) ([]byte, bool) { return jsonscan.StrContents(v) }

// strValue decodes a string token into a new string.
func strValue(v []byte) (string, bool) {
	c, ok := strContents(v)
	if !ok {
		return "", false
	}
	if bytes.IndexByte(c, '\\') < 0 {
		return string(c), true
	}
	return string(appendUnescaped(nil, c)), true
}

// intValue parses a JSON integer, reporting overflow past 1<<53 as huge.
func intValue(v []byte) (n int64, ok, huge bool) { return jsonscan.Int(v) }

// appendUnescaped appends the decoded contents of a validated string token; invalid UTF-8 is
// copied as it is, so that text split mid-rune joins back byte for byte.
func appendUnescaped(dst, s []byte) []byte { return jsonscan.AppendUnescaped(dst, s) }

// appendString appends s as a JSON string token (always valid UTF-8).
func appendString(dst []byte, s string) []byte { return jsonscan.AppendQuote(dst, s) }

// appendBytesString is appendString for a byte slice, without copying it.
func appendBytesString(dst, b []byte) []byte { return jsonscan.AppendQuoteBytes(dst, b) }

// bstr views b as a string for read-only use within a call.
func bstr(b []byte) string { return jsonscan.BytesString(b) }

// appendCompact appends a validated JSON value without insignificant white space, so that raw
// upstream JSON passed through stays on one SSE data line.
func appendCompact(dst, v []byte) []byte { return jsonscan.AppendCompact(dst, v) }
