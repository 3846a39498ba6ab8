package upstream

import (
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

	sse "github.com/tmaxmax/go-sse"

	"github.com/respgate/respgate/wire"
)

// Stream is one streamed upstream response. Next is not safe for concurrent use; Close may be
// called from any goroutine at any time (it interrupts a blocked Next). The caller must Close
// every Stream (a deferred Close is right also after io.EOF or an error).
type Stream struct {
	c    *Client
	cl   *call
	body io.ReadCloser
	rd   *idleReader

	mu       sync.Mutex // serialises Next, Close and abort
	next     func() (sse.Event, error, bool)
	stop     func()
	unwatch  func() bool // stops the context.AfterFunc that calls abort
	status   int         // the response's status, kept on errors
	buf      []byte      // Data of the last event, reused
	err      error       // sticky end: io.EOF, ErrClosed or an *Error
	released bool
}

// maxRetainedBuf is the largest event buffer kept between events; one huge event does not pin
// its buffer for the rest of the stream.
const maxRetainedBuf = 64 << 10

func (c *Client) newStream(cl *call, status int, body io.ReadCloser) *Stream {
	s := &Stream{c: c, cl: cl, body: body, status: status}
	s.rd = &idleReader{r: body, cl: cl, d: cl.idleD, sse: true}
	// sse.Read's scanner buffer grows up to MaxEventSize and fails with bufio.ErrTooLong
	// beyond it, which bounds the memory of one event.
	seq := iter.Seq2[sse.Event, error](sse.Read(s.rd, &sse.ReadConfig{MaxEventSize: c.maxEventBytes}))
	// iter.Pull2 runs the push iterator as a coroutine: no goroutine switch per event, and no
	// goroutine left once the iterator ends or stop is called (Close, or the end of the stream).
	s.next, s.stop = iter.Pull2(seq)
	// When the request's context ends (the caller's context, the idle timer, Close), release
	// the stream even if nobody calls Next or Close again: an abandoned stream leaks nothing
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

// Next returns the next event of the stream, or io.EOF at its clean end: the body ended, or an
// event's data was "[DONE]" (vLLM sends none, docs/wire.md §6.1; OpenAI-style upstreams may). Any
// other failure is an *Error (KindCanceled, KindTimeout, KindStreamBroken, KindEventTooLarge,
// KindBadBody), or ErrClosed after Close; once Next fails it keeps returning the same error.
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
// Data is the event's raw data, not validated as JSON, and valid only until the next call to
// Next or Close: the Stream reuses the buffer, which saves an allocation per event on the hot
// path. A caller that keeps data must copy it. Type is an ordinary string that may be kept.
func (s *Stream) Next() (wire.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return wire.Event{}, s.err
	}
	for {
		select {
		case <-s.cl.ctx.Done(): // the caller's context, the idle timer or Close
			return s.fail(s.c.classify(s.cl.caller, s.cl.ctx, context.Cause(s.cl.ctx), true))
		default:
		}
		ev, err, ok := s.next()
		if !ok {
			return s.fail(io.EOF)
		}
		if err != nil {
			return s.fail(s.c.classify(s.cl.caller, s.cl.ctx, err, true))
		}
		if ev.Data == "" {
			continue // WHATWG: an event with an empty data buffer is not dispatched
		}
		if ev.Data == "[DONE]" {
			return s.fail(io.EOF)
		}
		if cap(s.buf) > maxRetainedBuf && len(ev.Data) <= maxRetainedBuf {
			s.buf = nil
		}
		s.buf = append(s.buf[:0], ev.Data...)
		if s.rd.injected() && !json.Valid(s.buf) {
			return s.fail(&Error{Kind: KindStreamBroken, Message: "stream ended in the middle of an event"})
		}
		typ := ev.Type
		if typ == "" {
			if typ = typeOf(s.buf); typ == "" {
				return s.fail(&Error{Kind: KindBadBody, Message: "event has neither an event name nor a JSON type"})
			}
		}
		return wire.Event{Type: internType(typ), Data: s.buf}, nil
	}
}

// fail ends the stream with err (io.EOF included) and releases it.
func (s *Stream) fail(err error) (wire.Event, error) {
	if e := (*Error)(nil); errors.As(err, &e) && e.Status == 0 {
		e.Status = s.status
	}
	s.err = err
	s.release()
	return wire.Event{}, err
}

// release ends the iterator, stops the idle timer, closes the body (returning the connection to
// the pool when it was read to its end) and cancels the request. Callers hold s.mu.
func (s *Stream) release() {
	if s.released {
		return
	}
	s.released = true
	s.unwatch()
	s.stop()
	s.cl.end(s.body)
}

// Close ends the stream and releases its connection. It is safe to call more than once, after
// io.EOF or an error, and concurrently with a blocked Next, which then returns ErrClosed.
// (A stream whose context ends is released even without Close, but call it anyway: only Close
// frees a stream abandoned under a context that never ends.)
func (s *Stream) Close() error {
	s.cl.cancel(ErrClosed) // unblocks a Next waiting for bytes, before we wait for its lock
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
