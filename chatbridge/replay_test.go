package chatbridge

import (
	"testing"
)

// A record whose parent record is blocked (a conflict, or a failed turn at its start) or gone
// (purged) is not replayed: its ancestry is no longer what the request replays before it. The
// blocked message itself is a conflict; replay stops at the first incoherent record.
func TestARecordWhoseParentIsBlockedOrPurgedIsNotReplayed(t *testing.T) {
	records, hist := session(t, 3)
	m := msgs(t, hist...)
	h, _ := Identify(testScope, m, Limits{})

	blocked := append([]Record(nil), records...)
	blocked[0].Blocked = true
	p := h.Plan(m, blocked, 0)
	if p.Hits != 0 || p.Conflicts != 1 || p.Misses != 2 || len(p.Replace) != 0 || p.Last != "" {
		t.Fatalf("parent blocked: %+v", p)
	}

	purged := append([]Record(nil), records[1:]...)
	p = h.Plan(m, purged, 0)
	if p.Hits != 0 || p.Misses != 3 || len(p.Replace) != 0 {
		t.Fatalf("parent purged: %+v", p)
	}

	// The middle one blocked: the first replays, the rest do not.
	mid := append([]Record(nil), records...)
	mid[1].Blocked = true
	p = h.Plan(m, mid, 0)
	if p.Hits != 1 || p.Conflicts != 1 || p.Misses != 1 || p.Last != records[0].End || len(p.Replace) != 1 {
		t.Fatalf("middle blocked: %+v", p)
	}
}

// maxBytes bounds the replayed items exactly: a budget equal to the records' size replays them
// all, one byte less stops before the last; 0 is unbounded.
func TestReplayByteBudgetIsExact(t *testing.T) {
	records, hist := session(t, 3)
	m := msgs(t, hist...)
	h, _ := Identify(testScope, m, Limits{})
	total := 0
	for i := range records {
		total += records[i].Bytes()
	}
	if records[0].Bytes() == 0 || total == records[0].Bytes() {
		t.Fatal("records without items")
	}
	for _, tc := range []struct{ budget, hits, misses int }{
		{total, 3, 0},
		{total - 1, 2, 1},
		{records[0].Bytes(), 1, 2},
		{records[0].Bytes() - 1, 0, 3},
		{0, 3, 0},
	} {
		p := h.Plan(m, records, tc.budget)
		if p.Hits != tc.hits || p.Misses != tc.misses || (tc.budget > 0 && p.Bytes > tc.budget) {
			t.Fatalf("budget %d (total %d): hits %d misses %d bytes %d, want %d hits", tc.budget, total, p.Hits, p.Misses, p.Bytes, tc.hits)
		}
		if tc.hits == 3 && p.Bytes != total {
			t.Fatalf("budget %d: %d bytes replayed, want %d", tc.budget, p.Bytes, total)
		}
	}
}

// A turn that ended in a refusal is captured and replays when the client sends the refusal back
// as the completion showed it.
func TestARefusalTurnReplays(t *testing.T) {
	refusal := items(t,
		`{"id":"rs_r","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"should not"}],"status":"completed"}`,
		`{"id":"msg_r","type":"message","role":"assistant","status":"completed","content":[{"type":"refusal","refusal":"I can't help with that."}]}`)
	hist := []string{user}
	h, ok := Identify(testScope, msgs(t, hist...), Limits{})
	if !ok {
		t.Fatal("not identified")
	}
	rec, ok := h.Capture(refusal, "")
	if !ok {
		t.Fatal("a refusal turn was not captured")
	}
	for _, back := range []string{
		`{"role":"assistant","content":null,"refusal":"I can't help with that."}`,
		`{"role":"assistant","content":"","refusal":"I can't help with that."}`,
	} {
		next := append(append([]string(nil), hist...), back, `{"role":"user","content":"why?"}`)
		m := msgs(t, next...)
		h2, _ := Identify(testScope, m, Limits{})
		p := h2.Plan(m, []Record{rec}, 0)
		if p.Hits != 1 || len(p.Replace[1]) != 2 || p.Replace[1][0].ID != "rs_r" {
			t.Fatalf("refusal sent back as %s: %+v", back, p)
		}
	}
}
