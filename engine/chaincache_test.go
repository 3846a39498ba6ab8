package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// A continuation of a cached chain head reuses the projection of its history (issue 25: a warm
// turn projects only what is new): the entry a commit puts holds the projection of the turn's
// own history, the next continuation extends it to all of the head's history and keeps that in
// the entry, and what goes upstream is byte for byte what a cold load of the chain sends.
func TestChainCacheKeepsTheProjectedHistory(t *testing.T) {
	s, sim := newSimEngine(t, Config{}, nil)
	tenant := testTenant
	entry := func(id string) *chainEntry {
		t.Helper()
		e, ok := s.chains.c.GetIfPresent(chainKey{tenant, id})
		if !ok {
			t.Fatalf("no chain cache entry for %s", id)
		}
		return e
	}
	create := func(body string) string {
		t.Helper()
		status, out := call(t, s, body)
		if status != http.StatusOK {
			t.Fatalf("create: %d %s", status, out)
		}
		var r struct{ ID string }
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
			t.Fatalf("create answered %s", out)
		}
		return r.ID
	}

	prev := create(`{"model":"openai/gpt-oss-sim","input":"one"}`)
	for _, in := range []string{"two", "three", "four"} {
		id := create(fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":%q,"previous_response_id":%q}`, in, prev))
		if e := entry(prev); e.prep.Len() != len(e.items) || len(e.items) == 0 {
			t.Fatalf("the continued head %s: projection of %d of its %d history items, want all", prev, e.prep.Len(), len(e.items))
		}
		if e, before := entry(id), len(entry(prev).items); e.prep.Len() != before || len(e.items) <= before {
			t.Fatalf("the new head %s: projection of %d of its %d history items, want the %d its turn replayed",
				id, e.prep.Len(), len(e.items), before)
		}
		prev = id
	}

	// The same continuation three times (store:false, so the head stays): from the entry the
	// commit put (the projection extended by the last turn), from the entry that continuation
	// completed, and from a chain loaded anew.
	next := fmt.Sprintf(`{"model":"openai/gpt-oss-sim","store":false,"previous_response_id":%q,`+
		`"input":[{"type":"message","id":"msg_next","role":"user","content":"five"}]}`, prev)
	var bodies [][]byte
	for i := range 3 {
		if i == 2 {
			s.chains = newChainCache(s.cfg.ChainCacheBytes)
		}
		create(next)
		reqs := sim.Requests()
		bodies = append(bodies, reqs[len(reqs)-1].Body)
	}
	if !bytes.Equal(bodies[0], bodies[2]) || !bytes.Equal(bodies[1], bodies[2]) {
		t.Fatalf("upstream bodies differ:\nextended: %s\ncached:   %s\nloaded:   %s", bodies[0], bodies[1], bodies[2])
	}
	if n := bytes.Count(bodies[2], []byte(`"type":"reasoning"`)); n < 4 {
		t.Fatalf("the history replayed %d reasoning items, want one per turn: %s", n, bodies[2])
	}
}

// genStore answers ChainGeneration only.
type genStore struct {
	store.Store
	gen int64
	err error
}

func (g *genStore) ChainGeneration(context.Context, *store.ChainGenerationParams) (int64, error) {
	return g.gen, g.err
}

// An entry serves a continuation only while the tenant's generation is the one it was read at;
// a changed generation or a failed check is a miss that drops the entry. An entry may weigh at
// most a quarter of the cache, each item counted as its JSON plus chainEntryOverhead.
func TestChainCacheEntriesHoldOnlyAtTheirGenerationAndWithinAQuarter(t *testing.T) {
	const maxBytes = 4000
	item := func(id string, jsonBytes int) wire.Item {
		pad := jsonBytes - len(`{"id":"","type":"message","x":""}`) - len(id)
		return wire.Item{ID: id, Type: "message", JSON: []byte(`{"id":"` + id + `","type":"message","x":"` + strings.Repeat("a", pad) + `"}`)}
	}
	c := newChainCache(maxBytes)
	st := &genStore{gen: 1}
	ctx := t.Context()

	c.put("t", "quarter", 1, []wire.Item{item("m1", maxBytes/4-chainEntryOverhead)}, historyInfo{})
	c.put("t", "over", 1, []wire.Item{item("m2", maxBytes/4-chainEntryOverhead+1)}, historyInfo{})
	c.put("t", "two", 1, []wire.Item{item("m3", 100), item("m4", maxBytes/4-2*chainEntryOverhead-100+1)}, historyInfo{})
	if _, _, ok := c.get(ctx, st, "t", "quarter"); !ok {
		t.Fatal("an entry of exactly a quarter of the cache was not kept")
	}
	for _, id := range []string{"over", "two"} {
		if _, _, ok := c.get(ctx, st, "t", id); ok {
			t.Fatalf("entry %q weighs more than a quarter of the cache (items and their overhead) and was kept", id)
		}
	}

	items, info, ok := c.get(ctx, st, "t", "quarter")
	if !ok || len(items) != 1 || items[0].ID != "m1" || info.gen != 1 || !info.ok {
		t.Fatalf("hit at its generation: %v %+v %t", items, info, ok)
	}
	if _, _, ok := c.get(ctx, st, "other-tenant", "quarter"); ok {
		t.Fatal("another tenant's continuation used the entry")
	}
	st.gen = 2
	if _, _, ok := c.get(ctx, st, "t", "quarter"); ok {
		t.Fatal("an entry read at generation 1 served a continuation at generation 2")
	}
	st.gen = 1
	if _, _, ok := c.get(ctx, st, "t", "quarter"); ok {
		t.Fatal("a stale entry was not dropped on the miss")
	}
	c.put("t", "quarter", 1, []wire.Item{item("m1", 100)}, historyInfo{})
	st.err = errors.New("connection reset")
	if _, _, ok := c.get(ctx, st, "t", "quarter"); ok {
		t.Fatal("a failed generation check served the entry")
	}
}

// A turn cut short keeps, of its output, the items that finished and the compaction item that
// automatic compaction led it with (whole from the start, with no status): continuing it, from
// the cache or from the store, replays the summary, never the region it replaced (issue 38 item
// 21).
func TestACutTurnKeepsItsCompactionItemForItsContinuation(t *testing.T) {
	in := wire.Item{ID: "msg_in", Type: wire.TypeMessage, JSON: []byte(`{"id":"msg_in","type":"message","role":"user","content":"go on"}`)}
	cmp := compact.NewItem("cmp_1", "rgr1.auto.x")
	cut := wire.Item{ID: "msg_out", Type: wire.TypeMessage, JSON: []byte(`{"id":"msg_out","type":"message","status":"in_progress"}`)}
	done := wire.Item{ID: "rs_1", Type: wire.TypeReasoning, JSON: []byte(`{"id":"rs_1","type":"reasoning","status":"completed"}`)}
	for _, status := range []wire.Status{wire.StatusCancelled, wire.StatusFailed} {
		got := appendTurnHistory(nil, status, []wire.Item{in}, []wire.Item{cmp, done, cut})
		if ids := itemIDs(got); !slices.Equal(ids, []string{"msg_in", "cmp_1", "rs_1"}) {
			t.Errorf("%s turn: history %v, want its input, its compaction item and its finished item", status, ids)
		}
		chain := &store.Chain{Turns: []store.ChainTurn{{Response: store.Response{Status: status}, Input: []wire.Item{in}, Output: []wire.Item{cmp, done, cut}}}}
		if ids := itemIDs(chainHistory(chain)); !slices.Equal(ids, []string{"msg_in", "cmp_1", "rs_1"}) {
			t.Errorf("%s turn loaded from the store: history %v", status, ids)
		}
	}
	if ids := itemIDs(appendTurnHistory(nil, wire.StatusIncomplete, []wire.Item{in}, []wire.Item{cmp, cut})); !slices.Equal(ids, []string{"msg_in", "cmp_1", "msg_out"}) {
		t.Errorf("an incomplete turn is replayed whole: %v", ids)
	}
}

func itemIDs(items []wire.Item) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}
