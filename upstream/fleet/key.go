package fleet

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// KeyParams are what the turn engine knows about the chain a turn continues. Key uses the
// first of LineageRoot, ConversationID, PromptCacheKey that is set, else a digest of
// Instructions and FirstInput.
type KeyParams struct {
	// Tenant is the tenant's fingerprint: keys of different tenants never coincide, even for
	// equal prompt_cache_key values.
	Tenant string
	// LineageRoot is the id of the root response of the previous_response_id chain the turn
	// continues; a fork shares its parent chain's root, since it shares its prefix. Empty for
	// a turn that continues no chain.
	LineageRoot string
	// ConversationID is the conversation the turn belongs to.
	ConversationID string
	// PromptCacheKey is the request's prompt_cache_key, OpenAI's own affinity hint.
	PromptCacheKey string
	// Instructions and FirstInput are the turn's leading instructions and its first input
	// message as sent upstream (any stable serialisation): clients that resend the whole
	// history every turn send the same opening every turn.
	Instructions []byte
	FirstInput   []byte
}

// Key is the routing key of a turn (upstream.Route.Key): an opaque digest, so neither ids nor
// the tenant can be read back from it (it is logged and may reach an external router). It is a
// pure function of p: every respgate replica computes the same key for the same chain.
func Key(p KeyParams) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(p.Tenant))
	switch {
	case p.LineageRoot != "":
		field([]byte("lineage"))
		field([]byte(p.LineageRoot))
	case p.ConversationID != "":
		field([]byte("conversation"))
		field([]byte(p.ConversationID))
	case p.PromptCacheKey != "":
		field([]byte("prompt_cache_key"))
		field([]byte(p.PromptCacheKey))
	default:
		field([]byte("opening"))
		field(p.Instructions)
		field(p.FirstInput)
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
}

// AffinityValue is the value of the routing-key header sent to an external router
// (--upstream-affinity-header): HMAC-SHA256 of the key under secret, so a router (or its logs)
// sees a stable token per chain and nothing else. "" for an empty key.
func AffinityValue(secret []byte, key string) string {
	if key == "" {
		return ""
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}
