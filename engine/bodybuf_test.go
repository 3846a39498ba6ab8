package engine

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// holdingUpstream answers every request with a recorded stream; the first request's body it
// keeps unread and open, as a transport still writing it would, until the test reads it.
type holdingUpstream struct {
	stream []byte
	held   io.ReadCloser
}

func (h *holdingUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.held == nil {
		h.held = r.Body
	} else {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return sseResponse(r, h.stream), nil
}

// stackPool is a bufPool that always hands out the buffer given back last.
type stackPool struct{ free []any }

func (p *stackPool) Get() any {
	if len(p.free) == 0 {
		return new([]byte)
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return b
}

func (p *stackPool) Put(b any) { p.free = append(p.free, b) }

// A streamed turn's body buffer is reused (server/bodybuf.go) only once the upstream transport
// has closed the body: a transport may still be sending it after the turn ended.
func TestABodyIsNotReusedWhileTheTransportHoldsIt(t *testing.T) {
	h := &holdingUpstream{stream: recordSimStream(t, `{"model":"openai/gpt-oss-sim?quirks=none&tokens=4","input":"hi","stream":true}`)}
	s := engineOver(t, h)
	s.bodyBufs = &stackPool{} // hands out the buffer given back last, every time
	turn := func(input string) {
		t.Helper()
		code, body := call(t, s, `{"model":"openai/gpt-oss-sim","input":"`+input+`","stream":true,"store":false}`)
		if code != http.StatusOK || !strings.Contains(body, "response.completed") {
			t.Fatalf("turn %q: %d %s", input, code, body)
		}
	}
	turn(strings.Repeat("first ", 100))
	turn(strings.Repeat("later ", 100))
	if len(s.bodyBufs.(*stackPool).free) != 1 {
		t.Fatalf("%d buffers given back after the second turn, want its own", len(s.bodyBufs.(*stackPool).free))
	}
	sent, err := io.ReadAll(h.held)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.held.Close()
	if !bytes.Contains(sent, []byte("first first")) || bytes.Contains(sent, []byte("later")) {
		t.Fatalf("the first turn's body changed while the transport held it: %.200s", sent)
	}
}

// A frame batch takes its buffer only when a frame is built and gives it back, emptied, once
// written, so a stream between upstream reads holds none.
func TestFrameBatchHoldsABufferOnlyWhileItHasFrames(t *testing.T) {
	var f frameBatch
	f.release() // nothing held: a no-op
	b := f.buf()
	if b == nil || f.b != b || f.buf() != b {
		t.Fatal("buf does not keep one buffer for the batch")
	}
	*b = append(*b, "event: x\n\n"...)
	f.release()
	if f.b != nil {
		t.Fatal("the batch still holds its buffer after release")
	}
	if len(*b) != 0 {
		t.Fatalf("a released buffer keeps %d bytes of frames", len(*b))
	}
	if got := f.buf(); len(*got) != 0 {
		t.Fatalf("a new batch starts with %q", *got)
	}
	f.release()
}
