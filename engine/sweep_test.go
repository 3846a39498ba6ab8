package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// purgeBatches asks for batches of 500 until one deletes fewer, and adds up what was deleted; an
// error or the context's end stops it.
func TestPurgeBatchesStopsAtAShortBatch(t *testing.T) {
	s, _ := newCountingEngine(t, Config{})
	for _, tc := range []struct {
		name    string
		batches []int
		err     error
		total   int
		calls   int
	}{
		{"one short batch", []int{20}, nil, 20, 1},
		{"full batches then a short one", []int{500, 500, 499}, nil, 1499, 3},
		{"full batches then an empty one", []int{500, 0}, nil, 500, 2},
		{"an error ends it", []int{500}, errors.New("store down (injected)"), 500, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var limits []int
			total := s.purgeBatches(t.Context(), "test purge", func(limit int) (int, error) {
				limits = append(limits, limit)
				if len(limits) > len(tc.batches) {
					return 0, tc.err
				}
				return tc.batches[len(limits)-1], nil
			})
			if total != tc.total || len(limits) != tc.calls || slices.ContainsFunc(limits, func(l int) bool { return l != 500 }) {
				t.Fatalf("total %d after batches of %v, want %d in %d calls", total, limits, tc.total, tc.calls)
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if total := s.purgeBatches(ctx, "test purge", func(int) (int, error) { t.Fatal("called after the context ended"); return 0, nil }); total != 0 {
		t.Fatalf("total %d", total)
	}
}

// Sweep applies Retention only when it is set: responses created before now-Retention are
// deleted, newer ones kept; with no retention nothing is deleted.
func TestSweepAppliesRetentionOnlyWhenSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retention time.Duration
		kept      []bool // old (2h), recent (1 min)
	}{
		{"no retention", 0, []bool{true, true}},
		{"one hour", time.Hour, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newCountingEngine(t, Config{Retention: tc.retention})
			var ids []string
			for _, age := range []time.Duration{2 * time.Hour, time.Minute} {
				r := store.Response{ID: wire.NewID(wire.PrefixResponse), Tenant: "t1", Status: wire.StatusCompleted, Model: "m",
					CreatedAt: time.Now().Add(-age), Echo: []byte(`{}`)}
				if err := s.store.ResponseCommit(t.Context(), &store.ResponseCommitParams{Response: r}); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.ID)
			}
			s.Sweep(t.Context())
			for i, id := range ids {
				_, _, err := s.store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: "t1", ID: id})
				if kept := err == nil; kept != tc.kept[i] || !kept && !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("response %d: %v, want kept=%v", i, err, tc.kept[i])
				}
			}
		})
	}
}
