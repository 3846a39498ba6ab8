package compact

import (
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// An item given with its JSON only (no Type) is a compaction item by its JSON's type; a set Type
// is what counts when there is one.
func TestIsCompactionReadsTheJSONOnlyWhenTheTypeIsUnset(t *testing.T) {
	for _, tc := range []struct {
		it   wire.Item
		want bool
	}{
		{wire.Item{JSON: []byte(`{"type":"compaction","id":"cmp_1","encrypted_content":"e"}`)}, true},
		{wire.Item{JSON: []byte(`{"type":"message","role":"user","content":"x"}`)}, false},
		{wire.Item{Type: TypeCompaction, JSON: []byte(`{"type":"message","role":"user","content":"x"}`)}, true},
		{wire.Item{Type: wire.TypeMessage, JSON: []byte(`{"type":"compaction","encrypted_content":"e"}`)}, false},
	} {
		if got := IsCompaction(tc.it); got != tc.want {
			t.Errorf("IsCompaction(type %q, %s) = %v, want %v", tc.it.Type, tc.it.JSON, got, tc.want)
		}
	}
}

// expandOf expands session with the given payloads by compaction item id.
func expandOf(t *testing.T, session string, payloads map[string]*Payload) []wire.Item {
	t.Helper()
	out, _, err := Expand(items(session), func(id, _ string) (*Payload, error) { return payloads[id], nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(its []wire.Item) []string { return ItemIDs(its) }

// A summary takes the place of the first item it replaced that comes before its compaction item,
// not of the compaction item itself (what it replaced came first) and never of a replaced item
// that follows it.
func TestExpandPutsTheSummaryWhereTheFirstEarlierReplacedItemWas(t *testing.T) {
	for _, tc := range []struct {
		session  string
		payloads map[string]*Payload
		want     string
	}{
		{"UAX", map[string]*Payload{"X2": {V: 1, Summary: "s", Replaced: []string{"U0"}}}, "X2 A1"},
		{"XAU", map[string]*Payload{"X0": {V: 1, Summary: "s", Replaced: []string{"U2"}}}, "X0 A1"},
		{"UAUX", map[string]*Payload{"X3": {V: 1, Summary: "s", Replaced: []string{"U2", "U0"}}}, "X3 A1"},
	} {
		got := ids(expandOf(t, tc.session, tc.payloads))
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("Expand(%s) = %s, want %s", tc.session, s, tc.want)
		}
	}
}

// Two summaries that want one place are both kept, in their items' order.
func TestExpandKeepsTwoSummariesForOnePlaceInOrder(t *testing.T) {
	out := expandOf(t, "UXAX", map[string]*Payload{
		"X1": {V: 1, Summary: "first", Replaced: []string{"U0"}},
		"X3": {V: 1, Summary: "second", Replaced: []string{"U0"}},
	})
	if got := strings.Join(ids(out), " "); got != "X1 X3 A2" {
		t.Fatalf("Expand = %s, want both summaries where U0 was, then A2", got)
	}
	for _, it := range out[:2] {
		if it.Type != wire.TypeMessage {
			t.Fatalf("%s is %q, want its summary message", it.ID, it.Type)
		}
	}
}

// The estimate is a token per 3 bytes of each item's JSON (rounded down) plus 4 per item.
func TestEstimateTokensIsAThirdOfTheBytesPlusFourAnItem(t *testing.T) {
	its := []wire.Item{{JSON: make([]byte, 10)}, {JSON: make([]byte, 3)}, {}}
	if got, want := EstimateTokens(its), (3+4)+(1+4)+(0+4); got != want {
		t.Fatalf("EstimateTokens = %d, want %d", got, want)
	}
	if got := EstimateTokens(nil); got != 0 {
		t.Fatalf("EstimateTokens(nil) = %d", got)
	}
}
