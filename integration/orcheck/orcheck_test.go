package orcheck

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// The Open Responses document the end-to-end tests use (integration/testdata/README.md).
const spec = "../testdata/openresponses-openapi-2026-04-24.json"

// testdata/response.json and testdata/stream.sse are respgate's answers (over the simulator) to a
// json_schema request with a function tool and a namespace tool, and to a streamed turn with
// reasoning: each relies on some of the overlays.

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadWith(t *testing.T, overlays []Overlay) *Schema {
	t.Helper()
	s, err := load(readFile(t, spec), overlays)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mutated returns testdata/response.json after f.
func mutated(t *testing.T, f func(r map[string]any)) []byte {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal(readFile(t, "testdata/response.json"), &r); err != nil {
		t.Fatal(err)
	}
	f(r)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itemOfType(t *testing.T, r map[string]any, typ string) map[string]any {
	t.Helper()
	for _, it := range r["output"].([]any) {
		if m := it.(map[string]any); m["type"] == typ {
			return m
		}
	}
	t.Fatalf("no %s item in testdata/response.json", typ)
	return nil
}

// reasoningTextDelta is the first response.reasoning_text.delta event of testdata/stream.sse.
func reasoningTextDelta(t *testing.T) []byte {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, "testdata/stream.sse")), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"response.reasoning_text.delta"`) {
			return []byte(data)
		}
	}
	t.Fatal("no response.reasoning_text.delta in testdata/stream.sse")
	return nil
}

func TestRespgateOutputConforms(t *testing.T) {
	s := loadWith(t, Overlays)
	if err := s.Response(readFile(t, "testdata/response.json")); err != nil {
		t.Fatal(err)
	}
	st := s.NewStream()
	_, _ = st.Write(readFile(t, "testdata/stream.sse"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// Each overlay changes what is accepted: every case below is decided by the overlay it names
// (Overlays[overlay]), checked with all overlays and with all but that one.
func TestOverlaysDecideWhatTheDocumentAloneWouldNot(t *testing.T) {
	with := loadWith(t, Overlays)
	response := func(s *Schema, raw []byte) error { return s.Response(raw) }
	event := func(s *Schema, raw []byte) error { return s.Event(raw) }
	for _, c := range []struct {
		name    string
		overlay int
		check   func(*Schema, []byte) error
		raw     []byte
		accept  bool // with the overlays
	}{
		{"output_text without logprobs is rejected", 0, response,
			mutated(t, func(r map[string]any) {
				delete(itemOfType(t, r, "message")["content"].([]any)[0].(map[string]any), "logprobs")
			}), false},
		{"a reasoning item without status is rejected", 1, response,
			mutated(t, func(r map[string]any) { delete(itemOfType(t, r, "reasoning"), "status") }), false},
		{"a reasoning item with a status outside MessageStatus is rejected", 1, response,
			mutated(t, func(r map[string]any) { itemOfType(t, r, "reasoning")["status"] = "done" }), false},
		{"response.reasoning_text.delta is accepted", 2, event, reasoningTextDelta(t), true},
		{"a json_schema format carries the client's schema object", 3, response, readFile(t, "testdata/response.json"), true},
		{"an OpenAI namespace tool whose tools are function tools is accepted", 4, response,
			mutated(t, func(r map[string]any) { r["text"] = map[string]any{"format": map[string]any{"type": "text"}} }), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			without := loadWith(t, slices.Delete(slices.Clone(Overlays), c.overlay, c.overlay+1))
			err := c.check(with, c.raw)
			if c.accept && err != nil {
				t.Errorf("with the overlays: %v", err)
			}
			if !c.accept && err == nil {
				t.Error("with the overlays: accepted")
			}
			if (c.check(without, c.raw) == nil) != !c.accept {
				t.Errorf("without overlay %d the same is decided: the case does not test it", c.overlay)
			}
		})
	}
}

// What the overlays widen stays checked: the added shapes are not "anything goes".
func TestOverlaysAcceptOnlyTheShapesTheyName(t *testing.T) {
	s := loadWith(t, Overlays)
	var delta map[string]any
	if err := json.Unmarshal(reasoningTextDelta(t), &delta); err != nil {
		t.Fatal(err)
	}
	delete(delta, "delta")
	noDelta, _ := json.Marshal(delta)
	namespace := func(f func(ns map[string]any)) []byte {
		return mutated(t, func(r map[string]any) {
			for _, tool := range r["tools"].([]any) {
				if ns := tool.(map[string]any); ns["type"] == "namespace" {
					f(ns)
				}
			}
		})
	}
	for name, err := range map[string]error{
		"a reasoning_text.delta without delta": s.Event(noDelta),
		"a json_schema format whose schema is a string": s.Response(mutated(t, func(r map[string]any) {
			r["text"].(map[string]any)["format"].(map[string]any)["schema"] = "{}"
		})),
		"a namespace tool holding a hosted tool": s.Response(namespace(func(ns map[string]any) {
			ns["tools"] = []any{map[string]any{"type": "web_search"}}
		})),
		"a namespace tool without a name": s.Response(namespace(func(ns map[string]any) { delete(ns, "name") })),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// An overlay whose target the document lacks fails the load instead of being skipped.
func TestLoadFailsWhenAnOverlayTargetIsMissing(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(readFile(t, spec), &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc["components"].(map[string]any)["schemas"].(map[string]any), "JsonSchemaResponseFormat")
	b, _ := json.Marshal(doc)
	_, err := load(b, Overlays)
	if err == nil || !strings.Contains(err.Error(), "JsonSchemaResponseFormat") {
		t.Fatalf("load = %v, want an error naming JsonSchemaResponseFormat", err)
	}
}

func TestPatch(t *testing.T) {
	doc := map[string]any{"a": map[string]any{"list": []any{"x"}, "k": "v"}}
	if err := patchAdd(doc, "/a/list/-", "y"); err != nil {
		t.Fatal(err)
	}
	if err := patchAdd(doc, "/a/new", true); err != nil {
		t.Fatal(err)
	}
	if err := patchReplace(doc, "/a/k", "w"); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc)
	if want := `{"a":{"k":"w","list":["x","y"],"new":true}}`; !bytes.Equal(got, []byte(want)) {
		t.Errorf("patched = %s, want %s", got, want)
	}
	for name, err := range map[string]error{
		"add under a missing parent": patchAdd(doc, "/b/c", 1),
		"replace a missing member":   patchReplace(doc, "/a/missing", 1),
		"add at an array index":      patchAdd(doc, "/a/list/0", "z"),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The same stream as WebSocket messages (one event per message, no [DONE]) conforms; with one
// message lost the sequence rule catches it.
func TestSocketTurnAppliesTheStreamRules(t *testing.T) {
	s := loadWith(t, Overlays)
	var msgs [][]byte
	for _, l := range bytes.Split(readFile(t, "testdata/stream.sse"), []byte("\n")) {
		if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok && string(d) != "[DONE]" {
			msgs = append(msgs, d)
		}
	}
	check := func(msgs [][]byte) (bool, error) {
		k := s.NewSocketTurn()
		ended := false
		for _, m := range msgs {
			ended = k.Message(m)
		}
		err := k.Close()
		return ended, err
	}
	if ended, err := check(msgs); err != nil || !ended {
		t.Fatalf("whole turn: ended %v, %v", ended, err)
	}
	if _, err := check(append(msgs[:2:2], msgs[3:]...)); err == nil || !strings.Contains(err.Error(), "sequence_number") {
		t.Fatalf("a lost message was not caught: %v", err)
	}
	if ended, err := check(msgs[:len(msgs)-1]); err == nil || ended {
		t.Fatalf("a turn without its terminal event passed: ended %v, %v", ended, err)
	}
}
