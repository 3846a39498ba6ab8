package upstream

import (
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestEventsDecodesAcrossReads: events that straddle reads of the body decode as whole ones.
func TestEventsDecodesAcrossReads(t *testing.T) {
	t.Parallel()
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, "http://127.0.0.1:1", func(cfg *Config) { cfg.MaxEventBytes = tc.maxEvent })
			want := outcome{Events: tc.want, End: tc.end}
			// In chunks of 7 bytes, so events straddle reads.
			got := drain(t, memStream(c, &chunkReader{data: []byte(tc.body), sizes: []int{7}}))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Events:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestEventsTwiceEndsClosed: a stream is read once; a second Events, after a first that
// stopped early, yields only ErrClosed.
func TestEventsTwiceEndsClosed(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	body := "data: " + delta + "\n\ndata: " + delta + "\n\n"
	s := memStream(c, strings.NewReader(body))
	for _, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if o := drain(t, s); len(o.Events) != 0 || o.End != "closed" {
		t.Errorf("Events twice: %+v, want no event and closed", o)
	}
}

// TestBeforeReadRunsOncePerReadAfterItsEvents: the hook runs before each read of the body, so
// the events decoded from one read are all yielded before it runs again (a relay flushes them in
// one write), and each event is yielded before the read that follows it (none is held back).
func TestBeforeReadRunsOncePerReadAfterItsEvents(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	frame := "data: " + delta + "\n\n"
	// Three reads: two events, one event, the end.
	body := &chunkReader{data: []byte(frame + frame + frame), sizes: []int{2 * len(frame), len(frame)}}
	s := memStream(c, body)
	defer s.Close()
	var log []string
	s.BeforeRead(func() { log = append(log, "read") })
	for _, err := range s.Events() {
		if err != nil {
			log = append(log, endName(err))
			break
		}
		log = append(log, "event")
	}
	want := []string{"read", "event", "event", "read", "event", "read", "eof"}
	if !slices.Equal(log, want) {
		t.Errorf("got %v, want %v", log, want)
	}
}

// TestFinishHandsTheConnectionBack: a stream read to its terminal event and finished (not read
// to its end by the caller) leaves its connection in the pool.
func TestFinishHandsTheConnectionBack(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(sseHandler("data: "+delta+"\n\n", "data: "+created+"\n\n"))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, nil)
	for range 3 {
		s, err := c.Stream(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, err := range s.Events() {
			if err != nil {
				t.Fatalf("event %d: %v", n, err)
			}
			if n++; n == 2 { // the caller's terminal event: it reads no further
				break
			}
		}
		if err := s.Finish(time.Minute); err != nil {
			t.Fatal(err)
		}
		if o := drain(t, s); len(o.Events) != 0 || (o.End != "closed" && o.End != "eof") {
			t.Fatalf("Events after Finish: %+v, want no event and the end", o)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 finished streams, want 1", n)
	}
}
