package rehydrate

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/wire"
)

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

// Size is what a cache charges for a History: the projection's capacity, historyEntryOverhead per
// id and call id, and 16 bytes per reasoning span it keeps for reasoning.context current_turn.
func TestHistorySizeChargesEveryIndexAndSpan(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think"}]}`,
		`{"id":"fc_1","type":"function_call","call_id":"call_1","name":"f","arguments":"{}"}`,
		`{"id":"fco_1","type":"function_call_output","call_id":"call_1","output":"ok"}`,
		`{"id":"rs_2","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"again"}]}`,
		`{"id":"fc_2","type":"function_call","call_id":"call_2","name":"f","arguments":"{}"}`,
		`{"id":"fco_2","type":"function_call_output","call_id":"call_2","output":"ok"}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}`,
		`{"id":"rs_3","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"more"}]}`)
	h := mustBuild(t, &Params{History: hist, Input: mustInput(t, `"next"`), ReasoningContext: wire.ContextCurrentTurn}).History
	ids, calls, spans := len(h.ids), len(h.calls), len(h.sentReasoning)+len(h.drop)
	if ids != len(hist) || calls != 2 || len(h.drop) != 2 || len(h.sentReasoning) != 1 {
		t.Fatalf("indexed %d ids, %d call ids, %d dropped and %d sent reasoning spans; want %d, 2, 2, 1", ids, calls, len(h.drop), len(h.sentReasoning), len(hist))
	}
	if want := int64(cap(h.buf) + (ids+calls)*historyEntryOverhead + spans*16); h.Size() != want {
		t.Fatalf("Size %d, want %d (capacity %d, %d index entries, %d spans)", h.Size(), want, cap(h.buf), ids+calls, spans)
	}
}

// A prepared projection made for another tenant, other keys, another history param or a longer
// history is not used: Build answers exactly as without it. Without history there is no
// projection to keep.
func TestBuildIgnoresAPreparedHistoryMadeForOtherParams(t *testing.T) {
	ring := testRing(t)
	otherKeys := testRing(t, seal.Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, 32)})
	blob := sealFor(t, ring, "tenant-a", "rs_1", sealedParts)
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"`+blob+`"}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}`)
	longer := append(slices.Clone(hist), mustItems(t, `{"id":"msg_3","type":"message","role":"user","content":[{"type":"input_text","text":"later"}]}`)...)
	own := Params{History: hist, Input: mustInput(t, `"next"`), Keys: ring, Tenant: "tenant-a", NewID: fixedID}
	prepared := func(p Params, history []wire.Item, param string) *History {
		t.Helper()
		h, err := prepare(&Params{History: history, Keys: p.Keys, Tenant: p.Tenant}, param, fixedID)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tc := range []struct {
		name string
		p    Params
		pre  *History
	}{
		{"another tenant's", func() Params { p := own; p.Tenant = "tenant-b"; return p }(), prepared(own, hist, defaultHistoryParam)},
		{"other keys'", func() Params { p := own; p.Keys = otherKeys; return p }(), prepared(own, hist, defaultHistoryParam)},
		{"another param's", func() Params { p := own; p.HistoryParam = "conversation"; return p }(), prepared(own, hist, defaultHistoryParam)},
		{"a longer history's", own, prepared(own, longer, defaultHistoryParam)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := Build(&tc.p)
			with := tc.p
			with.Prepared = tc.pre
			got, gerr := Build(&with)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("with the prepared projection: error %v, want %v", gerr, werr)
			}
			if werr == nil && (!bytes.Equal(got.Body, want.Body) || !reflect.DeepEqual(got.History, want.History)) {
				t.Fatalf("with the prepared projection: body\n%s\nwant\n%s", got.Body, want.Body)
			}
		})
	}
	if res := mustBuild(t, &Params{Input: mustInput(t, `"hi"`)}); res.History != nil {
		t.Fatalf("a Build without history returned a projection of %d items", res.History.Len())
	}
}
