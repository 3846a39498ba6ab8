package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/respgate/respgate/store"
)

// Text no backend can store (invalid UTF-8, NUL, escaped lone surrogates), ids no backend can look
// up, and JSON nested past the limit are the same 400 on Postgres and SQLite, naming the param,
// and nothing reaches the model. Before, Postgres answered 500 after the model ran (SQLSTATE
// 22021, or jsonb refusing \u0000) while SQLite stored the bytes and served them back.
func TestTextAndIDsNoBackendCanStoreAre400OnBothBackendsBeforeTheModelRuns(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		auth := []string{"Authorization", "Bearer test-key"}
		prev := g.create(t, `{"model":"`+harmony+`","input":"remember 7"}`)
		status, body, _ := rawDo(t, "POST", g.URL+"/conversations", `{"metadata":{"k":"v"}}`, auth...)
		if status != http.StatusOK {
			t.Fatalf("create conversation: %d %s", status, body)
		}
		var cv struct{ ID string }
		if err := json.Unmarshal(body, &cv); err != nil || cv.ID == "" {
			t.Fatalf("conversation: %s", body)
		}
		conv := cv.ID
		before := len(g.Sim.Requests())

		deep := strings.Repeat(`{"a":`, 9990) + "1" + strings.Repeat("}", 9990)
		create := func(members string) string {
			return `{"model":"` + harmony + `","input":"hi",` + members + `}`
		}
		for _, tc := range []struct {
			name, method, path, body, param, code string
		}{
			{"NUL in previous_response_id", "POST", "/responses", create(`"previous_response_id":"` + prev.ID + `\u0000"`), "previous_response_id", "invalid_value"},
			{"invalid UTF-8 in metadata", "POST", "/responses", create("\"metadata\":{\"key\":\"caf\xe9\"}"), "metadata.key", "invalid_value"},
			{"NUL in instructions", "POST", "/responses", create(`"instructions":"a\u0000b"`), "instructions", "invalid_value"},
			{"lone surrogate in input text", "POST", "/responses", `{"model":"` + harmony + `","input":[{"role":"user","content":[{"type":"input_text","text":"\udc00"}]}]}`, "input[0].content[0].text", "invalid_value"},
			{"NUL in an input item id", "POST", "/responses", `{"model":"` + harmony + `","input":[{"type":"message","role":"user","id":"msg_\u0000","content":"x"}]}`, "input[0].id", "invalid_value"},
			{"NUL in an item_reference", "POST", "/responses", `{"model":"` + harmony + `","input":[{"type":"item_reference","id":"msg_\u0000"}]}`, "input[0].id", "invalid_value"},
			{"NUL in conversation", "POST", "/responses", create(`"conversation":"` + conv + `\u0000"`), "conversation", "invalid_value"},
			{"deep text", "POST", "/responses", create(`"text":` + deep), "text" + strings.Repeat(".a", 63), "nesting_too_deep"},
			{"NUL in conversation metadata", "POST", "/conversations", `{"metadata":{"k":"\u0000"}}`, "metadata.k", "invalid_value"},
			{"invalid UTF-8 in conversation update", "POST", "/conversations/" + conv, "{\"metadata\":{\"k\":\"\xff\"}}", "metadata.k", "invalid_value"},
			{"NUL in a conversation item id", "POST", "/conversations/" + conv + "/items", `{"items":[{"type":"message","role":"user","id":"m\u0000","content":"x"}]}`, "items[0].id", "invalid_value"},
			{"NUL in a response path id", "GET", "/responses/" + prev.ID + "%00", "", "response_id", "invalid_value"},
			{"invalid UTF-8 in a response path id", "DELETE", "/responses/%FF", "", "response_id", "invalid_value"},
			{"NUL in a conversation path id", "GET", "/conversations/" + conv + "%00/items", "", "conversation_id", "invalid_value"},
			{"invalid UTF-8 in an item path id", "GET", "/conversations/" + conv + "/items/msg_%FF", "", "item_id", "invalid_value"},
			// docs/errors.md: ids with control characters are invalid_value (issue 38 item 10).
			{"BEL in an input item id", "POST", "/responses", `{"model":"` + harmony + `","input":[{"type":"message","role":"user","id":"msg_\u0007","content":"x"}]}`, "input[0].id", "invalid_value"},
			{"U+2028 in an input item id", "POST", "/responses", `{"model":"` + harmony + `","input":[{"type":"message","role":"user","id":"msg_\u2028x","content":"x"}]}`, "input[0].id", "invalid_value"},
			{"C1 control in an item_reference", "POST", "/responses", `{"model":"` + harmony + `","input":[{"type":"item_reference","id":"msg_\u0085"}]}`, "input[0].id", "invalid_value"},
			{"BEL in a conversation item id", "POST", "/conversations/" + conv + "/items", `{"items":[{"type":"message","role":"user","id":"m\u0007","content":"x"}]}`, "items[0].id", "invalid_value"},
			{"U+2029 in a new conversation's item id", "POST", "/conversations", `{"items":[{"type":"message","role":"user","id":"m\u2029","content":"x"}]}`, "items[0].id", "invalid_value"},
			{"U+2028 in an item path id", "GET", "/conversations/" + conv + "/items/msg_%E2%80%A8", "", "item_id", "invalid_value"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				status, body, _ := rawDo(t, tc.method, g.URL+tc.path, tc.body, auth...)
				typ, code, param, _ := envelope(t, body)
				if status != http.StatusBadRequest || typ != "invalid_request_error" || code != tc.code || param != tc.param {
					t.Fatalf("got %d %s, want 400 invalid_request_error param %q code %q", status, body, tc.param, tc.code)
				}
			})
		}
		if n := len(g.Sim.Requests()) - before; n != 0 {
			t.Fatalf("%d rejected requests reached the model", n)
		}
		// Nothing was written: the conversation still has exactly its metadata and no items.
		status, body, _ = rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items", "", auth...)
		if status != http.StatusOK || !strings.Contains(string(body), `"data":[]`) {
			t.Fatalf("conversation items after the rejections: %d %s", status, body)
		}
		status, body, _ = rawDo(t, "GET", g.URL+"/conversations/"+conv, "", auth...)
		if status != http.StatusOK || !strings.Contains(string(body), `"metadata":{"k":"v"}`) {
			t.Fatalf("conversation after the rejections: %d %s", status, body)
		}
	})
}
