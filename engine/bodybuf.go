package engine

import "sync"

// bufPool is where turns get the buffers of vLLM-bound request bodies (rehydrate.Params.Buf)
// and give them back: a sync.Pool (newBodyBufs); tests put a deterministic one in its place.
//
// A continuation of a long chain builds a body of megabytes; in fresh memory each of its pages
// is zeroed and faulted in on first touch, which on the reference machine cost 6–25 ms of
// system time per 1.8 MB body, more than all of the turn's own work (docs/scaling.md, "What
// bounds the figures"). A buffer goes back only from a streamed turn, once the upstream
// transport has let go of it (upstream.Client.StreamLent); any other turn leaves its body to
// the GC.
type bufPool interface {
	Get() any
	Put(any)
}

func newBodyBufs() bufPool { return &sync.Pool{New: func() any { return new([]byte) }} }

// maxPooledBody bounds the buffers kept: a larger body is rare enough to allocate.
const maxPooledBody = 8 << 20

func (e *Engine) getBodyBuf() *[]byte { return e.bodyBufs.Get().(*[]byte) }

func (e *Engine) putBodyBuf(b *[]byte) {
	if cap(*b) <= maxPooledBody {
		*b = (*b)[:0]
		e.bodyBufs.Put(b)
	}
}
