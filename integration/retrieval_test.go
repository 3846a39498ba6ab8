package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

func TestGetStreamingReplaysTheStoredResponseFromStartingAfter(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		orig := g.stream(t, fmt.Sprintf(`{"model":%q,"input":"use tools","tools":%s,"stream":true}`, harmony, tools))
		// openai-go's GetStreaming sends a GET with a JSON body {"stream":true}.
		s := g.client.Responses.GetStreaming(t.Context(), orig.final.ID, responses.ResponseGetParams{})
		var events []responses.ResponseStreamEventUnion
		for s.Next() {
			events = append(events, s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		checkStreamShape(t, events)
		final := events[len(events)-1].Response
		if !jsonEqual(outputJSON(&final), outputJSON(orig.final)) {
			t.Fatalf("replayed output differs:\n%s\n%s", outputJSON(&final), outputJSON(orig.final))
		}
		// The TypeScript form: ?stream=true&starting_after=N returns the events after N.
		_, body, _ := rawDo(t, "GET", g.URL+"/responses/"+orig.final.ID+"?stream=true&starting_after=3", "", "Authorization", "Bearer test-key")
		first := ""
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "data: {") {
				var ev struct {
					SequenceNumber int `json:"sequence_number"`
				}
				_ = json.Unmarshal([]byte(line[6:]), &ev)
				first = fmt.Sprint(ev.SequenceNumber)
				break
			}
		}
		if first != "4" || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("starting_after=3 replay starts at sequence %s", first)
		}
	})
}

func TestDeletingAnAncestorMakesContinuingADescendantNameIt(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		a := g.create(t, `{"model":"`+harmony+`","input":"one"}`)
		b := g.create(t, `{"model":"`+harmony+`","input":"two","previous_response_id":"`+a.ID+`"}`)
		c := g.create(t, `{"model":"`+harmony+`","input":"three","previous_response_id":"`+b.ID+`"}`)
		status, body, _ := rawDo(t, "DELETE", g.URL+"/responses/"+b.ID, "", "Authorization", "Bearer test-key")
		if status != 200 || !jsonEqual(string(body), fmt.Sprintf(`{"id":%q,"object":"response.deleted","deleted":true}`, b.ID)) {
			t.Fatalf("delete: %d %s", status, body)
		}
		if err := g.client.Responses.Delete(t.Context(), b.ID); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("second delete: %v", err)
		}
		if s, _, _ := rawDo(t, "GET", g.URL+"/responses/"+b.ID+"/input_items", "", "Authorization", "Bearer test-key"); s != 404 {
			t.Fatalf("input_items of a deleted response: %d", s)
		}
		// The descendant's input_items would start at the gap: the same clear 400 as continuing
		// it (issue 38 item 9); before, it silently listed only its own input.
		status, body, _ = rawDo(t, "GET", g.URL+"/responses/"+c.ID+"/input_items", "", "Authorization", "Bearer test-key")
		if _, code, param, msg := envelope(t, body); status != 400 || code != "previous_response_not_found" || param != "response_id" || !strings.Contains(msg, b.ID) {
			t.Fatalf("input_items past a deleted ancestor: %d %s", status, body)
		}
		// The first response, whose chain is whole, still lists its input.
		status, body, _ = rawDo(t, "GET", g.URL+"/responses/"+a.ID+"/input_items", "", "Authorization", "Bearer test-key")
		if status != 200 || !strings.Contains(string(body), `"one"`) {
			t.Fatalf("input_items of the root: %d %s", status, body)
		}
		status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"four","previous_response_id":"`+c.ID+`"}`, "Authorization", "Bearer test-key")
		_, code, param, msg := envelope(t, body)
		if status != 400 || code != "previous_response_not_found" || param != "previous_response_id" || !strings.Contains(msg, b.ID) {
			t.Fatalf("continue past a deleted ancestor: %d %s", status, body)
		}
	})
}

func TestInputItemsPaginateWithIDsAndCancelAndModelsAnswer(t *testing.T) {
	g := newGateway(t, nil)
	var in []string
	for i := 0; i < 45; i++ {
		in = append(in, fmt.Sprintf(`{"role":"user","content":"m%d"}`, i))
	}
	r := g.create(t, `{"model":"`+harmony+`","input":[`+strings.Join(in, ",")+`]}`)
	// Default order is desc; the auto-pager follows the last item's id (as the TS SDK does).
	var got []string
	it := g.client.Responses.InputItems.ListAutoPaging(t.Context(), r.ID, responses.InputItemListParams{Limit: param.NewOpt[int64](10)})
	for it.Next() {
		cur := it.Current()
		if cur.ID == "" {
			t.Fatalf("input item without id")
		}
		var m map[string]any
		_ = json.Unmarshal([]byte(cur.RawJSON()), &m)
		got = append(got, messageText(m))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 45 || got[0] != "m44" || got[44] != "m0" {
		t.Fatalf("input items desc: %d items, first %v", len(got), got[:min(3, len(got))])
	}
	status, body, _ := rawDo(t, "POST", g.URL+"/responses/"+r.ID+"/cancel", "", "Authorization", "Bearer test-key")
	if _, code, _, _ := envelope(t, body); status != 400 || code != "response_not_cancellable" {
		t.Fatalf("cancel: %d %s", status, body)
	}
	if status, _, _ = rawDo(t, "POST", g.URL+"/responses/resp_nope/cancel", "", "Authorization", "Bearer test-key"); status != 404 {
		t.Fatalf("cancel unknown: %d", status)
	}
	models, err := g.client.Models.List(t.Context())
	if err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v", err)
	}
	// Unknown routes and wrong methods answer JSON envelopes.
	for _, c := range [][2]string{{"GET", "/v1/nope"}, {"PUT", "/v1/responses/x"}, {"PATCH", "/v1/conversations"}} {
		s, b, _ := rawDo(t, c[0], strings.TrimSuffix(g.URL, "/v1")+c[1], "")
		envelope(t, b)
		if s != 404 && s != 405 {
			t.Fatalf("%s %s: %d", c[0], c[1], s)
		}
	}
}

func TestRetentionDeletesOldResponsesButKeepsConversationItems(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{Retention: time.Nanosecond}})
		plain := g.create(t, `{"model":"`+harmony+`","input":"old"}`)
		conv := newConversation(t, g, `{}`)
		inConv := g.create(t, `{"model":"`+harmony+`","input":"kept in the conversation","conversation":"`+conv+`"}`)
		// With workers running, retention is the River leader's periodic job (docs/background.md): run it now.
		g.Server.Engine().Purge(t.Context())
		for _, id := range []string{plain.ID, inConv.ID} {
			if s, _, _ := rawDo(t, "GET", g.URL+"/responses/"+id, "", "Authorization", "Bearer test-key"); s != 404 {
				t.Fatalf("response %s outlived the retention period: %d", id, s)
			}
		}
		if items := allItems(t, g, conv, "asc"); len(items) != 3 {
			t.Fatalf("the conversation has %d items after retention, want its 3", len(items))
		}
	})
}
