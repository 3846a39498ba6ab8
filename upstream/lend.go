package upstream

import (
	"bytes"
	"io"
	"net/http"
	"sync"
)

// lentBody is a request body whose buffer the caller wants back (Client.StreamLent): the
// transport may close a request body after RoundTrip has returned (http.RoundTripper), and
// until it has, the buffer may still be being written to the connection. lentBody counts the
// readers the transport opens over the buffer (the request's Body, and each GetBody of a
// retried request) and calls release once, when the round trip has returned and every reader
// is closed.
type lentBody struct {
	b       []byte
	release func()

	mu       sync.Mutex
	open     int
	returned bool
	done     bool
}

// newLentBody sets req's Body, ContentLength and GetBody to readers of b.
func newLentBody(req *http.Request, b []byte, release func()) *lentBody {
	l := &lentBody{b: b, release: release}
	req.Body = l.reader()
	req.ContentLength = int64(len(b))
	req.GetBody = func() (io.ReadCloser, error) { return l.reader(), nil }
	return l
}

func (l *lentBody) reader() io.ReadCloser {
	l.mu.Lock()
	l.open++
	l.mu.Unlock()
	return &lentReader{Reader: bytes.NewReader(l.b), l: l}
}

// roundTripped records that the round trip has returned: no reader opens after it.
func (l *lentBody) roundTripped() {
	l.mu.Lock()
	l.returned = true
	l.settle()
}

// closed records that one reader was closed.
func (l *lentBody) closed() {
	l.mu.Lock()
	l.open--
	l.settle()
}

// settle releases the buffer when nothing can read it any more; it unlocks l.mu.
func (l *lentBody) settle() {
	fire := l.returned && l.open == 0 && !l.done
	if fire {
		l.done = true
	}
	l.mu.Unlock()
	if fire {
		l.release()
	}
}

// lentReader is one reader of a lentBody; its first Close counts.
type lentReader struct {
	*bytes.Reader
	l    *lentBody
	once sync.Once
}

func (r *lentReader) Close() error {
	r.once.Do(r.l.closed)
	return nil
}
