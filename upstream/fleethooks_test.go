package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// OnRelease runs once when the stream ends, whichever way, and at once when it already has: a
// fleet counts a replica's streams in flight with it.
func TestOnReleaseRunsOnceAtTheStreamsEnd(t *testing.T) {
	srv := sseServer(t, "event: a\ndata: {\"type\":\"a\"}\n\n")
	c := newTestClient(t, srv.URL, nil)
	for _, end := range []string{"eof", "close", "cancel"} {
		t.Run(end, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			s, err := c.Stream(ctx, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			s.OnRelease(func() { n++ })
			switch end {
			case "eof":
				drain(t, s)
			case "close":
				_ = s.Close()
			case "cancel":
				cancel()
				for _, err := range s.Events() { // ends with the context's error
					if err != nil {
						break
					}
				}
			}
			_ = s.Close()
			if n != 1 {
				t.Errorf("OnRelease ran %d times, want 1", n)
			}
			late := 0
			s.OnRelease(func() { late++ })
			if late != 1 {
				t.Errorf("OnRelease after the end ran %d times, want 1 (at once)", late)
			}
		})
	}
}

// WithHeader adds one header to a call, and never replaces the Client's own.
func TestWithHeaderAddsAHeaderButNotTheClientsOwn(t *testing.T) {
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, nil)
	ctx := WithHeader(t.Context(), "x-session-id", "tok")
	ctx = WithHeader(ctx, "Authorization", "Bearer stolen") // ignored
	if _, err := c.Models(ctx); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h.Get("X-Session-Id") != "tok" || h.Get("Authorization") != "Bearer "+testKey {
		t.Errorf("headers %v", h)
	}
	if _, err := c.Models(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h.Get("X-Session-Id") != "" {
		t.Errorf("a call without the header sent %q", h.Get("X-Session-Id"))
	}
}
