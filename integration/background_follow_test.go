package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

// TestBackgroundFollowerOnTheOtherReplicaIsWokenByNotifications: a reader of a running
// background response's stream on the replica that does not run it receives every event in
// order, woken by Postgres notifications alone: its fallback poll is an hour, so a missed or
// absent notification would leave it waiting (and the test's deadline would fail it).
func TestBackgroundFollowerOnTheOtherReplicaIsWokenByNotifications(t *testing.T) {
	t.Parallel()
	a, b := replicas(t, server.Config{BackgroundFollowPoll: time.Hour})
	r := a.create(t, `{"model":"`+harmony+`?delay_ms=20&tokens=60","input":"follow me","background":true}`)
	var runner, follower *gw
	waitFor(t, 30*time.Second, "a replica to call the model", func() bool {
		switch {
		case sentToModel(a, "follow me"):
			runner, follower = a, b
		case sentToModel(b, "follow me"):
			runner, follower = b, a
		}
		return runner != nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	got := followStream(ctx, t, follower, r.ID, -1)
	if len(got) < 60 {
		t.Fatalf("the follower received %d events, want the whole turn", len(got))
	}
	for i, ev := range got {
		if ev.SequenceNumber != int64(i) {
			t.Fatalf("event %d has sequence_number %d (%s)", i, ev.SequenceNumber, ev.Type)
		}
	}
	if last := got[len(got)-1]; last.Type != "response.completed" {
		t.Fatalf("the follower's stream ended with %s", last.Type)
	}
	// The wakes came through the store's notifications.
	if n := metricValue(t, follower, "respgate_background_notifications_total"); n < 2 {
		t.Fatalf("respgate_background_notifications_total = %d on the follower", n)
	}
	// And the same stream resumed mid-way on the follower, now from the log alone.
	again := followStream(ctx, t, follower, r.ID, 9)
	if len(again) != len(got)-10 || again[0].SequenceNumber != 10 {
		t.Fatalf("resume after 9: %d events from #%d, want %d from #10", len(again), again[0].SequenceNumber, len(got)-10)
	}
}

// followStream reads GET ?stream=true&starting_after=after with openai-go until the stream ends
// or ctx does (then the test fails: nothing woke the follower).
func followStream(ctx context.Context, t *testing.T, g *gw, id string, after int64) []responses.ResponseStreamEventUnion {
	t.Helper()
	p := responses.ResponseGetParams{}
	if after >= 0 {
		p.StartingAfter = openai.Int(after)
	}
	client := openai.NewClient(option.WithBaseURL(g.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	s := client.Responses.GetStreaming(ctx, id, p)
	defer s.Close()
	var evs []responses.ResponseStreamEventUnion
	for s.Next() {
		evs = append(evs, s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("follow %s after %d (%d events read): %v", id, after, len(evs), err)
	}
	return evs
}

// metricValue reads an unlabelled series from g's /metrics (0 when absent).
func metricValue(t *testing.T, g *gw, series string) int64 {
	t.Helper()
	_, body, _ := rawDo(t, "GET", strings.TrimSuffix(g.URL, "/v1")+"/metrics", "", "Authorization", "Bearer test-key")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return int64(v)
}

// busyWorker starts a gateway with one background worker and occupies it with a long turn, so
// the background responses created next stay queued until it is cancelled (the returned func).
func busyWorker(t *testing.T, st store.Store) (*gw, func()) {
	t.Helper()
	g := newGateway(t, st, respgatetest.Options{Server: server.Config{BackgroundWorkers: 1}})
	blocker := g.create(t, `{"model":"`+harmony+`?delay_ms=50&tokens=5000","input":"occupy the worker","background":true}`)
	pollResponse(t, g, blocker.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
	return g, func() {
		t.Helper()
		if _, err := g.client.Responses.Cancel(t.Context(), blocker.ID); err != nil {
			t.Fatalf("cancel the blocker: %v", err)
		}
	}
}

func TestBackgroundQueueDepthGaugeOnMetrics(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g, release := busyWorker(t, newStore(t))
		if n := metricValue(t, g, "respgate_background_queued"); n != 0 {
			t.Fatalf("respgate_background_queued = %d with nothing queued", n)
		}
		var queued []string
		for i := range 3 {
			queued = append(queued, g.create(t, fmt.Sprintf(`{"model":"%s","input":"wait %d","background":true}`, harmony, i)).ID)
		}
		if n := metricValue(t, g, "respgate_background_queued"); n != 3 {
			t.Fatalf("respgate_background_queued = %d with 3 queued", n)
		}
		if _, err := g.client.Responses.Cancel(t.Context(), queued[0]); err != nil {
			t.Fatal(err)
		}
		if n := metricValue(t, g, "respgate_background_queued"); n != 2 {
			t.Fatalf("respgate_background_queued = %d after a cancel, want 2", n)
		}
		release()
		for _, id := range queued[1:] {
			pollResponse(t, g, id, terminal)
		}
		if n := metricValue(t, g, "respgate_background_queued"); n != 0 {
			t.Fatalf("respgate_background_queued = %d once the queue drained", n)
		}
	})
}

func TestBackgroundDeletingAQueuedConversationTurnReleasesTheConversation(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g, release := busyWorker(t, newStore(t))
		defer release()
		conv := newConversation(t, g, `{"items":[{"role":"user","content":"remember: the door code is 4711"}]}`)
		r := g.create(t, fmt.Sprintf(`{"model":%q,"input":"queued turn","conversation":%q,"background":true}`, harmony, conv))
		if r.Status != "queued" {
			t.Fatalf("the conversation turn is %s, want queued behind the busy worker", r.Status)
		}
		// Queued, it holds the conversation's turn.
		turn := fmt.Sprintf(`{"model":%q,"input":"what is the code?","conversation":%q}`, harmony, conv)
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn, "Authorization", "Bearer test-key")
		if _, code, _, _ := envelope(t, body); status != 409 || code != "conversation_locked" {
			t.Fatalf("a turn while the queued one holds the conversation: %d %s", status, body)
		}
		if err := g.client.Responses.Delete(t.Context(), r.ID); err != nil {
			t.Fatalf("delete the queued turn: %v", err)
		}
		// Deleted, it holds nothing: the next turn is served at once.
		got := g.create(t, turn)
		if got.Status != "completed" || !strings.Contains(got.OutputText(), "4711") {
			t.Fatalf("the turn after the delete: %s %q", got.Status, got.OutputText())
		}
		if sentToModel(g, "queued turn") {
			t.Fatalf("the deleted turn reached the model")
		}
	})
}

// TestBackgroundConversationTurnHoldsTheLeaseAndLandsInTheConversation: background:true with a
// conversation, through openai-go: while queued and running the turn holds the conversation's
// turn (another turn is 409), then it completes with the conversation's history and its input
// and output are appended to the conversation.
func TestBackgroundConversationTurnHoldsTheLeaseAndLandsInTheConversation(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g, release := busyWorker(t, newStore(t))
		conv := newConversation(t, g, `{"items":[{"role":"user","content":"remember: the door code is 4711"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Noted."}]}]}`)
		r, err := g.client.Responses.New(t.Context(), responses.ResponseNewParams{
			Model:        harmony,
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("what is the code?")},
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv)},
			Background:   openai.Bool(true),
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if r.Status != "queued" || !r.Background || r.Conversation.ID != conv {
			t.Fatalf("create answered %s background %v conversation %q", r.Status, r.Background, r.Conversation.ID)
		}
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", fmt.Sprintf(`{"model":%q,"input":"me too","conversation":%q}`, harmony, conv),
			"Authorization", "Bearer test-key")
		if _, code, _, _ := envelope(t, body); status != 409 || code != "conversation_locked" {
			t.Fatalf("a turn while the background one holds the conversation: %d %s", status, body)
		}
		release()
		done := pollResponse(t, g, r.ID, terminal)
		if done.Status != "completed" || !strings.Contains(done.OutputText(), "the door code is 4711") {
			t.Fatalf("background conversation turn ended %s: %q", done.Status, done.OutputText())
		}
		items := allItems(t, g, conv, conversations.ItemListParamsOrderAsc)
		if got := itemSummary(items); got != "message:user message:assistant message:user reasoning message:assistant" {
			t.Fatalf("conversation items: %s", got)
		}
		if last := items[len(items)-1]; last.ID != done.Output[len(done.Output)-1].ID {
			t.Fatalf("the conversation's last item %s is not the response's output %s", last.ID, done.Output[len(done.Output)-1].ID)
		}
		// The turn is over: the conversation takes the next one.
		next := g.create(t, fmt.Sprintf(`{"model":%q,"input":"and again?","conversation":%q}`, harmony, conv))
		if next.Status != "completed" {
			t.Fatalf("the next turn: %s", next.Status)
		}
	})
}
