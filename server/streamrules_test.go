package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/wire"
)

// signalClient is a client that closes first at its first write.
type signalClient struct {
	*client
	once  sync.Once
	first chan struct{}
}

func (c *signalClient) Write(b []byte) (int, error) {
	n, err := c.client.Write(b)
	c.once.Do(func() { close(c.first) })
	return n, err
}

// With MaxConcurrentStreams streams running, another stream is a 503 too_many_streams before it
// reaches upstream; a stream that ended frees its place.
func TestStreamsPastMaxConcurrentStreamsAre503(t *testing.T) {
	h := newTurnHarnessConfig(t, Config{MaxConcurrentStreams: 1}, func(_ *turnStore, g *upstreamGate) { g.hold = true })
	ctxA, cancelA := context.WithCancel(t.Context())
	aDone := make(chan struct{})
	go func() { defer close(aDone); h.serve(ctxA, h.newClient(), streamBody) }()
	<-h.gate.arrived // A runs
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	b := h.newClient()
	bDone := make(chan struct{})
	go func() { defer close(bDone); h.serve(ctxB, b, streamBody) }()
	select {
	case <-bDone:
	case <-h.gate.arrived:
		cancelB()
		<-bDone
		cancelA()
		<-aDone
		t.Fatal("a second stream reached upstream past MaxConcurrentStreams=1")
	}
	cancelA()
	<-aDone
	if env := envelope(t, b.body.String()); b.code != http.StatusServiceUnavailable || deref(env.Code) != "too_many_streams" {
		t.Fatalf("the second stream: %d %s, want 503 too_many_streams", b.code, b.body.String())
	}
	if n := h.s.ActiveStreams(); n != 0 {
		t.Fatalf("%d active streams after both ended", n)
	}
	h.gate.hold = false // both requests have ended
	for range 2 {
		c := h.newClient()
		h.serve(t.Context(), c, streamBody)
		if len(c.events(wire.EventCompleted)) != 1 {
			t.Fatalf("a stream after the others ended: %d %s", c.code, c.body.String())
		}
	}
}

// A stream cut by shutdown past its deadline ends with response.failed saying so, and is stored
// failed with the same words.
func TestStreamCutByShutdownEndsFailedWithTheReason(t *testing.T) {
	h := newTurnHarness(t, nil)
	c := &signalClient{client: h.newClient(), first: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := newRequest(t, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim?stall=1h&stall_after=3","input":"hi","stream":true}`)
		h.s.ServeHTTP(c, req)
	}()
	<-c.first
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	h.s.Shutdown(expired) // cuts the stream, then waits for the turn
	<-done
	failed := c.events(wire.EventFailed)
	var ev struct {
		Response struct {
			Status string
			Error  struct{ Code, Message string }
		}
	}
	if len(failed) != 1 || json.Unmarshal([]byte(failed[0]), &ev) != nil ||
		ev.Response.Error.Message != "The gateway shut down before the response finished; retry it." {
		t.Fatalf("response.failed events %q", failed)
	}
	r := h.stored(t, h.st.firstCommit(t))
	if r.Status != wire.StatusFailed || !json.Valid(r.Error) || !containsMessage(r.Error, ev.Response.Error.Message) {
		t.Fatalf("stored %s %s", r.Status, r.Error)
	}
}

func containsMessage(raw json.RawMessage, msg string) bool {
	var e struct{ Message string }
	return json.Unmarshal(raw, &e) == nil && e.Message == msg
}

// An upstream failure mid-stream ends the stream with response.failed carrying the error object a
// non-streamed call gets for the same failure (docs/errors.md, "Streamed turns").
func TestMidStreamUpstreamFailureCarriesTheNonStreamedError(t *testing.T) {
	h := newTurnHarness(t, nil)
	for _, fault := range []string{"error_after=3", "cut_after=3"} {
		c := h.newClient()
		h.serve(t.Context(), c, `{"model":"openai/gpt-oss-sim?`+fault+`","input":"hi","stream":true}`)
		failed := c.events(wire.EventFailed)
		var ev struct {
			Response struct {
				Error struct{ Code, Message string }
			}
		}
		if len(failed) != 1 || json.Unmarshal([]byte(failed[0]), &ev) != nil {
			t.Fatalf("%s: response.failed events %q in %s", fault, failed, c.body.String())
		}
		sc := h.newClient()
		h.serve(t.Context(), sc, `{"model":"openai/gpt-oss-sim?`+fault+`","input":"hi"}`)
		env := envelope(t, sc.body.String())
		if ev.Response.Error.Code != deref(env.Code) || ev.Response.Error.Message != env.Message {
			t.Fatalf("%s: streamed error %+v, non-streamed %s", fault, ev.Response.Error, sc.body.String())
		}
	}
}

// A stream that ends early stops the model at once: the upstream body is closed before the
// record is committed, not after, whether the client left or respgate refused the output (an
// item over MaxOutputItemBytes while the model is still generating).
func TestAStreamThatEndsEarlyClosesTheUpstreamBeforeTheCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failAfter int
		itemLimit int
		commit    string
	}{
		{"the client left", 3, 0, "store: commit cancelled"},
		{"an item over the limit", 0, 64, "store: commit failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTurnHarnessConfig(t, Config{MaxOutputItemBytes: tc.itemLimit}, func(s *turnStore, g *upstreamGate) { g.steps = s.steps })
			c := h.newClient()
			c.failAfter = tc.failAfter
			h.serve(t.Context(), c, `{"model":"openai/gpt-oss-sim?tokens=2000","input":"hi","stream":true}`)
			steps := h.steps.snapshot()
			closed, commit := index(steps, "upstream: body closed"), index(steps, tc.commit)
			if closed < 0 || commit < 0 || closed > commit {
				t.Fatalf("steps %v: want the upstream body closed before %q", steps, tc.commit)
			}
		})
	}
}

// A stream that ends normally reads its upstream body to the end, so every turn reuses one
// upstream connection.
func TestFinishedStreamsReuseTheUpstreamConnection(t *testing.T) {
	var dials atomic.Int32
	h := newTurnHarness(t, func(_ *turnStore, g *upstreamGate) {
		d := &net.Dialer{}
		g.next.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}
	})
	for turn := range 3 {
		c := h.newClient()
		// delay_ms spaces every upstream write, [DONE] included: the terminal event arrives before
		// the body's end, which the turn must still read.
		h.serve(t.Context(), c, `{"model":"openai/gpt-oss-sim?delay_ms=2&tokens=5","input":"hi","stream":true}`)
		if len(c.events(wire.EventCompleted)) != 1 {
			t.Fatalf("turn %d did not complete: %s", turn, c.body.String())
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("3 streamed turns dialled upstream %d times, want 1", n)
	}
}

// A stream cut mid-item still closes what it opened: each output_item.added has its
// output_item.done before response.failed.
func TestACutStreamClosesItsOpenItemsBeforeResponseFailed(t *testing.T) {
	h := newTurnHarness(t, nil)
	for _, cut := range []int{5, 8} {
		c := h.newClient()
		h.serve(t.Context(), c, fmt.Sprintf(`{"model":"openai/gpt-oss-sim?cut_after=%d","input":"hi","stream":true}`, cut))
		added, done := len(c.events(wire.EventItemAdded)), len(c.events(wire.EventItemDone))
		if added == 0 || added != done || len(c.events(wire.EventFailed)) != 1 {
			t.Fatalf("cut after %d: %d items added, %d done, in %s", cut, added, done, c.body.String())
		}
		if failed := strings.Index(c.body.String(), "event: response.failed"); strings.LastIndex(c.body.String(), "event: response.output_item.done") > failed {
			t.Fatalf("cut after %d: an item closed after response.failed", cut)
		}
	}
}
