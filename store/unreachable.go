package store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// Unreachable reports whether err is the database connection failing (refused, reset, cut,
// timed out on the network) rather than the database answering with an error. The server answers
// such a request 503 store_unavailable, which clients retry, instead of a 500 (docs/errors.md).
// A context's deadline or cancellation is not: it also satisfies net.Error, but says nothing of
// the connection.
func Unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE)
}
