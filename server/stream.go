package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
	"go.opentelemetry.io/otel/trace"
)

// eventSink is where a streamed turn sends its client events: the SSE response of a POST
// (sseWriter) or a WebSocket connection (socketSink). The turn lifecycle is the same for both
// (docs/design.md §1); only the framing differs.
type eventSink interface {
	// write sends events as the accumulator frames them (one or more SSE frames, the last turn's
	// write ending with [DONE]); an error means the client is gone.
	write(frames []byte) error
	// keepalive proves the client is still there during upstream silence.
	keepalive() error
	// idleSince is the time of the last successful write.
	idleSince() time.Time
}

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

// openStream sends the headers of an event stream and returns its writer.
func (s *Server) openStream(c echo.Context) *sseWriter {
	res := c.Response()
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	res.WriteHeader(http.StatusOK)
	return &sseWriter{res: res, rc: http.NewResponseController(res), writeTimeout: s.cfg.WriteTimeout, last: time.Now()}
}

func (w *sseWriter) write(b []byte) error {
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

func (w *sseWriter) keepalive() error { return w.write([]byte(": keepalive\n\n")) }

func (w *sseWriter) idleSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// frameWriter takes a turn's client frames: the SSE writer itself, or a client face that
// writes its own frames in their place (a chat turn's chunks, server/chat.go).
type frameWriter interface {
	write(b []byte) error
}

var errClientGone = errors.New("server: client went away")

// streamTurn serves stream:true (and every WebSocket turn): reqCtx ends when the client goes away,
// open opens the client's stream once upstream has answered. Before that an upstream failure is
// returned (an error envelope or event); after it, only an in-band response.failed can report it
// (docs/style.md: the relay model).
func (s *Server) streamTurn(reqCtx context.Context, t *turn, open func() eventSink) error {
	ctx, cancel := context.WithCancelCause(reqCtx)
	defer cancel(nil)
	s.tel.activeStreams.Add(ctx, 1)
	defer s.tel.activeStreams.Add(context.WithoutCancel(ctx), -1)

	uctx, span := s.tel.tracer.Start(ctx, "upstream.stream")
	defer span.End()
	up, err := s.connect(ctx, uctx, t)
	defer t.keeper.Stop()
	if err != nil {
		return err
	}
	defer up.Close()

	w := open()
	// One helper goroutine per stream besides the keeper: keepalive comments during silence, and
	// shutdown past its deadline. Stopped and awaited when the stream ends.
	watchDone, watchExited := make(chan struct{}), make(chan struct{})
	defer func() { close(watchDone); <-watchExited }()
	go func() { defer close(watchExited); s.watchStream(ctx, cancel, w, watchDone) }()

	var out frameWriter = w
	if t.chat != nil {
		out = t.chat.sink(w)
	}
	acc := accumulator.New(s.accOptions(t))
	cause := s.relay(ctx, out, acc, up, span)
	_ = up.Close() // nothing more is read: a client that left stops the model at once
	return s.endStream(ctx, t, out, acc, cause)
}

// connect writes the in-progress record (with the input) concurrently with the upstream connect,
// then starts the turn's lease keeper. A failure before the stream opens is answered as an error
// envelope (and stored as a failed record when the record was written).
func (s *Server) connect(ctx, uctx context.Context, t *turn) (*upstream.Stream, error) {
	began := s.begin(ctx, t)
	start := time.Now()
	up, upErr := s.upstream.Stream(uctx, t.body)
	s.tel.upstreamLatency.Record(ctx, time.Since(start).Seconds())
	if err := <-began; err != nil {
		if up != nil {
			_ = up.Close()
		}
		s.releaseConversation(t)
		return nil, err
	}
	t.leased = t.req.Store
	if t.req.Store {
		t.events = &eventLog{}
	}
	t.keeper = s.startKeeper(t)
	if upErr == nil {
		return up, nil
	}
	if ctx.Err() != nil {
		_ = s.finish(ctx, t, &accumulator.Result{Status: wire.StatusCancelled,
			Error: goneError(ctx, "The client closed the request.")})
		return nil, ctx.Err()
	}
	return nil, s.failBeforeStream(ctx, t, upErr)
}

// relay feeds upstream events through the accumulator and writes the client events, one write
// per upstream event, until the upstream's terminal event, its end, or a failure (the cause).
func (s *Server) relay(ctx context.Context, w frameWriter, acc *accumulator.Accumulator, up *upstream.Stream, span trace.Span) error {
	start := time.Now()
	buf := acc.Start(make([]byte, 0, 4096))
	if err := w.write(buf); err != nil {
		return errClientGone
	}
	events, firstDelta := int64(0), false
	defer func() { s.tel.events.Add(context.WithoutCancel(ctx), events) }()
	for !acc.Done() {
		ev, err := up.Next()
		if errors.Is(err, io.EOF) {
			// vLLM ends a failed generation by closing the stream (docs/wire.md §6.5 quirk 5).
			return &upstream.Error{Kind: upstream.KindStreamBroken, Status: http.StatusOK,
				Message: "the stream ended before its terminal event"}
		}
		if err != nil {
			return err
		}
		if ev.Type == wire.EventError {
			return up.EventError(ev.Data) // mapped like the same error before the stream
		}
		events++
		if !firstDelta && ev.Type.IsDelta() {
			firstDelta = true
			s.tel.ttft.Record(ctx, time.Since(start).Seconds())
			span.AddEvent("first_token")
		}
		buf, err = acc.Feed(buf[:0], ev)
		if len(buf) > 0 && w.write(buf) != nil {
			return errClientGone
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// endStream closes the accumulator with the relay's cause, commits, and only then writes the
// terminal event and [DONE] (docs/design.md §1 invariant 2).
func (s *Server) endStream(ctx context.Context, t *turn, w frameWriter, acc *accumulator.Accumulator, cause error) error {
	reqCtx := context.WithoutCancel(ctx)
	// ctx ends when the client goes away (its request, or a failed keepalive write) or when
	// shutdown passes its deadline (cause errShutdown).
	clientGone := errors.Is(cause, errClientGone) || ctx.Err() != nil && !errors.Is(context.Cause(ctx), errShutdown)
	if cause != nil && !clientGone && errors.Is(context.Cause(ctx), errShutdown) {
		cause = errShutdown // the stream was cut by shutdown, not by upstream
	}
	buf, r := acc.Close(nil, cause)
	s.tel.droppedEvents.Add(reqCtx, int64(r.Dropped))
	switch obj := failureObject(cause); {
	case errors.Is(cause, errShutdown) && r.Error != nil:
		r.Error.Message = cutMessage(ctx)
	case obj != nil && r.Status == wire.StatusFailed && !clientGone:
		// The error object a non-streamed call gets for the same upstream failure
		// (docs/errors.md, "Streamed turns"): in response.failed and in the stored record.
		r.Error = obj
	}
	if clientGone {
		// The client left: keep what it received and record the response as cancelled (neither
		// the model's incompleteness nor a gateway failure).
		r.Status = wire.StatusCancelled
		r.Error = goneError(ctx, "The client closed the stream.")
		_ = s.finish(ctx, t, r)
		s.log.Info("client left mid-stream", "response_id", t.rec.ID)
		return nil
	}
	if len(buf) > 0 {
		_ = w.write(buf)
	}
	if cause != nil {
		s.log.Warn("upstream stream ended early", "response_id", t.rec.ID, "error", cause)
	}
	_ = s.finish(ctx, t, r) // on failure r is now failed: the client is told so
	buf = acc.Terminal(buf[:0], r)
	buf = append(buf, wire.DoneFrame...)
	_ = w.write(buf)
	return nil
}

var (
	errShutdown    = errors.New("server: gateway shutting down")
	errSyncTimeout = errors.New("server: non-streamed upstream call timed out")
)

// watchStream writes keepalive comments during silence and cuts the stream when shutdown passes
// its deadline, until done closes. It does no store work: the lease keeper renews leases on its
// own goroutine, so a blocked client write cannot delay them.
func (s *Server) watchStream(ctx context.Context, cancel context.CancelCauseFunc, w eventSink, done <-chan struct{}) {
	tick := min(s.cfg.KeepAlive/2, time.Second)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-s.stop:
			cancel(errShutdown)
			return
		case now := <-ticker.C:
			if now.Sub(w.idleSince()) >= s.cfg.KeepAlive {
				if w.keepalive() != nil {
					cancel(errClientGone)
					return
				}
			}
		}
	}
}

func conversationNotFound(id string) error {
	return wire.NotFound("conversation", "Conversation with id '%s' not found.", id)
}
