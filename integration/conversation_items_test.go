package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// One id never names two items of a conversation: an id repeated with other content, in one
// POST /v1/conversations, in one /items call, or against an item the conversation has, is 400
// item_id_conflict and stores nothing; an exact repeat (a retried call) is stored once; GET and
// DELETE of the id then see exactly one item (issue 38 item 3). Before, both copies were stored,
// replayed to vLLM, served at random and deleted together.
func TestConversationItemIDsNameOneItem(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		msg := func(id, text string) string {
			return `{"type":"message","id":"` + id + `","role":"user","content":"` + text + `"}`
		}
		refused := func(what string, status int, body []byte, param string) {
			t.Helper()
			if _, code, p, _ := envelope(t, body); status != http.StatusBadRequest || code != "item_id_conflict" || p != param {
				t.Fatalf("%s: %d %s, want 400 item_id_conflict param %s", what, status, body, param)
			}
		}
		before := len(g.UpstreamRequests())

		status, body, _ := rawDo(t, "POST", g.URL+"/conversations", `{"items":[`+msg("msg_a", "one")+`,`+msg("msg_a", "two")+`]}`, auth...)
		refused("create with one id twice", status, body, "items[1]")

		conv := newConversation(t, g, `{"items":[`+msg("msg_a", "one")+`,`+msg("msg_a", "one")+`,`+msg("msg_b", "b")+`]}`)
		if items := allItems(t, g, conv, "asc"); len(items) != 2 {
			t.Fatalf("an exact repeat in a create: %d items stored, want 2: %s", len(items), itemSummary(items))
		}

		status, body, _ = rawDo(t, "POST", g.URL+"/conversations/"+conv+"/items", `{"items":[`+msg("msg_c", "c")+`,`+msg("msg_a", "changed")+`]}`, auth...)
		refused("items reusing a stored id", status, body, "items[1]")
		status, body, _ = rawDo(t, "POST", g.URL+"/conversations/"+conv+"/items", `{"items":[`+msg("msg_d", "d")+`,`+msg("msg_d", "e")+`]}`, auth...)
		refused("items with one id twice", status, body, "items[1]")
		if items := allItems(t, g, conv, "asc"); len(items) != 2 {
			t.Fatalf("a refused batch stored items: %s", itemSummary(items))
		}

		// A retried call: what is already there, as sent, is not stored again.
		added := addItems(t, g, conv, `[`+msg("msg_b", "b")+`,`+msg("msg_c", "c")+`]`)
		if len(added) != 1 || added[0].ID != "msg_c" {
			t.Fatalf("retried batch answered %s", itemSummary(added))
		}
		if items := allItems(t, g, conv, "asc"); len(items) != 3 {
			t.Fatalf("after the retry: %s", itemSummary(items))
		}

		// A turn on the conversation replays each item once.
		g.create(t, `{"model":"`+harmony+`","conversation":"`+conv+`","input":"next"}`)
		reqs := g.UpstreamRequests()
		if n := strings.Count(string(reqs[len(reqs)-1]), `"one"`); n != 1 {
			t.Fatalf("msg_a reached vLLM %d times", n)
		}
		if len(reqs) != before+1 {
			t.Fatalf("%d upstream calls, want the one turn", len(reqs)-before)
		}
		status, body, _ = rawDo(t, "DELETE", g.URL+"/conversations/"+conv+"/items/msg_a", "", auth...)
		if status != http.StatusOK {
			t.Fatalf("delete msg_a: %d %s", status, body)
		}
		if status, body, _ = rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items/msg_a", "", auth...); status != http.StatusNotFound {
			t.Fatalf("msg_a after its delete: %d %s", status, body)
		}
	})
}

// A compaction item added to a conversation is checked as a turn checks it: a modified one,
// another key's and one no respgate issued are 400 invalid_encrypted_content naming items[i],
// and nothing of the batch is stored, so the conversation stays usable (issue 38 item 5). A
// genuine one is stored and the next turn replays its summary.
func TestConversationCompactionItemsAreCheckedWhenAdded(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		_, last := session(t, g, harmony)
		cr, err := g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
			Model: responses.ResponseCompactParamsModel(harmony), PreviousResponseID: openai.String(last.ID)})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		var item json.RawMessage
		for _, it := range compactOutput(t, cr.RawJSON()) {
			if typ, _ := itemType(it); typ == compact.TypeCompaction {
				item = it
			}
		}
		if item == nil {
			t.Fatal("no compaction item")
		}
		var v struct{ ID, EncryptedContent string }
		v.EncryptedContent = compact.EncryptedContent(wireItem(item))
		_, v.ID = itemType(item)
		with := func(id, enc string) string {
			return `{"type":"compaction","id":"` + id + `","encrypted_content":"` + enc + `"}`
		}
		last4 := v.EncryptedContent[len(v.EncryptedContent)-4:]
		flip := map[bool]string{true: "AAAA", false: "BBBB"}[last4 != "AAAA"]
		tampered := v.EncryptedContent[:len(v.EncryptedContent)-4] + flip
		hello := `{"type":"message","role":"user","content":"hi"}`
		conv := newConversation(t, g, `{}`)
		for _, tc := range []struct {
			name, items, key, says string
		}{
			{"modified", `[` + hello + `,` + with(v.ID, tampered) + `]`, "test-key", "modified"},
			{"another item's", `[` + hello + `,` + with("cmp_other", v.EncryptedContent) + `]`, "test-key", "modified"},
			{"another key's", `[` + hello + `,` + with(v.ID, v.EncryptedContent) + `]`, "other-key", "another API key"},
			{"foreign", `[` + hello + `,` + with(v.ID, "opaque-from-elsewhere") + `]`, "test-key", "not issued by this gateway"},
		} {
			for _, route := range []struct{ path, body string }{
				{"/conversations", `{"items":` + tc.items + `}`},
				{"/conversations/" + conv + "/items", `{"items":` + tc.items + `}`},
			} {
				status, body, _ := rawDo(t, "POST", g.URL+route.path, route.body, "Authorization", "Bearer "+tc.key)
				// The batch is refused before the conversation is looked up (for another key too,
				// which cannot see it: the same answer as for an unknown conversation).
				if _, code, param, msg := envelope(t, body); status != http.StatusBadRequest || code != "invalid_encrypted_content" || param != "items[1]" || !strings.Contains(msg, tc.says) ||
					!strings.Contains(msg, "items[1]") || strings.Contains(msg, "input[") {
					t.Fatalf("%s via %s: %d %s", tc.name, route.path, status, body)
				}
			}
		}
		if items := allItems(t, g, conv, "asc"); len(items) != 0 {
			t.Fatalf("refused batches stored %s", itemSummary(items))
		}
		// The genuine item is accepted, and the next turn goes through.
		addItems(t, g, conv, `[`+string(item)+`]`)
		g.create(t, `{"model":"`+harmony+`","conversation":"`+conv+`","input":"what was the vault code?"}`)
		reqs := g.UpstreamRequests()
		if up := string(reqs[len(reqs)-1]); !strings.Contains(up, compact.SummaryMarker) || strings.Contains(up, v.EncryptedContent) {
			t.Fatalf("the turn after a genuine compaction item did not replay its summary: %s", up)
		}
	})
}

func wireItem(raw json.RawMessage) wire.Item {
	it, _ := wire.ParseItem(raw)
	return it
}
