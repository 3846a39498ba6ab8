package store

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// Unreachable reports whether err is the database connection failing (refused, reset, cut,
// timed out on the network) rather than the database answering with an error. The server answers
// such a request 503 store_unavailable, which clients retry, instead of a 500 (docs/errors.md).
func Unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE)
}
