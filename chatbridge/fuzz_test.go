package chatbridge

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/respgate/respgate/wire"
)

// FuzzTranslate feeds arbitrary chat bodies through Decode, Identify, Plan, ToResponses and
// Capture. Invariants: no panic; a rejection is a 400 *wire.APIError with a param; a translation
// is valid JSON with one Origin per input item; canonicalisation is idempotent (a history and
// its canonical forms have one identity); a captured turn's own echo matches it.
func FuzzTranslate(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"},` + echo("a") + `,` + tool("a") + `],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"no"}],"tool_calls":[]}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x","extra":1.50}]}],"response_format":{"type":"json_schema","json_schema":{"name":"n"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var members map[string]json.RawMessage
		if json.Unmarshal(body, &members) != nil {
			return
		}
		r, err := Decode(members)
		if err != nil {
			mustBe400(t, err)
			return
		}
		h, ok := Identify(r.Scope("t"), r.Messages, Limits{MaxBytes: 1 << 20})
		var replace map[int][]wire.Item
		if ok {
			replace = h.Plan(r.Messages, nil, 0).Replace
			checkIdempotent(t, r, h)
			if rec, ok := h.Capture(turnItems(t, "a"), ""); ok {
				again, ok := Identify(r.Scope("t"), append(r.Messages[:len(r.Messages):len(r.Messages)], Message{Role: "assistant", JSON: Envelope(rec.Items)}), Limits{MaxBytes: 1 << 20})
				if ok && again.Position() != rec.End {
					t.Fatal("a captured turn's echo does not reach its End")
				}
			}
		}
		tr, err := r.ToResponses(replace)
		if err != nil {
			mustBe400(t, err)
			return
		}
		var out struct{ Input []json.RawMessage }
		if err := json.Unmarshal(tr.Body, &out); err != nil {
			t.Fatalf("translation is not JSON: %v", err)
		}
		if len(out.Input) != len(tr.Origin) {
			t.Fatalf("%d input items, %d origins", len(out.Input), len(tr.Origin))
		}
	})
}

func mustBe400(t *testing.T, err error) {
	t.Helper()
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("rejection %v is not a 400 envelope", err)
	}
}

// checkIdempotent identifies the canonical forms of r's messages and expects the same digests.
func checkIdempotent(t *testing.T, r *Request, h *History) {
	canon := make([]Message, len(r.Messages))
	for i, m := range r.Messages {
		v, err := wire.DecodeValue(m.JSON)
		if err != nil {
			t.Fatal(err)
		}
		w := canonWriter{budget: 1 << 22, maxDepth: 1 << 10}
		if err := w.value(canonMessage(v), 0); err != nil {
			return
		}
		canon[i] = Message{Role: m.Role, JSON: w.dst}
	}
	h2, ok := Identify(r.Scope("t"), canon, Limits{MaxBytes: 1 << 20})
	if !ok {
		return
	}
	if h2.Position() != h.Position() {
		t.Fatal("canonicalisation is not idempotent")
	}
}
