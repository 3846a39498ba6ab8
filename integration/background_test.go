package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
)

// poll fetches a response until cond holds (the test's deadline bounds it).
func pollResponse(t *testing.T, g *gw, id string, cond func(*responses.Response) bool) *responses.Response {
	t.Helper()
	var r *responses.Response
	waitFor(t, 60*time.Second, "response "+id, func() bool {
		var err error
		r, err = g.client.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return cond(r)
	}, func() string { return "status " + string(r.Status) })
	return r
}

func terminal(r *responses.Response) bool {
	switch r.Status {
	case "completed", "incomplete", "failed", "cancelled":
		return true
	}
	return false
}

func TestBackgroundResponseIsQueuedThenCompletes(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		r := g.create(t, `{"model":"`+harmony+`","input":"remember: the tide is high","background":true}`)
		if r.Status != "queued" || !r.Background {
			t.Fatalf("create answered status %q background %v, want queued", r.Status, r.Background)
		}
		done := pollResponse(t, g, r.ID, terminal)
		if done.Status != "completed" || done.OutputText() == "" {
			t.Logf("%s", done.RawJSON())
			t.Fatalf("background response ended %q with %q", done.Status, done.OutputText())
		}
	})
}

// getStream reads GET /v1/responses/{id}?stream=true&starting_after=after with openai-go's
// GetStreaming and returns its events.
func getStream(t *testing.T, g *gw, id string, after int64) []responses.ResponseStreamEventUnion {
	t.Helper()
	p := responses.ResponseGetParams{}
	if after >= 0 {
		p.StartingAfter = openai.Int(after)
	}
	client := g.client
	if after >= 0 {
		// A resumed stream starts mid-way, which the conformance check of whole streams rejects.
		client = openai.NewClient(option.WithBaseURL(g.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	}
	s := client.Responses.GetStreaming(t.Context(), id, p)
	defer s.Close()
	var evs []responses.ResponseStreamEventUnion
	for s.Next() {
		evs = append(evs, s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("get stream %s after %d: %v", id, after, err)
	}
	return evs
}

func TestBackgroundStreamIsLiveAndResumesFromEverySequenceNumber(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		// background + stream: the create call streams the turn live from its event log.
		live := g.stream(t, `{"model":"`+harmony+`?tokens=30","input":"count","background":true,"stream":true}`)
		if live.final.Status != "completed" || !live.final.Background {
			t.Fatalf("live background stream ended %q (background %v)", live.final.Status, live.final.Background)
		}
		n := len(live.events)
		if n < 30 {
			t.Fatalf("stream has %d events, want a long one", n)
		}
		id := live.final.ID
		// Every starting_after replays exactly the events after it, with their original
		// sequence numbers and bytes: nothing lost, nothing repeated.
		for after := -1; after < n; after++ {
			got := getStream(t, g, id, int64(after))
			if len(got) != n-after-1 {
				t.Fatalf("starting_after=%d: %d events, want %d", after, len(got), n-after-1)
			}
			for i, ev := range got {
				want := live.events[after+1+i]
				if ev.SequenceNumber != want.SequenceNumber || ev.Type != want.Type {
					t.Fatalf("starting_after=%d: event %d is %s #%d, want %s #%d", after, i, ev.Type, ev.SequenceNumber, want.Type, want.SequenceNumber)
				}
				if ev.Type != "response.completed" && !jsonEqual(ev.RawJSON(), want.RawJSON()) {
					t.Fatalf("starting_after=%d: event #%d differs:\n%s\n%s", after, ev.SequenceNumber, ev.RawJSON(), want.RawJSON())
				}
			}
		}
	})
}

func TestBackgroundResumeWhileRunningFollowsToTheEnd(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		r := g.create(t, `{"model":"`+harmony+`?delay_ms=20&tokens=60","input":"slow","background":true}`)
		// Wait until some events are logged, then resume after the third one: the stream
		// follows the running turn to its terminal event.
		pollResponse(t, g, r.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		got := getStream(t, g, r.ID, 2)
		if len(got) == 0 || got[0].SequenceNumber != 3 {
			t.Fatalf("resume after 2 began with %+v", got)
		}
		for i, ev := range got {
			if ev.SequenceNumber != int64(3+i) {
				t.Fatalf("event %d has sequence_number %d", i, ev.SequenceNumber)
			}
		}
		if last := got[len(got)-1]; last.Type != "response.completed" {
			t.Fatalf("resumed stream ended with %s", last.Type)
		}
	})
}

func TestBackgroundValidatesBeforeQueueing(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		for _, tc := range []struct{ body, param, code string }{
			{`{"model":"m","input":"x","background":true,"store":false}`, "background", "invalid_parameter_combination"},
			{`{"model":"m","input":"x","background":true,"previous_response_id":"resp_missing"}`, "previous_response_id", "previous_response_not_found"},
			{`{"model":"m","input":[{"type":"item_reference","id":"msg_nope"}],"background":true}`, "input[0]", ""},
		} {
			status, body, _ := rawDo(t, "POST", g.URL+"/responses", tc.body, "Authorization", "Bearer test-key")
			if status != 400 {
				t.Fatalf("%s: status %d %s", tc.body, status, body)
			}
			_, code, param, _ := envelope(t, body)
			if param != tc.param && tc.code != "" || tc.code != "" && code != tc.code {
				t.Fatalf("%s: param %q code %q", tc.body, param, code)
			}
		}
		if n := len(g.UpstreamRequests()); n != 0 {
			t.Fatalf("rejected background requests made %d upstream calls", n)
		}
	})
}

func TestBackgroundCancel(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{BackgroundWorkers: 1}})
		running := g.create(t, `{"model":"`+harmony+`?delay_ms=50&tokens=2000","input":"long","background":true}`)
		queued := g.create(t, `{"model":"`+harmony+`","input":"waits","background":true}`)
		// Running: claimed, and its request reached the model (which streams a token per 50 ms).
		pollResponse(t, g, running.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		waitFor(t, 30*time.Second, "the model to be called", func() bool { return sentToModel(g, "long") })
		// The one worker is busy: the second is still queued, and its cancel ends it at once.
		c, err := g.client.Responses.Cancel(t.Context(), queued.ID)
		if err != nil || c.Status != "cancelled" {
			t.Fatalf("cancel of a queued response: %v %+v", err, c)
		}
		// A running one is cancelled wherever it runs and stored with its partial output.
		c, err = g.client.Responses.Cancel(t.Context(), running.ID)
		if err != nil || c.Status != "cancelled" {
			t.Fatalf("cancel of a running response: %v %s", err, c.RawJSON())
		}
		if c.Error.Code != "" {
			t.Fatalf("a cancelled response carries error %+v", c.Error)
		}
		stored := pollResponse(t, g, running.ID, terminal)
		if stored.Status != "cancelled" || len(stored.Output) == 0 {
			t.Fatalf("stored %q with %d output items, want cancelled with its partial output", stored.Status, len(stored.Output))
		}
		// Idempotent: cancelling again returns the same response unchanged.
		again, err := g.client.Responses.Cancel(t.Context(), running.ID)
		if err != nil || again.Status != "cancelled" || !jsonEqual(again.RawJSON(), stored.RawJSON()) {
			t.Fatalf("second cancel: %v %s", err, again.RawJSON())
		}
		// The queued one never ran.
		if sentToModel(g, "waits") {
			t.Fatal("a response cancelled while queued reached the model")
		}
		// A finished background response is returned unchanged; a foreground one is still a 400.
		done := g.create(t, `{"model":"`+harmony+`","input":"quick","background":true}`)
		done = pollResponse(t, g, done.ID, terminal)
		c, err = g.client.Responses.Cancel(t.Context(), done.ID)
		if err != nil || c.Status != "completed" {
			t.Fatalf("cancel of a finished background response: %v %+v", err, c)
		}
		fg := g.create(t, `{"model":"`+harmony+`","input":"fg"}`)
		status, body, _ := rawDo(t, "POST", g.URL+"/responses/"+fg.ID+"/cancel", "", "Authorization", "Bearer test-key")
		if status != 400 {
			t.Fatalf("cancel of a foreground response: %d %s", status, body)
		}
	})
}

// sentToModel reports whether a request whose body contains text reached g's simulator.
func sentToModel(g *gw, text string) bool {
	for _, b := range g.UpstreamRequests() {
		if strings.Contains(string(b), text) {
			return true
		}
	}
	return false
}

// replicas starts two gateways on one Postgres schema, each with its own River client and its
// own simulator, as two respgate processes would run.
func replicas(t *testing.T, cfg server.Config) (*gw, *gw) {
	t.Helper()
	dsn := pgtest.DSN(t)
	open := func() store.Store {
		st, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatalf("open postgres: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	a := newGateway(t, open(), respgatetest.Options{Server: cfg})
	b := newGateway(t, open(), respgatetest.Options{Server: cfg})
	return a, b
}

func TestBackgroundJobsDrainAcrossTwoReplicasWithoutDuplicateRuns(t *testing.T) {
	t.Parallel()
	a, b := replicas(t, server.Config{BackgroundWorkers: 4})
	const n = 100
	ids := make([]string, n)
	for i := range n {
		g := a
		if i%2 == 1 {
			g = b
		}
		ids[i] = g.create(t, fmt.Sprintf(`{"model":"%s","input":"job number %03d","background":true}`, harmony, i)).ID
	}
	for _, id := range ids {
		r := pollResponse(t, a, id, terminal)
		if r.Status != "completed" {
			t.Fatalf("%s ended %s", id, r.Status)
		}
	}
	// The simulators' request logs: every job reached the model exactly once, and both
	// replicas worked.
	runs := map[string]int{}
	perReplica := [2]int{}
	for k, g := range []*gw{a, b} {
		for _, body := range g.UpstreamRequests() {
			for i := range n {
				if strings.Contains(string(body), fmt.Sprintf("job number %03d", i)) {
					runs[ids[i]]++
					perReplica[k]++
				}
			}
		}
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Fatalf("%s reached the model %d times", id, runs[id])
		}
	}
	if perReplica[0] == 0 || perReplica[1] == 0 {
		t.Fatalf("one replica ran every job: %v", perReplica)
	}
}

func TestBackgroundCancelFromTheReplicaNotRunningIt(t *testing.T) {
	t.Parallel()
	a, b := replicas(t, server.Config{})
	r := a.create(t, `{"model":"`+harmony+`?delay_ms=50&tokens=2000","input":"far away","background":true}`)
	var runner, other *gw
	waitFor(t, 30*time.Second, "a replica to call the model", func() bool {
		switch {
		case sentToModel(a, "far away"):
			runner, other = a, b
		case sentToModel(b, "far away"):
			runner, other = b, a
		}
		return runner != nil
	})
	c, err := other.client.Responses.Cancel(t.Context(), r.ID)
	if err != nil || c.Status != "cancelled" {
		t.Fatalf("cancel from the other replica: %v %s", err, c.RawJSON())
	}
	got := pollResponse(t, runner, r.ID, terminal)
	if got.Status != "cancelled" {
		t.Fatalf("stored %s", got.Status)
	}
}

func TestBackgroundKill9OfTheRunningReplicaEndsItFailedTruthfully(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	p1 := startBinary(t, dsn)
	p2 := startBinary(t, dsn)
	r := createWith(t, p1.client(), `{"model":"`+harmony+`?delay_ms=50&tokens=2000","input":"doomed","background":true}`)
	var runner, other *proc
	waitFor(t, 30*time.Second, "a replica to run the turn", func() bool {
		for _, p := range []*proc{p1, p2} {
			if strings.Contains(p.log(), `"background response running","response_id":"`+r.ID) {
				runner, other = p, p1
				if p == p1 {
					other = p2
				}
			}
		}
		return runner != nil
	})
	if err := runner.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = runner.cmd.Wait()
	// The survivor's lease sweeper ends it failed with the reason: its gateway stopped.
	var got *responses.Response
	survivor := other.client()
	waitFor(t, 30*time.Second, "the survivor to end the response", func() bool {
		var err error
		got, err = survivor.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
		return err == nil && terminal(got)
	})
	if got.Status != "failed" || !strings.Contains(got.Error.Message, "lease expired") {
		t.Fatalf("ended %s with %+v", got.Status, got.Error)
	}
}

func TestBackgroundLimitsAnswer429And503WithRetryAfter(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		g := newGateway(t, st, respgatetest.Options{Server: server.Config{BackgroundWorkers: 1, BackgroundMaxPerTenant: 2, BackgroundMaxQueued: 1}})
		slow := `{"model":"` + harmony + `?delay_ms=50&tokens=2000","input":"hold","background":true}`
		running := g.create(t, slow)
		pollResponse(t, g, running.ID, func(r *responses.Response) bool { return r.Status == "in_progress" })
		// The one worker is busy: this key's second response waits in the queue...
		queued := g.create(t, slow)
		// ...a third from the same key passes its bound (429), one from another key the
		// queue's (503).
		status, body, hdr := rawDo(t, "POST", g.URL+"/responses", slow, "Authorization", "Bearer test-key")
		if _, code, _, _ := envelope(t, body); status != 429 || code != "too_many_background_responses" || hdr.Get("Retry-After") == "" {
			t.Fatalf("past the tenant bound: %d %s (Retry-After %q)", status, body, hdr.Get("Retry-After"))
		}
		status, body, hdr = rawDo(t, "POST", g.URL+"/responses", slow, "Authorization", "Bearer other-key")
		if _, code, _, _ := envelope(t, body); status != 503 || code != "background_queue_full" || hdr.Get("Retry-After") == "" {
			t.Fatalf("past the queue bound: %d %s (Retry-After %q)", status, body, hdr.Get("Retry-After"))
		}
		for _, id := range []string{queued.ID, running.ID} {
			if _, err := g.client.Responses.Cancel(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		}
		// Deleting a finished background response deletes its turn and its event log with it.
		if err := g.client.Responses.Delete(t.Context(), running.ID); err != nil {
			t.Fatal(err)
		}
		tn := g.Server.TenantOf("test-key")
		if _, err := st2(g).BackgroundTurnGet(t.Context(), &store.BackgroundTurnGetParams{Tenant: tn, ResponseID: running.ID}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("background turn after delete: %v", err)
		}
		if _, err := st2(g).ResponseEventList(t.Context(), &store.ResponseEventListParams{Tenant: tn, ResponseID: running.ID, After: -1}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("event log after delete: %v", err)
		}
	})
}

// st2 is the gateway's store (respgatetest's own SQLite one when the test passed none).
func st2(g *gw) store.Store { return g.Store }
