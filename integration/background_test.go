package integration

import (
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/store"
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
