package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// IsNull reports whether a raw value is the literal null.
func IsNull(v []byte) bool { return string(v) == "null" }

// StrContents returns the raw contents of a string token (escapes undecoded), or false if v is not
// a string token.
func StrContents(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

// AppendUnescaped appends the decoded contents of a validated string token (without its quotes).
// Lone surrogate escapes become U+FFFD, as in encoding/json; every other byte, invalid UTF-8
// included, is copied as it is, so that text split mid-rune joins back byte for byte.
func AppendUnescaped(dst, s []byte) []byte {
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

// BytesString views b as a string for read-only use within a call; b must not change meanwhile.
func BytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) } //nolint:gosec // G103: a deliberate zero-copy view; the doc comment states the caller's guarantee

// AppendCompact appends a validated JSON value without insignificant white space, so that raw
// JSON passed through stays on one SSE data line.
func AppendCompact(dst, v []byte) []byte {
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
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		if c == '"' {
			inStr = true
		}
		dst = append(dst, c)
	}
	return dst
}

// Int parses a raw JSON integer (no fraction, no exponent). huge reports that digits went on after
// the magnitude passed 1<<53 (beyond which JSON numbers stop being exact in JavaScript), so n is
// not the value and the value may not fit an int64; otherwise n is exact.
func Int(v []byte) (n int64, ok, huge bool) {
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
