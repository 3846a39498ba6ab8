package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/respgate/respgate/wire"
)

// Stream is one streamed upstream response, read once with Events; Close may be called from any
// goroutine at any time (it interrupts a read blocked on the body). The caller must Close
// every Stream (a deferred Close is right also after io.EOF or an error).
type Stream struct {
	c    *Client
	cl   *call
	body io.ReadCloser
	rd   *idleReader

	mu        sync.Mutex // serialises the decoding step of Events, Close and abort
	seq       iter.Seq2[sse.Event, error]
	pushing   bool        // Events is reading the stream: a second Events must not
	unwatch   func() bool // stops the context.AfterFunc that calls abort
	status    int         // the response's status, kept on errors
	buf       []byte      // Data of the last event, reused
	err       error       // sticky end: io.EOF, ErrClosed or an *Error
	released  bool
	onRelease []func() // OnRelease's functions, run once by release
}

// maxRetainedBuf is the largest event buffer kept between events; one huge event does not pin
// its buffer for the rest of the stream.
const maxRetainedBuf = 64 << 10

func (c *Client) newStream(cl *call, status int, body io.ReadCloser) *Stream {
	s := &Stream{c: c, cl: cl, body: body, status: status}
	s.rd = &idleReader{r: body, cl: cl, d: cl.idleD, sse: true}
	// sse.Read's scanner buffer grows up to MaxEventSize and fails with bufio.ErrTooLong
	// beyond it, which bounds the memory of one event.
	s.seq = iter.Seq2[sse.Event, error](sse.Read(s.rd, &sse.ReadConfig{MaxEventSize: c.maxEventBytes}))
	// When the request's context ends (the caller's context, the idle timer, Close), release
	// the stream even if nobody reads it or calls Close again: an abandoned stream leaks nothing
	// once its context is done.
	s.unwatch = context.AfterFunc(cl.ctx, s.abort)
	return s
}

// abort ends the stream with the reason its context ended.
func (s *Stream) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		_, _ = s.fail(s.c.classify(s.cl.caller, s.cl.ctx, context.Cause(s.cl.ctx), true))
		return
	}
	s.release()
}

// Events reads the stream as a push iterator, for a range loop: the loop's body runs on the
// caller's goroutine between reads of the body, with no coroutine and no goroutine at all. Every
// event is yielded with a nil error; the last yield carries the error that ends the stream with a
// zero Event: io.EOF at its clean end (the body ended, or an event's data was "[DONE]"; vLLM sends
// none, docs/wire.md §6.1; OpenAI-style upstreams may). Any other failure is an *Error
// (KindCanceled, KindTimeout, KindStreamBroken, KindEventTooLarge, KindBadBody), or ErrClosed
// after Close. A Stream is read once: a second Events yields only the error that ended the
// first (ErrClosed if the first is still running). The loop's body must not call Close (after
// the loop, or from another goroutine, it may: a read blocked on the body then ends with
// ErrClosed).
//
// Decoding follows the SSE specification through go-sse: LF, CRLF and lone CR line endings,
// multi-line data joined with "\n", "data:" with or without a space, comments and id/retry
// fields ignored, a leading BOM dropped, and events without data skipped. Deliberate
// extensions:
//
//   - an unterminated final event at a clean end of the body is dispatched (the specification
//     discards it), unless its data is not valid JSON, which means it was cut: KindStreamBroken;
//   - an event without an "event:" field takes its Type from the JSON's "type" member, or is
//     "error" for a typeless {"error":{...}} object; an event with neither is KindBadBody;
//   - when both are present the SSE event name wins (vLLM always sends both, equal, §5.1).
//
// Data is the event's raw data, not validated as JSON, and valid only until the loop's body
// returns: the Stream reuses the buffer, which saves an allocation per event on the hot path. A
// caller that keeps data must copy it. Type is an ordinary string that may be kept.
func (s *Stream) Events() iter.Seq2[wire.Event, error] {
	return func(yield func(wire.Event, error) bool) {
		s.mu.Lock()
		start := s.err
		if start == nil && s.pushing {
			_, start = s.fail(ErrClosed)
		}
		s.pushing = true
		s.mu.Unlock()
		if start != nil {
			yield(wire.Event{}, start)
			return
		}
		for raw, rawErr := range s.seq {
			s.mu.Lock()
			e, err, skip := s.ctxEnded()
			if err == nil {
				e, err, skip = s.decode(raw, rawErr, true)
			}
			s.mu.Unlock()
			if skip {
				continue
			}
			if !yield(e, err) || err != nil {
				return
			}
		}
		s.mu.Lock()
		err := s.err
		if err == nil {
			_, err = s.fail(io.EOF)
		}
		s.mu.Unlock()
		yield(wire.Event{}, err)
	}
}

// ctxEnded ends the stream when its context has ended (the caller's context, the idle timer or
// Close) or it has already ended; it returns (zero, nil, false) otherwise. Callers hold s.mu.
func (s *Stream) ctxEnded() (wire.Event, error, bool) {
	if s.err != nil {
		return wire.Event{}, s.err, false
	}
	select {
	case <-s.cl.ctx.Done():
		ev, err := s.fail(s.c.classify(s.cl.caller, s.cl.ctx, context.Cause(s.cl.ctx), true))
		return ev, err, false
	default:
		return wire.Event{}, nil, false
	}
}

// decode turns what go-sse read into the stream's next event, or its end (the stream is then
// released); skip reports an event that is not dispatched. ok is false at the end of go-sse's
// iteration. Callers hold s.mu.
func (s *Stream) decode(ev sse.Event, err error, ok bool) (_ wire.Event, _ error, skip bool) {
	if !ok {
		e, err := s.fail(io.EOF)
		return e, err, false
	}
	if err != nil {
		e, err := s.fail(s.c.classify(s.cl.caller, s.cl.ctx, err, true))
		return e, err, false
	}
	if ev.Data == "" {
		return wire.Event{}, nil, true // WHATWG: an event with an empty data buffer is not dispatched
	}
	if ev.Data == "[DONE]" {
		e, err := s.fail(io.EOF)
		return e, err, false
	}
	if cap(s.buf) > maxRetainedBuf && len(ev.Data) <= maxRetainedBuf {
		s.buf = nil
	}
	s.buf = append(s.buf[:0], ev.Data...)
	if s.rd.injected() && !json.Valid(s.buf) {
		e, err := s.fail(&Error{Kind: KindStreamBroken, Message: "stream ended in the middle of an event"})
		return e, err, false
	}
	typ := ev.Type
	if typ == "" {
		if typ = typeOf(s.buf); typ == "" {
			e, err := s.fail(&Error{Kind: KindBadBody, Message: "event has neither an event name nor a JSON type"})
			return e, err, false
		}
	}
	return wire.Event{Type: internType(typ), Data: s.buf}, nil, false
}

// Peek waits for the stream's first event, without consuming it: Events yields it, and all that
// follows, as if Peek had not been called. It returns nil when the stream begins with an ordinary
// event; the *Error an "error" event names (EventError) when it begins with one; and the failure
// that ends the stream when the body breaks, ends or times out before any event (KindStreamBroken,
// KindTimeout, KindCanceled as Events reports them; the stream is then released). A fleet peeks
// before it hands a stream to the turn, so that a replica that answered 200 and then failed
// before its first event is skipped while nothing has reached the client (issue 39;
// docs/fleet.md, "Health and failover"). Call it at most once, before Events; the caller must
// still Close the Stream.
func (s *Stream) Peek() error {
	s.mu.Lock()
	if s.err != nil || s.pushing {
		err := s.err
		if err == nil {
			err = ErrClosed
		}
		s.mu.Unlock()
		return err
	}
	body := s.rd.r
	s.mu.Unlock()
	rd := &idleReader{r: body, cl: s.cl, d: s.cl.idleD}
	var buf []byte
	chunk := make([]byte, 4<<10)
	for {
		n, rerr := rd.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if data, typ, ok := firstEvent(buf, s.c.maxEventBytes); ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.err != nil {
				return s.err
			}
			// The decoder reads the peeked bytes again, then the rest of the body.
			s.rd.r = io.MultiReader(bytes.NewReader(buf), body)
			if typ == string(wire.EventError) {
				return s.EventError(data)
			}
			return nil
		}
		if rerr == nil && len(buf) > s.c.maxEventBytes {
			rerr = &Error{Kind: KindEventTooLarge, Message: "first event exceeds " + strconv.Itoa(s.c.maxEventBytes) + " bytes"}
		}
		if rerr != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.err != nil {
				return s.err
			}
			if errors.Is(rerr, io.EOF) {
				rerr = &Error{Kind: KindStreamBroken, Message: "the stream ended before its first event"}
			} else if e := (*Error)(nil); !errors.As(rerr, &e) {
				rerr = s.c.classify(s.cl.caller, s.cl.ctx, rerr, true)
			}
			_, err := s.fail(rerr)
			return err
		}
	}
}

// firstEvent finds the first complete event with data in buf (an SSE prefix): its data and its
// type (the event name, else the JSON's type, as decode reads it).
func firstEvent(buf []byte, limit int) (data []byte, typ string, ok bool) {
	for ev, err := range sse.Read(bytes.NewReader(buf), &sse.ReadConfig{MaxEventSize: limit}) {
		if err != nil {
			return nil, "", false
		}
		if ev.Data == "" {
			continue
		}
		data = []byte(ev.Data)
		if typ = ev.Type; typ == "" {
			typ = typeOf(data)
		}
		return data, typ, true
	}
	return nil, "", false
}

// BeforeRead sets f to run before each read of the upstream body, on the goroutine that reads
// the stream (Events' caller): the moment the decoder has no complete event left and
// may wait for bytes. A relay flushes there what it has buffered, so the events of one read go
// to its client in one write, and a lone event is never held back (issue 25). Set it before
// reading; f must not call the Stream's methods.
func (s *Stream) BeforeRead(f func()) { s.rd.before = f }

// Finish reads what is left of the body after the stream's terminal event, for at most wait
// and maxDrainBytes, then closes the stream: a body read to its end hands its connection back to
// the pool (a body closed early closes the connection, and the next stream dials a new one, with
// its own goroutines). It is for the end of a stream the caller has read to its terminal event;
// anywhere else Close is right.
func (s *Stream) Finish(wait time.Duration) error {
	s.mu.Lock()
	if s.err == nil && !s.rd.eof {
		timer := time.AfterFunc(wait, func() { s.cl.cancel(ErrClosed) })
		_, _ = io.Copy(io.Discard, io.LimitReader(s.body, maxDrainBytes))
		timer.Stop()
	}
	s.mu.Unlock()
	return s.Close()
}

// maxDrainBytes bounds what Finish reads after the terminal event (vLLM sends nothing more: the
// rest is the chunked body's end).
const maxDrainBytes = 64 << 10

// fail ends the stream with err (io.EOF included) and releases it.
func (s *Stream) fail(err error) (wire.Event, error) {
	if e := (*Error)(nil); errors.As(err, &e) && e.Status == 0 {
		e.Status = s.status
	}
	s.err = err
	s.release()
	return wire.Event{}, err
}

// release stops the idle timer, closes the body (returning the connection to
// the pool when it was read to its end) and cancels the request. Callers hold s.mu.
func (s *Stream) release() {
	if s.released {
		return
	}
	s.released = true
	for _, f := range s.onRelease {
		f()
	}
	s.onRelease = nil
	s.unwatch()
	s.cl.end(s.body)
}

// OnRelease registers f to run once when the stream ends for any reason (its end, an error, its
// context, Close), at once if it already has: a fleet counts a replica's streams in flight with
// it (upstream/fleet). f runs under the Stream's lock and must not call the Stream's methods.
func (s *Stream) OnRelease(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		f()
		return
	}
	s.onRelease = append(s.onRelease, f)
}

// Close ends the stream and releases its connection. It is safe to call more than once, after
// io.EOF or an error, and concurrently with a read of Events blocked on the body, which then
// ends with ErrClosed.
// (A stream whose context ends is released even without Close, but call it anyway: only Close
// frees a stream abandoned under a context that never ends.)
func (s *Stream) Close() error {
	s.cl.cancel(ErrClosed) // unblocks a read waiting for bytes, before we wait for the lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = ErrClosed
	}
	s.release()
	return nil
}

// String prints a safe summary, never event data.
func (s *Stream) String() string { return "upstream.Stream" }

// GoString is String.
func (s *Stream) GoString() string { return s.String() }

// Format prints String for every verb.
func (s *Stream) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// LogValue logs String.
func (s *Stream) LogValue() slog.Value { return slog.StringValue(s.String()) }

// EventError turns the data of an upstream "error" event into the Error a non-streamed call
// gets for the same failure, so the client's response.failed carries the object the mapping
// table gives (docs/errors.md, "Streamed turns"). It reads vLLM's error envelope
// {"error":{"message","type","param","code"}} (what vLLM's streaming routes write for a
// GenerationError: code 500, type InternalServerError), Open Responses' nested form and OpenAI's
// flat {"type":"error","code","message","param"}. Status is the HTTP status the event names: vLLM's
// integer code, 429 for rate_limit_exceeded, 400 for context_length_exceeded, else 500 (the
// upstream failed the generation). Data it cannot read still gives a 500 with no message.
func (s *Stream) EventError(data []byte) *Error {
	env, ok := parseEnvelope(data)
	if !ok {
		var flat struct {
			Message string          `json:"message"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(data, &flat) == nil {
			env = envelope{Message: flat.Message, Code: scalar(flat.Code), Param: scalar(flat.Param)}
		}
	}
	status := http.StatusInternalServerError
	if n, err := strconv.Atoi(env.Code); err == nil && n >= 400 && n <= 599 {
		status = n
	}
	switch env.Code {
	case wire.CodeRateLimit:
		status = http.StatusTooManyRequests
	case "context_length_exceeded":
		status = http.StatusBadRequest
	}
	r := s.c.redact
	return &Error{Kind: KindHTTP, Status: status,
		Type:    r.clean(env.Type, maxFieldBytes),
		Code:    r.clean(env.Code, maxFieldBytes),
		Param:   r.clean(env.Param, maxFieldBytes),
		Message: r.clean(env.Message, maxMessageBytes)}
}

// typeOf returns the "type" member of an event's JSON object, for events without an "event:"
// field. A typeless object with a top-level "error" member is an error event: OpenAI-compatible
// servers end a broken stream with data: {"error":{...}} (the nested form of docs/wire.md §5.2).
// Anything else gives "".
func typeOf(data []byte) string {
	var head struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &head) != nil {
		return ""
	}
	if head.Type == "" && len(head.Error) > 0 && string(head.Error) != "null" {
		return "error"
	}
	return head.Type
}

// knownTypes interns the event names respgate knows (wire.EventTypes), so an Event's Type never
// pins the decoder's per-event buffer.
var knownTypes = func() map[string]wire.EventType {
	m := make(map[string]wire.EventType, len(wire.EventTypes))
	for _, t := range wire.EventTypes {
		m[string(t)] = t
	}
	return m
}()

func internType(s string) wire.EventType {
	if v, ok := knownTypes[s]; ok {
		return v
	}
	return wire.EventType(strings.Clone(s))
}
