package wire

import (
	"crypto/rand"
	"encoding/hex"
	"unicode"
	"unicode/utf8"
)

// Id prefixes respgate mints (docs/wire.md §8.1: the gateway owns every id).
const (
	PrefixResponse     = "resp_"
	PrefixMessage      = "msg_"
	PrefixReasoning    = "rs_"
	PrefixFunctionCall = "fc_"
	PrefixCallID       = "call_"
	PrefixOutput       = "fco_"
	PrefixConversation = "conv_"
	PrefixItem         = "item_"
)

// NewID returns prefix followed by 48 random hex digits (24 bytes from crypto/rand), the length
// OpenAI's own ids have. Safe for concurrent use.
func NewID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	buf := make([]byte, len(prefix)+48)
	copy(buf, prefix)
	hex.Encode(buf[len(prefix):], b[:])
	return string(buf)
}

// PrefixForType is the id prefix for an item of the given type, "item_" for types without one.
func PrefixForType(typ string) string {
	switch typ {
	case TypeMessage:
		return PrefixMessage
	case TypeReasoning:
		return PrefixReasoning
	case TypeFunctionCall:
		return PrefixFunctionCall
	case TypeFunctionCallOutput:
		return PrefixOutput
	}
	return PrefixItem
}

// ValidID reports whether a client-sent id can be stored and looked up on every backend and shown
// in a log line or an error message as one line: valid UTF-8 without control characters (C0, DEL,
// C1) or the Unicode line and paragraph separators (U+2028, U+2029). No id respgate mints has any
// (docs/errors.md, invalid_value).
func ValidID(id string) bool {
	for i := 0; i < len(id); {
		c := id[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(id[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += n
	}
	return true
}

// Clip bounds a client-sent string (an id, a type, a name) echoed in an error message: up to 64
// bytes whole, a longer one cut at a rune boundary and marked "…".
func Clip(s string) string {
	n := 64
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
