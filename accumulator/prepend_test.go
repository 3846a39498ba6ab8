package accumulator

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/respgate/respgate/wire"
)

// compactionItem is a gateway item to prepend (automatic compaction's, docs/compaction.md §6).
var compactionItem = wire.Item{ID: "cmp_1", Type: "compaction",
	JSON: []byte(`{"type":"compaction","id":"cmp_1","encrypted_content":"rgr1.k.blob"}`)}

// With Options.Prepend, every trace still gives a valid client stream: the prepended item is
// announced and closed at output_index 0 right after response.in_progress, the model's items
// follow at output_index 1…, sequence numbers stay dense, and the Result (also of a failed
// stream) starts with the item and then holds exactly what it holds without it.
func TestPrependLeadsTheOutputOfEveryTrace(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			evs := readTrace(t, tf)
			_, plain, _, _ := replay(evs, testOptions())
			opts := testOptions()
			opts.Prepend = []wire.Item{compactionItem}
			stream, res, info := runChecked(t, evs, opts)
			if len(res.Output) != len(plain.Output)+1 || res.Output[0].ID != "cmp_1" {
				t.Fatalf("output %d items (first %q), want the compaction item then %d", len(res.Output), res.Output[0].ID, len(plain.Output))
			}
			for i, it := range plain.Output {
				if !bytes.Equal(it.JSON, res.Output[i+1].JSON) {
					t.Fatalf("model item %d differs:\n%s\n%s", i, it.JSON, res.Output[i+1].JSON)
				}
			}
			if res.Status != plain.Status {
				t.Fatalf("status %s, without the prepended item %s", res.Status, plain.Status)
			}
			evsOut := info.events
			if evsOut[2].Type != string(wire.EventItemAdded) || evsOut[3].Type != string(wire.EventItemDone) {
				t.Fatalf("events 2, 3 are %s, %s; want the compaction item's added and done\n%s", evsOut[2].Type, evsOut[3].Type, stream)
			}
			for _, e := range evsOut[2:4] {
				if string(e.obj["output_index"]) != "0" || !sameItem(e.obj["item"], compactionItem.JSON) {
					t.Fatalf("%s: %s", e.Type, e.Data)
				}
			}
		})
	}
}

// A non-streamed response gets the same head: output[0] is the prepended item.
func TestPrependLeadsANonStreamedOutput(t *testing.T) {
	body := `{"id":"r","status":"completed","output":[{"type":"message","id":"m","role":"assistant","status":"completed",` +
		`"content":[{"type":"output_text","text":"hi","annotations":[]}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`
	opts := testOptions()
	opts.Prepend = []wire.Item{compactionItem}
	res, err := FromResponse(opts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 2 || res.Output[0].ID != "cmp_1" || res.Output[1].Type != wire.TypeMessage {
		out, _ := json.Marshal(res.Output)
		t.Fatalf("output %s", out)
	}
}
