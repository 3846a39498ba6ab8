package accumulator

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// fakeSeal "seals" by naming the item and the content's length, so a test can see what was
// sealed without a key ring.
func fakeSeal(id string, content []byte) string {
	return "rgr1.test." + id + "." + strings.Repeat("x", len(content)%7)
}

// TestHiddenReasoningNeverReachesTheClientButIsStored replays every trace with reasoning hidden:
// the client stream has no reasoning or summary text events and no reasoning content, its
// sequence numbers stay dense, reasoning items carry the minted encrypted_content, and the stored
// items equal those of the raw replay but for that encrypted_content.
func TestHiddenReasoningNeverReachesTheClientButIsStored(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			evs := readTrace(t, tf)
			_, raw, _, _ := replay(evs, testOptions())
			opts := testOptions()
			opts.Reasoning = ReasoningOptions{Seal: fakeSeal, Hide: true}
			opts.Render = func(s *Snapshot) []byte { return []byte(`{"id":"resp_test","object":"response","output":[]}`) }
			stream, hidden, _, _ := replay(evs, opts)
			cevs, err := parseClientStream(stream)
			if err != nil {
				t.Fatal(err)
			}
			for i, ev := range cevs {
				if num(ev.obj["sequence_number"]) != i {
					t.Fatalf("event %d has sequence_number %s", i, ev.obj["sequence_number"])
				}
				switch wire.EventType(ev.Type) {
				case wire.EventReasoningDelta, wire.EventReasoningDone, wire.EventSummaryDelta, wire.EventSummaryTextDone,
					wire.EventSummaryAdded, wire.EventSummaryDone:
					t.Fatalf("event %d: %s reached the client", i, ev.Type)
				case wire.EventPartAdded, wire.EventPartDone:
					if bytes.Contains(ev.obj["part"], []byte(`"reasoning_text"`)) {
						t.Fatalf("event %d: a reasoning part reached the client: %s", i, ev.Data)
					}
				case wire.EventItemDone:
					item := fields(ev.obj["item"])
					if str(item["type"]) != wire.TypeReasoning {
						continue
					}
					if _, has := item["content"]; has || string(item["summary"]) != "[]" || !strings.HasPrefix(str(item["encrypted_content"]), "rgr1.test.") {
						t.Fatalf("event %d: hidden reasoning item %s", i, ev.obj["item"])
					}
				}
			}
			if len(hidden.Output) != len(raw.Output) {
				t.Fatalf("stored %d items hidden, %d raw", len(hidden.Output), len(raw.Output))
			}
			for i := range raw.Output {
				h, r := fields(hidden.Output[i].JSON), fields(raw.Output[i].JSON)
				if str(h["type"]) == wire.TypeReasoning {
					if !strings.HasPrefix(str(h["encrypted_content"]), "rgr1.test.") {
						t.Errorf("stored item %d lacks the minted blob: %s", i, hidden.Output[i].JSON)
					}
					delete(h, "encrypted_content")
					delete(r, "encrypted_content")
				}
				delete(h, "id")
				delete(r, "id")
				hb, _ := json.Marshal(h)
				rb, _ := json.Marshal(r)
				if !bytes.Equal(hb, rb) {
					t.Errorf("stored item %d differs:\nhidden %s\nraw    %s", i, hb, rb)
				}
			}
		})
	}
}
