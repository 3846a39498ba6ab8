// Package jsonscan is respgate's one JSON scanner: the rules every package that reads untrusted
// JSON without decoding it (accumulator, rehydrate, bench/loadgen) shares, and the small helpers
// around them. It walks a value once, validates what it walks and hands out raw spans, so that the
// per-event and per-item hot paths neither allocate nor scan a byte twice.
//
// The rules (one set, tested in rules_test.go and fuzzed against jsontext in fuzz_test.go):
//
//   - Syntax is RFC 8259, exactly what github.com/go-json-experiment/json/jsontext and
//     encoding/json accept: one value, optional white space around it, no trailing bytes.
//   - Nesting: at most MaxDepth arrays and objects, counting the outermost. Deeper input is a
//     syntax error. (The scanners this replaces allowed 200 in the accumulator and 10,000 in
//     rehydrate; the stricter one is kept: no event, item or request member respgate reads needs
//     more, and a small bound keeps the nesting stack a fixed-size array.)
//   - UTF-8: invalid UTF-8 inside a string is accepted and reported (BadUTF8 on the span), never
//     silently passed on as if valid. Rejecting it would refuse history stored before this rule and
//     a text delta that splits a rune (the accumulator joins deltas byte for byte, see
//     accumulator/invariance_test.go); each caller decides what leaves: rehydrate re-encodes such
//     strings with U+FFFD, and wire.AppendString (respgate's one JSON string quoter, which the
//     callers of this package use to write strings) replaces invalid bytes with U+FFFD.
//   - Size: the scanner has no size limit of its own and needs none: it never allocates and its
//     memory is constant (the nesting stack is MaxDepth bits), whatever the input. Input size is
//     bounded where the input enters (the SSE line limit in upstream, the request body limit in
//     server, the accumulator's per-item and per-response byte limits).
//   - Duplicate object member names are accepted, as all three old scanners did; callers that
//     keep one take the last, as encoding/json and Python's json (which vLLM parses with) do.
//
// jsontext itself was measured on the accumulator's per-delta path (a Decoder reused with Reset
// over a bytes.Buffer, ReadValue per member): about +48% CPU per delta and four more allocations
// per stream than this scanner, so the hot paths keep this scanner and jsontext is the reference it
// is fuzzed against.
//
// It does no I/O and imports nothing of respgate's; it must not grow semantic knowledge of the
// Responses API (that belongs to wire, accumulator and rehydrate).
package jsonscan

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted, counting the outermost.
const MaxDepth = 200

// ErrSyntax reports bytes that are not one well-formed JSON value under the package rules.
// Callers wrap it with their own context.
var ErrSyntax = errors.New("jsonscan: invalid JSON")

// Flags describe the strings inside a value: the OR over every string (keys included) in it.
type Flags uint8

const (
	// Escaped: some string holds a backslash escape, so its raw bytes are not its text.
	Escaped Flags = 1 << iota
	// BadUTF8: some string holds bytes that are not valid UTF-8.
	BadUTF8
)

// Span is the position of one value inside a byte slice, b[S:E], and the flags of the strings
// inside it. The zero Span (E == 0) means absent.
type Span struct {
	S, E int
	F    Flags
}

// Present reports whether the span holds a value.
func (sp Span) Present() bool { return sp.E != 0 }

// Kind is the first byte of the value: '"', '{', '[', 'n', 't', 'f', or a number's first byte;
// 0 when absent.
func (sp Span) Kind(b []byte) byte {
	if sp.E == 0 {
		return 0
	}
	return b[sp.S]
}

// Absent reports a member that is missing or null.
func (sp Span) Absent(b []byte) bool { return sp.E == 0 || b[sp.S] == 'n' }

// IsStr reports a string value.
func (sp Span) IsStr(b []byte) bool { return sp.Kind(b) == '"' }

// EmptyStr reports the string "" (the span must be a string).
func (sp Span) EmptyStr() bool { return sp.E-sp.S == 2 }

// Inner is the raw (still escaped) content of a string value, without its quotes.
func (sp Span) Inner(b []byte) []byte { return b[sp.S+1 : sp.E-1] }

// Bytes is the raw value.
func (sp Span) Bytes(b []byte) []byte { return b[sp.S:sp.E] }

// Plain reports a string (or a value whose strings are all) free of escapes and invalid UTF-8,
// whose raw bytes are therefore its text.
func (sp Span) Plain() bool { return sp.F&(Escaped|BadUTF8) == 0 }

// strSafe marks the bytes a string can hold without attention: printable ASCII but '"' and '\\'.
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

// SkipWS returns the index of the first byte at or after i that is not JSON white space.
func SkipWS(b []byte, i int) int {
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

// ScanString scans the string token that starts at b[i] (which must be '"') and returns the index
// after its closing quote and its flags. Raw control characters and bad escapes are errors.
func ScanString(b []byte, i int) (int, Flags, error) {
	var flags Flags
	i++
	for {
		// Eight bytes at a time while none needs attention (a quote, a backslash, a control or a
		// non-ASCII byte): prose and deltas are mostly such runs.
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
			return 0, 0, ErrSyntax
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, flags, nil
		case c == '\\':
			flags |= Escaped
			if i+1 >= len(b) {
				return 0, 0, ErrSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return 0, 0, ErrSyntax
				}
				i += 6
			default:
				return 0, 0, ErrSyntax
			}
		case c < 0x20:
			return 0, 0, ErrSyntax
		default: // non-ASCII
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				flags |= BadUTF8
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
		i = digits(b, i)
	default:
		return 0, ErrSyntax
	}
	if i < len(b) && b[i] == '.' {
		d := i + 1
		if i = digits(b, d); i == d {
			return 0, ErrSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		if i = digits(b, d); i == d {
			return 0, ErrSyntax
		}
	}
	return i, nil
}

// digits returns the index of the first byte at or after i that is not an ASCII digit.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, ErrSyntax
	}
	return i + len(lit), nil
}

// stack records, one bit per open container, whether it is an object: MaxDepth bits, so the
// scanner's memory does not depend on its input.
type stack struct {
	bits [(MaxDepth + 63) / 64]uint64
	n    int
}

func (s *stack) push(obj bool) {
	if obj {
		s.bits[s.n/64] |= 1 << (s.n % 64)
	} else {
		s.bits[s.n/64] &^= 1 << (s.n % 64)
	}
	s.n++
}

func (s *stack) topObj() bool { return s.bits[(s.n-1)/64]&(1<<((s.n-1)%64)) != 0 }

// SkipValue validates the value that starts at b[i] (no leading space) and returns the index after
// it and the flags of every string inside it. depth is the number of arrays and objects already
// open around b[i] (0 for a top-level value); the value may nest MaxDepth-depth more. It is
// iterative, so nesting costs no Go stack.
func SkipValue(b []byte, i, depth int) (int, Flags, error) {
	var st stack
	var flags Flags
	if depth < 0 {
		depth = 0
	}
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return 0, 0, ErrSyntax
		}
		var err error
		switch c := b[i]; c {
		case '"':
			var f Flags
			i, f, err = ScanString(b, i)
			flags |= f
		case '{', '[':
			if depth+st.n >= MaxDepth {
				return 0, 0, ErrSyntax
			}
			j := SkipWS(b, i+1)
			if j < len(b) && (c == '{' && b[j] == '}' || c == '[' && b[j] == ']') {
				i = j + 1
				break
			}
			st.push(c == '{')
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
		// After a value: close containers or move on to the next element.
		for {
			if st.n == 0 {
				return i, flags, nil
			}
			i = SkipWS(b, i)
			if i >= len(b) {
				return 0, 0, ErrSyntax
			}
			obj := st.topObj()
			if b[i] == ',' {
				i = SkipWS(b, i+1)
				if obj {
					if i, err = scanKey(b, i, &flags); err != nil {
						return 0, 0, err
					}
				}
				break
			}
			if obj && b[i] == '}' || !obj && b[i] == ']' {
				i++
				st.n--
				continue
			}
			return 0, 0, ErrSyntax
		}
	}
}

// scanKey scans `"key" :` at b[i] and returns the index of the member's value.
func scanKey(b []byte, i int, flags *Flags) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, ErrSyntax
	}
	e, f, err := ScanString(b, i)
	if err != nil {
		return 0, err
	}
	*flags |= f
	i = SkipWS(b, e)
	if i >= len(b) || b[i] != ':' {
		return 0, ErrSyntax
	}
	return SkipWS(b, i+1), nil
}

// Scan validates that b is exactly one value, with optional white space around it, and returns
// its span.
func Scan(b []byte) (Span, error) {
	s := SkipWS(b, 0)
	e, f, err := SkipValue(b, s, 0)
	if err != nil {
		return Span{}, err
	}
	if SkipWS(b, e) != len(b) {
		return Span{}, ErrSyntax
	}
	return Span{s, e, f}, nil
}

// Valid reports whether b is exactly one value under the package rules.
func Valid(b []byte) bool {
	_, err := Scan(b)
	return err == nil
}

// Member is one object member: the key's string token (quotes included) and the value.
type Member struct {
	Key, Val Span
}

// Obj walks the members of one object, validating as it goes. The zero value is an exhausted
// iterator; start one with NewObj. Not safe for concurrent use.
type Obj struct{ walk }

// walk is what Obj and Arr share: the position in a container, the entries read, and the end or
// the error that stopped it.
type walk struct {
	b     []byte
	i     int
	n     int
	depth int
	end   int // index after the closing '}' or ']' once Next has returned false without error
	err   error
}

// next moves to the start of the next entry and returns its index; false at closer (the end) or
// at an error.
func (w *walk) next(closer byte) (int, bool) {
	if w.err != nil || w.end != 0 {
		return 0, false
	}
	b := w.b
	i := SkipWS(b, w.i)
	if i >= len(b) {
		w.err = ErrSyntax
		return 0, false
	}
	if b[i] == closer {
		w.end = i + 1
		return 0, false
	}
	if w.n > 0 {
		if b[i] != ',' {
			w.err = ErrSyntax
			return 0, false
		}
		i = SkipWS(b, i+1)
	}
	return i, true
}

// Err reports the syntax error that stopped Next, if any.
func (w *walk) Err() error { return w.err }

// End is the index after the container's closing '}' or ']', once Next has returned false
// without error.
func (w *walk) End() int { return w.end }

// NewObj starts at the object at or after b[i] (white space skipped); depth is the number of
// arrays and objects open around it (0 for a top-level object). A non-object is reported by Err
// after the first Next.
func NewObj(b []byte, i, depth int) Obj { return Obj{startWalk(b, i, depth, '{')} }

// startWalk starts a walk inside the container that opener opens at or after b[i].
func startWalk(b []byte, i, depth int, opener byte) walk {
	i = SkipWS(b, i)
	if i >= len(b) || b[i] != opener || depth >= MaxDepth {
		return walk{b: b, err: ErrSyntax}
	}
	return walk{b: b, i: i + 1, depth: depth}
}

// Next returns the next member, or false at the end of the object or at the first error.
func (o *Obj) Next() (Member, bool) {
	i, ok := o.next('}')
	if !ok {
		return Member{}, false
	}
	b := o.b
	if i >= len(b) || b[i] != '"' {
		o.err = ErrSyntax
		return Member{}, false
	}
	ke, kf, err := ScanString(b, i)
	if err != nil {
		o.err = err
		return Member{}, false
	}
	m := Member{Key: Span{i, ke, kf}}
	i = SkipWS(b, ke)
	if i >= len(b) || b[i] != ':' {
		o.err = ErrSyntax
		return Member{}, false
	}
	vs := SkipWS(b, i+1)
	ve, vf, err := SkipValue(b, vs, o.depth+1)
	if err != nil {
		o.err = err
		return Member{}, false
	}
	m.Val = Span{vs, ve, vf}
	o.i = ve
	o.n++
	return m, true
}

// Finish walks the members the caller did not read and checks that only white space follows the
// object: after it, the whole input has been validated.
func (o *Obj) Finish() error {
	for _, more := o.Next(); more; _, more = o.Next() {
	}
	if o.err != nil {
		return o.err
	}
	if SkipWS(o.b, o.end) != len(o.b) {
		return ErrSyntax
	}
	return nil
}

// Arr walks the elements of one array, validating as it goes. Start one with NewArr. Not safe for
// concurrent use.
type Arr struct{ walk }

// NewArr starts at the array at or after b[i] (white space skipped); depth is as for NewObj.
func NewArr(b []byte, i, depth int) Arr { return Arr{startWalk(b, i, depth, '[')} }

// Next returns the next element, or false at the end of the array or at the first error.
func (a *Arr) Next() (Span, bool) {
	i, ok := a.next(']')
	if !ok {
		return Span{}, false
	}
	ve, vf, err := SkipValue(a.b, i, a.depth+1)
	if err != nil {
		a.err = err
		return Span{}, false
	}
	a.i = ve
	a.n++
	return Span{i, ve, vf}, true
}
