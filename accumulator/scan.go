package accumulator

import (
	"bytes"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A small JSON scanner. Upstream events are untrusted input and most of them are tiny deltas, so the
// hot path must not decode whole objects: the scanner walks one object's top-level members and
// hands out raw value spans, validating the syntax of everything it skips. Nothing here allocates.

var errSyntax = errors.New("malformed JSON")

// maxDepth bounds nesting so that hostile input cannot exhaust the stack.
const maxDepth = 200

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(d []byte, i int) int {
	for i < len(d) && isWS(d[i]) {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// plain marks the bytes a string scan can skip: not a quote, backslash or control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString returns the index just past the string token that starts at d[i] == '"'. It rejects
// bad escapes and raw control characters (which would also break SSE framing); bytes ≥ 0x80 are
// passed as they are, valid UTF-8 or not, so that text split mid-rune joins back byte for byte.
func scanString(d []byte, i int) (int, error) {
	i++
	for i < len(d) {
		for i < len(d) && plain[d[i]] { // fast path: bytes that need no attention
			i++
		}
		if i >= len(d) {
			break
		}
		c := d[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(d) {
				return 0, errSyntax
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return 0, errSyntax
				}
				i += 6
			default:
				return 0, errSyntax
			}
		case c < 0x20:
			return 0, errSyntax
		default:
			i++
		}
	}
	return 0, errSyntax
}

func scanNumber(d []byte, i int) (int, error) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		return 0, errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		s := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == s {
			return 0, errSyntax
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		s := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		if i == s {
			return 0, errSyntax
		}
	}
	return i, nil
}

// skipValue returns the index just past the JSON value that starts at d[i].
func skipValue(d []byte, i, depth int) (int, error) {
	if i >= len(d) {
		return 0, errSyntax
	}
	switch c := d[i]; {
	case c == '"':
		return scanString(d, i)
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return 0, errSyntax
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(d, i+1)
		if i < len(d) && d[i] == closer {
			return i + 1, nil
		}
		for {
			var err error
			if c == '{' {
				if i >= len(d) || d[i] != '"' {
					return 0, errSyntax
				}
				if i, err = scanString(d, i); err != nil {
					return 0, err
				}
				i = skipWS(d, i)
				if i >= len(d) || d[i] != ':' {
					return 0, errSyntax
				}
				i = skipWS(d, i+1)
			}
			if i, err = skipValue(d, i, depth+1); err != nil {
				return 0, err
			}
			i = skipWS(d, i)
			if i >= len(d) {
				return 0, errSyntax
			}
			if d[i] == ',' {
				i = skipWS(d, i+1)
				continue
			}
			if d[i] == closer {
				return i + 1, nil
			}
			return 0, errSyntax
		}
	case c == 't':
		return literal(d, i, "true")
	case c == 'f':
		return literal(d, i, "false")
	case c == 'n':
		return literal(d, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return scanNumber(d, i)
	}
	return 0, errSyntax
}

func literal(d []byte, i int, lit string) (int, error) {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// validJSON reports whether d is exactly one JSON value (surrounding white space allowed).
func validJSON(d []byte) bool {
	i := skipWS(d, 0)
	e, err := skipValue(d, i, 0)
	return err == nil && skipWS(d, e) == len(d)
}

// objIter walks the members of one JSON object. Keys are returned raw (without quotes, escapes
// undecoded); values are raw spans, already syntax-checked.
type objIter struct {
	d     []byte
	i     int
	n     int
	depth int
	end   bool
	err   error
}

func newObjIter(d []byte, depth int) objIter {
	i := skipWS(d, 0)
	if i >= len(d) || d[i] != '{' {
		return objIter{err: errSyntax, end: true}
	}
	return objIter{d: d, i: i + 1, depth: depth}
}

func (o *objIter) next() (key, val []byte, ok bool) {
	if o.end {
		return nil, nil, false
	}
	d := o.d
	i := skipWS(d, o.i)
	if i < len(d) && d[i] == '}' {
		o.end, o.i = true, i+1
		return nil, nil, false
	}
	if o.n > 0 {
		if i >= len(d) || d[i] != ',' {
			return o.fail()
		}
		i = skipWS(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return o.fail()
	}
	ke, err := scanString(d, i)
	if err != nil {
		return o.fail()
	}
	key = d[i+1 : ke-1]
	i = skipWS(d, ke)
	if i >= len(d) || d[i] != ':' {
		return o.fail()
	}
	i = skipWS(d, i+1)
	ve, err := skipValue(d, i, o.depth+1)
	if err != nil {
		return o.fail()
	}
	val = d[i:ve]
	o.i = ve
	o.n++
	if bytes.IndexByte(key, '\\') >= 0 {
		key = appendUnescaped(nil, key) // rare: an escaped key
	}
	return key, val, true
}

func (o *objIter) fail() ([]byte, []byte, bool) {
	o.err, o.end = errSyntax, true
	return nil, nil, false
}

// finish reports a syntax error met while iterating, or trailing bytes after the object.
func (o *objIter) finish() error {
	if o.err != nil {
		return o.err
	}
	for o.next(); !o.end; o.next() { // drain members the caller did not read
	}
	if o.err != nil {
		return o.err
	}
	if skipWS(o.d, o.i) != len(o.d) {
		return errSyntax
	}
	return nil
}

// arrIter walks the elements of a JSON array that has already been syntax-checked.
type arrIter struct {
	d   []byte
	i   int
	n   int
	end bool
	err error
}

func newArrIter(d []byte) arrIter {
	i := skipWS(d, 0)
	if i >= len(d) || d[i] != '[' {
		return arrIter{err: errSyntax, end: true}
	}
	return arrIter{d: d, i: i + 1}
}

func (a *arrIter) next() ([]byte, bool) {
	if a.end {
		return nil, false
	}
	d := a.d
	i := skipWS(d, a.i)
	if i < len(d) && d[i] == ']' {
		a.end, a.i = true, i+1
		return nil, false
	}
	if a.n > 0 {
		if i >= len(d) || d[i] != ',' {
			a.err, a.end = errSyntax, true
			return nil, false
		}
		i = skipWS(d, i+1)
	}
	e, err := skipValue(d, i, 1)
	if err != nil {
		a.err, a.end = errSyntax, true
		return nil, false
	}
	a.i, a.n = e, a.n+1
	return d[i:e], true
}

// isNull reports whether a raw value is the literal null.
func isNull(v []byte) bool { return string(v) == "null" }

// strContents returns the raw contents of a string token (escapes undecoded).
func strContents(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

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
func intValue(v []byte) (n int64, ok, huge bool) {
	neg := false
	if len(v) > 0 && v[0] == '-' {
		neg, v = true, v[1:]
	}
	if len(v) == 0 {
		return 0, false, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		if n > 1<<53 {
			huge = true
			continue
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true, huge
}

// appendUnescaped appends the decoded contents of a syntax-checked string token. Lone surrogates
// become U+FFFD, as in encoding/json; all other bytes are copied as they are.
func appendUnescaped(dst, s []byte) []byte {
	for {
		k := bytes.IndexByte(s, '\\')
		if k < 0 || k+1 >= len(s) {
			return append(dst, s...)
		}
		dst = append(dst, s[:k]...)
		s = s[k:]
		switch s[1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			if len(s) < 6 {
				return dst
			}
			r := hex4(s[2:6])
			s = s[6:]
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
					if r2 := hex4(s[2:6]); 0xdc00 <= r2 && r2 < 0xe000 {
						r = utf16.DecodeRune(r, r2)
						s = s[6:]
						dst = utf8.AppendRune(dst, r)
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, s[1])
		}
		s = s[2:]
	}
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string token. Invalid UTF-8 becomes U+FFFD (as encoding/json
// does); U+2028/U+2029 are escaped for JavaScript consumers.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendBytesString is appendString for a byte slice, without copying it.
func appendBytesString(dst, b []byte) []byte { return appendString(dst, bstr(b)) }

// bstr views b as a string for read-only use within a call.
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendCompact appends a syntax-checked JSON value without insignificant white space, so that
// raw upstream JSON passed through stays on one SSE data line.
func appendCompact(dst, v []byte) []byte {
	inStr := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inStr {
			dst = append(dst, c)
			if c == '\\' && i+1 < len(v) {
				i++
				dst = append(dst, v[i])
			} else if c == '"' {
				inStr = false
			}
			continue
		}
		if isWS(c) {
			continue
		}
		if c == '"' {
			inStr = true
		}
		dst = append(dst, c)
	}
	return dst
}
