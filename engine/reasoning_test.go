package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/wire"
)

// viewServer is the part of a Server an itemView uses: the exposure policy and a seal ring whose
// blobs hold at most maxPlaintext bytes.
func viewServer(t *testing.T, exposure ReasoningExposure, maxPlaintext int) *Engine {
	t.Helper()
	secret, err := seal.NewKeySecret()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewRing([]seal.Key{{ID: "k1", Secret: secret}}, nil, maxPlaintext)
	if err != nil {
		t.Fatal(err)
	}
	return &Engine{cfg: Config{ReasoningExposure: exposure}, ring: ring}
}

// opened is the plaintext of the encrypted_content of a reasoning item shown to tenant "t1".
func opened(t *testing.T, s *Engine, it wire.Item) string {
	t.Helper()
	var v struct {
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(it.JSON, &v); err != nil {
		t.Fatal(err)
	}
	plain, err := s.ring.Open(seal.Binding{Tenant: "t1", ItemID: it.ID, ItemType: wire.TypeReasoning}, v.EncryptedContent)
	if err != nil {
		t.Fatalf("the encrypted_content of %s does not open: %v (%s)", it.ID, err, it.JSON)
	}
	return string(plain)
}

// Under the raw policy a reasoning item is shown as stored, or with respgate's encrypted_content
// added when the client includes it; under the hidden policy it always loses its text and gains
// the blob. Either way the blob seals exactly the item's content parts (an item without content
// seals an empty array), and a content over the ring's bound gets no blob at all.
func TestItemViewSealsTheContentAndHidesOnlyUnderTheHiddenPolicy(t *testing.T) {
	const content = `[{"type":"reasoning_text","text":"think twice"}]`
	withText := wire.Item{ID: "rs_1", Type: wire.TypeReasoning, JSON: json.RawMessage(`{"id":"rs_1","type":"reasoning","summary":[],"content":` + content + `}`)}
	noText := wire.Item{ID: "rs_2", Type: wire.TypeReasoning, JSON: json.RawMessage(`{"id":"rs_2","type":"reasoning","summary":[]}`)}
	msg := wire.Item{ID: "msg_1", Type: wire.TypeMessage, JSON: json.RawMessage(`{"id":"msg_1","type":"message","role":"assistant","content":[]}`)}
	items := []wire.Item{msg, withText, noText}

	raw := viewServer(t, ExposureRaw, 0)
	if got := raw.View("t1", false).Items(items); &got[0] != &items[0] {
		t.Fatal("the raw policy without include changed the items")
	}
	got := raw.View("t1", true).Items(items)
	if string(got[0].JSON) != string(msg.JSON) || !strings.Contains(string(got[1].JSON), `"text":"think twice"`) {
		t.Fatalf("include under the raw policy changed more than the blob: %s %s", got[0].JSON, got[1].JSON)
	}
	if p := opened(t, raw, got[1]); p != content {
		t.Fatalf("the blob of rs_1 holds %s, want its content %s", p, content)
	}
	if p := opened(t, raw, got[2]); p != "[]" {
		t.Fatalf("the blob of an item without content holds %s, want []", p)
	}

	hidden := viewServer(t, ExposureHidden, 0)
	got = hidden.View("t1", false).Items(items)
	if strings.Contains(string(got[1].JSON), "think twice") || !strings.Contains(string(got[1].JSON), `"summary":[]`) {
		t.Fatalf("the hidden policy showed the reasoning text: %s", got[1].JSON)
	}
	if p := opened(t, hidden, got[1]); p != content {
		t.Fatalf("the hidden item's blob holds %s, want its content %s", p, content)
	}

	small := viewServer(t, ExposureRaw, len(content)-1)
	if enc := small.View("t1", true).seal("rs_1", []byte(content)); enc != "" {
		t.Fatalf("a content over the ring's bound got a blob: %q", enc)
	}
	if enc := small.View("t1", true).seal("rs_2", nil); !seal.IsSealed(enc) {
		t.Fatalf("an empty content within the bound got no blob: %q", enc)
	}
}
