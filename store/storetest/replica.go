package storetest

import (
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// replicaCases cover Response.Replica and ReplicaAway (migrations 008, 010): the upstream
// replica that served a response, which the chain's next turn prefers, and whether the chain
// was away from its first choice (docs/fleet.md).
var replicaCases = []storeCase{
	{"a response's replica round-trips through commit, begin and get", testReplicaRoundTrip},
	{"a commit without a replica keeps the one begin stored, and one with a replica replaces it", testReplicaKeptByCommit},
	{"chain loads carry each turn's replica, forks included", testReplicaInChain},
}

func testReplicaRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := newResponse(tenantA, "resp_r1", "", "", wire.StatusCompleted)
	r.Replica, r.ReplicaAway = "pool-a/http://10.0.0.1:8000/v1", true
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Output: msgs(t, "o", 1)}))
	got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_r1"})
	noErr(t, "get", err)
	checkResponse(t, got, r)

	b := newResponse(tenantA, "resp_r2", "resp_r1", "", wire.StatusInProgress)
	b.Replica, b.ReplicaAway = "b", true
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: b, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	got, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_r2"})
	noErr(t, "get begun", err)
	checkResponse(t, got, b)

	// No replica reads back as "".
	n := newResponse(tenantA, "resp_r3", "", "", wire.StatusCompleted)
	noErr(t, "commit without replica", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: n}))
	got, _, err = s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: "resp_r3"})
	noErr(t, "get without replica", err)
	checkResponse(t, got, n)
}

func testReplicaKeptByCommit(t *testing.T, s store.Store) {
	ctx := t.Context()
	// Away goes with the replica: kept with it, replaced with it.
	for _, tc := range []struct {
		id, begin, commit, want         string
		beginAway, commitAway, wantAway bool
	}{
		{"resp_keep", "a", "", "a", true, false, true},
		{"resp_replace", "a", "b", "b", true, false, false},
		{"resp_late", "", "c", "c", false, true, true},
	} {
		begun := newResponse(tenantA, tc.id, "", "", wire.StatusInProgress)
		begun.Replica, begun.ReplicaAway = tc.begin, tc.beginAway
		noErr(t, "begin "+tc.id, s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: begun, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
		final := newResponse(tenantA, tc.id, "", "", wire.StatusCompleted)
		final.CreatedAt = begun.CreatedAt
		final.Replica, final.ReplicaAway = tc.commit, tc.commitAway
		noErr(t, "commit "+tc.id, s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: final, Begun: true, Output: msgs(t, tc.id, 1)}))
		got, _, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: tc.id})
		noErr(t, "get "+tc.id, err)
		if got.Replica != tc.want || got.ReplicaAway != tc.wantAway {
			t.Errorf("%s: replica %q away %v after begin %q and commit %q, want %q away %v", tc.id, got.Replica, got.ReplicaAway, tc.begin, tc.commit, tc.want, tc.wantAway)
		}
	}
}

func testReplicaInChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	commit := func(id, prev, replica string) {
		r := newResponse(tenantA, id, prev, "", wire.StatusCompleted)
		r.Replica, r.ReplicaAway = replica, replica == "y"
		noErr(t, "commit "+id, s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Input: msgs(t, id+"_in", 1), Output: msgs(t, id+"_out", 1)}))
	}
	commit("resp_c1", "", "x")
	commit("resp_c2", "resp_c1", "")
	commit("resp_c3", "resp_c2", "y")
	commit("resp_f3", "resp_c2", "z") // a fork of resp_c2
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{"resp_c3", []string{"x", "", "y (away)"}},
		{"resp_f3", []string{"x", "", "z"}},
	} {
		chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: tc.id})
		noErr(t, "chain "+tc.id, err)
		var got []string
		for _, turn := range chain.Turns {
			r := turn.Response.Replica
			if turn.Response.ReplicaAway {
				r += " (away)"
			}
			got = append(got, r)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("chain %s replicas %q, want %q", tc.id, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("chain %s replicas %q, want %q", tc.id, got, tc.want)
				break
			}
		}
	}
}
