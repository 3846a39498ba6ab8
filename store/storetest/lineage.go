package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// lineageCases check ResponseChainGet on trees of forks (backends store chains by lineage,
// migrations/postgres/006) against a model that follows previous_response_id one response at a
// time, and the lineage generation caches of chains rely on.
var lineageCases = []storeCase{
	{"forks at every depth, and forks of forks, load the history of their own path", testForkEveryDepth},
	{"deleting at every depth of a forked tree names the missing ancestor, and a new continuation never fills the gap", testForkDeletes},
	{"concurrent continuations of one response each load their own chain", testConcurrentContinuations},
	{"a begun response continuing a chain loads it, and forks from an in-progress response", testBegunLineage},
	{"a chain never crosses tenants", testLineageTenants},
	{"the lineage generation advances with each deletion of the tenant's responses and nothing else", testChainGeneration},
	{"concurrent commits that succeed, fail and do nothing each get their own outcome", testConcurrentCommitsMixed},
}

// tree is the model: each stored response's previous response and items, per tenant.
type tree struct {
	t       *testing.T
	s       store.Store
	tenant  string
	prev    map[string]string
	in, out map[string][]wire.Item
	order   []string // every id ever committed, in order
	deleted map[string]bool
}

func newTree(t *testing.T, s store.Store, tenant string) *tree {
	return &tree{t: t, s: s, tenant: tenant, prev: map[string]string{}, in: map[string][]wire.Item{},
		out: map[string][]wire.Item{}, deleted: map[string]bool{}}
}

// add commits id continuing prev ("" for a root) with one input and one output item.
func (m *tree) add(id, prev string) {
	m.t.Helper()
	in, out := msgs(m.t, id+"_in", 1), msgs(m.t, id+"_out", 1)
	commitTurn(m.t, m.s, m.tenant, id, prev, "", in, out)
	m.record(id, prev, in, out)
}

func (m *tree) record(id, prev string, in, out []wire.Item) {
	m.prev[id], m.in[id], m.out[id] = prev, in, out
	m.order = append(m.order, id)
}

func (m *tree) del(id string) {
	m.t.Helper()
	noErr(m.t, "delete "+id, m.s.ResponseDelete(context.Background(), &store.ResponseDeleteParams{Tenant: m.tenant, ID: id}))
	m.deleted[id] = true
}

// want is the chain of id by the model: the ids oldest first, and the missing ancestor.
func (m *tree) want(id string) (ids []string, missing string) {
	for cur := id; cur != ""; cur = m.prev[cur] {
		if _, ok := m.prev[cur]; !ok || m.deleted[cur] {
			missing = cur
			break
		}
		ids = append(ids, cur)
	}
	slices.Reverse(ids)
	return ids, missing
}

// check loads the chain of every id and compares it with the model.
func (m *tree) check(when string) {
	m.t.Helper()
	for _, id := range m.order {
		chain, err := m.s.ResponseChainGet(context.Background(), &store.ResponseChainGetParams{Tenant: m.tenant, ID: id})
		if m.deleted[id] {
			isNotFound(m.t, when+": chain of deleted "+id, err)
			continue
		}
		if err != nil {
			m.t.Fatalf("%s: chain of %s: %v", when, id, err)
		}
		wantIDs, wantMissing := m.want(id)
		var gotIDs []string
		for _, r := range responsesOf(chain) {
			gotIDs = append(gotIDs, r.ID)
		}
		if !slices.Equal(gotIDs, wantIDs) || chain.Missing != wantMissing {
			m.t.Fatalf("%s: chain of %s = %v missing %q, want %v missing %q", when, id, gotIDs, chain.Missing, wantIDs, wantMissing)
		}
		for _, turn := range chain.Turns {
			rid := turn.Response.ID
			checkItems(m.t, when+": input of "+rid+" in the chain of "+id, turn.Input, m.in[rid])
			checkItems(m.t, when+": output of "+rid+" in the chain of "+id, turn.Output, m.out[rid])
		}
	}
}

// forkTree builds a main chain m0…m(n-1); from every mk a fork fk with a continuation gk, a
// second fork hk, and from every fk a fork of the fork ffk.
func forkTree(t *testing.T, s store.Store, tenant string, n int) *tree {
	m := newTree(t, s, tenant)
	prev := ""
	for k := range n {
		id := fmt.Sprintf("m%d", k)
		m.add(id, prev)
		prev = id
	}
	for k := range n {
		m.add(fmt.Sprintf("f%d", k), fmt.Sprintf("m%d", k))
		m.add(fmt.Sprintf("g%d", k), fmt.Sprintf("f%d", k))
		m.add(fmt.Sprintf("h%d", k), fmt.Sprintf("m%d", k))
		m.add(fmt.Sprintf("ff%d", k), fmt.Sprintf("f%d", k))
	}
	return m
}

func testForkEveryDepth(t *testing.T, s store.Store) {
	m := forkTree(t, s, tenantA, 8)
	m.check("forked tree")
	// Deep forks: continue each fork-of-fork a few turns, then fork the middle of that run.
	for k := range 8 {
		prev := fmt.Sprintf("ff%d", k)
		for j := range 3 {
			id := fmt.Sprintf("ff%d_%d", k, j)
			m.add(id, prev)
			prev = id
		}
		m.add(fmt.Sprintf("ff%d_x", k), fmt.Sprintf("ff%d_1", k))
	}
	m.check("deep forks")
}

func testForkDeletes(t *testing.T, s store.Store) {
	m := forkTree(t, s, tenantA, 6)
	// Delete a middle member of the main chain, a fork's first response, a fork of a fork and
	// the root, checking every chain after each.
	for _, id := range []string{"m3", "f1", "ff4", "g2", "m0"} {
		m.del(id)
		m.check("after deleting " + id)
	}
	// A response whose continuation was deleted is continued again: the new response must not
	// take the deleted one's place in the chains of the deleted one's descendants (m4, m5 still
	// name m3 as missing).
	m.add("n2", "m2")
	m.add("n2b", "n2")
	m.add("nf2", "f2")
	m.check("after continuing where a response was deleted")
	// Continuing a deleted response stores an orphan whose chain names it missing.
	m.add("o3", "m3")
	m.check("after continuing a deleted response")
}

func testConcurrentContinuations(t *testing.T, s store.Store) {
	m := newTree(t, s, tenantA)
	m.add("root", "")
	m.add("head", "root")
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	type turn struct {
		id      string
		in, out []wire.Item
	}
	turns := make([]turn, n)
	for i := range n {
		turns[i] = turn{fmt.Sprintf("c%d", i), msgs(t, fmt.Sprintf("c%d_in", i), 1), msgs(t, fmt.Sprintf("c%d_out", i), 1)}
		wg.Go(func() {
			errs <- s.ResponseCommit(context.Background(), &store.ResponseCommitParams{
				Response: newResponse(tenantA, turns[i].id, "head", "", wire.StatusCompleted),
				Input:    turns[i].in, Output: turns[i].out,
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		noErr(t, "concurrent commit", err)
	}
	for _, tr := range turns {
		m.record(tr.id, "head", tr.in, tr.out)
	}
	// Each continues further, so whichever extended the head's branch and the forks both grow.
	for i := range n {
		m.add(fmt.Sprintf("c%d_next", i), fmt.Sprintf("c%d", i))
	}
	m.check("concurrent continuations")
}

func testBegunLineage(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newTree(t, s, tenantA)
	m.add("r0", "")
	m.add("r1", "r0")
	// A begun turn continuing r1, finished later.
	in := msgs(t, "b_in", 2)
	begun := newResponse(tenantA, "b2", "r1", "", wire.StatusInProgress)
	noErr(t, "begin", s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: begun, Input: in, LeaseOwner: "w1", LeaseExpiresAt: now().Add(time.Hour)}))
	// While it is in progress its chain loads (in progress) and a fork from r1 is a new branch.
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "b2"})
	noErr(t, "chain of the begun response", err)
	if got := responsesOf(chain); len(got) != 3 || got[2].Status != wire.StatusInProgress {
		t.Fatalf("chain of the begun response: %v", got)
	}
	m.add("x2", "r1")
	out := msgs(t, "b_out", 1)
	noErr(t, "commit", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: finalOf(begun), Output: out, Begun: true}))
	m.record("b2", "r1", in, out)
	m.add("b3", "b2")
	m.add("x3", "x2")
	m.check("begun turns")
}

func testLineageTenants(t *testing.T, s store.Store) {
	a := forkTree(t, s, tenantA, 3)
	// Tenant B reuses the ids in another shape, and continues tenant A's ids, which do not
	// exist for it.
	b := newTree(t, s, tenantB)
	b.add("m2", "")
	b.add("f0", "m2")
	b.add("m1", "m0")
	b.add("z", "f0")
	a.check("tenant A")
	b.check("tenant B")
}

func testChainGeneration(t *testing.T, s store.Store) {
	ctx := t.Context()
	gen := func(tenant string) int64 {
		t.Helper()
		g, err := s.ChainGeneration(ctx, &store.ChainGenerationParams{Tenant: tenant})
		noErr(t, "chain generation", err)
		return g
	}
	a0, b0 := gen(tenantA), gen(tenantB)
	m := forkTree(t, s, tenantA, 3)
	createConversation(t, s, tenantA, "conv_g", msgs(t, "cg", 1))
	noErr(t, "conversation item delete", s.ConversationItemDelete(ctx, &store.ConversationItemDeleteParams{Tenant: tenantA, ConversationID: "conv_g", ItemID: "cg_0"}))
	if gen(tenantA) != a0 {
		t.Fatalf("generation moved without a response deletion: %d → %d", a0, gen(tenantA))
	}
	chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "g2"})
	noErr(t, "chain", err)
	if chain.Generation != a0 {
		t.Fatalf("chain generation %d, want %d", chain.Generation, a0)
	}
	// A delete that is refused (unknown id, live lease) changes nothing.
	err = s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_none"})
	isNotFound(t, "delete unknown", err)
	beginTurn(t, s, tenantA, "resp_live", "", nil, now().Add(time.Hour))
	if err := s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_live"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete of a live response: %v, want a conflict", err)
	}
	if gen(tenantA) != a0 {
		t.Fatalf("generation moved by a refused delete")
	}
	m.del("m1")
	a1 := gen(tenantA)
	if a1 == a0 || gen(tenantB) != b0 {
		t.Fatalf("after a delete: tenant A %d → %d, tenant B %d → %d; want A to move, B not", a0, a1, b0, gen(tenantB))
	}
	chain, err = s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: "g2"})
	noErr(t, "chain", err)
	if chain.Generation != a1 {
		t.Fatalf("chain generation %d, want %d", chain.Generation, a1)
	}
	// Retention deletes count as well, for the tenants whose responses it deleted.
	old := newResponse(tenantB, "resp_old", "", "", wire.StatusCompleted)
	old.CreatedAt = now().Add(-48 * time.Hour)
	noErr(t, "commit old", s.ResponseCommit(ctx, &store.ResponseCommitParams{Response: old}))
	n, err := s.ResponsePurge(ctx, &store.ResponsePurgeParams{Before: now().Add(-time.Hour), Limit: 10})
	noErr(t, "purge", err)
	if n != 1 || gen(tenantB) == b0 || gen(tenantA) != a1 {
		t.Fatalf("purge of %d: tenant B %d → %d, tenant A %d → %d; want 1, B to move, A not", n, b0, gen(tenantB), a1, gen(tenantA))
	}
}

// testConcurrentCommitsMixed commits many turns at once, some of which must fail (an unknown
// conversation, a begun response deleted meanwhile) or be no-ops (already terminal): backends
// that group concurrent commits into one transaction must give each its own outcome.
func testConcurrentCommitsMixed(t *testing.T, s store.Store) {
	ctx := t.Context()
	createConversation(t, s, tenantA, "conv_mix", nil)
	commitTurn(t, s, tenantA, "resp_done", "", "", nil, msgs(t, "done", 1))
	gone := beginTurn(t, s, tenantA, "resp_gone", "", msgs(t, "gone", 1), now().Add(-time.Minute))
	noErr(t, "delete begun", s.ResponseDelete(ctx, &store.ResponseDeleteParams{Tenant: tenantA, ID: "resp_gone"}))
	type outcome struct {
		id   string
		p    *store.ResponseCommitParams
		want error // nil, store.ErrNotFound
		kept bool  // the response exists afterwards
	}
	var cases []outcome
	for i := range 24 {
		id := fmt.Sprintf("resp_mix_%d", i)
		switch i % 6 {
		case 1:
			cases = append(cases, outcome{id, &store.ResponseCommitParams{Response: newResponse(tenantA, id, "", "conv_none", wire.StatusCompleted),
				Output: msgs(t, id, 1), ConversationID: "conv_none"}, store.ErrNotFound, false})
		case 2:
			cases = append(cases, outcome{"resp_done", &store.ResponseCommitParams{Response: newResponse(tenantA, "resp_done", "", "", wire.StatusCompleted)}, nil, true})
		case 3:
			cases = append(cases, outcome{"resp_gone", &store.ResponseCommitParams{Response: finalOf(gone), Output: msgs(t, "late", 1), Begun: true}, store.ErrNotFound, false})
		case 4:
			cases = append(cases, outcome{id, &store.ResponseCommitParams{Response: newResponse(tenantA, id, "", "conv_mix", wire.StatusCompleted),
				Input: msgs(t, id+"_in", 1), Output: msgs(t, id+"_out", 1), ConversationID: "conv_mix"}, nil, true})
		default:
			cases = append(cases, outcome{id, &store.ResponseCommitParams{Response: newResponse(tenantA, id, "resp_done", "", wire.StatusCompleted),
				Input: msgs(t, id+"_in", 1), Output: msgs(t, id+"_out", 2)}, nil, true})
		}
	}
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { errs[i] = s.ResponseCommit(context.Background(), c.p) })
	}
	wg.Wait()
	for i, c := range cases {
		if (c.want == nil) != (errs[i] == nil) || (c.want != nil && !errors.Is(errs[i], c.want)) {
			t.Errorf("commit %d (%s): %v, want %v", i, c.id, errs[i], c.want)
		}
		_, out, err := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenantA, ID: c.id})
		switch {
		case c.kept && err != nil:
			t.Errorf("%s not stored: %v", c.id, err)
		case !c.kept && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s stored by a failed commit (%d output items, %v)", c.id, len(out), err)
		case c.kept && c.p.Response.ID != "resp_done":
			checkItems(t, "output of "+c.id, out, c.p.Output)
		}
	}
	// The conversation got each successful turn's input then output, adjacent.
	items := conversationItems(t, s, tenantA, "conv_mix")
	if len(items) != 8 {
		t.Fatalf("conversation has %d items, want 8", len(items))
	}
	for k := 0; k < len(items); k += 2 {
		in, out := items[k].ID, items[k+1].ID
		if !strings.HasSuffix(in, "_in_0") || strings.TrimSuffix(in, "_in_0") != strings.TrimSuffix(out, "_out_0") {
			t.Fatalf("conversation items %s, %s are not one turn's input then output", in, out)
		}
	}
	// Chains of the continuations of resp_done each load resp_done then themselves.
	for _, c := range cases {
		if c.p.Response.PreviousResponseID == "resp_done" {
			chain, err := s.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tenantA, ID: c.id})
			noErr(t, "chain", err)
			if got := responsesOf(chain); len(got) != 2 || got[0].ID != "resp_done" {
				t.Fatalf("chain of %s: %v", c.id, got)
			}
		}
	}
}

// Lineage is a response's place in the lineage layout (migrations/postgres/006,
// migrations/sqlite/006) as its row holds it; Fork is -1 for none.
type Lineage struct{ Branch, Depth, Fork int64 }

// LineageLayout checks that a backend lays chains out as the layout's range scans need: a
// continuation of a branch's head extends that branch at the next depth, a continuation of any
// other response starts a new branch at the next depth that records the branch it forked from,
// and a response without a previous one (or whose previous one does not exist) starts a new
// branch at depth 0. Chain loads give the same answers on any layout (lineageCases); this is what
// keeps a linear chain to one range scan. read returns a response's stored lineage; s must be
// empty.
func LineageLayout(t *testing.T, s store.Store, read func(id string) Lineage) {
	t.Helper()
	for _, c := range [][2]string{{"resp_0", ""}, {"resp_1", "resp_0"}, {"resp_2", "resp_1"},
		{"resp_fork", "resp_1"}, {"resp_fork_next", "resp_fork"}, {"resp_orphan", "resp_missing"}} {
		commitTurn(t, s, tenantA, c[0], c[1], "", msgs(t, c[0], 1), nil)
	}
	main := read("resp_0")
	want := map[string]Lineage{
		"resp_0":         {main.Branch, 0, -1},
		"resp_1":         {main.Branch, 1, -1},
		"resp_2":         {main.Branch, 2, -1},
		"resp_fork":      {read("resp_fork").Branch, 2, main.Branch},
		"resp_fork_next": {read("resp_fork").Branch, 3, -1},
		"resp_orphan":    {read("resp_orphan").Branch, 0, -1},
	}
	for id, w := range want {
		if got := read(id); got != w {
			t.Errorf("%s: lineage %+v, want %+v", id, got, w)
		}
	}
	branches := map[int64]bool{main.Branch: true, want["resp_fork"].Branch: true, want["resp_orphan"].Branch: true}
	if len(branches) != 3 {
		t.Errorf("branches main %d, fork %d, orphan %d: want three distinct", main.Branch, want["resp_fork"].Branch, want["resp_orphan"].Branch)
	}
}
