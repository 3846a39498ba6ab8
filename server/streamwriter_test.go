package server

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
)

// deadlineWriter is a client connection as an sseWriter sees it: it records the write deadlines
// set on it, and fails every write once failWrites is set.
type deadlineWriter struct {
	header     http.Header
	body       bytes.Buffer
	deadlines  []time.Time
	failWrites bool
}

func (d *deadlineWriter) Header() http.Header { return d.header }
func (d *deadlineWriter) WriteHeader(int)     {}
func (d *deadlineWriter) Flush()              {}
func (d *deadlineWriter) Write(b []byte) (int, error) {
	if d.failWrites {
		return 0, errors.New("connection reset by peer")
	}
	return d.body.Write(b)
}

func (d *deadlineWriter) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

func newDeadlineSSE(writeTimeout time.Duration) (*sseWriter, *deadlineWriter) {
	d := &deadlineWriter{header: http.Header{}}
	return newSSEWriter(echo.NewResponse(d, echo.New()), writeTimeout), d
}

// flushFailWriter is a connection whose flush fails as net/http's does when the bytes it pushes
// to a client that stopped reading hit the write deadline.
type flushFailWriter struct {
	deadlineWriter
	flushErr error
}

func (f *flushFailWriter) FlushError() error { return f.flushErr }

// A write whose flush hits the write deadline fails, and the writer reports the client dropped:
// the error reaches it through echo's Response, whose own Flush would drop it.
func TestSSEWriterSeesAFlushThatHitItsDeadline(t *testing.T) {
	f := &flushFailWriter{deadlineWriter: deadlineWriter{header: http.Header{}}}
	w := newSSEWriter(echo.NewResponse(f, echo.New()), time.Second)
	if err := w.Write([]byte("event: a\n\n")); err != nil {
		t.Fatal(err)
	}
	if w.Dropped() {
		t.Fatal("dropped after a write that went through")
	}
	f.flushErr = &net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded}
	if err := w.Write([]byte("event: b\n\n")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write whose flush hit its deadline: %v, want the deadline error", err)
	}
	if !w.Dropped() {
		t.Fatal("a flush that hit its deadline is not reported as a dropped client")
	}
}

// The SSE writer's idle clock (what keepalives count from) moves at the header flush and at each
// successful write, never at a failed one; each write gets its own deadline, WriteTimeout from
// its start (none when WriteTimeout is 0); after a failed write every later one fails the same
// way without touching the connection.
func TestSSEWriterKeepsItsIdleClockDeadlinesAndFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, d := newDeadlineSSE(30 * time.Second)
		time.Sleep(5 * time.Second)
		w.SendHeaders()
		if got := w.IdleSince(); !got.Equal(time.Now()) {
			t.Fatalf("idle since %s after the header flush at %s", got, time.Now())
		}
		time.Sleep(5 * time.Second)
		if err := w.Write([]byte("event: a\n\n")); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if !w.IdleSince().Equal(now) || len(d.deadlines) != 1 || !d.deadlines[0].Equal(now.Add(30*time.Second)) {
			t.Fatalf("after a write: idle since %s, deadlines %v; want %s and one deadline 30s on", w.IdleSince(), d.deadlines, now)
		}
		time.Sleep(time.Second)
		d.failWrites = true
		err := w.Write([]byte("event: b\n\n"))
		if err == nil || !w.IdleSince().Equal(now) {
			t.Fatalf("a failed write: %v, idle since %s (want the last good write's %s)", err, w.IdleSince(), now)
		}
		d.failWrites = false
		if again := w.Write([]byte("event: c\n\n")); !errors.Is(again, err) || strings.Contains(d.body.String(), "event: c") {
			t.Fatalf("a write after a failure: %v, body %q; want the first error and nothing written", again, d.body.String())
		}

		untimed, ud := newDeadlineSSE(0)
		if err := untimed.Write([]byte("event: a\n\n")); err != nil || len(ud.deadlines) != 0 {
			t.Fatalf("WriteTimeout 0: %v, deadlines %v; want none", err, ud.deadlines)
		}
	})
}

// The stream metrics: every relayed upstream event counts, and a finished stream is no longer
// active.
func TestStreamMetricsCountRelayedEventsAndNoStreamStaysActive(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	metric := func(name string) string {
		_, m := call(t, s, http.MethodGet, "/metrics", "")
		for line := range strings.Lines(m) {
			if f := strings.Fields(line); len(f) == 2 && f[0] == name {
				return f[1]
			}
		}
		return ""
	}
	for turn := range 2 {
		if code, body := call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","input":"hi","stream":true}`); code != http.StatusOK || !strings.Contains(body, "response.completed") {
			t.Fatalf("turn %d: %d %s", turn, code, body)
		}
		if active := metric("respgate_stream_active"); active != "0" {
			t.Fatalf("after turn %d respgate_stream_active is %q, want 0", turn, active)
		}
	}
	if n := metric("respgate_stream_events_total"); n == "" || n == "0" || strings.HasPrefix(n, "-") {
		t.Fatalf("respgate_stream_events_total is %q after two streams", n)
	}
}
