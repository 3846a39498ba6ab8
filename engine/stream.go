package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
	"go.opentelemetry.io/otel/trace"
)

// Sink is where a streamed turn sends its client events: the SSE response of a POST, a
// WebSocket lane, Chat Completions chunks, or (background turns) the event log. The turn
// lifecycle is the same for all (docs/design.md §1); only the framing differs.
type Sink interface {
	// Write sends events as the accumulator frames them (one or more SSE frames, the last
	// turn's write ending with [DONE]); an error means the client is gone.
	Write(frames []byte) error
	// Keepalive proves the client is still there during upstream silence.
	Keepalive() error
	// IdleSince is the time of the last successful write.
	IdleSince() time.Time
}

// HeaderSink is a Sink whose transport has a status line (HTTP): it is opened as soon as
// upstream has answered, before the first event, and a failure after that is told in-band
// (failOpenStream).
type HeaderSink interface {
	Sink
	SendHeaders()
}

// frameWriter takes a turn's client frames.
type frameWriter interface {
	Write(b []byte) error
}

// ErrClientGone is the cause a front door cancels a turn with when its client went away.
var ErrClientGone = errors.New("engine: client went away")

// streamTurn serves stream:true (and every WebSocket turn): reqCtx ends when the client goes away,
// open opens the client's stream once upstream has answered. Before that an upstream failure is
// returned (an error envelope or event); after it, only an in-band response.failed can report it
// (docs/style.md: the relay model).
//
// Goroutines: the turn runs on its caller's (the HTTP handler's, or the WebSocket loop's), which
// also reads the upstream stream (upstream.Stream.Events, no coroutine). Keepalives, the shutdown
// cut and the lease keeper are timers whose callbacks run only when due, each stopped and awaited
// before the turn returns (issue 25: at most 3 goroutines per open stream, with net/http's own).
func (e *Engine) streamTurn(reqCtx context.Context, t *Turn, open func() Sink) error {
	ctx, cancel := context.WithCancelCause(reqCtx)
	defer cancel(nil)
	e.tel.ActiveStreams.Add(ctx, 1)
	defer e.tel.ActiveStreams.Add(context.WithoutCancel(ctx), -1)

	uctx, span := e.tel.Tracer.Start(ctx, "upstream.stream")
	defer span.End()
	// When upstream has answered before the in-progress record is written, the client's stream
	// opens at once (its status line and headers), and response.created, which names the id,
	// waits for the record (issue 25 item 3: the record never sits on the time to first byte).
	var w Sink
	up, err := e.connect(ctx, uctx, t, func() {
		w = open()
		if hs, ok := w.(HeaderSink); ok {
			hs.SendHeaders()
		}
	})
	defer t.keeper.Stop()
	defer e.appender.remove(t)
	if err != nil {
		if _, ok := w.(HeaderSink); ok {
			return e.failOpenStream(w, err)
		}
		return err
	}
	defer up.Close()

	if w == nil {
		w = open()
	}
	watch := e.watchStream(cancel, w)
	defer watch.stop()

	var out frameWriter = w
	acc := accumulator.New(e.accOptions(t))
	cause := e.relay(ctx, cancel, out, acc, up, span, t.steer)
	if cause != nil {
		_ = up.Close() // nothing more is read: a client that left stops the model at once
	}
	err = e.endStream(ctx, t, out, acc, cause)
	if cause == nil {
		// The model has finished: read the body's end so the connection is reused (after the
		// client has its terminal event, so this never delays it).
		_ = up.Finish(upstreamDrainWait)
	}
	return err
}

// upstreamDrainWait bounds the wait for the end of an upstream body after its terminal event.
const upstreamDrainWait = 250 * time.Millisecond

// relayBufs pools the relay's frame buffers (issue 25: no per-turn or per-event buffer growth
// once warm); buffers grown past maxPooledRelayBuf are left to the GC.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

const maxPooledRelayBuf = 256 << 10

// frameBatch holds the frames built from one upstream read until they are written. Its buffer is
// taken from relayBufs for the batch and given back once the batch is written, so a stream that
// waits for its next token (a paced model: most of its life) holds none (issue 25: memory per
// open stream).
type frameBatch struct{ b *[]byte }

// buf is the batch's buffer, taken from the pool when the batch has none.
func (f *frameBatch) buf() *[]byte {
	if f.b == nil {
		f.b = relayBufs.Get().(*[]byte)
	}
	return f.b
}

// release gives the buffer back; the batch must have been written (or dropped).
func (f *frameBatch) release() {
	if f.b != nil && cap(*f.b) <= maxPooledRelayBuf {
		*f.b = (*f.b)[:0]
		relayBufs.Put(f.b)
	}
	f.b = nil
}

// connect writes the in-progress record (with the input) concurrently with the upstream connect,
// then starts the turn's lease keeper. A failure before the stream opens is answered as an error
// envelope (and stored as a failed record when the record was written). answered runs when
// upstream has answered 2xx while the record is still being written.
func (e *Engine) connect(ctx, uctx context.Context, t *Turn, answered func()) (*upstream.Stream, error) {
	began := e.begin(ctx, t)
	start := time.Now()
	var release func()
	if buf := t.bodyBuf; buf != nil {
		t.bodyBuf = nil
		release = func() { e.putBodyBuf(buf) }
	}
	up, served, upErr := e.upstream.StreamLent(uctx, e.route(t), t.body, release)
	setServed(&t.rec, served)
	e.tel.UpstreamLatency.Record(ctx, time.Since(start).Seconds())
	var beginErr error
	select {
	case beginErr = <-began:
	default:
		if upErr == nil {
			answered()
		}
		beginErr = <-began
	}
	if err := beginErr; err != nil {
		if up != nil {
			_ = up.Close()
		}
		return nil, err
	}
	t.leased = t.store
	if t.store {
		t.events = &eventLog{}
		if !t.claimed {
			e.appender.add(t) // a background turn's keeper flushes its log (startKeeper)
		}
	}
	t.keeper = e.startKeeper(t)
	if upErr == nil {
		return up, nil
	}
	if ctx.Err() != nil {
		_ = e.finish(ctx, t, endedBeforeAnswer(ctx))
		return nil, ctx.Err()
	}
	return nil, e.failBeforeStream(ctx, t, upErr)
}

// endedBeforeAnswer is the record of a turn whose context ended while it waited for upstream's
// answer: failed with the true reason when shutdown (River's hard stop of a background turn, cause
// ErrShutdown) or a background time limit cut it, as a cut mid-stream is (endStream); cancelled
// otherwise, with no error for a cancel and client_disconnected for a client that left. Nobody
// cancelled a turn cut by shutdown: it is not stored cancelled (docs/background.md, "Shutdown").
func endedBeforeAnswer(ctx context.Context) *accumulator.Result {
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		return &accumulator.Result{Status: wire.StatusFailed, Error: &wire.ErrorObject{Code: "server_error", Message: cutMessage(ctx)}}
	}
	return &accumulator.Result{Status: wire.StatusCancelled, Error: goneError(ctx, "The client closed the request.")}
}

// failOpenStream answers a turn whose client stream opened (upstream had answered) before its
// in-progress record failed to be written: no response exists and its id was never sent, so the
// stream carries only an error event, OpenAI's streaming error shape with the envelope's code,
// message and param, then [DONE] (docs/errors.md, "Streamed turns").
func (e *Engine) failOpenStream(w Sink, err error) error {
	ae := KnownAPIError(err)
	if ae == nil {
		ae = e.Unexpected(err)
	}
	code := ae.Code
	if code == "" {
		code = string(ae.Type)
	}
	ev := struct {
		Type           string  `json:"type"`
		Code           string  `json:"code"`
		Message        string  `json:"message"`
		Param          *string `json:"param"`
		SequenceNumber int     `json:"sequence_number"`
	}{Type: "error", Code: code, Message: ae.Message}
	if ae.Param != "" {
		ev.Param = &ae.Param
	}
	data, jerr := json.Marshal(ev)
	if jerr != nil {
		return jerr
	}
	frame := wire.Event{Type: wire.EventError, Data: data}.AppendSSE(nil)
	_ = w.Write(append(frame, wire.DoneFrame...))
	return nil
}

// relay feeds upstream events through the accumulator and writes the client events until the
// upstream's terminal event, its end, or a failure (the cause). The events decoded from one read
// of the upstream body go to the client in one write and flush, made before the next read (which
// may wait): a lone event is written as soon as it is decoded, a burst in one write
// (httputil.ReverseProxy flushes the same way, issue 25). A failed write cancels the turn's
// context (cancel), which also ends a read waiting on upstream.
//
// steer (nil: none) cuts the stream before the first upstream event read at an output-item
// boundary once a cut was asked (ErrSteered).
func (e *Engine) relay(ctx context.Context, cancel context.CancelCauseFunc, w frameWriter, acc *accumulator.Accumulator,
	up *upstream.Stream, span trace.Span, steer *Steer) error {
	start := time.Now()
	var werr error
	var batch frameBatch
	defer batch.release()
	flush := func() {
		if batch.b != nil && len(*batch.b) > 0 && werr == nil {
			if werr = w.Write(*batch.b); werr != nil {
				cancel(ErrClientGone)
			}
		}
		batch.release()
	}
	up.BeforeRead(flush)
	b := batch.buf()
	*b = acc.Start(*b)
	flush()
	if werr != nil {
		return ErrClientGone
	}
	if steer != nil {
		steer.attach(cancel, acc.AtBoundary())
		defer steer.detach()
	}
	events, firstDelta := int64(0), false
	defer func() { e.tel.Events.Add(context.WithoutCancel(ctx), events) }()
	err := func() error {
		for ev, err := range up.Events() {
			if werr != nil {
				return ErrClientGone
			}
			if steer.Steered() {
				return ErrSteered // cut at a boundary while the upstream was silent
			}
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
				e.tel.Ttft.Record(ctx, time.Since(start).Seconds())
				span.AddEvent("first_token")
			}
			b := batch.buf()
			feed := func() { *b, err = acc.Feed(*b, ev) }
			if steer == nil {
				feed()
			} else if steer.step(ev.Type.Terminal(), feed, acc.AtBoundary) {
				return ErrSteered
			}
			if err != nil {
				return err
			}
			if acc.Done() {
				return nil
			}
		}
		return nil
	}()
	if steer.Steered() {
		err = ErrSteered // however the read ended once the cut was made
	}
	flush()
	if werr != nil {
		return ErrClientGone
	}
	return err
}

// endStream closes the accumulator with the relay's cause, commits, and only then writes the
// terminal event and [DONE] (docs/design.md §1 invariant 2).
func (e *Engine) endStream(ctx context.Context, t *Turn, w frameWriter, acc *accumulator.Accumulator, cause error) error {
	reqCtx := context.WithoutCancel(ctx)
	// ctx ends when the client goes away (its request, or a failed keepalive write) or when
	// shutdown passes its deadline (cause ErrShutdown).
	// A stream cut by shutdown needs no renaming: the upstream read it ended wraps ctx's cause
	// (upstream.Error keeps it), so errors.Is(cause, ErrShutdown) holds below.
	clientGone := errors.Is(cause, ErrClientGone) ||
		ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrShutdown) && !errors.Is(context.Cause(ctx), ErrSteered)
	buf, r := acc.Close(nil, cause)
	e.tel.DroppedEvents.Add(reqCtx, int64(r.Dropped))
	steered := errors.Is(cause, ErrSteered) && !clientGone
	switch obj := failureObject(cause); {
	case steered:
		// Cut at an output-item boundary for steering: every item the client saw finished; the
		// response is incomplete, not failed (Steer).
		r.Status, r.Error, r.IncompleteDetails = wire.StatusIncomplete, nil, steeredDetails
	case errors.Is(cause, ErrShutdown) && r.Error != nil:
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
		if d, ok := w.(Dropper); ok && d.Dropped() && r.Error != nil {
			// Not a client that left: the gateway dropped one that stopped reading (issue 38
			// item 8).
			r.Error = &wire.ErrorObject{Code: CodeWriteTimeout, Message: MsgWriteTimeout}
		}
		_ = e.finish(ctx, t, r)
		e.log.Info("client left mid-stream", "response_id", t.rec.ID)
		return nil
	}
	if len(buf) > 0 {
		_ = w.Write(buf)
	}
	if cause != nil && !steered {
		e.log.Warn("upstream stream ended early", "response_id", t.rec.ID, "error", cause)
	}
	_ = e.finish(ctx, t, r) // on failure r is now failed: the client is told so
	buf = acc.Terminal(buf[:0], r)
	buf = append(buf, wire.DoneFrame...)
	_ = w.Write(buf)
	return nil
}

// Dropper is implemented by a Sink that can tell a client it dropped for not reading within the
// write timeout (a write that hit its deadline) from one that left.
type Dropper interface {
	// Dropped reports whether a write failed because the client did not take it in time.
	Dropped() bool
}

// The stored reason of a stream whose client the gateway dropped for not reading.
const (
	CodeWriteTimeout = "client_write_timeout"
	MsgWriteTimeout  = "The gateway dropped the client: it stopped reading the stream for longer than the write timeout."
)

var (
	ErrShutdown    = errors.New("engine: gateway shutting down")
	errSyncTimeout = errors.New("server: non-streamed upstream call timed out")
)

// streamWatch writes keepalive comments during silence and cuts the stream when shutdown passes
// its deadline. It holds no goroutine while it waits (issue 25): a timer due when the client has
// had nothing for KeepAlive, and a context.AfterFunc on the server's stop; their callbacks run on
// short-lived goroutines that stop waits for. It does no store work: the lease keeper renews
// leases on its own, so a blocked client write cannot delay them.
type streamWatch struct {
	keepAlive time.Duration
	w         Sink
	cancel    context.CancelCauseFunc
	unstop    func() bool // stops the AfterFunc on the engine's stop (nil: none)
	task      timerTask
}

func (e *Engine) watchStream(cancel context.CancelCauseFunc, w Sink) *streamWatch {
	sw := &streamWatch{keepAlive: e.cfg.KeepAlive, w: w, cancel: cancel}
	sw.task.start(sw.keepAlive, sw.keepalive)
	if e.stopCtx != nil {
		sw.unstop = context.AfterFunc(e.stopCtx, func() { sw.task.run(func() { cancel(ErrShutdown) }) })
	}
	return sw
}

// keepalive runs when the client may have been idle for KeepAlive: it writes a keepalive when so,
// and runs again at the next moment the client can have been idle that long.
func (sw *streamWatch) keepalive() (time.Duration, bool) {
	next := sw.keepAlive
	if idle := time.Since(sw.w.IdleSince()); idle >= sw.keepAlive {
		if sw.w.Keepalive() != nil {
			sw.cancel(ErrClientGone)
			return 0, false
		}
	} else {
		next -= idle
	}
	return next, true
}

// stop ends the watch and waits for a callback still running (a keepalive write is bounded by
// the write timeout).
func (sw *streamWatch) stop() {
	if sw.unstop != nil {
		sw.unstop()
	}
	sw.task.stop()
}

func conversationNotFound(id string) error {
	return wire.NotFound("conversation", "Conversation with id '%s' not found.", id)
}
