package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/respgate/respgate/store"
)

func newConversation(t *testing.T, g *gw, body string) string {
	t.Helper()
	cv, err := g.client.Conversations.New(t.Context(), param.Override[conversations.ConversationNewParams](json.RawMessage(body)))
	if err != nil {
		t.Fatalf("create conversation: %v", err)
	}
	if !strings.HasPrefix(cv.ID, "conv_") || cv.Object != "conversation" {
		t.Fatalf("conversation object: %s", cv.RawJSON())
	}
	return cv.ID
}

func addItems(t *testing.T, g *gw, conv, items string) []conversations.ConversationItemUnion {
	t.Helper()
	l, err := g.client.Conversations.Items.New(t.Context(), conv, param.Override[conversations.ItemNewParams](json.RawMessage(`{"items":`+items+`}`)))
	if err != nil {
		t.Fatalf("add items: %v", err)
	}
	return l.Data
}

// allItems lists a conversation's items in ascending order through the SDK's auto-pager.
func allItems(t *testing.T, g *gw, conv string, order conversations.ItemListParamsOrder) []conversations.ConversationItemUnion {
	t.Helper()
	var out []conversations.ConversationItemUnion
	it := g.client.Conversations.Items.ListAutoPaging(t.Context(), conv, conversations.ItemListParams{Order: order, Limit: param.NewOpt[int64](7)})
	for it.Next() {
		out = append(out, it.Current())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("list items: %v", err)
	}
	return out
}

func itemSummary(items []conversations.ConversationItemUnion) string {
	var parts []string
	for _, it := range items {
		s := it.Type
		if it.Role != "" {
			s += ":" + string(it.Role)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestConversationTurnPrependsItsItemsAndAppendsTheTurn(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		conv := newConversation(t, g, `{"items":[{"role":"user","content":"remember: the door code is 4711"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Noted."}]}],"metadata":{"topic":"doors"}}`)
		for i, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":%q,"input":"what is the code? (%d)","conversation":%q,"stream":%v}`, harmony, i, conv, stream)
			var out string
			var echo string
			if stream {
				s := g.stream(t, body)
				out, echo = s.final.OutputText(), s.final.Conversation.ID
			} else {
				r := g.create(t, body)
				out, echo = r.OutputText(), r.Conversation.ID
			}
			if echo != conv {
				t.Fatalf("response echoes conversation %q, want %q", echo, conv)
			}
			if !strings.Contains(out, "the door code is 4711") {
				t.Fatalf("the model did not see the conversation's items: %s", out)
			}
		}
		// The simulator saw the conversation before the new input, in order.
		reqs := g.UpstreamRequests()
		in := upstreamInput(t, reqs[1])
		var seq []string
		for _, it := range in {
			seq = append(seq, fmt.Sprint(it["type"], ":", it["role"]))
		}
		want := "message:user message:assistant message:user reasoning:<nil> message:assistant message:user"
		if got := strings.Join(seq, " "); got != want {
			t.Fatalf("upstream input of turn 2:\n got %s\nwant %s", got, want)
		}
		if messageText(in[0]) != "remember: the door code is 4711" || messageText(in[5]) != "what is the code? (1)" {
			t.Fatalf("upstream input texts: %v / %v", in[0], in[5])
		}
		// The items list shows initial + input + output, in order, each with an id.
		items := allItems(t, g, conv, conversations.ItemListParamsOrderAsc)
		if got := itemSummary(items); got != "message:user message:assistant message:user reasoning message:assistant message:user reasoning message:assistant" {
			t.Fatalf("conversation items: %s", got)
		}
		for _, it := range items {
			if it.ID == "" {
				t.Fatalf("item without id: %s", it.RawJSON())
			}
		}
	})
}

func TestItemsAddedOrDeletedBetweenTurnsChangeWhatTheModelSees(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		conv := newConversation(t, g, `{}`)
		added := addItems(t, g, conv, `[{"role":"user","content":"remember: apples"},{"role":"user","content":"remember: pears"}]`)
		if len(added) != 2 || added[0].ID == "" {
			t.Fatalf("added items: %+v", added)
		}
		r := g.create(t, fmt.Sprintf(`{"model":%q,"input":"fruit?","conversation":%q}`, harmony, conv))
		if !strings.Contains(r.OutputText(), "apples; pears") {
			t.Fatalf("turn 1 answer: %s", r.OutputText())
		}
		if _, err := g.client.Conversations.Items.Delete(t.Context(), conv, added[0].ID); err != nil {
			t.Fatalf("delete item: %v", err)
		}
		addItems(t, g, conv, `[{"role":"user","content":"remember: plums"}]`)
		r = g.create(t, fmt.Sprintf(`{"model":%q,"input":"fruit now?","conversation":%q}`, harmony, conv))
		if out := r.OutputText(); strings.Contains(out, "apples") || !strings.Contains(out, "pears; plums") {
			t.Fatalf("turn 2 answer should drop apples and add plums: %s", out)
		}
		reqs := g.UpstreamRequests()
		var users []string
		for _, it := range upstreamInput(t, reqs[len(reqs)-1]) {
			if it["role"] == "user" {
				users = append(users, messageText(it))
			}
		}
		if got := strings.Join(users, "|"); got != "remember: pears|fruit?|remember: plums|fruit now?" {
			t.Fatalf("user messages sent upstream on turn 2: %s", got)
		}
	})
}

func TestConversationItemPaginationBothWaysAcross250Items(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		conv := newConversation(t, g, `{}`)
		for b := 0; b < 13; b++ {
			var items []string
			for i := 0; i < 20 && b*20+i < 250; i++ {
				items = append(items, fmt.Sprintf(`{"role":"user","content":"item %d"}`, b*20+i))
			}
			addItems(t, g, conv, "["+strings.Join(items, ",")+"]")
		}
		asc := allItems(t, g, conv, conversations.ItemListParamsOrderAsc)
		desc := allItems(t, g, conv, conversations.ItemListParamsOrderDesc)
		if len(asc) != 250 || len(desc) != 250 {
			t.Fatalf("listed %d asc and %d desc items, want 250", len(asc), len(desc))
		}
		for i := range asc {
			if want := fmt.Sprintf("item %d", i); itemText(asc[i]) != want || desc[249-i].ID != asc[i].ID {
				t.Fatalf("position %d: asc %q, desc id %s vs %s", i, itemText(asc[i]), desc[249-i].ID, asc[i].ID)
			}
		}
		// The raw list object and its last_id cursor.
		status, body, _ := rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items?order=asc&limit=100", "", "Authorization", "Bearer test-key")
		var page struct {
			Object  string            `json:"object"`
			Data    []json.RawMessage `json:"data"`
			FirstID string            `json:"first_id"`
			LastID  string            `json:"last_id"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(body, &page); err != nil || status != 200 || page.Object != "list" || len(page.Data) != 100 || !page.HasMore ||
			page.FirstID != asc[0].ID || page.LastID != asc[99].ID {
			t.Fatalf("page 1: %d %+v", status, page)
		}
		_, body, _ = rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items?order=asc&limit=100&after="+page.LastID, "", "Authorization", "Bearer test-key")
		_ = json.Unmarshal(body, &page)
		if len(page.Data) != 100 || page.FirstID != asc[100].ID || !page.HasMore {
			t.Fatalf("page 2 after last_id: %+v", page)
		}
	})
}

func TestConcurrentTurnsOnOneConversationNeverInterleave(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		conv := newConversation(t, g, `{}`)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok, locked := 0, 0
		// 50 clients start a turn at once; a client told 409 retries until its turn is served, so
		// the turns are serialised by the gateway, never interleaved.
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for attempt := 0; attempt < 2000; attempt++ {
					status, body, _ := rawDo(t, "POST", g.URL+"/responses",
						fmt.Sprintf(`{"model":"%s?delay_ms=1","input":"turn %d","conversation":%q}`, harmony, i, conv), "Authorization", "Bearer test-key")
					mu.Lock()
					switch status {
					case 200:
						ok++
					case 409:
						if _, code, _, _ := envelope(t, body); code != "conversation_locked" {
							t.Errorf("409 with code %q", code)
						}
						locked++
					default:
						t.Errorf("unexpected %d: %s", status, body)
					}
					mu.Unlock()
					if status != 409 {
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		if ok != 50 || locked == 0 {
			t.Fatalf("%d turns served, %d attempts locked out; want 50 served and some 409s", ok, locked)
		}
		items := allItems(t, g, conv, conversations.ItemListParamsOrderAsc)
		if len(items) != 3*ok {
			t.Fatalf("%d items for %d turns, want %d", len(items), ok, 3*ok)
		}
		for i := 0; i < len(items); i += 3 {
			if got := itemSummary(items[i : i+3]); got != "message:user reasoning message:assistant" {
				t.Fatalf("turn at %d interleaved: %s", i, got)
			}
		}
		t.Logf("50 concurrent clients: %d turns served, %d attempts got 409 conversation_locked", ok, locked)
	})
}

func TestConversationLimitsErrorsAndDeleteSemantics(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		auth := []string{"Authorization", "Bearer test-key"}
		var many []string
		for i := 0; i < 21; i++ {
			many = append(many, `{"role":"user","content":"x"}`)
		}
		status, body, _ := rawDo(t, "POST", g.URL+"/conversations", `{"items":[`+strings.Join(many, ",")+`]}`, auth...)
		if _, code, param, _ := envelope(t, body); status != 400 || param != "items" || code != "array_above_max_length" {
			t.Fatalf("21 items: %d %s", status, body)
		}
		conv := newConversation(t, g, `{"items":[{"role":"user","content":"remember: kept"}]}`)
		status, body, _ = rawDo(t, "POST", g.URL+"/conversations/"+conv+"/items", `{"items":[`+strings.Join(many, ",")+`]}`, auth...)
		if status != 400 {
			t.Fatalf("append 21 items: %d %s", status, body)
		}
		status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"x","conversation":"`+conv+`","previous_response_id":"resp_x"}`, auth...)
		if _, _, param, _ := envelope(t, body); status != 400 || param != "previous_response_id" {
			t.Fatalf("conversation + previous_response_id: %d %s", status, body)
		}
		r := g.create(t, fmt.Sprintf(`{"model":%q,"input":"hi","conversation":{"id":%q}}`, harmony, conv))
		// Foreign tenant and unknown ids are the same 404.
		_, unknown, _ := rawDo(t, "GET", g.URL+"/conversations/conv_doesnotexist", "", "Authorization", "Bearer other-key")
		s1, foreign, _ := rawDo(t, "GET", g.URL+"/conversations/"+conv, "", "Authorization", "Bearer other-key")
		if s1 != 404 || strings.ReplaceAll(string(foreign), conv, "X") != strings.ReplaceAll(string(unknown), "conv_doesnotexist", "X") {
			t.Fatalf("foreign conversation: %d %s vs %s", s1, foreign, unknown)
		}
		status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"x","conversation":"`+conv+`"}`, "Authorization", "Bearer other-key")
		if status != 404 {
			t.Fatalf("turn on a foreign conversation: %d %s", status, body)
		}
		// Update metadata, then delete: the conversation is gone, the response's items are kept.
		status, body, _ = rawDo(t, "POST", g.URL+"/conversations/"+conv, `{"metadata":{"k":"v"}}`, auth...)
		if status != 200 || !strings.Contains(string(body), `"k":"v"`) {
			t.Fatalf("update: %d %s", status, body)
		}
		del, err := g.client.Conversations.Delete(t.Context(), conv)
		if err != nil || !del.Deleted || del.ID != conv {
			t.Fatalf("delete: %v %+v", err, del)
		}
		if status, _, _ = rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items", "", auth...); status != 404 {
			t.Fatalf("items of a deleted conversation: %d", status)
		}
		got, err := g.client.Responses.Get(t.Context(), r.ID, responsesGetParams())
		if err != nil || len(got.Output) == 0 {
			t.Fatalf("the response of a deleted conversation lost its items: %v", err)
		}
		in, err := g.client.Responses.InputItems.List(t.Context(), r.ID, inputItemsParams())
		if err != nil || len(in.Data) != 1 {
			t.Fatalf("input items after conversation delete: %v %d", err, len(in.Data))
		}
	})
}

func TestTurnOnAThousandItemConversationSendsThemAll(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		g := newGateway(t, st)
		conv := newConversation(t, g, `{}`)
		for b := 0; b < 50; b++ {
			var items []string
			for i := 0; i < 20; i++ {
				items = append(items, fmt.Sprintf(`{"role":"user","content":"line %d"}`, b*20+i))
			}
			addItems(t, g, conv, "["+strings.Join(items, ",")+"]")
		}
		start := time.Now()
		all, err := g.Store.ConversationItemsAll(t.Context(), &store.ConversationItemsAllParams{Tenant: g.Server.TenantOf("test-key"), ConversationID: conv})
		t.Logf("ConversationItemsAll of %d items took %v", len(all), time.Since(start))
		if err != nil || len(all) != 1000 {
			t.Fatalf("load: %v, %d items", err, len(all))
		}
		r := g.create(t, fmt.Sprintf(`{"model":%q,"input":"count them","conversation":%q}`, harmony, conv))
		if !strings.Contains(r.OutputText(), "Seen 1001 messages") {
			t.Fatalf("the model did not see all 1,000 items: %s", r.OutputText())
		}
	})
}

// itemText is the text of a conversation message item (its parts joined).
func itemText(it conversations.ConversationItemUnion) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(it.RawJSON()), &m)
	return messageText(m)
}

func TestEncryptedOnlyReasoningIsRefusedBeforeAnythingIsStoredOrSent(t *testing.T) {
	g := newGateway(t, nil)
	auth := []string{"Authorization", "Bearer test-key"}
	conv := newConversation(t, g, `{}`)
	enc := `{"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"opaque"}`
	status, body, _ := rawDo(t, "POST", g.URL+"/conversations/"+conv+"/items", `{"items":[{"role":"user","content":"hi"},`+enc+`]}`, auth...)
	if _, code, param, _ := envelope(t, body); status != 400 || code != "encrypted_reasoning_unsupported" || param != "items[1]" {
		t.Fatalf("encrypted-only reasoning added to a conversation: %d %s", status, body)
	}
	if items := allItems(t, g, conv, "asc"); len(items) != 0 {
		t.Fatalf("a refused batch stored %d items", len(items))
	}
	status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":[{"role":"user","content":"hi"},`+enc+`]}`, auth...)
	if _, code, param, _ := envelope(t, body); status != 400 || code != "encrypted_reasoning_unsupported" || param != "input[1]" {
		t.Fatalf("encrypted-only reasoning in input: %d %s", status, body)
	}
	// Codex sends "encrypted_content": null beside plaintext: accepted, and nothing encrypted goes upstream.
	g.create(t, `{"model":"`+harmony+`","input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_y","summary":[],"content":[{"type":"reasoning_text","text":"plain"}],"encrypted_content":null},{"role":"user","content":"go on"}]}`)
	if n := len(g.UpstreamRequests()); n != 1 {
		t.Fatalf("the simulator received %d requests, want only the valid one", n)
	}
}
