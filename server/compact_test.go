package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/respgate/respgate/compact"
)

// A turn whose input brings back a compaction item sends vLLM its summary, but stores (and lists
// as its input) the compaction item itself, as the client sent it. The summary was asked for with
// the operator's handoff prompt.
func TestACompactionItemInTheInputIsStoredAsSent(t *testing.T) {
	const prompt = "Hand the session over to the next engineer; keep every code and name."
	s, sim := newSimServerAndSim(t, Config{CompactionPrompt: prompt}, nil)
	prev := ""
	for _, fact := range []string{"the vault code is 4417", "the cat is called Miso", "deploy on Friday", "what is next?"} {
		body := `{"model":"openai/gpt-oss-sim","input":"remember: ` + fact + `"`
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		code, answer := call(t, s, http.MethodPost, "/v1/responses", body+"}")
		var r struct{ ID string }
		if err := json.Unmarshal([]byte(answer), &r); code != http.StatusOK || err != nil {
			t.Fatalf("turn: %d %s", code, answer)
		}
		prev = r.ID
	}
	code, answer := call(t, s, http.MethodPost, "/v1/responses/compact", `{"model":"openai/gpt-oss-sim","previous_response_id":"`+prev+`"}`)
	var cr struct{ Output []json.RawMessage }
	if err := json.Unmarshal([]byte(answer), &cr); code != http.StatusOK || err != nil {
		t.Fatalf("compact: %d %s", code, answer)
	}
	var cmp json.RawMessage
	for _, it := range cr.Output {
		if typ, _ := itemType(it); typ == compact.TypeCompaction {
			cmp = it
		}
	}
	if cmp == nil {
		t.Fatalf("no compaction item in %s", answer)
	}
	if reqs := sim.Requests(); len(reqs) == 0 || !strings.Contains(string(reqs[len(reqs)-1].Body), prompt) {
		t.Fatal("the summary was not asked for with the configured handoff prompt")
	}
	_, cmpID := itemType(cmp)
	input, _ := json.Marshal(append(cr.Output, json.RawMessage(`{"role":"user","content":"what do you remember?"}`)))
	sim.Reset()
	code, answer = call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","input":`+string(input)+`}`)
	var next struct{ ID string }
	if err := json.Unmarshal([]byte(answer), &next); code != http.StatusOK || err != nil {
		t.Fatalf("turn after compaction: %d %s", code, answer)
	}
	if reqs := sim.Requests(); len(reqs) != 1 || strings.Contains(string(reqs[0].Body), cmpID) || !strings.Contains(string(reqs[0].Body), "compaction summary") {
		t.Fatalf("vLLM got %d requests; want one with the summary and without the compaction item", len(reqs))
	}
	code, list := call(t, s, http.MethodGet, "/v1/responses/"+next.ID+"/input_items?order=asc&limit=100", "")
	var page struct{ Data []json.RawMessage }
	if err := json.Unmarshal([]byte(list), &page); code != http.StatusOK || err != nil {
		t.Fatalf("input items: %d %s", code, list)
	}
	found := false
	for _, it := range page.Data {
		if typ, id := itemType(it); id == cmpID {
			found = typ == compact.TypeCompaction && jsonEqual(it, cmp)
		}
		if strings.Contains(string(it), "compaction summary") {
			t.Fatalf("the stored input holds the summary vLLM got: %s", it)
		}
	}
	if !found {
		t.Fatalf("the stored input does not hold the compaction item %s as sent: %s", cmpID, list)
	}
}

func itemType(raw json.RawMessage) (typ, id string) {
	var v struct{ Type, ID string }
	_ = json.Unmarshal(raw, &v)
	return v.Type, v.ID
}
