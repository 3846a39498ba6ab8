package rehydrate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// This file is a small validating JSON scanner. Build reads every stored item of a conversation on
// every turn, so it cannot afford encoding/json (which scans each item twice and allocates for every
// value): the scanner walks an item once, records where the members it cares about are, and lets the
// projection copy string tokens verbatim (JSON in, JSON out: no unescape/re-escape round trip).
// It validates what it walks (strings, numbers, literals, nesting), so the bytes it copies are
// always well-formed JSON, even when the input is not.

// errSyntax reports bytes that are not one well-formed JSON value.
var errSyntax = errors.New("rehydrate: invalid JSON")

// maxDepth bounds nesting, as encoding/json does (it uses 10000 too).
const maxDepth = 10000

// String flags, OR-ed over every string inside a value.
const (
	strEscaped = 1 << iota // contains a backslash escape
	strBadUTF8             // contains bytes that are not valid UTF-8
)

// span is the position of one JSON value inside a byte slice: b[s:e]. e == 0 means absent.
// f holds the string flags of every string inside it.
type span struct{ s, e, f int }

func (sp span) present() bool { return sp.e != 0 }

// kind is the first byte of the value: '"', '{', '[', 'n', 't', 'f', or a number's first byte;
// 0 when absent.
func (sp span) kind(b []byte) byte {
	if sp.e == 0 {
		return 0
	}
	return b[sp.s]
}

// absent reports a member that is missing or null.
func (sp span) absent(b []byte) bool { return sp.e == 0 || b[sp.s] == 'n' }

// isStr reports a string value.
func (sp span) isStr(b []byte) bool { return sp.kind(b) == '"' }

// emptyStr reports the string "".
func (sp span) emptyStr() bool { return sp.e-sp.s == 2 }

// inner is the raw (still escaped) content of a string value, without its quotes.
func (sp span) inner(b []byte) []byte { return b[sp.s+1 : sp.e-1] }

// strSafe marks bytes a string can hold without special handling.
var strSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasZero is non-zero when some byte of x is zero (the classic SWAR test).
func hasZero(x uint64) uint64 { return (x - lsb) &^ x & msb }

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanString scans the string that starts at b[i] (a '"') and returns the index after its closing
// quote and its flags.
func scanString(b []byte, i int) (int, int, error) {
	flags := 0
	i++
	for {
		// Eight bytes at a time while none is special (a quote, a backslash, a control or a
		// non-ASCII byte): prose is mostly such runs.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if (x-lsb*0x20)&^x&msb|hasZero(x^(lsb*'"'))|hasZero(x^(lsb*'\\'))|x&msb != 0 {
				break
			}
			i += 8
		}
		for i < len(b) && strSafe[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, 0, errSyntax
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, flags, nil
		case c == '\\':
			flags |= strEscaped
			if i+1 >= len(b) {
				return 0, 0, errSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, 0, errSyntax
				}
				i += 6
			default:
				return 0, 0, errSyntax
			}
		case c < 0x20:
			return 0, 0, errSyntax
		default: // non-ASCII
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				flags |= strBadUTF8
			}
			i += n
		}
	}
}

func scanNumber(b []byte, i int) (int, error) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return 0, errSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, errSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return 0, errSyntax
		}
	}
	return i, nil
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errSyntax
	}
	return i + len(lit), nil
}

// skipValue validates the value that starts at b[i] (no leading space) and returns the index after
// it and the OR of the flags of every string inside it. It is iterative, so deep nesting costs no
// stack.
func skipValue(b []byte, i int) (int, int, error) {
	var stackBuf [32]byte
	stack := stackBuf[:0]
	flags := 0
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, 0, errSyntax
		}
		var err error
		switch c := b[i]; c {
		case '"':
			var f int
			i, f, err = scanString(b, i)
			flags |= f
		case '{', '[':
			j := skipWS(b, i+1)
			if j < len(b) && (c == '{' && b[j] == '}' || c == '[' && b[j] == ']') {
				i = j + 1
				break
			}
			if len(stack) >= maxDepth {
				return 0, 0, errSyntax
			}
			stack = append(stack, c)
			i = j
			if c == '{' {
				i, err = scanKey(b, i, &flags)
			}
			if err != nil {
				return 0, 0, err
			}
			continue
		case 't':
			i, err = scanLiteral(b, i, "true")
		case 'f':
			i, err = scanLiteral(b, i, "false")
		case 'n':
			i, err = scanLiteral(b, i, "null")
		default:
			i, err = scanNumber(b, i)
		}
		if err != nil {
			return 0, 0, err
		}
		// After a value: close containers or move to the next element.
		for {
			if len(stack) == 0 {
				return i, flags, nil
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return 0, 0, errSyntax
			}
			top := stack[len(stack)-1]
			if b[i] == ',' {
				i = skipWS(b, i+1)
				if top == '{' {
					if i, err = scanKey(b, i, &flags); err != nil {
						return 0, 0, err
					}
				}
				break
			}
			if top == '{' && b[i] == '}' || top == '[' && b[i] == ']' {
				i++
				stack = stack[:len(stack)-1]
				continue
			}
			return 0, 0, errSyntax
		}
	}
}

// scanKey scans `"key" :` at b[i] and returns the index of the member's value.
func scanKey(b []byte, i int, flags *int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errSyntax
	}
	e, f, err := scanString(b, i)
	if err != nil {
		return 0, err
	}
	*flags |= f
	i = skipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		return 0, errSyntax
	}
	return skipWS(b, i+1), nil
}

// objIter walks the members of one object. Start it with newObjIter at the '{'.
type objIter struct {
	b   []byte
	i   int
	n   int
	end int // index after '}' once next has returned false without error
	err error
}

// newObjIter starts at b[i]; it reports errSyntax on the first next when b[i] is not '{'.
func newObjIter(b []byte, i int) objIter {
	if i >= len(b) || b[i] != '{' {
		return objIter{b: b, err: errSyntax}
	}
	return objIter{b: b, i: i + 1}
}

// member is one object member: the key's string token (quotes included) and the value.
type member struct {
	key span
	val span
}

// keyBytes returns the member's key, unescaped. Switch on string(m.keyBytes(b)): that conversion
// costs no allocation (the compiler compares in place), which matters because every member of
// every stored item goes through it on every turn.
func (m member) keyBytes(b []byte) []byte {
	if m.key.f&(strEscaped|strBadUTF8) == 0 {
		return m.key.inner(b)
	}
	var s string
	if json.Unmarshal(b[m.key.s:m.key.e], &s) != nil {
		return nil
	}
	return []byte(s)
}

// is reports whether the member's key equals name, without allocating for plain keys.
func (m member) is(b []byte, name string) bool {
	return string(m.keyBytes(b)) == name
}

func (o *objIter) next() (member, bool) {
	if o.err != nil {
		return member{}, false
	}
	b := o.b
	i := skipWS(b, o.i)
	if i >= len(b) {
		o.err = errSyntax
		return member{}, false
	}
	if b[i] == '}' {
		o.end = i + 1
		return member{}, false
	}
	if o.n > 0 {
		if b[i] != ',' {
			o.err = errSyntax
			return member{}, false
		}
		i = skipWS(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		o.err = errSyntax
		return member{}, false
	}
	ke, kf, err := scanString(b, i)
	if err != nil {
		o.err = err
		return member{}, false
	}
	m := member{key: span{i, ke, kf}}
	i = skipWS(b, ke)
	if i >= len(b) || b[i] != ':' {
		o.err = errSyntax
		return member{}, false
	}
	vs := skipWS(b, i+1)
	ve, vf, err := skipValue(b, vs)
	if err != nil {
		o.err = err
		return member{}, false
	}
	m.val = span{vs, ve, vf}
	o.i = ve
	o.n++
	return m, true
}

// arrIter walks the elements of one array. Start it with newArrIter at the '['.
type arrIter struct {
	b   []byte
	i   int
	n   int
	err error
}

func newArrIter(b []byte, sp span) arrIter {
	if sp.kind(b) != '[' {
		return arrIter{b: b, err: errSyntax}
	}
	return arrIter{b: b, i: sp.s + 1}
}

func (a *arrIter) next() (span, bool) {
	if a.err != nil {
		return span{}, false
	}
	b := a.b
	i := skipWS(b, a.i)
	if i >= len(b) {
		a.err = errSyntax
		return span{}, false
	}
	if b[i] == ']' {
		return span{}, false
	}
	if a.n > 0 {
		if b[i] != ',' {
			a.err = errSyntax
			return span{}, false
		}
		i = skipWS(b, i+1)
	}
	ve, vf, err := skipValue(b, i)
	if err != nil {
		a.err = err
		return span{}, false
	}
	a.i = ve
	a.n++
	return span{i, ve, vf}, true
}

// str decodes a string value. Plain strings cost one allocation (the result); escaped ones go
// through encoding/json.
func str(b []byte, sp span) string {
	if sp.f&(strEscaped|strBadUTF8) == 0 {
		return string(sp.inner(b))
	}
	var s string
	_ = json.Unmarshal(b[sp.s:sp.e], &s) // sp was validated by the scanner
	return s
}

// strIs reports whether the string value at sp equals lit, without allocating for plain strings.
func strIs(b []byte, sp span, lit string) bool {
	if !sp.isStr(b) {
		return false
	}
	if sp.f&(strEscaped|strBadUTF8) == 0 {
		return string(sp.inner(b)) == lit
	}
	return str(b, sp) == lit
}

// appendStr appends the string token at sp as valid UTF-8 JSON: verbatim unless it holds invalid
// UTF-8, which is replaced by U+FFFD as encoding/json would when decoding it.
func appendStr(dst, b []byte, sp span) []byte {
	if sp.f&strBadUTF8 == 0 {
		return append(dst, b[sp.s:sp.e]...)
	}
	return appendQuoted(dst, str(b, sp))
}

// appendStrInner appends the string at sp without its quotes (for joining several strings into one).
func appendStrInner(dst, b []byte, sp span) []byte {
	if sp.f&strBadUTF8 == 0 {
		return append(dst, sp.inner(b)...)
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
// over its members and the object's start.
func scanTop(b []byte) objIter {
	return newObjIter(b, skipWS(b, 0))
}
