package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/wire"
)

// The Responses WebSocket mode (Open Responses x-openresponses-websocket, docs/clients.md): a
// client opens GET /v1/responses as a WebSocket and sends {"type":"response.create", …body}; each
// turn's events come back one JSON message per event, the same events as the SSE stream of a
// POST, from the same turn engine. Failures are {"type":"error","status":N,"error":{…}}.
// store:false responses stay continuable on the connection that made them (engine.SocketCache).
//
// Lanes (OpenAI's stream_id): each response.create names a lane (none: the default lane). A
// lane runs its creates one at a time, first in first out; the lanes of one connection run
// concurrently, at most WSMaxLanes of them; every event of a lane's response, its error events and
// its steering events carry its stream_id. Steering (response.steer, steer.go) queues user input
// for a running response; the lane runs the successor it asks for.
//
// Goroutines per connection: the handler's own (the loop: pings, idle and shutdown), one reader,
// and one per lane with work (queued or running), which ends when its queue is empty. The handler
// starts them and waits for all of them before it returns. A turn adds what it adds over HTTP
// (the stream watch and the lease keeper, stopped before Serve returns).

var (
	errUpgradeRequired = &wire.APIError{Status: http.StatusUpgradeRequired, Type: wire.ErrInvalidRequest, Code: "websocket_required",
		Message: "GET /v1/responses is the WebSocket mode of the Responses API: open it as a WebSocket, or POST to create a response."}
	errNotText   = wire.Invalid("", "invalid_message", "WebSocket messages must be text messages holding one JSON object.")
	errMsgType   = wire.Invalid("type", "invalid_value", "The client messages are {\"type\":\"response.create\", …} and {\"type\":\"response.steer\", …}.")
	errStreamID  = wire.Invalid("stream_id", "invalid_value", "'stream_id' must be a string of 1 to 256 letters, digits, '_', '.' or '-'.")
	errLaneQueue = &wire.APIError{Status: http.StatusTooManyRequests, Type: wire.ErrInvalidRequest, Code: "lane_queue_full",
		Message: "This lane already holds its maximum of " + strconv.Itoa(laneQueueMax) + " queued response.create messages; send the next one after a terminal event."}
)

// laneQueueMax bounds the response.create messages a lane holds beyond the one it runs.
const laneQueueMax = 16

// errTooManyLanes answers a response.create that would open lane number max+1.
func errTooManyLanes(max int) error {
	return &wire.APIError{Status: http.StatusTooManyRequests, Type: wire.ErrInvalidRequest, Code: "too_many_lanes",
		Message: fmt.Sprintf("This connection already runs its maximum of %d lanes (stream_id); send on a running lane, wait for one to finish, or open another connection.", max)}
}

// responsesSocket serves GET /v1/responses: the upgrade (after the same authentication, tenancy and
// header limits as every route), then the connection until the client, the idle timeout or
// shutdown ends it.
func (s *Server) responsesSocket(c echo.Context) error {
	r := c.Request()
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		c.Response().Header().Set("Upgrade", "websocket")
		return errUpgradeRequired
	}
	if !s.engine.AdmitInto(&s.sockets) {
		return engine.ErrShuttingDown
	}
	defer s.sockets.Done()
	// Cross-origin requests are refused (Accept's default): a browser page cannot open a
	// socket with a user's credentials. Compression stays off: events are small and many.
	hw := &handshakeWriter{ResponseWriter: c.Response()}
	conn, err := websocket.Accept(hw, r, nil)
	if err != nil {
		return hw.refusal(err) // Accept's plain-text answer was held back: the envelope instead
	}
	conn.SetReadLimit(s.cfg.WSMaxMessageBytes)
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	k := &socket{s: s, conn: conn, tenant: tenant(c), ctx: ctx, cancel: cancel, laneDone: make(chan struct{}, 1),
		cache: engine.NewSocketCache(s.cfg.WSCacheBytes), lanes: map[string]*lane{}, steers: newSteerBook()}
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); k.read() }()
	k.loop()
	cancel(engine.ErrClientGone)
	_ = conn.CloseNow() // after a clean Close, a no-op
	<-readerDone        // no lane starts after this
	k.laneWG.Wait()     // the lanes' turns end as a disconnect ends them
	return nil
}

// handshakeWriter is the response writer websocket.Accept answers through. A refused handshake
// (Accept's http.Error: 403 for another origin, 400 for a bad version or key, 426…) is held
// back, so that the refusal goes out as the JSON envelope like every other refusal (issue 38
// item 11); the headers Accept set (Sec-WebSocket-Version, Upgrade) stay. Unwrap lets Accept
// find the connection's http.Hijacker.
type handshakeWriter struct {
	http.ResponseWriter
	status int // the refusal's status, once Accept wrote one
}

func (w *handshakeWriter) WriteHeader(status int) {
	if status >= http.StatusBadRequest {
		w.status = status
		w.Header().Del("Content-Type") // http.Error's text/plain; the error handler sets JSON
		w.Header().Del("X-Content-Type-Options")
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *handshakeWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		return len(p), nil // http.Error's text
	}
	return w.ResponseWriter.Write(p)
}

func (w *handshakeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refusal is the API error of a handshake Accept refused with err (nil when Accept had already
// switched protocols: the connection is gone, nothing can be written).
func (w *handshakeWriter) refusal(err error) error {
	switch w.status {
	case 0:
		return nil
	case http.StatusForbidden:
		return &wire.APIError{Status: http.StatusForbidden, Type: wire.ErrInvalidRequest, Code: "websocket_origin_not_allowed",
			Message: "Cross-origin WebSocket connections are refused: the Origin header must name the host the socket is opened on."}
	case http.StatusUpgradeRequired:
		return errUpgradeRequired
	}
	// The library's text says what is wrong with the handshake (the client's own headers only).
	msg := strings.TrimPrefix(err.Error(), "failed to accept WebSocket connection: ")
	return &wire.APIError{Status: w.status, Type: wire.ErrInvalidRequest, Code: "invalid_websocket_handshake",
		Message: "Invalid WebSocket handshake: " + msg + "."}
}

// socket is one WebSocket connection.
type socket struct {
	s      *Server
	conn   *websocket.Conn
	tenant string
	// ctx ends when the connection does (the reader failed: the client closed it, sent too
	// large a message, or the connection was closed here).
	ctx    context.Context
	cancel context.CancelCauseFunc
	cache  *engine.SocketCache // shared by the lanes (a lane may fork from another's response)

	mu     sync.Mutex
	lanes  map[string]*lane // the lanes with work, by stream_id ("" the default lane); mu
	steers *steerBook       // the steering targets and queues (steer.go); mu
	// laneWG counts the lane goroutines; the reader adds to it (under mu), the handler waits.
	laneWG sync.WaitGroup
	// laneDone is signalled when a lane has drained: the loop restarts its idle clock.
	laneDone chan struct{}
	seq      atomic.Int64 // sequence numbers of the connection's steering events
	// dropped: a write hit WriteTimeout, so the connection was closed for a client that stopped
	// reading (engine.Dropper: the turns it cut are stored with that reason).
	dropped atomic.Bool
}

type socketMessage struct {
	typ  websocket.MessageType
	data []byte
}

// lane is one stream_id's FIFO of response.create messages; its goroutine runs them in order.
type lane struct {
	id    string // "" for the default lane (no stream_id: its events carry none)
	queue []socketMessage
}

// read reads client messages until the connection fails, then ends ctx: the lanes' turns are
// cancelled as an HTTP disconnect cancels a turn. A response.create joins its lane's queue; a
// response.steer is answered at once (steer.go); a message that is neither is answered on the
// default lane, in order with what that lane has queued.
func (k *socket) read() {
	for {
		typ, data, err := k.conn.Read(k.ctx)
		if err != nil {
			k.cancel(engine.ErrClientGone)
			return
		}
		m := socketMessage{typ, data}
		env, envErr := readRouting(m)
		switch {
		case envErr == nil && env.Type == "response.steer":
			k.steer(data)
		case envErr == nil && env.streamErr != nil:
			_ = k.sendError("", env.streamErr)
		default:
			// A create, or a message whose fault is answered in turn on the default lane (so an
			// invalid message never overtakes what was sent before it, nor holds up what follows).
			if err := k.enqueue(env.StreamID, m); err != nil {
				_ = k.sendError(env.StreamID, err)
			}
		}
	}
}

// routing is what the reader reads of a message to route it.
type routing struct {
	Type      string `json:"type"`
	StreamID  string `json:"-"`
	streamErr error
}

// readRouting reads a message's type and stream_id. An error means the message is not one a
// lane can route: the default lane answers it.
func readRouting(m socketMessage) (routing, error) {
	var env routing
	if m.typ != websocket.MessageText {
		return env, errNotText
	}
	var raw struct {
		Type     string          `json:"type"`
		StreamID json.RawMessage `json:"stream_id"`
	}
	if err := json.Unmarshal(m.data, &raw); err != nil {
		return env, err
	}
	env.Type = raw.Type
	if wire.IsNull(raw.StreamID) || raw.Type != "response.create" {
		return env, nil
	}
	if json.Unmarshal(raw.StreamID, &env.StreamID) != nil || !validStreamID(env.StreamID) {
		env.StreamID, env.streamErr = "", errStreamID
	}
	return env, nil
}

// validStreamID is the SDK's rule for a lane's name (openai-node ResponsesWebSocketSession.lane).
func validStreamID(id string) bool {
	if len(id) == 0 || len(id) > 256 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// enqueue adds m to lane id's queue, starting the lane when it has no work; the lane limit and the
// queue bound are answered as errors (not queued).
func (k *socket) enqueue(id string, m socketMessage) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ctx.Err() != nil {
		return nil
	}
	l := k.lanes[id]
	switch {
	case l == nil && len(k.lanes) >= k.s.cfg.WSMaxLanes:
		return errTooManyLanes(k.s.cfg.WSMaxLanes)
	case l == nil:
		l = &lane{id: id}
		k.lanes[id] = l
		k.laneWG.Add(1)
		go k.runLane(l)
	case len(l.queue) >= laneQueueMax:
		return errLaneQueue
	}
	l.queue = append(l.queue, m)
	return nil
}

// busy reports whether any lane has work.
func (k *socket) busy() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.lanes) > 0
}

// runLane runs lane l's messages in order until its queue is empty (or the connection has
// ended: what is still queued is dropped), then removes the lane.
func (k *socket) runLane(l *lane) {
	defer k.laneWG.Done()
	for {
		k.mu.Lock()
		if len(l.queue) == 0 || k.ctx.Err() != nil {
			delete(k.lanes, l.id)
			k.mu.Unlock()
			select {
			case k.laneDone <- struct{}{}:
			default:
			}
			return
		}
		m := l.queue[0]
		l.queue[0] = socketMessage{}
		l.queue = l.queue[1:]
		k.mu.Unlock()
		if err := k.create(l, m); err != nil && k.ctx.Err() == nil {
			_ = k.sendError(l.id, err)
		}
	}
}

// loop pings the client, and closes the connection when it has been idle too long or the server
// has drained its turns for shutdown.
func (k *socket) loop() {
	s := k.s
	idle := time.NewTimer(s.cfg.WSIdleTimeout)
	defer idle.Stop()
	ping := time.NewTicker(s.cfg.KeepAlive)
	defer ping.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-s.drained:
			_ = k.conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-k.laneDone:
			idle.Reset(s.cfg.WSIdleTimeout)
		case <-idle.C:
			if k.busy() {
				idle.Reset(s.cfg.WSIdleTimeout)
				continue
			}
			_ = k.conn.Close(websocket.StatusNormalClosure, "idle timeout")
			return
		case <-ping.C:
			if k.ping() != nil {
				return
			}
		}
	}
}

// create runs one response.create of lane l through the engine, then the successors steering
// asks for (steer.go). An error it returns was not streamed: the lane sends it as an error event.
func (k *socket) create(l *lane, m socketMessage) error {
	s := k.s
	if m.typ != websocket.MessageText {
		return errNotText
	}
	// The message is charged to the request-body budget while its turn runs, as a POST's body is.
	if !s.budget.TryAcquire(int64(len(m.data))) {
		return errOverloaded
	}
	defer s.budget.Release(int64(len(m.data)))
	members, err := socketCreateMembers(m.data, s.cfg.MaxJSONDepth)
	if err != nil {
		return err
	}
	// Steering input queued for this continuation (response.steer.pending) leads its input.
	carried := k.takeParked(l.id, previousID(members))
	if len(carried) > 0 {
		members["input"] = prependSteers(carried, members["input"])
	}
	req, err := createFromMembers(members)
	if err != nil {
		k.failSteers(l.id, carried, steerSuccessorFailed)
		return err
	}
	return k.runTurns(l, members, req, carried)
}

// socketDoor is a socket turn's engine.Door: its events go to its lane's sink, and once prepared
// the response is a steering target of the connection (steer.go).
type socketDoor struct {
	k    *socket
	sink *socketSink
	tg   *steerTarget
}

func (d *socketDoor) Prepared(p engine.Prepared) { d.k.runTarget(p.ID, d.tg) }
func (d *socketDoor) Open() engine.Sink          { return d.sink }

// socketCreateMembers reads a response.create message's members: the create body with "type"
// (and "stream_id", routing only) beside it. Every socket turn is streamed, so the spec says
// stream, stream_options and background are not sent; Codex CLI sends "stream":true (and may send
// stream_options) on every message anyway, so those are accepted as the no-ops they are. What
// contradicts the transport is refused: "stream":false and "background":true (docs/clients.md).
func socketCreateMembers(msg []byte, maxDepth int) (map[string]json.RawMessage, error) {
	members, err := scanCreate(msg, maxDepth)
	if err != nil {
		return nil, err
	}
	var typ string
	if json.Unmarshal(members["type"], &typ) != nil || typ != "response.create" {
		return nil, errMsgType
	}
	for _, c := range [...]struct{ name, allowed string }{{"stream", "true"}, {"background", "false"}} {
		if v, sent := members[c.name]; sent && string(bytes.TrimSpace(v)) != c.allowed {
			return nil, wire.Invalid(c.name, "unsupported_parameter",
				"'%s' must be omitted (or %s) in a WebSocket response.create message: every response is streamed on the socket.", c.name, c.allowed)
		}
	}
	members["stream"] = json.RawMessage("true")
	delete(members, "background")
	delete(members, "type")
	delete(members, "stream_id")
	return members, nil
}

// previousID is a create's previous_response_id ("" when absent or not a string).
func previousID(members map[string]json.RawMessage) string {
	var id string
	_ = json.Unmarshal(members["previous_response_id"], &id)
	return id
}

// send writes one message, within WriteTimeout: a client that does not read is dropped (the
// library closes the connection when the write's context ends), as an SSE client is.
func (k *socket) send(msg []byte) error {
	ctx, cancel := context.WithTimeout(k.ctx, k.s.cfg.WriteTimeout)
	defer cancel()
	err := k.conn.Write(ctx, websocket.MessageText, msg)
	// The write's own deadline, not the connection's end: the library closes the connection when
	// the deadline passes, which ends k.ctx too, but ctx then says DeadlineExceeded first.
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		k.dropped.Store(true)
	}
	return err
}

// sendError sends err as a WebSocket error event (WebSocketErrorEvent) of lane streamID:
// {"type":"error","status":N,"error":{"message","type","param","code"},"stream_id"?}.
func (k *socket) sendError(streamID string, err error) error {
	ae := engine.KnownAPIError(err)
	if ae == nil {
		ae = k.s.engine.Unexpected(err) // as the HTTP error handler answers it
	}
	b := append(make([]byte, 0, 256), `{"type":"error","status":`...)
	b = strconv.AppendInt(b, int64(ae.Status), 10)
	b = append(b, ',')
	b = append(b, ae.Envelope()[1:]...) // "error":{…}}
	return k.send(withStreamID(b, streamID))
}

// withStreamID adds "stream_id" to the JSON object event (unless streamID is ""): every event of a
// lane carries it, or the client's lane never sees its response end. The accumulator's events are
// shared with SSE, where it has no place, so it is added here, when framing for the socket. event
// is reused.
func withStreamID(event []byte, streamID string) []byte {
	if streamID == "" {
		return event
	}
	event = bytes.TrimRight(event, " \t\r\n")
	if len(event) < 2 || event[len(event)-1] != '}' {
		return event
	}
	event = event[:len(event)-1]
	if len(bytes.TrimSpace(event)) > 1 { // not {}
		event = append(event, ',')
	}
	event = append(event, `"stream_id":`...)
	event = wire.AppendString(event, streamID)
	return append(event, '}')
}

// ping sends a ping and waits for its pong within WriteTimeout; a failure closes the connection.
func (k *socket) ping() error {
	ctx, cancel := context.WithTimeout(k.ctx, k.s.cfg.WriteTimeout)
	defer cancel()
	err := k.conn.Ping(ctx)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			k.dropped.Store(true) // no pong within the write timeout: a client that stopped reading
		}
		k.cancel(engine.ErrClientGone)
		_ = k.conn.CloseNow()
	}
	return err
}

// socketSink is a turn's engine.Sink on a socket lane: each SSE frame's data becomes one text
// message with the lane's stream_id; the [DONE] frame is not sent (the terminal event ends a turn
// on a socket).
type socketSink struct {
	k        *socket
	streamID string
	mu       sync.Mutex
	last     time.Time
	msg      []byte // the message under construction (one turn's writes are sequential)
}

var doneFrame = []byte(wire.DoneFrame)

func (w *socketSink) Write(frames []byte) error {
	frames = bytes.TrimSuffix(frames, doneFrame)
	for len(frames) > 0 {
		frame, rest, _ := bytes.Cut(frames, []byte("\n\n"))
		frames = rest
		if _, data, ok := bytes.Cut(frame, []byte("\ndata: ")); ok {
			if w.streamID != "" {
				w.msg = withStreamID(append(w.msg[:0], data...), w.streamID)
				data = w.msg
			}
			if err := w.k.send(data); err != nil {
				return err
			}
		}
	}
	w.mu.Lock()
	w.last = time.Now()
	w.mu.Unlock()
	return nil
}

func (w *socketSink) Keepalive() error { return w.k.ping() }

// Dropped reports whether the connection dropped a client that stopped reading
// (engine.Dropper).
func (w *socketSink) Dropped() bool { return w.k.dropped.Load() }

func (w *socketSink) IdleSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}
