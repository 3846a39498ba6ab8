package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// AppendString appends s to dst as a JSON string literal. Unlike Go-syntax quoting (Go escapes
// such as \a and \x00 are not JSON), every control character is escaped the JSON way, and
// invalid UTF-8 comes out as U+FFFD, so the result is always valid JSON and valid UTF-8 whatever
// a stored id or status holds.
func AppendString(dst []byte, s string) []byte {
	// The only error AppendQuote reports is invalid UTF-8, which it has already replaced.
	dst, _ = jsontext.AppendQuote(dst, s)
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
