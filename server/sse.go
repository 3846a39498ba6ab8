package server

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
)

// The SSE writer: a POST's event stream, the engine.Sink of streamed HTTP turns and of
// GET ?stream=true.

var (
	_ engine.HeaderSink = (*sseWriter)(nil)
	_ engine.Dropper    = (*sseWriter)(nil)
)

// sseWriter serialises writes to a client stream: relayed events from the turn and keepalive
// comments from its ticker. Each call is one write and one flush.
type sseWriter struct {
	mu           sync.Mutex
	res          *echo.Response
	rc           *http.ResponseController
	writeTimeout time.Duration
	last         time.Time
	err          error
}

// newSSEWriter writes an event stream on res, each write within writeTimeout (0: none). Its
// flushes go to the connection's own writer, not through res: echo's Response.Flush drops the
// error of a flush, so a write that hit its deadline in the flush (where the bytes of a small
// event reach the connection) would go unseen, and the turn would learn of the dead client only
// from its cancelled context, as if the client had left (engine.Dropper).
func newSSEWriter(res *echo.Response, writeTimeout time.Duration) *sseWriter {
	return &sseWriter{res: res, rc: http.NewResponseController(res.Writer), writeTimeout: writeTimeout, last: time.Now()}
}

// SendHeaders sends the status line and headers now, before any event.
func (w *sseWriter) SendHeaders() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err = w.rc.Flush(); w.err == nil {
		w.last = time.Now()
	}
}

func (w *sseWriter) Write(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.writeTimeout > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.writeTimeout))
	}
	if _, err := w.res.Write(b); err != nil {
		w.err = err
		return err
	}
	if err := w.rc.Flush(); err != nil {
		w.err = err
		return err
	}
	w.last = time.Now()
	return nil
}

// Dropped reports whether a write hit its deadline (WriteTimeout): the client stopped reading
// (engine.Dropper).
func (w *sseWriter) Dropped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ne net.Error
	return errors.Is(w.err, os.ErrDeadlineExceeded) || errors.As(w.err, &ne) && ne.Timeout()
}

func (w *sseWriter) Keepalive() error { return w.Write([]byte(": keepalive\n\n")) }

func (w *sseWriter) IdleSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}
