package server

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/wire"
)

// TestMain fails the package's run if a test leaves a goroutine behind (every goroutine has an
// owner that stops it and waits for it).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewRefusesALeaseNoLongerThanTheWriteTimeout(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	_, err = New(t.Context(), Config{LeaseTTL: 15 * time.Second, WriteTimeout: 30 * time.Second}, sq, nil)
	if err == nil || !strings.Contains(err.Error(), "write timeout") {
		t.Fatalf("New with lease 15s < write timeout 30s: %v", err)
	}
}

func TestPaginateWalksTheContextBothWays(t *testing.T) {
	var items []wire.Item
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		items = append(items, wire.Item{ID: id})
	}
	ids := func(p *store.ItemPage) string {
		var s []string
		for _, it := range p.Items {
			s = append(s, it.ID)
		}
		return strings.Join(s, "")
	}
	for _, tc := range []struct {
		pg   pageQuery
		want string
		more bool
	}{
		{pageQuery{limit: 2, order: store.OrderAsc}, "ab", true},
		{pageQuery{after: "b", limit: 2, order: store.OrderAsc}, "cd", true},
		{pageQuery{after: "d", limit: 2, order: store.OrderAsc}, "e", false},
		{pageQuery{limit: 3, order: store.OrderDesc}, "edc", true},
		{pageQuery{after: "c", limit: 3, order: store.OrderDesc}, "ba", false},
	} {
		p, err := paginate(items, tc.pg)
		if err != nil || ids(p) != tc.want || p.HasMore != tc.more {
			t.Fatalf("%+v: %q more=%v err=%v, want %q more=%v", tc.pg, ids(p), p.HasMore, err, tc.want, tc.more)
		}
	}
	if _, err := paginate(items, pageQuery{after: "zz", limit: 2}); err == nil {
		t.Fatal("an unknown cursor was accepted")
	}
	if items[0].ID != "a" || items[4].ID != "e" {
		t.Fatal("paginate reordered its input")
	}
}

func TestReplayOfAnUnreadableItemFailsInsteadOfLeavingAGap(t *testing.T) {
	r := &store.Response{ID: "resp_1", Status: wire.StatusCompleted, CreatedAt: time.Unix(1, 0), Echo: []byte(`{}`)}
	out := []wire.Item{
		{ID: "msg_1", Type: "message", JSON: []byte(`{"id":"msg_1","type":"message","status":"completed","content":[]}`)},
		{ID: "msg_2", Type: "message", JSON: []byte(`{"id":"msg_2","type":"message","status":"completed","content":"not parts"}`)},
	}
	if b, err := replayEvents(nil, r, out, -1); err == nil {
		t.Fatalf("replay of an unreadable item succeeded:\n%s", b)
	}
}
