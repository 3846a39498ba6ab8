package rehydrate

import "testing"

// A History's Size counts at least its projection's bytes and an overhead per id and call id it
// indexes (a chain cache weighs its entries by it); a nil History covers nothing and weighs nothing.
func TestHistorySizeCountsTheProjectionAndItsIndexes(t *testing.T) {
	var none *History
	if none.Len() != 0 || none.Size() != 0 {
		t.Fatalf("nil History: Len %d, Size %d", none.Len(), none.Size())
	}
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"hello there"}]}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think"}]}`,
		`{"id":"fc_1","type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}`)
	res := mustBuild(t, &Params{History: hist, Input: mustInput(t, `"next"`)})
	h := res.History
	if h.Len() != len(hist) {
		t.Fatalf("Len %d, want %d", h.Len(), len(hist))
	}
	indexes := len(h.ids) + len(h.calls)
	if indexes != 5 { // four item ids, one call id
		t.Fatalf("%d ids and call ids indexed, want 5", indexes)
	}
	if min := int64(len(h.buf) + indexes*historyEntryOverhead); h.Size() < min {
		t.Fatalf("Size %d, want at least the projection (%d bytes) and %d per index entry (%d)", h.Size(), len(h.buf), historyEntryOverhead, min)
	}
	if one := mustBuild(t, &Params{History: hist[:1], Input: mustInput(t, `"next"`)}).History; one.Size() >= h.Size() {
		t.Fatalf("one item's History weighs %d, four items' %d", one.Size(), h.Size())
	}
}
