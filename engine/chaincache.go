package engine

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/maypok86/otter/v2"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// chainCache is this replica's memory of the assembled history (chainHistory) of recent chain
// heads, so a continuation of one needs no chain load: a stored terminal response and its items
// never change, and whatever deletes one advances the tenant's lineage generation in the same
// transaction (store.Store ChainGeneration). An entry is used only while the generation is the
// one it was read at, checked by one index lookup per turn: right across replicas, with no
// time-based expiry (docs/scaling.md, "Chain cache"). It is bounded by the bytes of item JSON it
// holds (Config.ChainCacheBytes); otter evicts by weight with W-TinyLFU, so a burst of one-off
// chains does not flush the heads that conversations keep continuing.
type chainCache struct {
	c *otter.Cache[chainKey, *chainEntry]
}

type chainKey struct{ tenant, id string }

// chainEntry is the history a continuation of the response replays, and the generation it is
// right for.
type chainEntry struct {
	gen   int64
	items []wire.Item
	// prep is the projection of the first prep.Len() items (rehydrate.History), so a
	// continuation projects only the rest: the previous turn's history when the entry is put at
	// a commit, all of items once a continuation has been built.
	prep  *rehydrate.History
	bytes int64
	// usage is the response's own usage (JSON), which sizes its continuation for automatic
	// compaction (server/tokens.go).
	usage json.RawMessage
	// served is where the response ran (store.Response.Replica and ReplicaAway).
	served upstream.Served
}

// chainEntryOverhead is counted per item on top of its JSON (ids, slice headers).
const chainEntryOverhead = 64

func newChainCache(maxBytes int64) *chainCache {
	return &chainCache{c: otter.Must(&otter.Options[chainKey, *chainEntry]{
		MaximumWeight: uint64(max(maxBytes, 0)), //nolint:gosec // G115: not negative
		Weigher: func(_ chainKey, e *chainEntry) uint32 {
			return uint32(min(max(e.bytes, 0), 1<<32-1)) //nolint:gosec // G115: clamped to uint32
		},
		// Maintenance runs on the caller's goroutine: the cache starts none of its own (it has
		// no expiry, so no periodic clean-up either).
		Executor: func(fn func()) { fn() },
	})}
}

// get returns the cached history of the response if the tenant's generation is still the one
// it was read at (one store round trip). A store error is a miss: the caller loads the chain.
func (c *chainCache) get(ctx context.Context, st store.Store, tenant, id string) ([]wire.Item, historyInfo, bool) {
	e, ok := c.c.GetIfPresent(chainKey{tenant, id})
	if !ok {
		return nil, historyInfo{}, false
	}
	gen, err := st.ChainGeneration(ctx, &store.ChainGenerationParams{Tenant: tenant})
	if err != nil || gen != e.gen {
		c.c.Invalidate(chainKey{tenant, id})
		return nil, historyInfo{}, false
	}
	return slices.Clip(e.items), historyInfo{gen: gen, ok: true, usage: e.usage, prep: e.prep, served: e.served}, true // a caller's append copies
}

// put remembers the history a continuation of the response replays, read at generation gen,
// with what info says of the response: its usage, the replica that served it, and the
// projection of a prefix of the history (nil if none). An entry
// heavier than a quarter of the cache is not kept.
func (c *chainCache) put(tenant, id string, gen int64, items []wire.Item, info historyInfo) {
	e := &chainEntry{gen: gen, items: items, usage: info.usage, prep: info.prep, served: info.served}
	for _, it := range items {
		e.bytes += int64(len(it.JSON)) + chainEntryOverhead
	}
	e.bytes += info.prep.Size()
	if uint64(e.bytes) > c.c.GetMaximum()/4 { //nolint:gosec // G115: a sum of lengths and sizes, not negative
		return
	}
	c.c.Set(chainKey{tenant, id}, e)
}

// keepProjection records in the response's entry the projection of its whole history that a
// continuation built (rehydrate.Result.History), if the entry is still the one read at
// generation gen and held less of it: the next continuation of the same head (a retry, a
// fork, another replica's client) then projects nothing again.
func (c *chainCache) keepProjection(tenant, id string, gen int64, prep *rehydrate.History) {
	e, ok := c.c.GetIfPresent(chainKey{tenant, id})
	if !ok || e.gen != gen || prep.Len() != len(e.items) || e.prep.Len() >= prep.Len() {
		return
	}
	c.put(tenant, id, gen, e.items, historyInfo{usage: e.usage, prep: prep, served: e.served})
}

// appendTurnHistory appends what a continuation replays of one turn: its input, then its output,
// of a failed or cancelled turn only the items that finished (chainHistory).
func appendTurnHistory(history []wire.Item, status wire.Status, input, output []wire.Item) []wire.Item {
	history = append(history, input...)
	switch status {
	case wire.StatusFailed, wire.StatusCancelled:
		for _, it := range output {
			// A compaction item (automatic compaction leads the output with it) is whole
			// from the start and has no status: it stands, and keeps the summary in place.
			if itemFinished(it) || compact.IsCompaction(it) {
				history = append(history, it)
			}
		}
	default:
		history = append(history, output...)
	}
	return history
}
