package storetest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// benchItems returns n items of about 400 bytes each, ids prefixed by prefix.
func benchItems(b testing.TB, prefix string, n int) []wire.Item {
	b.Helper()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 8)
	out := make([]wire.Item, n)
	for i := range out {
		out[i] = msg(b, fmt.Sprintf("%s_%d", prefix, i), text)
	}
	return out
}

// BenchmarkCommit measures ResponseCommit of one turn: a completed response with 5 input and 5
// output items of about 400 bytes each, no conversation, on the given (empty) store.
func BenchmarkCommit(b *testing.B, s store.Store) {
	ctx := b.Context()
	p := BenchCommitParams(b, "")
	i := 0
	for b.Loop() {
		p.Response.ID = fmt.Sprintf("resp_bench_%d", i)
		err := s.ResponseCommit(ctx, p)
		if err != nil {
			b.Fatalf("commit: %v", err)
		}
		i++
	}
}

// BenchmarkBegin measures ResponseBegin of one turn's in-progress record with one input item of
// about 400 bytes, on the given (empty) store: the write a streamed turn's response.created
// waits for (docs/design.md §1).
func BenchmarkBegin(b *testing.B, s store.Store) {
	ctx := b.Context()
	p := &store.ResponseBeginParams{Response: newResponse(tenantA, "", "", "", wire.StatusInProgress),
		Input: benchItems(b, "in", 1), LeaseOwner: "bench", LeaseExpiresAt: now().Add(time.Hour)}
	i := 0
	for b.Loop() {
		p.Response.ID = fmt.Sprintf("resp_begin_%d", i)
		if err := s.ResponseBegin(ctx, p); err != nil {
			b.Fatalf("begin: %v", err)
		}
		i++
	}
}

// BenchmarkChainGet measures ResponseChainGet of a previous_response_id chain of the given depth,
// each response holding one input and one output item of about 400 bytes. The chain is built
// before the timer starts; s must be empty.
func BenchmarkChainGet(b *testing.B, s store.Store, depth int) {
	prev := BenchChain(b, s, tenantA, depth)
	loopChainGet(b, s, prev, 2*depth)
}

// BenchmarkChainWarm measures what a replica's chain cache costs a continuation of a cached
// head of a chain of the given depth: the generation check (ChainGeneration), whatever the depth.
// The chain is built before the timer starts; s must be empty.
func BenchmarkChainWarm(b *testing.B, s store.Store, depth int) {
	BenchChain(b, s, tenantA, depth)
	ctx := b.Context()
	for b.Loop() {
		if _, err := s.ChainGeneration(ctx, &store.ChainGenerationParams{Tenant: tenantA}); err != nil {
			b.Fatalf("chain generation: %v", err)
		}
	}
}

// BenchChain commits a previous_response_id chain of the given depth for tenant, each response
// holding one input and one output item of about 400 bytes (ids resp_0 … resp_{depth-1}), and
// returns its head's id.
func BenchChain(b testing.TB, s store.Store, tenant string, depth int) string {
	b.Helper()
	prev := ""
	for i := range depth {
		id := fmt.Sprintf("resp_%d", i)
		commitTurn(b, s, tenant, id, prev, "", benchItems(b, fmt.Sprintf("in%d", i), 1), benchItems(b, fmt.Sprintf("out%d", i), 1))
		prev = id
	}
	return prev
}

// BenchmarkChainForked measures ResponseChainGet of a chain of the given depth that forks every
// forkEvery responses (each fork a new branch: depth/forkEvery range scans), the worst layout for
// lineage short of a fork at every turn.
func BenchmarkChainForked(b *testing.B, s store.Store, depth, forkEvery int) {
	prev := ""
	for i := range depth {
		id := fmt.Sprintf("resp_%d", i)
		if i > 0 && i%forkEvery == 0 {
			// A sibling first, so this continuation forks.
			commitTurn(b, s, tenantA, id+"_sibling", prev, "", nil, nil)
		}
		commitTurn(b, s, tenantA, id, prev, "", benchItems(b, fmt.Sprintf("in%d", i), 1), benchItems(b, fmt.Sprintf("out%d", i), 1))
		prev = id
	}
	loopChainGet(b, s, prev, 2*depth)
}

// BenchCommitParams is the turn BenchmarkCommit commits, with the given response id.
func BenchCommitParams(b testing.TB, id string) *store.ResponseCommitParams {
	return &store.ResponseCommitParams{
		Response: newResponse(tenantA, id, "", "", wire.StatusCompleted),
		Input:    benchItems(b, "in", 5),
		Output:   benchItems(b, "out", 5),
	}
}

// BenchChainHead is the tenant and id of the head of the chain the chain benchmarks build.
func BenchChainHead(depth int) (tenant, id string) {
	return tenantA, fmt.Sprintf("resp_%d", depth-1)
}

// BenchmarkCommitParallel measures ResponseCommit of BenchmarkCommit's turn from concurrent
// callers (b.RunParallel, GOMAXPROCS × -cpu goroutines): what grouping concurrent commits buys.
func BenchmarkCommitParallel(b *testing.B, s store.Store) {
	ctx := b.Context()
	var n atomic.Int64
	b.ResetTimer() // the caller opened s
	b.RunParallel(func(pb *testing.PB) {
		p := BenchCommitParams(b, "")
		for pb.Next() {
			p.Response.ID = fmt.Sprintf("resp_par_%d", n.Add(1))
			if err := s.ResponseCommit(ctx, p); err != nil {
				b.Errorf("commit: %v", err)
				return
			}
		}
	})
}

// loopChainGet is the timed loop of the chain benchmarks: tenantA's chain ending at head, which
// holds items items.
func loopChainGet(b *testing.B, s store.Store, head string, items int) {
	ctx := b.Context()
	for b.Loop() {
		chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: head})
		if err != nil {
			b.Fatalf("chain get: %v", err)
		}
		if len(chain.Items()) != items {
			b.Fatalf("chain has %d items, want %d", len(chain.Items()), items)
		}
	}
}
