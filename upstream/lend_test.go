package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
			body := []byte(`{"model":"m","input":"` + strings.Repeat("hi ", smallBody/3) + `","stream":true}`) // lent: over smallBody
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

// writeCounter counts the writes made to the connections it dialed.
type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (w writeCounter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(p)
}

// A small body is sent as a copy that net/http knows to be in memory, so the request is one write
// (one segment for the upstream to read), and the caller's buffer is its own again at once; a
// longer one is lent: the headers, then the body.
func TestStreamLentSendsASmallBodyAsACopyInOneWrite(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name       string
		size       int
		wantWrites int32
	}{
		{name: "small", size: smallBody, wantWrites: 1},
		{name: "larger", size: smallBody + 1, wantWrites: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var writes atomic.Int32
			tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				return writeCounter{c, &writes}, err
			}}
			defer tr.CloseIdleConnections()
			c, err := New(Config{BaseURL: srv.URL + "/v1", Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			body := bytes.Repeat([]byte("x"), tc.size)
			st, err := c.StreamLent(t.Context(), body, func() {})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if b := <-got; b != string(body) {
				t.Fatalf("the upstream read %d bytes other than those sent", len(b))
			}
			if n := writes.Load(); n != tc.wantWrites {
				t.Errorf("the request took %d writes, want %d", n, tc.wantWrites)
			}
		})
	}
}

// lateReader is a transport that answers at once and leaves the request body to be read after
// RoundTrip has returned, as http.RoundTripper allows.
type lateReader struct{ body chan io.ReadCloser }

func (lr *lateReader) RoundTrip(r *http.Request) (*http.Response, error) {
	lr.body <- r.Body
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader("data: [DONE]\n\n")), ContentLength: -1, Request: r}, nil
}

// A small body is the caller's again when the call returns: what the transport reads later is
// the copy, whatever the caller has since written into its buffer.
func TestStreamLentGivesASmallBodyBackAtOnceAndSendsItsCopy(t *testing.T) {
	lr := &lateReader{body: make(chan io.ReadCloser, 1)}
	c, err := New(Config{BaseURL: "http://upstream.invalid/v1", Transport: lr})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","input":"hi","stream":true}`)
	want := string(body)
	released := 0
	st, err := c.StreamLent(t.Context(), body, func() {
		released++
		copy(body, bytes.Repeat([]byte("y"), len(body))) // the caller reuses its buffer
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if released != 1 {
		t.Fatalf("the small body came back %d times when the call returned, want once", released)
	}
	if b, _ := io.ReadAll(<-lr.body); string(b) != want {
		t.Fatalf("the transport read %q, want the body as sent, %q", b, want)
	}
}
