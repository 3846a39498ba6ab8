package storetest

import (
	"fmt"
	"strings"
	"testing"

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
	in, out := benchItems(b, "in", 5), benchItems(b, "out", 5)
	ctx := b.Context()
	i := 0
	for b.Loop() {
		err := s.ResponseCommit(ctx, &store.ResponseCommitParams{
			Response: newResponse(tenantA, fmt.Sprintf("resp_bench_%d", i), "", "", wire.StatusCompleted),
			Input:    in,
			Output:   out,
		})
		if err != nil {
			b.Fatalf("commit: %v", err)
		}
		i++
	}
}

// BenchmarkChainGet measures ResponseChainGet of a previous_response_id chain of the given depth,
// each response holding one input and one output item of about 400 bytes. The chain is built
// before the timer starts; s must be empty.
func BenchmarkChainGet(b *testing.B, s store.Store, depth int) {
	prev := ""
	for i := range depth {
		id := fmt.Sprintf("resp_%d", i)
		commitTurn(b, s, tenantA, id, prev, "", benchItems(b, fmt.Sprintf("in%d", i), 1), benchItems(b, fmt.Sprintf("out%d", i), 1))
		prev = id
	}
	ctx := b.Context()
	for b.Loop() {
		chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: prev})
		if err != nil {
			b.Fatalf("chain get: %v", err)
		}
		if len(chain.Items()) != 2*depth {
			b.Fatalf("chain has %d items, want %d", len(chain.Items()), 2*depth)
		}
	}
}
