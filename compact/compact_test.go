package compact

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// items builds a session from a compact notation: S system, D developer, U user, A assistant,
// C function_call, O function_call_output, R reasoning, X compaction; each gets id "<letter><i>".
func items(spec string) []wire.Item {
	var out []wire.Item
	for i, ch := range spec {
		id := string(ch) + string(rune('0'+i%10))
		var b string
		switch ch {
		case 'S', 'D', 'U', 'A':
			role := map[rune]string{'S': "system", 'D': "developer", 'U': "user", 'A': "assistant"}[ch]
			b = `{"type":"message","id":"` + id + `","role":"` + role + `","content":"x"}`
		case 'C':
			b = `{"type":"function_call","id":"` + id + `","call_id":"c","name":"f","arguments":"{}"}`
		case 'O':
			b = `{"type":"function_call_output","id":"` + id + `","call_id":"c","output":"y"}`
		case 'R':
			b = `{"type":"reasoning","id":"` + id + `","summary":[]}`
		case 'X':
			b = `{"type":"compaction","id":"` + id + `","encrypted_content":"e"}`
		}
		it, err := wire.ParseItem([]byte(b))
		if err != nil {
			panic(err)
		}
		out = append(out, it)
	}
	return out
}

// letters renders items back in the notation.
func letters(its []wire.Item) string {
	var b strings.Builder
	for _, it := range its {
		b.WriteString(it.ID[:1])
	}
	return b.String()
}

func TestPlanItems(t *testing.T) {
	for _, tc := range []struct {
		name, session string
		keep          int
		lead, region  string
		recent        string
	}{
		{"nothing to compact: fewer user turns than kept", "SUA", 2, "S", "", "UA"},
		{"nothing to compact: exactly the kept turns", "SUAUA", 2, "S", "", "UAUA"},
		{"the oldest turn is compacted", "SUAUAUA", 2, "S", "UA", "UAUA"},
		{"leading system and developer messages are kept", "SDUAUAUA", 2, "SD", "UA", "UAUA"},
		{"a function call stays with its output", "URCOAUCOA", 1, "", "URCOA", "UCOA"},
		{"the boundary falls on a user message, never between call and output", "UCOUCOUCO", 2, "", "UCO", "UCOUCO"},
		{"keep 0 compacts everything after the lead", "DUAUA", 0, "D", "UAUA", ""},
		{"a negative keep means the default", "UAUAUA", -1, "", "UA", "UAUA"},
		{"a system message after the lead is part of the region", "UASUAUA", 2, "", "UAS", "UAUA"},
		{"an earlier compaction item alone is not compacted again", "XUAUA", 2, "", "", "XUAUA"},
		// A history the client already cut with its own compaction items is not compacted again.
		{"several earlier compaction items alone are not compacted again", "XXUAUA", 2, "", "", "XXUAUA"},
		{"a compaction item after the lead alone is not compacted again", "SXUAUA", 2, "S", "", "XUAUA"},
		{"a compaction item and one more item are compacted", "XAUAUA", 2, "", "XA", "UAUA"},
		{"an earlier compaction item is compacted with what follows it", "XUAUAUA", 2, "", "XUA", "UAUA"},
		{"items before the first user message belong to the region", "AUAUA", 2, "", "A", "UAUA"},
		{"empty", "", 2, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanItems(items(tc.session), tc.keep)
			if got := [3]string{letters(p.Lead), letters(p.Region), letters(p.Recent)}; got != [3]string{tc.lead, tc.region, tc.recent} {
				t.Fatalf("plan of %s (keep %d) = lead %q region %q recent %q, want %q %q %q",
					tc.session, tc.keep, got[0], got[1], got[2], tc.lead, tc.region, tc.recent)
			}
			if p.Empty() != (tc.region == "") {
				t.Fatalf("Empty() = %v", p.Empty())
			}
		})
	}
}

// An easy-form user message (no type) is a boundary too.
func TestPlanItemsEasyFormMessages(t *testing.T) {
	var its []wire.Item
	for _, s := range []string{`{"role":"system","content":"s"}`, `{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`, `{"role":"user","content":"c"}`} {
		it, _ := wire.ParseItem([]byte(s))
		its = append(its, it)
	}
	p := PlanItems(its, 1)
	if len(p.Lead) != 1 || len(p.Region) != 2 || len(p.Recent) != 1 {
		t.Fatalf("plan %d/%d/%d, want 1/2/1", len(p.Lead), len(p.Region), len(p.Recent))
	}
}

func TestExpand(t *testing.T) {
	payloads := map[string]*Payload{}
	open := func(id, enc string) (*Payload, error) {
		if p, ok := payloads[id]; ok && enc == "e" {
			return p, nil
		}
		return nil, errors.New("does not open")
	}
	sess := items("SUAXUA") // X3 replaced U1, A2
	payloads["X3"] = &Payload{V: 1, Summary: "remember: k", Replaced: []string{"U1", "A2"}}
	out, replaced, err := Expand(sess, open, nil)
	if err != nil {
		t.Fatal(err)
	}
	if letters(out) != "SXUA" || out[1].Type != wire.TypeMessage || out[1].ID != "X3" {
		t.Fatalf("expanded %q, want the summary in place of the replaced items", letters(out))
	}
	if !replaced["U1"] || !replaced["A2"] || len(replaced) != 2 {
		t.Fatalf("replaced %v", replaced)
	}
	var msg struct {
		Role    string `json:"role"`
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(out[1].JSON, &msg); err != nil || msg.Role != "user" || !strings.HasPrefix(msg.Content[0].Text, SummaryMarker) || !strings.Contains(msg.Content[0].Text, "remember: k") {
		t.Fatalf("summary message %s", out[1].JSON)
	}

	// The client's pattern: the compaction item without the replaced items stays in place.
	out, _, err = Expand(items("XUA")[0:1], func(id, enc string) (*Payload, error) {
		return &Payload{V: 1, Summary: "s", Replaced: []string{"U7"}}, nil
	}, nil)
	if err != nil || len(out) != 1 || out[0].Type != wire.TypeMessage {
		t.Fatalf("in place: %v %v", out, err)
	}

	// drop removes items a later compaction replaced; no compaction item and nothing to drop
	// returns the slice itself.
	plain := items("UAUA")
	if out, _, _ := Expand(plain, open, nil); &out[0] != &plain[0] {
		t.Fatal("a session without compaction items was copied")
	}
	if out, _, _ := Expand(plain, open, map[string]bool{"U0": true, "A1": true}); letters(out) != "UA" || out[0].ID != "U2" {
		t.Fatalf("drop: %q", letters(out))
	}

	// An item that does not open names its index.
	var ie *ItemError
	if _, _, err := Expand(items("UX"), open, nil); !errors.As(err, &ie) || ie.Index != 1 {
		t.Fatalf("err %v, want an ItemError at 1", err)
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	p := &Payload{V: 1, Summary: "s", Replaced: []string{"a", "b"}, Model: "m"}
	got, err := ParsePayload(p.Marshal())
	if err != nil || got.Summary != "s" || !slices.Equal(got.Replaced, p.Replaced) {
		t.Fatalf("round trip %+v %v", got, err)
	}
	for _, bad := range []string{`{}`, `{"v":2,"summary":"s"}`, `{"v":1,"summary":"  "}`, `not json`} {
		if _, err := ParsePayload([]byte(bad)); !errors.Is(err, ErrBadPayload) {
			t.Fatalf("%s: err %v", bad, err)
		}
	}
}

func TestTruncateDropsWholeTurnsFromTheMiddle(t *testing.T) {
	count := func(its []wire.Item) int { return len(its) }
	for _, tc := range []struct {
		session string
		budget  int
		want    string
		dropped int
	}{
		{"SUAUA", 5, "SUAUA", 0},
		{"SUAUA", 4, "SUA", 2},
		{"SUCOAUA", 5, "SUA", 4},
		{"SDUAUAUA", 6, "SDUAUA", 2},
		{"SUAUA", 1, "SUA", 2}, // the last turn is always kept
	} {
		got, n := Truncate(items(tc.session), tc.budget, count)
		if letters(got) != tc.want || n != tc.dropped {
			t.Fatalf("Truncate(%s, %d) = %q (%d dropped), want %q (%d)", tc.session, tc.budget, letters(got), n, tc.want, tc.dropped)
		}
	}
}

// When the newest input alone holds more user turns than compaction keeps, the plan's Recent is
// shorter than that input: the boundary falls inside it. The turn code must then not compact
// (it would cut the input; server/context.go autoCompact guards on len(Recent) < len(input)).
func TestPlanBoundaryFallsInsideAnInputWithMoreUserTurnsThanKept(t *testing.T) {
	history, input := items("UA"), items("UAUAUA")
	p := PlanItems(append(append([]wire.Item(nil), history...), input...), 2)
	if len(p.Recent) >= len(input) || letters(p.Recent) != "UAUA" || letters(p.Region) != "UAUA" {
		t.Fatalf("plan region %q recent %q", letters(p.Region), letters(p.Recent))
	}
	// With as many user turns kept as the input has, the input is whole in Recent.
	if p := PlanItems(append(append([]wire.Item(nil), history...), input...), 3); len(p.Recent) != len(input) {
		t.Fatalf("keep 3: recent %q", letters(p.Recent))
	}
}

func TestThreshold(t *testing.T) {
	for _, tc := range []struct {
		used, window int
		frac         float64
		want         bool
	}{{79, 100, 0.8, false}, {80, 100, 0.8, true}, {1000, 0, 0.8, false}, {1000, 100, 0, false},
		{899, 1000, 0.9, false}, {900, 1000, 0.9, true}, {80, 101, 0.8, false}, {81, 101, 0.8, true}, {-1, 100, 0.8, false}, {1, 1, 1, true}} {
		if got := Threshold(tc.used, tc.window, tc.frac); got != tc.want {
			t.Fatalf("Threshold(%d, %d, %v) = %v", tc.used, tc.window, tc.frac, got)
		}
	}
}

func TestDigestIsSHA256OfTheStoredBytes(t *testing.T) {
	it := items("U")[0]
	if d := Digest(it); len(d) != 64 || d == Digest(items("A")[0]) {
		t.Fatalf("digest %q", d)
	}
}

// A compaction item that a later one replaced adds no summary: the later summary covers it.
func TestExpandSupersededCompaction(t *testing.T) {
	sess := items("UXUAXUA") // X1 replaced U0; X4 replaced U0, X1, U2, A3
	payloads := map[string]*Payload{
		"X1": {V: 1, Summary: "old", Replaced: []string{"U0"}},
		"X4": {V: 1, Summary: "new", Replaced: []string{"U0", "X1", "U2", "A3"}},
	}
	out, _, err := Expand(sess, func(id, _ string) (*Payload, error) { return payloads[id], nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if letters(out) != "XUA" || out[0].ID != "X4" {
		t.Fatalf("expanded %q (first %s), want only the later summary, then the recent turn", letters(out), out[0].ID)
	}
}

func TestPlanWindow(t *testing.T) {
	for _, tc := range []struct {
		name, session   string
		users, replaced string
	}{
		{"a short window: one user message, nothing else", "U", "U", ""},
		{"a short exchange: the user message, the rest replaced", "UA", "U", "A"},
		{"every user message is kept, even the early ones", "UAUAUA", "UUU", "AAA"},
		{"system and developer messages are replaced", "SDUAUA", "UU", "SDAA"},
		{"reasoning, calls and their outputs are replaced", "URCOAURA", "UU", "RCOARA"},
		{"an earlier compaction item is replaced with the rest", "XUAUA", "UU", "XAA"},
		{"items before the first user message are replaced", "AUA", "U", "AA"},
		{"the last item may be a user message", "UAU", "UU", "A"},
		{"empty", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := items(tc.session)
			w := PlanWindow(session)
			if got := [2]string{letters(w.Users), letters(w.Replaced)}; got != [2]string{tc.users, tc.replaced} {
				t.Fatalf("window of %s = users %q replaced %q, want %q %q", tc.session, got[0], got[1], tc.users, tc.replaced)
			}
			if letters(w.Summarise) != tc.session || w.Empty() != (tc.session == "") {
				t.Fatalf("summarise %q (empty %v), want the whole session %q", letters(w.Summarise), w.Empty(), tc.session)
			}
			for i, u := range w.Users { // verbatim: the same bytes
				if j := slices.IndexFunc(session, func(it wire.Item) bool { return it.ID == u.ID }); string(session[j].JSON) != string(u.JSON) {
					t.Fatalf("user message %d changed: %s", i, u.JSON)
				}
			}
			out := w.Output(NewItem("cmp_1", "blob"))
			if letters(out) != tc.users+"c" || !IsCompaction(out[len(out)-1]) {
				t.Fatalf("output %q, want the user messages then one compaction item", letters(out))
			}
		})
	}
}

// A message with a role and no type is a user message too (EasyInputMessage).
func TestPlanWindowReadsUntypedMessages(t *testing.T) {
	var session []wire.Item
	for _, b := range []string{`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`} {
		it, err := wire.ParseItem([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		session = append(session, it)
	}
	w := PlanWindow(session)
	if len(w.Users) != 1 || len(w.Replaced) != 1 || !strings.Contains(string(w.Users[0].JSON), `"hi"`) {
		t.Fatalf("users %d replaced %d", len(w.Users), len(w.Replaced))
	}
}
