package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// LegacyTurn is a response as a store before the lineage layout (schema version 3 and earlier)
// held it: a backend test writes these rows with that version's SQL, migrates, and hands the
// store to CheckUpgrade.
type LegacyTurn struct {
	Tenant, ID, Prev string
	Status           wire.Status
	CreatedAt        time.Time
	Input, Output    []wire.Item
	// Detached are items a conversation kept after the response was deleted: stored with no
	// response (response_id NULL), they belong to no chain.
	Detached []wire.Item
}

// LegacyFixture is a forest of chains in the old layout: a main chain with forks at every depth
// and forks of forks, children created out of id order, responses whose previous response was
// deleted (so never written here), an in-progress head, and a second tenant reusing ids.
func LegacyFixture(t testing.TB) []LegacyTurn {
	t.Helper()
	base := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	var out []LegacyTurn
	add := func(tenant, id, prev string) {
		out = append(out, LegacyTurn{
			Tenant: tenant, ID: id, Prev: prev, Status: wire.StatusCompleted,
			CreatedAt: base.Add(time.Duration(len(out)) * time.Second),
			Input:     msgs(t, tenant+id+"_in", 2), Output: msgs(t, tenant+id+"_out", 1),
		})
	}
	prev := ""
	for k := range 6 {
		id := fmt.Sprintf("m%d", k)
		add(tenantA, id, prev)
		prev = id
	}
	for k := range 6 {
		// The fork created first is the branch's continuation whatever its id.
		add(tenantA, fmt.Sprintf("z%d", k), fmt.Sprintf("m%d", k))
		add(tenantA, fmt.Sprintf("a%d", k), fmt.Sprintf("m%d", k))
		add(tenantA, fmt.Sprintf("z%d_1", k), fmt.Sprintf("z%d", k))
		add(tenantA, fmt.Sprintf("a%d_1", k), fmt.Sprintf("a%d", k))
		add(tenantA, fmt.Sprintf("a%d_f", k), fmt.Sprintf("a%d", k))
	}
	// Deleted ancestors: "gone" was deleted, its descendants remain; one kept its items in a
	// conversation.
	add(tenantA, "after_gone", "gone")
	add(tenantA, "after_gone_1", "after_gone")
	out[len(out)-1].Detached = msgs(t, "kept", 2)
	// An in-progress head.
	add(tenantA, "running", "m5")
	out[len(out)-1].Status = wire.StatusInProgress
	out[len(out)-1].Output = nil
	// Tenant B reuses ids in another shape and names tenant A's ids as previous responses.
	add(tenantB, "m1", "")
	add(tenantB, "m2", "m1")
	add(tenantB, "a0", "m0")
	add(tenantB, "z0", "m2")
	return out
}

// CheckUpgrade checks that every response of fixture loads, after the migration, exactly the
// chain the old layout stood for (followed one previous_response_id at a time), and that the
// migrated tree keeps growing correctly: continuing heads, forking, deleting.
func CheckUpgrade(t *testing.T, s store.Store, fixture []LegacyTurn) {
	t.Helper()
	trees := map[string]*tree{}
	for _, f := range fixture {
		m := trees[f.Tenant]
		if m == nil {
			m = newTree(t, s, f.Tenant)
			trees[f.Tenant] = m
		}
		m.record(f.ID, f.Prev, f.Input, f.Output)
	}
	tenants := []string{tenantA, tenantB}
	for _, tn := range tenants {
		trees[tn].check("migrated " + tn)
	}
	for _, f := range fixture {
		if f.Status != wire.StatusCompleted {
			chain, err := s.ResponseChainGet(context.Background(), &store.ResponseChainGetParams{Tenant: f.Tenant, ID: f.ID})
			noErr(t, "chain of "+f.ID, err)
			if got := responsesOf(chain); got[len(got)-1].Status != f.Status {
				t.Fatalf("status of %s: %s, want %s", f.ID, got[len(got)-1].Status, f.Status)
			}
		}
	}
	// Grow the migrated tree: continue heads and inner responses (forks), then delete.
	a := trees[tenantA]
	for _, id := range slices.Clone(a.order) {
		if id != "running" {
			a.add(id+"_new", id)
		}
	}
	a.check("after continuing every migrated response")
	a.del("m2")
	a.del("z4")
	a.check("after deleting migrated responses")
	trees[tenantB].add("new", "m2")
	trees[tenantB].check("tenant B after growing")
}
