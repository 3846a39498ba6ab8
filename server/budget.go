package server

import (
	"io"
	"net/http"

	"golang.org/x/sync/semaphore"

	"github.com/respgate/respgate/wire"
)

// The budget of request body bytes in flight (Config.MaxBodyBytesInFlight) is charged in
// bodyLimitMiddleware (routes.go) and released when the handler returns.

// errOverloaded answers a request whose body does not fit in the in-flight budget. The error
// handler adds Retry-After to every 503.
var errOverloaded = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "server_overloaded",
	Message: "The gateway is holding as many request bytes as it accepts at once; retry shortly."}

// bodyChunk is the step in which a body of unknown length (chunked) is charged to the budget.
const bodyChunk = 64 << 10

// chargedBody charges a body of unknown length to the budget as it is read, bodyChunk at a time.
// Not safe for concurrent use (a body is read by its handler's goroutine).
type chargedBody struct {
	io.ReadCloser
	budget  *semaphore.Weighted
	read    int64
	charged int64
}

func (b *chargedBody) Read(p []byte) (int, error) {
	if len(p) > bodyChunk {
		p = p[:bodyChunk]
	}
	if b.read+int64(len(p)) > b.charged {
		if !b.budget.TryAcquire(bodyChunk) {
			return 0, errOverloaded
		}
		b.charged += bodyChunk
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}
