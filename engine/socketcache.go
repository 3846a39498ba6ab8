package engine

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/wire"
)

// socketCacheEntries bounds how many store:false responses a connection remembers (the most
// recent ones; continuing from the last is the common case, a few more allow a short fork).
const socketCacheEntries = 8

// NewSocketCache is an empty SocketCache of about maxBytes.
func NewSocketCache(maxBytes int64) *SocketCache { return &SocketCache{maxBytes: maxBytes} }

// Remember keeps a finished store:false turn's outcome so the next turn can continue it; a
// continuation of a cached response that failed (out nil, or not completed nor incomplete)
// evicts that response (a retry then gets previous_response_not_found, as OpenAI answers).
func (c *SocketCache) Remember(spec *Spec, out *Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := out != nil && (out.Response.Status == wire.StatusCompleted || out.Response.Status == wire.StatusIncomplete)
	if !ok {
		c.evict(spec.PreviousResponseID)
		return
	}
	if !spec.Store {
		c.put(out.Response.ID, out.History, out.Input, out.Output, out.Response.Usage, out.Projected)
	}
}

// SocketCache is a connection's memory of its recent store:false responses: for each, the whole
// context a continuation replays (history, input, output), so continuing one needs no store. It
// holds at most socketCacheEntries responses and about maxBytes of item JSON; the oldest go first.
// A response larger than maxBytes is not kept (a continuation of it gets
// previous_response_not_found). A nil *SocketCache is empty. Safe for concurrent use: the lanes
// of one connection share it (a lane may fork from a response made on another).
type SocketCache struct {
	mu       sync.Mutex
	maxBytes int64
	entries  []cachedResponse // oldest first
	bytes    int64
}

type cachedResponse struct {
	id    string
	items []wire.Item
	bytes int64
	usage json.RawMessage // the response's usage (sizes its continuation, server/tokens.go)
	// prep is the projection of the history the turn replayed, a prefix of items (as in
	// chainEntry.prep): a continuation projects only the turn's input and output.
	prep *rehydrate.History
}

func (c *SocketCache) get(id string) ([]wire.Item, historyInfo, bool) {
	if c == nil {
		return nil, historyInfo{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		if e.id == id {
			return slices.Clip(e.items), historyInfo{usage: e.usage, prep: e.prep}, true // a caller's append copies
		}
	}
	return nil, historyInfo{}, false
}

// Put remembers response id with its context (history, then the turn's input and output), its
// usage and the projection of its history (nil if none).
func (c *SocketCache) Put(id string, history, input, output []wire.Item, usage json.RawMessage, prep *rehydrate.History) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(id, history, input, output, usage, prep)
}

func (c *SocketCache) put(id string, history, input, output []wire.Item, usage json.RawMessage, prep *rehydrate.History) {
	items := make([]wire.Item, 0, len(history)+len(input)+len(output))
	items = append(append(append(items, history...), input...), output...)
	n := prep.Size()
	for _, it := range items {
		n += int64(len(it.JSON))
	}
	if n > c.maxBytes {
		return
	}
	c.entries = append(c.entries, cachedResponse{id: id, items: items, bytes: n, usage: usage, prep: prep})
	c.bytes += n
	for len(c.entries) > socketCacheEntries || c.bytes > c.maxBytes {
		c.bytes -= c.entries[0].bytes
		c.entries = c.entries[1:]
	}
}

// Evict forgets response id.
func (c *SocketCache) Evict(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(id)
}

func (c *SocketCache) evict(id string) {
	for i, e := range c.entries {
		if e.id == id {
			c.bytes -= e.bytes
			c.entries = append(c.entries[:i:i], c.entries[i+1:]...)
			return
		}
	}
}
