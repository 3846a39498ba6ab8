package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

// Every entry path of a conversation turn releases the conversation's turn lease, at exactly
// one site, on each of its failure exits (engine.Serve and engine.RunBackground: one deferred
// release, or an explicit hand-off): after each failure the lease is free at once, without
// waiting for it to expire.
func TestEveryEntryPathFreesTheConversationOnItsFailureExits(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{BackgroundWorkers: 1, BackgroundMaxPerTenant: 1, BackgroundMaxQueued: 1}})
		tn := g.Server.TenantOf("test-key")
		var freeAs func(t *testing.T, tn, conv, after string)
		auth := []string{"Authorization", "Bearer test-key"}
		// free asserts the lease of conv is free: another holder can take it (and gives it back).
		free := func(t *testing.T, conv, after string) {
			t.Helper()
			freeAs(t, tn, conv, after)
		}
		freeAs = func(t *testing.T, tn, conv, after string) {
			t.Helper()
			p := &store.ConversationTurnAcquireParams{Tenant: tn, ConversationID: conv, ResponseID: "resp_probe",
				ExpiresAt: time.Now().Add(time.Minute)}
			if err := g.Store.ConversationTurnAcquire(t.Context(), p); err != nil {
				t.Fatalf("after %s the conversation is still locked: %v", after, err)
			}
			if err := g.Store.ConversationTurnRelease(t.Context(), &store.ConversationTurnReleaseParams{Tenant: tn,
				ConversationID: conv, ResponseID: "resp_probe"}); err != nil {
				t.Fatal(err)
			}
		}
		newConv := func(t *testing.T) string {
			t.Helper()
			status, body, _ := rawDo(t, "POST", g.URL+"/conversations", `{}`, auth...)
			if status != http.StatusOK {
				t.Fatalf("create conversation: %d %s", status, body)
			}
			return strings.Split(strings.Split(string(body), `"id":"`)[1], `"`)[0]
		}
		turn := func(conv, model, extra string) string {
			return `{"model":"` + model + `","conversation":"` + conv + `","input":"hi"` + extra + `}`
		}
		failing := harmony + "?status=500"

		t.Run("non-streamed, upstream refused", func(t *testing.T) {
			conv := newConv(t)
			if status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn(conv, failing, ""), auth...); status < 500 {
				t.Fatalf("turn: %d %s", status, body)
			}
			free(t, conv, "a refused non-streamed turn")
		})
		t.Run("streamed, upstream refused before the stream", func(t *testing.T) {
			conv := newConv(t)
			if status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn(conv, failing, `,"stream":true`), auth...); status < 500 {
				t.Fatalf("turn: %d %s", status, body)
			}
			free(t, conv, "a refused streamed turn")
		})
		t.Run("streamed, cut mid-stream", func(t *testing.T) {
			conv := newConv(t)
			status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn(conv, harmony+"?cut_after=5", `,"stream":true`), auth...)
			if status != http.StatusOK || !strings.Contains(string(body), "response.failed") {
				t.Fatalf("turn: %d %s", status, body)
			}
			free(t, conv, "a cut stream")
		})
		t.Run("background, failed in its worker", func(t *testing.T) {
			conv := newConv(t)
			status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn(conv, failing, `,"background":true`), auth...)
			if status != http.StatusOK {
				t.Fatalf("turn: %d %s", status, body)
			}
			id := strings.Split(strings.Split(string(body), `"id":"`)[1], `"`)[0]
			pollResponse(t, g, id, func(r *responses.Response) bool { return r.Status == "failed" })
			free(t, conv, "a background turn that failed")
		})
		t.Run("background, refused at enqueue", func(t *testing.T) {
			// The one worker runs a slow response of this key: its next one is past the bound.
			slow := g.create(t, `{"model":"`+harmony+`?delay_ms=50&tokens=2000","input":"hold","background":true}`)
			defer func() { _, _ = g.client.Responses.Cancel(t.Context(), slow.ID) }()
			pollResponse(t, g, slow.ID, func(r *responses.Response) bool { return r.Status == "in_progress" }) // not in the queue
			conv := newConv(t)
			status, body, _ := rawDo(t, "POST", g.URL+"/responses", turn(conv, harmony, `,"background":true`), auth...)
			if status != http.StatusTooManyRequests {
				t.Fatalf("turn past the tenant bound: %d %s", status, body)
			}
			free(t, conv, "a background turn refused at enqueue (429)")
			// Another key's response waits in the queue, which is then full: a third key's
			// conversation turn is refused with 503 and leaves its conversation free too.
			other := []string{"Authorization", "Bearer other-key"}
			status, body, _ = rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"wait","background":true}`, other...)
			if status != http.StatusOK {
				t.Fatalf("a queued response of another key: %d %s", status, body)
			}
			waiting := strings.Split(strings.Split(string(body), `"id":"`)[1], `"`)[0]
			defer func() { _, _, _ = rawDo(t, "POST", g.URL+"/responses/"+waiting+"/cancel", ``, other...) }()
			third := []string{"Authorization", "Bearer third-key"}
			status, body, _ = rawDo(t, "POST", g.URL+"/conversations", `{}`, third...)
			if status != http.StatusOK {
				t.Fatalf("create conversation: %d %s", status, body)
			}
			conv3 := strings.Split(strings.Split(string(body), `"id":"`)[1], `"`)[0]
			status, body, _ = rawDo(t, "POST", g.URL+"/responses", turn(conv3, harmony, `,"background":true`), third...)
			if status != http.StatusServiceUnavailable {
				t.Fatalf("turn past the queue bound: %d %s", status, body)
			}
			freeAs(t, g.Server.TenantOf("third-key"), conv3, "a background turn refused at enqueue (503)")
		})
		t.Run("websocket, upstream refused", func(t *testing.T) {
			conv := newConv(t)
			w := openWS(t, g)
			if tr := w.turn(`{"type":"response.create",` + turn(conv, failing, "")[1:]); tr.err == nil {
				t.Fatalf("a refused turn on the socket ended %s", tr.final.Status)
			}
			free(t, conv, "a refused socket turn")
			// A warm-up commits without output and ends the lease through its commit.
			w.turn(`{"type":"response.create","generate":false,` + turn(conv, harmony, "")[1:]).ok(t)
			free(t, conv, "a warm-up")
		})
	})
}
