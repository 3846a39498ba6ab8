package wire

import (
	"crypto/rand"
	"encoding/hex"
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
