package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// An item of the history that cannot be used is a 400 naming where the history came from (the
// conversation here), not the input; an id that names two contents is a 400 and is counted.
func TestHistoryErrorsNameTheirSourceAndIDConflictsAreCounted(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	conversation := func(items string) string {
		code, body := call(t, s, http.MethodPost, "/v1/conversations", `{"items":`+items+`}`)
		var c struct{ ID string }
		if err := json.Unmarshal([]byte(body), &c); code != http.StatusOK || err != nil {
			t.Fatalf("create conversation: %d %s", code, body)
		}
		return c.ID
	}
	// A foreign compaction item can no longer be added (conversations_test.go); one stored before
	// that check (written to the store directly here) is named as the conversation's.
	foreign := conversation(`[]`)
	if err := s.store.ConversationItemAppend(t.Context(), &store.ConversationItemAppendParams{Tenant: s.tenantOf("k"), ConversationID: foreign,
		Items: []wire.Item{{ID: "cmp_x", Type: "compaction", JSON: []byte(`{"type":"compaction","id":"cmp_x","encrypted_content":"opaque"}`)}}}); err != nil {
		t.Fatal(err)
	}
	code, body := call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","conversation":"`+foreign+`","input":"hi"}`)
	if env := envelope(t, body); code != http.StatusBadRequest || deref(env.Param) != "conversation" || deref(env.Code) != "invalid_encrypted_content" ||
		!strings.Contains(env.Message, "in the conversation") {
		t.Fatalf("a foreign compaction item in the conversation: %d %s", code, body)
	}

	dup := conversation(`[{"type":"message","id":"msg_dup","role":"user","content":"a"}]`)
	for range 2 {
		code, body = call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","conversation":"`+dup+`","input":[{"type":"message","id":"msg_dup","role":"user","content":"b"}]}`)
		if env := envelope(t, body); code != http.StatusBadRequest || deref(env.Code) != "item_id_conflict" {
			t.Fatalf("one id, two contents: %d %s", code, body)
		}
	}
	_, m := call(t, s, http.MethodGet, "/metrics", "")
	if !strings.Contains(m, "\nrespgate_rehydrate_id_conflicts_total 2\n") {
		t.Fatal("respgate_rehydrate_id_conflicts_total is not 2 after two conflicts")
	}
}

// truncation:"auto" says how many items it left out in X-Respgate-Truncated-Items, and only when
// it left some out.
func TestTruncatedTurnsNameTheItemsLeftOut(t *testing.T) {
	s := newSimServer(t, Config{ContextWindow: "openai/gpt-oss-sim=600"}, nil)
	prev := ""
	for i := range 40 {
		body := fmt.Sprintf(`{"model":"openai/gpt-oss-sim","truncation":"auto","input":"turn %d: keep going with the task"`, i)
		if prev != "" {
			body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
		}
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/responses", strings.NewReader(body+"}"))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var r struct{ ID string }
		if err := json.Unmarshal(rec.Body.Bytes(), &r); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("turn %d: %d %s", i, rec.Code, rec.Body)
		}
		prev = r.ID
		h, set := rec.Header().Get("X-Respgate-Truncated-Items"), len(rec.Header().Values("X-Respgate-Truncated-Items")) > 0
		if i == 0 && set {
			t.Fatalf("the first turn, which has no history, says %q items were left out", h)
		}
		if set {
			if n, err := strconv.Atoi(h); err != nil || n <= 0 {
				t.Fatalf("turn %d: X-Respgate-Truncated-Items %q", i, h)
			}
			return
		}
	}
	t.Fatal("40 turns in a 600-token window and none was truncated")
}
