package storetest

import (
	"testing"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// The replay records of the Chat Completions front door (store.Store ReplayRecord*).

var replayCases = []storeCase{
	{"replay records round-trip verbatim and list only the tenant's scope and ends", testReplayRoundTrip},
	{"a second payload for one replay identity blocks it for good", testReplayConflict},
	{"blocking a start blocks the older records there, not later ones", testReplayBlock},
	{"replay records are touched on use and bounded per scope by use", testReplayBound},
	{"replay purge deletes records unused since the cutoff, of every tenant", testReplayPurge},
}

const scopeA, scopeB = "scope-a", "scope-b"

func replayRecord(t testing.TB, end, payload string) *store.ReplayRecord {
	return &store.ReplayRecord{End: end, Start: "start-" + end, Envelope: "env-" + end, Parent: "parent-" + end, Payload: payload,
		Items: []wire.Item{msg(t, "rs_"+end, "reasoning of "+end), oddItems(t)[0]}}
}

func saveReplay(t testing.TB, s store.Store, p store.ReplayRecordSaveParams) {
	t.Helper()
	if p.Tenant == "" {
		p.Tenant = tenantA
	}
	if p.Scope == "" {
		p.Scope = scopeA
	}
	noErr(t, "save replay record", s.ReplayRecordSave(t.Context(), &p))
}

func listReplay(t testing.TB, s store.Store, tenant, scope string, ends ...string) map[string]store.ReplayRecord {
	t.Helper()
	recs, err := s.ReplayRecordList(t.Context(), &store.ReplayRecordListParams{Tenant: tenant, Scope: scope, Ends: ends})
	noErr(t, "list replay records", err)
	out := map[string]store.ReplayRecord{}
	for _, r := range recs {
		out[r.End] = r
	}
	return out
}

func testReplayRoundTrip(t *testing.T, s store.Store) {
	at := now()
	rec := replayRecord(t, "e1", "p1")
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: rec, Now: at})
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e2", "p2"), Now: at})
	got := listReplay(t, s, tenantA, scopeA, "e1", "e9")
	r, ok := got["e1"]
	if len(got) != 1 || !ok {
		t.Fatalf("listed %d records, want e1 only", len(got))
	}
	if r.Start != rec.Start || r.Envelope != rec.Envelope || r.Parent != rec.Parent || r.Payload != rec.Payload || r.Blocked {
		t.Fatalf("record %+v, want %+v", r, rec)
	}
	checkItems(t, "replay items", r.Items, rec.Items)
	checkTime(t, "created_at", r.CreatedAt, at)
	checkTime(t, "used_at", r.UsedAt, at)
	if n := len(listReplay(t, s, tenantB, scopeA, "e1")); n != 0 {
		t.Fatalf("another tenant listed %d records", n)
	}
	if n := len(listReplay(t, s, tenantA, scopeB, "e1")); n != 0 {
		t.Fatalf("another scope listed %d records", n)
	}
	if n := len(listReplay(t, s, tenantA, scopeA)); n != 0 {
		t.Fatalf("no ends listed %d records", n)
	}
}

func testReplayConflict(t *testing.T, s store.Store) {
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e1", "p1")})
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e1", "p1")})
	if r := listReplay(t, s, tenantA, scopeA, "e1")["e1"]; r.Blocked || len(r.Items) != 2 {
		t.Fatalf("the same payload twice: blocked=%v items=%d, want a usable record", r.Blocked, len(r.Items))
	}
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e1", "p2")})
	if r := listReplay(t, s, tenantA, scopeA, "e1")["e1"]; !r.Blocked || len(r.Items) != 0 {
		t.Fatalf("two payloads: blocked=%v items=%d, want a blocked marker without items", r.Blocked, len(r.Items))
	}
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e1", "p1")})
	if r := listReplay(t, s, tenantA, scopeA, "e1")["e1"]; !r.Blocked {
		t.Fatal("a conflict was forgotten when the first payload came back")
	}
	saveReplay(t, s, store.ReplayRecordSaveParams{Tenant: tenantB, Record: replayRecord(t, "e1", "p9")})
	if r := listReplay(t, s, tenantB, scopeA, "e1")["e1"]; r.Blocked {
		t.Fatal("another tenant's record with the same identity conflicted")
	}
}

func testReplayBlock(t *testing.T, s store.Store) {
	t0 := now()
	old := replayRecord(t, "e1", "p1")
	old.Start = "s"
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: old, Now: t0})
	saveReplay(t, s, store.ReplayRecordSaveParams{Block: "s", Now: t0.Add(time.Second)})
	later := replayRecord(t, "e2", "p2")
	later.Start = "s"
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: later, Now: t0.Add(2 * time.Second)})
	got := listReplay(t, s, tenantA, scopeA, "e1", "e2")
	if !got["e1"].Blocked || len(got["e1"].Items) != 0 {
		t.Fatal("the record older than the block is usable")
	}
	if got["e2"].Blocked {
		t.Fatal("a record newer than the block is blocked")
	}
}

func testReplayBound(t *testing.T, s store.Store) {
	t0 := now()
	for i, end := range []string{"e1", "e2", "e3"} {
		saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, end, end), Now: t0.Add(time.Duration(i) * time.Second)})
	}
	// e1 is used after e3 was written: it is now the most recently used.
	saveReplay(t, s, store.ReplayRecordSaveParams{Used: []string{"e1"}, Now: t0.Add(5 * time.Second)})
	checkTime(t, "used_at after use", listReplay(t, s, tenantA, scopeA, "e1")["e1"].UsedAt, t0.Add(5*time.Second))
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "e4", "e4"), Now: t0.Add(6 * time.Second), MaxPerScope: 2})
	got := listReplay(t, s, tenantA, scopeA, "e1", "e2", "e3", "e4")
	if len(got) != 2 || got["e1"].End == "" || got["e4"].End == "" {
		t.Fatalf("kept %v, want e1 and e4 (the two most recently used)", keys(got))
	}
	saveReplay(t, s, store.ReplayRecordSaveParams{Tenant: tenantB, Record: replayRecord(t, "e5", "e5"), MaxPerScope: 1})
	if len(listReplay(t, s, tenantA, scopeA, "e1", "e4")) != 2 {
		t.Fatal("another tenant's bound deleted this tenant's records")
	}
}

func keys(m map[string]store.ReplayRecord) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func testReplayPurge(t *testing.T, s store.Store) {
	t0 := now()
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "old", "p"), Now: t0.Add(-time.Hour)})
	saveReplay(t, s, store.ReplayRecordSaveParams{Tenant: tenantB, Record: replayRecord(t, "old", "p"), Now: t0.Add(-time.Hour)})
	saveReplay(t, s, store.ReplayRecordSaveParams{Record: replayRecord(t, "new", "p"), Now: t0})
	n, err := s.ReplayPurge(t.Context(), &store.ReplayPurgeParams{Before: t0.Add(-time.Minute), Limit: 10})
	noErr(t, "purge", err)
	if n != 2 {
		t.Fatalf("purged %d, want 2", n)
	}
	if got := listReplay(t, s, tenantA, scopeA, "old", "new"); len(got) != 1 || got["new"].End == "" {
		t.Fatalf("kept %v, want new", keys(got))
	}
}
