package engine

import (
	"encoding/json"

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
		p.FirstInput = openingOf(first)
	}
	return fleet.Key(p)
}

// openingOf is the first item as the key hashes it: its members without "id". respgate gives
// every turn's input items fresh ids, so two turns that open with the same message (two clients,
// two respgate replicas, a client that resends its whole history) would otherwise get different
// keys, and the replica holding that prefix would see only one of them (issue 39). An item that
// does not parse keeps its raw JSON.
func openingOf(it *wire.Item) []byte {
	if it.ID == "" {
		return it.JSON
	}
	fields, err := it.Fields()
	if err != nil {
		return it.JSON
	}
	delete(fields, "id")
	b, err := json.Marshal(fields) // map keys in sorted order: a stable serialisation
	if err != nil {
		return it.JSON
	}
	return b
}
