package engine

import (
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func items(ids ...string) []wire.Item {
	out := make([]wire.Item, len(ids))
	for i, id := range ids {
		out[i] = wire.Item{ID: id, JSON: []byte(`{"id":"` + id + `"}`)} // 9 bytes + len(id)
	}
	return out
}

func TestSocketCacheKeepsContextsAndStaysBounded(t *testing.T) {
	c := &SocketCache{maxBytes: 1 << 20}
	c.Put("r1", nil, items("a"), items("b"), nil, nil)
	h, _, ok := c.get("r1")
	if !ok || len(h) != 2 || h[0].ID != "a" || h[1].ID != "b" {
		t.Fatalf("r1: %v %v", h, ok)
	}
	// A continuation's context is its history, then its input and output.
	c.Put("r2", h, items("c"), items("d"), nil, nil)
	if h, _, _ := c.get("r2"); len(h) != 4 || h[3].ID != "d" {
		t.Fatalf("r2: %v", h)
	}
	// At most socketCacheEntries responses: the oldest go first.
	for i := range socketCacheEntries {
		c.Put("n"+string(rune('a'+i)), nil, items("e"), nil, nil, nil)
	}
	if _, _, ok := c.get("r1"); ok {
		t.Fatal("the oldest response outlived the entry bound")
	}
	if len(c.entries) != socketCacheEntries {
		t.Fatalf("%d entries", len(c.entries))
	}
	c.Evict("na")
	if _, _, ok := c.get("na"); ok || len(c.entries) != socketCacheEntries-1 {
		t.Fatal("evict did not remove the response")
	}
	var nilCache *SocketCache
	if _, _, ok := nilCache.get("r1"); ok {
		t.Fatal("a nil cache found something")
	}
}

func TestSocketCacheBoundsBytes(t *testing.T) {
	c := &SocketCache{maxBytes: 40}
	c.Put("big", nil, items(strings.Repeat("x", 40)), nil, nil, nil) // larger than the whole cache: not kept
	if _, _, ok := c.get("big"); ok {
		t.Fatal("a response larger than the cache was kept")
	}
	c.Put("r1", nil, items("aaaaaaaaaaa"), nil, nil, nil) // 20 bytes
	c.Put("r2", nil, items("bbbbbbbbbbb"), nil, nil, nil) // 20 bytes: 40 in all, still fits
	c.Put("r3", nil, items("ccccccccccc"), nil, nil, nil) // 60: r1 goes
	if _, _, ok := c.get("r1"); ok {
		t.Fatal("the byte bound did not evict the oldest")
	}
	if _, _, ok := c.get("r3"); !ok || c.bytes != 40 {
		t.Fatalf("r3 missing or %d bytes held", c.bytes)
	}
	exact := &SocketCache{maxBytes: 40}
	exact.Put("r4", nil, items(strings.Repeat("d", 31)), nil, nil, nil) // 40 bytes: exactly the bound, kept
	if _, _, ok := exact.get("r4"); !ok || exact.bytes != 40 {
		t.Fatalf("a response of exactly the cache's bound was not kept (%d bytes held)", exact.bytes)
	}
}
