package server

import (
	"errors"
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
	c := &socketCache{maxBytes: 1 << 20}
	c.put("r1", nil, items("a"), items("b"), nil, nil)
	h, _, ok := c.get("r1")
	if !ok || len(h) != 2 || h[0].ID != "a" || h[1].ID != "b" {
		t.Fatalf("r1: %v %v", h, ok)
	}
	// A continuation's context is its history, then its input and output.
	c.put("r2", h, items("c"), items("d"), nil, nil)
	if h, _, _ := c.get("r2"); len(h) != 4 || h[3].ID != "d" {
		t.Fatalf("r2: %v", h)
	}
	// At most socketCacheEntries responses: the oldest go first.
	for i := range socketCacheEntries {
		c.put("n"+string(rune('a'+i)), nil, items("e"), nil, nil, nil)
	}
	if _, _, ok := c.get("r1"); ok {
		t.Fatal("the oldest response outlived the entry bound")
	}
	if len(c.entries) != socketCacheEntries {
		t.Fatalf("%d entries", len(c.entries))
	}
	c.evict("na")
	if _, _, ok := c.get("na"); ok || len(c.entries) != socketCacheEntries-1 {
		t.Fatal("evict did not remove the response")
	}
	var nilCache *socketCache
	if _, _, ok := nilCache.get("r1"); ok {
		t.Fatal("a nil cache found something")
	}
}

func TestSocketCacheBoundsBytes(t *testing.T) {
	c := &socketCache{maxBytes: 40}
	c.put("big", nil, items(strings.Repeat("x", 40)), nil, nil, nil) // larger than the whole cache: not kept
	if _, _, ok := c.get("big"); ok {
		t.Fatal("a response larger than the cache was kept")
	}
	c.put("r1", nil, items("aaaaaaaaaaa"), nil, nil, nil) // 20 bytes
	c.put("r2", nil, items("bbbbbbbbbbb"), nil, nil, nil) // 20 bytes: 40 in all, still fits
	c.put("r3", nil, items("ccccccccccc"), nil, nil, nil) // 60: r1 goes
	if _, _, ok := c.get("r1"); ok {
		t.Fatal("the byte bound did not evict the oldest")
	}
	if _, _, ok := c.get("r3"); !ok || c.bytes != 40 {
		t.Fatalf("r3 missing or %d bytes held", c.bytes)
	}
	exact := &socketCache{maxBytes: 40}
	exact.put("r4", nil, items(strings.Repeat("d", 31)), nil, nil, nil) // 40 bytes: exactly the bound, kept
	if _, _, ok := exact.get("r4"); !ok || exact.bytes != 40 {
		t.Fatalf("a response of exactly the cache's bound was not kept (%d bytes held)", exact.bytes)
	}
}

func TestDecodeSocketCreateRefusesWhatContradictsTheSocket(t *testing.T) {
	for _, tc := range []struct{ member, param, code string }{
		{`"stream":false`, "stream", "unsupported_parameter"}, {`"stream":null`, "stream", "unsupported_parameter"},
		{`"background":true`, "background", "unsupported_parameter"}, {`"background":null`, "background", "unsupported_parameter"},
		{`"generate":"no"`, "generate", "invalid_type"},
	} {
		_, _, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",`+tc.member+`}`), 64)
		var ae *wire.APIError
		if !errors.As(err, &ae) || ae.Param != tc.param || ae.Code != tc.code {
			t.Fatalf("%s: %v", tc.member, err)
		}
	}
	// What Codex CLI sends on every message: no-ops on a socket.
	for _, member := range []string{`"stream":true`, `"stream": true `, `"stream_options":{"include_obfuscation":false}`, `"background":false`} {
		req, generate, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x",`+member+`}`), 64)
		if err != nil || !req.Stream || req.body.Background || !generate {
			t.Fatalf("%s: %+v %v", member, req, err)
		}
	}
	req, generate, err := decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x"}`), 64)
	if err != nil || !req.Stream || !req.Store || !generate {
		t.Fatalf("a plain create: %+v %v", req, err)
	}
	if _, generate, err = decodeSocketCreate([]byte(`{"type":"response.create","model":"m","input":"x","generate":false}`), 64); err != nil || generate {
		t.Fatalf("a warm-up: generate %v, %v", generate, err)
	}
}

// The terminal event frees the connection for the next create (the sink's endTurn); the end of
// that turn's code, which runs after, must not free a create accepted in between.
func TestSocketTurnEndFreesTheConnectionOnce(t *testing.T) {
	var k socket
	k.busy.Store(true) // the reader accepted a create
	k.turnOpen.Store(true)
	k.endTurn() // the sink wrote the terminal event
	if k.busy.Load() {
		t.Fatal("the terminal event did not free the connection")
	}
	if !k.busy.CompareAndSwap(false, true) { // the reader accepts the next create
		t.Fatal("the next create was refused")
	}
	k.endTurn() // the first turn's code returns
	if !k.busy.Load() {
		t.Fatal("the end of the previous turn freed the connection during the next")
	}
}
