package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// AppendString appends s to dst as a JSON string literal: respgate's one JSON string quoter
// (the accumulator's events, rehydration's vLLM-bound copy, the simulator's answers, every
// response body the server writes). It writes the minimal form of RFC 8785 §3.2.2.2, through
// jsontext: '"', '\\' and control characters escaped (\b \f \n \r \t short, the others \u00xx),
// everything else as it is (HTML characters, U+2028 and U+2029 included), which is also how
// Python's json.dumps(ensure_ascii=False) and pydantic, and so vLLM, write strings. Unlike
// Go-syntax quoting (Go escapes such as \a and \x00 are not JSON), the result is always valid
// JSON, and invalid UTF-8 comes out as U+FFFD, so it is valid UTF-8 whatever a stored id or an
// upstream delta holds. It does not allocate beyond growing dst.
func AppendString(dst []byte, s string) []byte {
	// A read-only view of s: jsontext only reads its input, and the conversion []byte(s) would
	// copy every string longer than a small stack buffer.
	return AppendStringBytes(dst, unsafe.Slice(unsafe.StringData(s), len(s))) //nolint:gosec // G103: a read-only view of an immutable string
}

// AppendStringBytes is AppendString for a byte slice, which it does not copy.
func AppendStringBytes(dst, b []byte) []byte {
	// The only error AppendQuote reports is invalid UTF-8, which it has already replaced.
	dst, _ = jsontext.AppendQuote(dst, b)
	return dst
}

// AppendRaw appends a stored JSON value to dst: "null" when raw is empty, otherwise raw with any
// invalid UTF-8 replaced by U+FFFD. Stored JSON is valid JSON (it was validated before it was
// written, and Postgres's jsonb checks it again), but SQLite keeps bytes as they were, and rows
// written before requests were checked for UTF-8 may hold invalid sequences; those can only sit
// inside JSON strings, where U+FFFD keeps the value valid.
func AppendRaw(dst, raw []byte) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	if utf8.Valid(raw) {
		return append(dst, raw...)
	}
	return append(dst, bytes.ToValidUTF8(raw, []byte("\uFFFD"))...)
}

// ValidUTF8 returns raw itself when it is valid UTF-8 and otherwise a copy with each run of
// invalid bytes replaced by U+FFFD (see AppendRaw for why stored JSON may need it).
func ValidUTF8(raw []byte) []byte {
	if utf8.Valid(raw) {
		return raw
	}
	return bytes.ToValidUTF8(raw, []byte("\uFFFD"))
}

// DecodeValue decodes raw, one JSON value and nothing after it, into Go values that keep what a
// comparison needs: numbers as spelled (json.Number, so 1.0 and 1 differ and large integers stay
// exact) and null distinct from an absent member.
func DecodeValue(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}
