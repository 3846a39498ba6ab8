package integration

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/testnet"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
)

// TestUpstreamRateLimitReachesTheClientWithRetryAfter: when vLLM (here the simulator) answers 429
// with Retry-After, an openai-go client sees a 429 with code rate_limit_exceeded, vLLM's message and
// the same Retry-After, streamed or not (docs/errors.md), so the SDK's retry backs off as long as
// upstream asked. The turn is recorded as failed, like any turn upstream refused.
func TestUpstreamRateLimitReachesTheClientWithRetryAfter(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + harmony + `?status=429&retry_after=7","input":"hi"}`
			var err error
			if stream {
				s := g.client.Responses.NewStreaming(t.Context(), params(body))
				for s.Next() {
					t.Errorf("streamed event %s after a 429", s.Current().Type)
				}
				err = s.Err()
				_ = s.Close()
			} else {
				_, err = g.client.Responses.New(t.Context(), params(body))
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("stream=%v: error %v (%T) is not an *openai.Error", stream, err, err)
			}
			if apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Message != "Simulated error (status 429)." {
				t.Errorf("stream=%v: %d code %q message %q, want 429 rate_limit_exceeded with vLLM's message",
					stream, apiErr.StatusCode, apiErr.Code, apiErr.Message)
			}
			if ra := apiErr.Response.Header.Get("Retry-After"); ra != "7" {
				t.Errorf("stream=%v: Retry-After %q, want the upstream's 7", stream, ra)
			}
		}
	})
}

// TestUpstreamTimeoutsLookTheSameStreamedOrNot: a stream whose upstream never sends headers hits
// the upstream client's connect timeout; a non-streamed call hits the server's own bound
// (server.Config.SyncTimeout). The client gets one and the same envelope for both.
func TestUpstreamTimeoutsLookTheSameStreamedOrNot(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{
		UpstreamURL: testnet.SilentServer(t) + "/v1",
		Upstream:    upstream.Config{ConnectTimeout: 100 * time.Millisecond},
		Server:      server.Config{SyncTimeout: 300 * time.Millisecond},
	})
	type answer struct {
		status                int
		typ, code, param, msg string
	}
	var got [2]answer
	for i, stream := range []string{"true", "false"} {
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","input":"hi","stream":`+stream+`}`,
			"Authorization", "Bearer test-key")
		typ, code, param, msg := envelope(t, body)
		got[i] = answer{status, typ, code, param, msg}
	}
	want := answer{504, "server_error", "upstream_timeout", "", "The upstream model server did not answer in time."}
	if got[0] != want || got[1] != want {
		t.Errorf("streamed %+v\nnot streamed %+v\nwant both %+v", got[0], got[1], want)
	}
}

// TestStreamEndingWithoutItsTerminalEventIsACut: an upstream stream that ends cleanly but
// without a terminal event (what is left of vLLM's generation error, docs/wire.md §6.5 quirk 5)
// fails the response with the same error object as a cut connection, streamed and stored.
func TestStreamEndingWithoutItsTerminalEventIsACut(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.created\ndata: "+
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_up","status":"in_progress","output":[]}}`+"\n\n")
	}))
	t.Cleanup(up.Close)
	g := newGateway(t, nil, respgatetest.Options{UpstreamURL: up.URL + "/v1"})
	s := g.stream(t, `{"model":"`+harmony+`","input":"hi","stream":true}`)
	want := "The connection to the upstream model server broke before the response was complete."
	if s.final.Status != "failed" || string(s.final.Error.Code) != "upstream_error" || s.final.Error.Message != want {
		t.Fatalf("final %s %+v, want failed upstream_error %q", s.final.Status, s.final.Error, want)
	}
	stored, err := g.client.Responses.Get(t.Context(), s.final.ID, responses.ResponseGetParams{})
	if err != nil || stored.Status != "failed" || stored.Error.Code != s.final.Error.Code || stored.Error.Message != want {
		t.Fatalf("stored %v %+v", err, stored.Error)
	}
}
