package rehydrate

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// chainCase is a stored chain plus the next request, as in testdata/chain5.json.
type chainCase struct {
	History []json.RawMessage          `json:"history"`
	Request map[string]json.RawMessage `json:"request"`
}

func loadChain(t testing.TB, name string) (hist []wire.Item, input []wire.Item, req *wire.CreateRequest) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var c chainCase
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for _, h := range c.History {
		hist = append(hist, mustItem(t, string(h)))
	}
	input, err = ParseInput(c.Request["input"])
	if err != nil {
		t.Fatal(err)
	}
	return hist, input, mustDecode(t, c.Request)
}

// golden is what the golden file records: the upstream body and everything else Build decided.
type golden struct {
	Body         json.RawMessage   `json:"body"`
	StoredInput  []json.RawMessage `json:"stored_input"`
	DroppedTools []string          `json:"dropped_tools"`
	Stats        Stats             `json:"stats"`
}

// A five-turn chain with reasoning (multi-part, summary-only, client-replayed with a blob), parallel
// function calls and their outputs (in another order, one as parts), an item_reference into history
// and a new question: the upstream body is exactly the golden one.
func TestGoldenFiveTurnChain(t *testing.T) {
	hist, input, req := loadChain(t, "chain5.json")
	if ids := ReferencedIDs(input); len(ids) != 1 || ids[0] != "msg_t4out" {
		t.Fatalf("ReferencedIDs = %v", ids)
	}
	lookup := MapLookup{"msg_t4out": hist[len(hist)-1]}
	res := mustBuild(t, &Params{History: hist, Input: input, Request: req, Lookup: lookup})

	g := golden{Body: res.Body, DroppedTools: res.DroppedTools, Stats: res.Stats}
	for _, it := range res.Input {
		g.StoredInput = append(g.StoredInput, it.JSON)
	}
	got, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "chain5.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./rehydrate -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("body differs from %s (run with -update after checking the change):\n%s", path, got)
	}

	// What the golden must show, checked independently of the file.
	body := string(res.Body)
	for _, s := range []string{"encrypted_content", "gAAAA", "summary only", "client summary", `"status"`, "annotations",
		"previous_response_id", "prompt_cache_key", "safety_identifier", "web_search", "phase"} {
		if strings.Contains(body, s) {
			t.Errorf("body contains %q", s)
		}
	}
	items := upstreamInput(t, res.Body)
	if len(items) != 18 {
		t.Errorf("%d upstream items, want 18", len(items))
	}
	if res.Stats.ReasoningReplayed != 5 || res.Stats.ReasoningSkipped != 1 || res.Stats.DuplicatesDropped != 1 || res.Stats.EncryptedDropped != 1 {
		t.Errorf("stats %+v", res.Stats)
	}
}
