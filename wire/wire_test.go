package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestParseItemKeepsTheExactBytesAndReadsIDAndType(t *testing.T) {
	raw := []byte(`{"type":"reasoning","id":"rs_1","encrypted_content":null,"x":1.0,"summary":[]}`)
	it, err := ParseItem(raw)
	if err != nil {
		t.Fatal(err)
	}
	if it.ID != "rs_1" || it.Type != "reasoning" || !bytes.Equal(it.JSON, raw) {
		t.Fatalf("got %s %s %s", it.ID, it.Type, it.JSON)
	}
	raw[2] = 'X' // the item owns a copy
	if it.JSON[2] != 't' {
		t.Fatalf("ParseItem did not copy its input")
	}
	out, _ := json.Marshal([]Item{it})
	if string(out) != `[{"type":"reasoning","id":"rs_1","encrypted_content":null,"x":1.0,"summary":[]}]` {
		t.Fatalf("marshal changed the item: %s", out)
	}
	for _, bad := range []string{``, `[]`, `"s"`, `{"id":1}`, `{`} {
		if _, err := ParseItem([]byte(bad)); err == nil {
			t.Errorf("ParseItem(%q) accepted", bad)
		}
	}
}

func TestItemsAndEventsNeverPrintTheirContent(t *testing.T) {
	it, _ := ParseItem([]byte(`{"type":"message","id":"m","content":"SECRET"}`))
	ev := Event{Type: "response.output_text.delta", Data: []byte(`{"delta":"SECRET"}`)}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "item", it, "event", ev)
	for _, s := range []string{fmt.Sprint(it), fmt.Sprintf("%v %+v %#v", it, it, it), fmt.Sprintf("%v %#v", ev, ev), logs.String()} {
		if strings.Contains(s, "SECRET") {
			t.Fatalf("content printed: %s", s)
		}
	}
}

func TestAPIErrorEnvelopeHasNullsForEmptyParamAndCode(t *testing.T) {
	e := Invalid("", "", "bad %s", "thing")
	if got := string(e.Envelope()); got != `{"error":{"message":"bad thing","type":"invalid_request_error","param":null,"code":null}}` {
		t.Fatalf("envelope %s", got)
	}
	var target *APIError
	if !errors.As(fmt.Errorf("wrapped: %w", NotFound("id", "no %s", "x")), &target) || target.Status != 404 {
		t.Fatalf("errors.As lost the APIError")
	}
}

func TestNewIDHasThePrefixAndIsUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID(PrefixResponse)
		if !strings.HasPrefix(id, "resp_") || len(id) != 5+48 || seen[id] {
			t.Fatalf("bad or repeated id %s", id)
		}
		seen[id] = true
	}
}
