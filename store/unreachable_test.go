package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestUnreachableIsTheConnectionNotTheDatabaseNorADeadline(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"refused", fmt.Errorf("connect: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), true},
		{"cut mid-message", fmt.Errorf("read message: %w", io.ErrUnexpectedEOF), true},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true},
		{"a database error", errors.New("ERROR: out of shared memory (SQLSTATE 53200)"), false},
		{"not found", ErrNotFound, false},
		{"a deadline (a net.Error too)", fmt.Errorf("commit: %w", context.DeadlineExceeded), false},
		{"cancelled", fmt.Errorf("commit: %w", context.Canceled), false},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
