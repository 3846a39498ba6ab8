package vllmsim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
	"time"
)

// BlockTokens is the size of a prefix-cache block: vLLM's default block size. Only whole
// blocks are cached, and a prompt's cached prefix is a whole number of them.
const BlockTokens = 16

// prefixCache models vLLM's automatic prefix caching for one simulated instance (docs/fleet.md,
// "The simulator's prefix cache"): an LRU of the hashes of full 16-token blocks, each hash
// chained over every token before it, so a block hits only when the whole prefix up to it is
// the same. A prompt's cached tokens are its leading run of cached blocks; after the lookup
// every full block of the prompt is cached (most recently used). Safe for concurrent use;
// deterministic for a given order of requests.
type prefixCache struct {
	mu       sync.Mutex
	capacity int
	lru      *list.List // of uint64 block hashes, most recent first
	blocks   map[uint64]*list.Element
}

func newPrefixCache(blocks int) *prefixCache {
	return &prefixCache{capacity: blocks, lru: list.New(), blocks: make(map[uint64]*list.Element, min(blocks, 1<<16))}
}

// use looks tokens up and caches them; it returns how many of them were cached. Like vLLM it
// never reports a whole prompt cached: the last token is always computed, so a prompt cached
// to its last block reports one block less.
func (c *prefixCache) use(tokens []uint32) int {
	n := len(tokens) / BlockTokens
	hashes := make([]uint64, n)
	h := fnv.New64a()
	var buf [4]byte
	for i, t := range tokens[:n*BlockTokens] {
		binary.LittleEndian.PutUint32(buf[:], t)
		_, _ = h.Write(buf[:])
		if (i+1)%BlockTokens == 0 {
			hashes[i/BlockTokens] = h.Sum64()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := 0
	for hit < n {
		if _, ok := c.blocks[hashes[hit]]; !ok {
			break
		}
		hit++
	}
	for _, bh := range hashes {
		if e, ok := c.blocks[bh]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.blocks[bh] = c.lru.PushFront(bh)
		for c.lru.Len() > c.capacity {
			old := c.lru.Back()
			delete(c.blocks, old.Value.(uint64))
			c.lru.Remove(old)
		}
	}
	cached := hit * BlockTokens
	if cached >= len(tokens) && cached > 0 {
		cached -= BlockTokens
	}
	return cached
}

// prefill is the simulated prefill time of a prompt: base + uncached tokens × per token.
func (o *Options) prefill(input, cached int) time.Duration {
	return o.PrefillBase + time.Duration(max(input-cached, 0))*o.PrefillPerToken
}
