package server

import (
	"bytes"
	"context"
	"encoding/json"
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
// POST, from the same turn lifecycle (streamTurn with a socketSink). Failures are
// {"type":"error","status":N,"error":{…}}. One turn runs at a time per connection. store:false
// responses stay continuable on the connection that made them (socketCache).
//
// Goroutines per connection: the handler's own (the loop: turns, pings, idle and shutdown), and
// one reader it starts and waits for. A turn adds streamTurn's watcher and the lease keeper, as
// over HTTP.

var (
	errUpgradeRequired = &wire.APIError{Status: http.StatusUpgradeRequired, Type: wire.ErrInvalidRequest, Code: "websocket_required",
		Message: "GET /v1/responses is the WebSocket mode of the Responses API: open it as a WebSocket, or POST to create a response."}
	errTurnInProgress = &wire.APIError{Status: http.StatusConflict, Type: wire.ErrInvalidRequest, Code: "response_in_progress",
		Message: "A response is already in progress on this connection; send the next response.create after its terminal event."}
	errNotText = wire.Invalid("", "invalid_message", "WebSocket messages must be text messages holding one JSON object.")
	errMsgType = wire.Invalid("type", "invalid_value", "The only client message is {\"type\":\"response.create\", …}.")
)

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
	conn, err := websocket.Accept(c.Response(), r, nil)
	if err != nil {
		return nil // Accept has answered the handshake's fault
	}
	conn.SetReadLimit(s.cfg.WSMaxMessageBytes)
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	k := &socket{s: s, conn: conn, tenant: tenant(c), ctx: ctx, cancel: cancel,
		msgs: make(chan socketMessage, 1), cache: engine.NewSocketCache(s.cfg.WSCacheBytes)}
	k.sink = &socketSink{k: k, last: time.Now()}
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); k.read() }()
	k.loop()
	cancel(engine.ErrClientGone)
	_ = conn.CloseNow() // after a clean Close, a no-op
	<-readerDone
	return nil
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
	// busy: a response.create has been accepted and its turn has not yet sent its terminal event
	// (or error). The reader sets it, so a second create is refused rather than queued. endTurn
	// clears it once per turn (turnOpen), so a create accepted just after a terminal event is not
	// freed by the end of the turn before it.
	busy     atomic.Bool
	turnOpen atomic.Bool
	msgs     chan socketMessage // the accepted create (at most one: busy)
	sink     *socketSink
	cache    *engine.SocketCache // used only by the loop's goroutine
}

type socketMessage struct {
	typ  websocket.MessageType
	data []byte
}

// read reads client messages until the connection fails, then ends ctx: a turn in progress is
// cancelled as an HTTP disconnect cancels it. A message during a turn is answered with an error
// event and dropped; the turn goes on.
func (k *socket) read() {
	for {
		typ, data, err := k.conn.Read(k.ctx)
		if err != nil {
			k.cancel(engine.ErrClientGone)
			return
		}
		if !k.busy.CompareAndSwap(false, true) {
			_ = k.sendError(errTurnInProgress)
			continue
		}
		k.msgs <- socketMessage{typ, data}
	}
}

// loop runs the accepted turns one at a time, pings the client between turns, and closes the
// connection when it has been idle too long or the server has drained its turns for shutdown.
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
		case <-idle.C:
			if k.busy.Load() { // a create has just arrived
				idle.Reset(s.cfg.WSIdleTimeout)
				continue
			}
			_ = k.conn.Close(websocket.StatusNormalClosure, "idle timeout")
			return
		case <-ping.C:
			if k.ping() != nil {
				return
			}
		case m := <-k.msgs:
			k.turnOpen.Store(true)
			err := k.turn(m)
			k.endTurn() // before the error event: the client may answer it with a new create
			if err != nil && k.ctx.Err() == nil {
				_ = k.sendError(err)
			}
			idle.Reset(s.cfg.WSIdleTimeout)
		}
	}
}

// endTurn ends the running turn, once: the next response.create is accepted.
func (k *socket) endTurn() {
	if k.turnOpen.CompareAndSwap(true, false) {
		k.busy.Store(false)
	}
}

// turn runs one response.create through the engine. An error it returns was not streamed: the
// loop sends it as an error event.
func (k *socket) turn(m socketMessage) error {
	s := k.s
	if m.typ != websocket.MessageText {
		return errNotText
	}
	// The message is charged to the request-body budget while its turn runs, as a POST's body is.
	if !s.budget.TryAcquire(int64(len(m.data))) {
		return errOverloaded
	}
	defer s.budget.Release(int64(len(m.data)))
	req, generate, err := decodeSocketCreate(m.data, s.cfg.MaxJSONDepth)
	if err != nil {
		return err
	}
	spec, err := req.spec(k.tenant)
	if err != nil {
		return err
	}
	spec.Local, spec.WarmUp = k.cache, !generate
	out, err := s.engine.Serve(k.ctx, spec, socketDoor{k.sink})
	if err != nil {
		out = nil
	}
	k.cache.Remember(spec, out)
	return err
}

// socketDoor is a socket turn's engine.Door: its events go to the connection's sink.
type socketDoor struct{ sink *socketSink }

func (socketDoor) Prepared(engine.Prepared) {}
func (d socketDoor) Open() engine.Sink      { return d.sink }

// decodeSocketCreate decodes a response.create message: the create body with "type" beside it.
// Every socket turn is streamed, so the spec says stream, stream_options and background are not
// sent; Codex CLI sends "stream":true (and may send stream_options) on every message anyway, so
// those are accepted as the no-ops they are. What contradicts the transport is refused:
// "stream":false and "background":true (docs/clients.md).
//
// generate is false for a warm-up ("generate":false: prepare the turn, run no model).
func decodeSocketCreate(msg []byte, maxDepth int) (req *createRequest, generate bool, err error) {
	members, err := scanCreate(msg, maxDepth)
	if err != nil {
		return nil, false, err
	}
	var typ string
	if json.Unmarshal(members["type"], &typ) != nil || typ != "response.create" {
		return nil, false, errMsgType
	}
	for _, c := range [...]struct{ name, allowed string }{{"stream", "true"}, {"background", "false"}} {
		if v, sent := members[c.name]; sent && string(bytes.TrimSpace(v)) != c.allowed {
			return nil, false, wire.Invalid(c.name, "unsupported_parameter",
				"'%s' must be omitted (or %s) in a WebSocket response.create message: every response is streamed on the socket.", c.name, c.allowed)
		}
	}
	members["stream"] = json.RawMessage("true")
	delete(members, "background")
	req, err = createFromMembers(members)
	if err != nil {
		return nil, false, err
	}
	return req, !req.warmUp, nil
}

// send writes one message, within WriteTimeout: a client that does not read is dropped (the
// library closes the connection when the write's context ends), as an SSE client is.
func (k *socket) send(msg []byte) error {
	ctx, cancel := context.WithTimeout(k.ctx, k.s.cfg.WriteTimeout)
	defer cancel()
	return k.conn.Write(ctx, websocket.MessageText, msg)
}

// sendError sends err as a WebSocket error event (WebSocketErrorEvent):
// {"type":"error","status":N,"error":{"message","type","param","code"}}.
func (k *socket) sendError(err error) error {
	ae := engine.KnownAPIError(err)
	if ae == nil {
		ae = k.s.engine.Unexpected(err) // as the HTTP error handler answers it
	}
	b := append(make([]byte, 0, 256), `{"type":"error","status":`...)
	b = strconv.AppendInt(b, int64(ae.Status), 10)
	b = append(b, ',')
	b = append(b, ae.Envelope()[1:]...) // "error":{…}}
	return k.send(b)
}

// ping sends a ping and waits for its pong within WriteTimeout; a failure closes the connection.
func (k *socket) ping() error {
	ctx, cancel := context.WithTimeout(k.ctx, k.s.cfg.WriteTimeout)
	defer cancel()
	err := k.conn.Ping(ctx)
	if err != nil {
		k.cancel(engine.ErrClientGone)
		_ = k.conn.CloseNow()
	}
	return err
}

// socketSink is a turn's engine.Sink on a socket: each SSE frame's data becomes one text message;
// the [DONE] frame is not sent (the terminal event ends a turn on a socket).
type socketSink struct {
	k    *socket
	mu   sync.Mutex
	last time.Time
}

var doneFrame = []byte(wire.DoneFrame)

func (w *socketSink) Write(frames []byte) error {
	if bytes.HasSuffix(frames, doneFrame) {
		// The turn is over once the client has its terminal event, which may lead it to send the
		// next response.create at once: that create must not be refused as concurrent.
		frames = frames[:len(frames)-len(doneFrame)]
		w.k.endTurn()
	}
	for len(frames) > 0 {
		frame, rest, _ := bytes.Cut(frames, []byte("\n\n"))
		frames = rest
		if _, data, ok := bytes.Cut(frame, []byte("\ndata: ")); ok {
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

func (w *socketSink) IdleSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}
