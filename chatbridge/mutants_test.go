package chatbridge

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// The canonical form's exact bytes: sorted members, commas only between elements, nulls left out.
func TestCanonicalFormIsExact(t *testing.T) {
	for in, want := range map[string]string{
		`{"b":[1,2,{"y":null,"x":"s"}],"a":true,"c":null}`: `{"a":true,"b":[1,2,{"x":"s"}]}`,
		`[]`:        `[]`,
		`{}`:        `{}`,
		`[[],[1]]`:  `[[],[1]]`,
		`{"k":1.0}`: `{"k":1.0}`,
	} {
		if got := canonicalString(t, json.RawMessage(in)); got != want {
			t.Errorf("canonical(%s) = %s, want %s", in, got, want)
		}
	}
}

// nested is a user message whose content part nests n objects deep.
func nested(n int) string {
	return `{"role":"user","content":[{"type":"text","text":"x","extra":` + strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}]}`
}

// MaxDepth and MaxBytes are inclusive bounds: a history at the bound is identified, one past it
// is not (and is never an error).
func TestLimitsAreInclusive(t *testing.T) {
	depthOf := func(n int) int { // the depth the canonical writer reaches for nested(n)
		lim := Limits{MaxBytes: 1 << 20, MaxDepth: 1}
		for ; lim.MaxDepth < 200; lim.MaxDepth++ {
			if _, ok := Identify(testScope, msgs(t, nested(n)), lim); ok {
				return lim.MaxDepth
			}
		}
		t.Fatal("never identified")
		return 0
	}
	d5, d6 := depthOf(5), depthOf(6)
	if d6 != d5+1 {
		t.Fatalf("one more level of nesting needs depth %d, not %d+1", d6, d5)
	}
	if _, ok := Identify(testScope, msgs(t, nested(6)), Limits{MaxBytes: 1 << 20, MaxDepth: d5}); ok {
		t.Fatal("a history one level past MaxDepth was identified")
	}

	m := msgs(t, user, `{"role":"assistant","content":"a"}`, `{"role":"user","content":"b"}`)
	size := 0
	for n := 1; n < 1<<16; n++ {
		if _, ok := Identify(testScope, m, Limits{MaxBytes: n, MaxDepth: 64}); ok {
			size = n
			break
		}
	}
	if size == 0 {
		t.Fatal("never identified")
	}
	if _, ok := Identify(testScope, m, Limits{MaxBytes: size - 1, MaxDepth: 64}); ok {
		t.Fatal("identified one byte under its size")
	}
	// The bound is on the whole history, not each message: a history twice as long needs more.
	long := msgs(t, user, `{"role":"assistant","content":"a"}`, `{"role":"user","content":"b"}`,
		`{"role":"assistant","content":"a"}`, `{"role":"user","content":"b"}`)
	if _, ok := Identify(testScope, long, Limits{MaxBytes: size, MaxDepth: 64}); ok {
		t.Fatal("a longer history fits the same budget")
	}
}

// A null member of a text part is an absent one: the part still equals its text.
func TestANullMemberOfATextPartIsAbsent(t *testing.T) {
	a := last(t, testScope, `{"role":"user","content":"hi"}`)
	b := last(t, testScope, `{"role":"user","content":[{"type":"text","text":"hi","cache_control":null}]}`)
	c := last(t, testScope, `{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}`)
	if a != b || a == c {
		t.Fatalf("null member: %v; set member: %v", a == b, a != c)
	}
}

// When replay stops at an incoherent record, every assistant message from there on counts as a
// miss, and nothing else does.
func TestMissesCountOnlyAssistantMessages(t *testing.T) {
	records, hist := session(t, 2)
	hist = append(hist, `{"role":"user","content":"one"}`, `{"role":"user","content":"two"}`, `{"role":"user","content":"three"}`)
	m := msgs(t, hist...)
	h, _ := Identify(testScope, m, Limits{})
	p := h.Plan(m, records[1:], 0) // the first record is gone: the second is incoherent
	if p.Hits != 0 || p.Misses != 2 {
		t.Fatalf("plan %+v, want 0 hits and 2 misses", p)
	}
}

func TestAssistantMessagesTranslateWithoutEmptyParts(t *testing.T) {
	for body, want := range map[string]string{
		// Only tool calls: no empty assistant message.
		`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"o"}]}`: `[{"content":"q","role":"user","type":"message"},{"arguments":"{}","call_id":"c1","name":"f","status":"completed","type":"function_call"},{"call_id":"c1","output":"o","type":"function_call_output"}]`,
		// function_call: null is the same as absent.
		`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","function_call":null}]}`: `[{"content":"q","role":"user","type":"message"},{"content":[{"annotations":[],"text":"a","type":"output_text"}],"role":"assistant","status":"completed","type":"message"}]`,
	} {
		out, err := translate(t, body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got := canonicalString(t, out["input"]); got != canonicalString(t, json.RawMessage(want)) {
			t.Errorf("%s:\ninput %s\nwant  %s", body, got, want)
		}
	}
	if _, err := translate(t, `{"model":"m","messages":[{"role":"user","content":"q"}],"stream":"yes"}`); err == nil {
		t.Fatal(`"stream":"yes" accepted`)
	}
}

// A completion whose items hold two tool calls gives each its index in the chunks, and the
// finish reason of a turn with tool calls is tool_calls, of one without stop.
func TestChunksNumberToolCallsAndFinishReasonsFollowThem(t *testing.T) {
	ch := Chunker{Meta: Meta{ID: "chatcmpl-1", Created: 1, Model: "m"}}
	for _, e := range []struct {
		typ  wire.EventType
		data string
	}{
		{wire.EventCreated, `{}`},
		{wire.EventItemAdded, `{"output_index":0,"item":{"type":"function_call","call_id":"c1","name":"f","arguments":""}}`},
		{wire.EventItemAdded, `{"output_index":1,"item":{"type":"function_call","call_id":"c2","name":"g","arguments":""}}`},
	} {
		ch.Event(e.typ, []byte(e.data))
	}
	out := string(ch.Take(nil))
	if !strings.Contains(out, `"id":"c1","index":0`) || !strings.Contains(out, `"id":"c2","index":1`) {
		t.Fatalf("tool call indices: %s", out)
	}
	calls := items(t, `{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}","status":"completed"}`)
	text := items(t, `{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[]}]}`)
	if r := (&Outcome{Status: wire.StatusCompleted, Items: calls}).FinishReason(); r != "tool_calls" {
		t.Fatalf("with a tool call: %s", r)
	}
	if r := (&Outcome{Status: wire.StatusCompleted, Items: text}).FinishReason(); r != "stop" {
		t.Fatalf("without: %s", r)
	}
	if b := string(AppendCompletion(nil, &Meta{ID: "x", Model: "m"}, &Outcome{Status: wire.StatusCompleted, Items: text}, ExposeRaw)); strings.Contains(b, "tool_calls\":") {
		t.Fatalf("a completion without tool calls lists them: %s", b)
	}
}
