package engine

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/respgate/respgate/wire"
)

// routeKey is the key that keeps the turns of one chain on one upstream replica, whose prefix
// cache then holds the chain (upstream.Route.Key; docs/fleet.md): the client's prompt_cache_key
// when it sends one (OpenAI's own affinity hint), else the conversation's id, else a digest of
// the tenant, the instructions and the chain's first item, which every turn of a
// previous_response_id chain, and every fork of it, shares with the chain's first turn: the
// history a continuation replays starts with that item. first is the first item of the history
// and input (nil: none).
func routeKey(tn string, req *Spec, first *wire.Item) string {
	switch {
	case req.Request != nil && req.Request.PromptCacheKey != nil && *req.Request.PromptCacheKey != "":
		return "pck:" + *req.Request.PromptCacheKey
	case req.ConversationID != "":
		return "conv:" + req.ConversationID
	}
	h := sha256.New()
	h.Write([]byte(tn))
	h.Write([]byte{0})
	if req.Request != nil && req.Request.Instructions.Set() {
		h.Write([]byte(req.Request.Instructions.Value))
	}
	h.Write([]byte{0})
	if first != nil {
		h.Write(first.JSON)
	}
	return "chain:" + hex.EncodeToString(h.Sum(nil)[:16])
}
