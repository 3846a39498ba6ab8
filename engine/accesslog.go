package engine

import (
	"context"
	"log/slog"
	"sync"

	"github.com/respgate/respgate/wire"
)

// A foreground turn is logged in one line: its commit hands the stored response's id, status
// and sizes to the request's access line (logMiddleware) instead of writing a line of its own,
// since each line is a write(2) and a second one per turn cost a tenth of a non-streamed turn's
// CPU (docs/scaling.md). A commit the access line cannot carry logs "response stored" itself:
// a background worker's, a WebSocket turn's (its access line is written when the socket
// closes), and one that lands after its request was logged.

// StoredLog is what a request's commit adds to its access line. Safe for concurrent use.
type StoredLog struct {
	mu     sync.Mutex
	closed bool // the access line is written: later commits log their own line
	set    bool
	attrs  [5]slog.Attr
}

type storedLogKey struct{}

// WithStoredLog gives ctx a StoredLog for the request's access line.
func WithStoredLog(ctx context.Context, l *StoredLog) context.Context {
	return context.WithValue(ctx, storedLogKey{}, l)
}

// Take closes l and returns the attributes a commit left, if any.
func (l *StoredLog) Take() []slog.Attr {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if !l.set {
		return nil
	}
	return l.attrs[:]
}

// logStored logs a committed response: on its request's access line when ctx carries one still
// open and not yet used, else as a line of its own.
func (e *Engine) logStored(ctx context.Context, id string, status wire.Status, input, output, events int) {
	attrs := [5]slog.Attr{slog.String("response_id", id), slog.String("response_status", string(status)),
		slog.Int("input_items", input), slog.Int("output_items", output), slog.Int("events", events)}
	if l, ok := ctx.Value(storedLogKey{}).(*StoredLog); ok {
		l.mu.Lock()
		if !l.closed && !l.set {
			l.attrs, l.set = attrs, true
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "response stored", attrs[:]...)
}
