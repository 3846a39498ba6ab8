package engine

import (
	"github.com/respgate/respgate/upstream/fleet"
	"github.com/respgate/respgate/wire"
)

// routeKey is the key that keeps the turns of one chain on one upstream replica, whose prefix
// cache then holds the chain (upstream.Route.Key; docs/fleet.md "The routing key"): fleet.Key of
// the conversation's id, else the client's prompt_cache_key (OpenAI's own affinity hint), else
// the chain's opening: the instructions and the first item of the history and input. Every turn
// of a previous_response_id chain, and every fork of it, replays the chain's first item first,
// so the opening names the chain from its first turn on, the turn before any lineage exists;
// a turn that changes the instructions moves to another key, and its Route's Prefer (the
// replica of the turn it continues) keeps it where the prefix is. first is nil when there is
// neither history nor input.
func routeKey(tn string, req *Spec, first *wire.Item) string {
	p := fleet.KeyParams{Tenant: tn, ConversationID: req.ConversationID}
	if r := req.Request; r != nil {
		if r.PromptCacheKey != nil {
			p.PromptCacheKey = *r.PromptCacheKey
		}
		if r.Instructions.Set() {
			p.Instructions = []byte(r.Instructions.Value)
		}
	}
	if first != nil {
		p.FirstInput = first.JSON
	}
	return fleet.Key(p)
}
