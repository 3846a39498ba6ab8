package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// lateCloser is a transport that answers a stream at once and closes the request body only when
// told to, after RoundTrip has returned, as http.RoundTripper allows. With retry it first
// rewinds the request once (GetBody), closing the first reader, as net/http does before
// retrying on another connection.
type lateCloser struct {
	retry bool
	close chan struct{} // closed by the test: the transport lets go of the body
	read  chan string   // what the transport read of the body
	err   error         // answer this error instead of a stream
}

func (lc *lateCloser) RoundTrip(r *http.Request) (*http.Response, error) {
	body := r.Body
	if lc.retry {
		_ = body.Close()
		var err error
		if body, err = r.GetBody(); err != nil {
			return nil, err
		}
	}
	b, _ := io.ReadAll(body)
	lc.read <- string(b)
	go func() { // the transport's own writer, which the test stops and waits for through close
		<-lc.close
		_ = body.Close()
	}()
	if lc.err != nil {
		return nil, lc.err
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader("data: [DONE]\n\n")), ContentLength: -1, Request: r}, nil
}

func TestStreamLentReleasesTheBodyOnlyOnceTheTransportLetGoOfIt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry bool
		err   error
	}{
		{name: "answered"},
		{name: "retried on another reader", retry: true},
		{name: "failed", err: errors.New("connection reset")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := &lateCloser{retry: tc.retry, close: make(chan struct{}), read: make(chan string, 1), err: tc.err}
			c, err := New(Config{BaseURL: "http://upstream.invalid/v1", Transport: lc})
			if err != nil {
				t.Fatal(err)
			}
			released := make(chan struct{}, 2)
			body := []byte(`{"model":"m","input":"hi","stream":true}`)
			st, err := c.StreamLent(t.Context(), body, func() { released <- struct{}{} })
			if got := <-lc.read; got != string(body) {
				t.Fatalf("the transport read %q, want %q", got, body)
			}
			if tc.err == nil && err != nil {
				t.Fatal(err)
			}
			if tc.err != nil && err == nil {
				t.Fatal("a failed round trip returned a stream")
			}
			if st != nil {
				st.Close()
			}
			if len(released) != 0 {
				t.Fatal("released while the transport still held the body")
			}
			close(lc.close)
			<-released // the transport's writer closes the body on its own goroutine
			if st == nil {
				return
			}
			st.Close() // a second Close of the stream releases nothing more
			if len(released) != 0 {
				t.Fatal("released twice")
			}
		})
	}
}

func TestStreamLentReleasesAtOnceWhenNothingIsSent(t *testing.T) {
	c, err := New(Config{BaseURL: "http://upstream.invalid/v1", Transport: &lateCloser{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var released atomic.Int32
	if _, err := c.StreamLent(ctx, []byte(`{}`), func() { released.Add(1) }); err == nil {
		t.Fatal("a cancelled call returned a stream")
	}
	if n := released.Load(); n != 1 {
		t.Fatalf("a call that sent nothing released its body %d times, want once", n)
	}
}
