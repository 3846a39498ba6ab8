package chatbridge

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func items(t testing.TB, raws ...string) []wire.Item {
	t.Helper()
	out := make([]wire.Item, len(raws))
	for i, r := range raws {
		it, err := wire.ParseItem([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = it
	}
	return out
}

// turnItems are a tool-calling turn's output: reasoning, a short text, a function call.
func turnItems(t testing.TB, n string) []wire.Item {
	return items(t,
		`{"id":"rs_`+n+`","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"think `+n+`"}],"status":"completed"}`,
		`{"id":"msg_`+n+`","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Calling f.","annotations":[]}]}`,
		`{"id":"fc_`+n+`","type":"function_call","call_id":"call_`+n+`","name":"f","arguments":"{\"q\":\"`+n+`\"}","status":"completed"}`)
}

// echo is the assistant message a client sends back for turnItems(n).
func echo(n string) string {
	return `{"role":"assistant","content":"Calling f.","tool_calls":[{"id":"call_` + n + `","type":"function","function":{"name":"f","arguments":"{\"q\":\"` + n + `\"}"}}]}`
}

func tool(n string) string {
	return `{"role":"tool","tool_call_id":"call_` + n + `","content":"out ` + n + `"}`
}

// session runs a tool loop of turns through Identify/Plan/Capture as the server does and returns
// the records and the final history.
func session(t *testing.T, turns int) ([]Record, []string) {
	t.Helper()
	var records []Record
	hist := []string{user}
	for i := range turns {
		n := string(rune('a' + i))
		m := msgs(t, hist...)
		h, ok := Identify(testScope, m, Limits{})
		if !ok {
			t.Fatal("not identified")
		}
		p := h.Plan(m, records, 0)
		if p.Hits != i {
			t.Fatalf("turn %d: %d hits, want %d (misses %d conflicts %d)", i, p.Hits, i, p.Misses, p.Conflicts)
		}
		rec, ok := h.Capture(turnItems(t, n), p.Last)
		if !ok {
			t.Fatal("capture refused")
		}
		records = append(records, rec)
		hist = append(hist, echo(n), tool(n))
	}
	return records, hist
}

func TestPlanReplacesEveryCapturedAssistantMessageInOrder(t *testing.T) {
	records, hist := session(t, 4)
	m := msgs(t, hist...)
	h, _ := Identify(testScope, m, Limits{})
	p := h.Plan(m, records, 0)
	if p.Hits != 4 || p.Misses != 0 || len(p.Replace) != 4 || p.Last != records[3].End {
		t.Fatalf("plan %+v", p)
	}
	for k, n := range map[int]string{1: "a", 3: "b", 5: "c", 7: "d"} {
		got := p.Replace[k]
		if len(got) != 3 || got[0].ID != "rs_"+n {
			t.Fatalf("message %d replaced by %v, want turn %s's items", k, got, n)
		}
	}
	tr, err := mustDecode(t, hist).ToResponses(p.Replace)
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Input []map[string]any }
	if err := json.Unmarshal(tr.Body, &body); err != nil {
		t.Fatal(err)
	}
	var reasoning []string
	for _, it := range body.Input {
		if it["type"] == "reasoning" {
			reasoning = append(reasoning, it["id"].(string))
		}
	}
	if want := []string{"rs_a", "rs_b", "rs_c", "rs_d"}; !slices.Equal(reasoning, want) {
		t.Fatalf("reasoning in the upstream input %v, want %v", reasoning, want)
	}
}

func mustDecode(t testing.TB, hist []string) *Request {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"model": "m", "messages": json.RawMessage("[" + strings.Join(hist, ",") + "]")})
	var members map[string]json.RawMessage
	_ = json.Unmarshal(raw, &members)
	r, err := Decode(members)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
