// Package logtest is a slog handler for tests that keeps what was logged, so that a test can
// assert what a component logs (and what it never logs).
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Records is a slog handler that keeps each record as "LEVEL message key=value ..." (errors
// left out: their text is the component's business). Safe for concurrent use.
type Records struct {
	mu   sync.Mutex
	list []string
}

func (l *Records) Enabled(context.Context, slog.Level) bool { return true }
func (l *Records) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *Records) WithGroup(string) slog.Handler            { return l }

func (l *Records) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "error" {
			s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, s)
	return nil
}

// Snapshot is what has been logged so far.
func (l *Records) Snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}
