package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// turn is one POST /v1/responses in flight.
type turn struct {
	req   *createRequest
	rec   store.Response // the response record; Status etc. are final after the upstream ends
	input []wire.Item    // the new input items to store
	body  []byte         // the vLLM-bound request
	// leased: ResponseBegin ran; convTurn: the conversation's turn lease is held. Atomic because
	// the lease keeper reads them while the turn goes on.
	leased   atomic.Bool
	convTurn atomic.Bool
	// toolNames maps the flat names of namespaced function tools back to the client's
	// (rehydrate.Result.ToolNames), for the accumulator.
	toolNames map[string]accumulator.ToolName
}

// createResponse is the turn lifecycle of DESIGN §1: validate, load history in one round trip,
// rehydrate (which may reject), mark in progress concurrently with the upstream connect, relay,
// commit, and only then send the terminal event.
func (s *Server) createResponse(c echo.Context) error {
	if s.closing.Load() {
		return &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "shutting_down",
			Message: "The gateway is shutting down; retry on another instance."}
	}
	s.inflight.Add(1)
	defer s.inflight.Done()

	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
		}
		return err
	}
	req, err := decodeCreate(body)
	if err != nil {
		return err
	}
	t, err := s.prepareTurn(c, req)
	if err != nil {
		return err
	}
	if req.Stream {
		if max := s.cfg.MaxConcurrentStreams; max > 0 && s.streams.Load() >= int64(max) {
			s.releaseConversation(t)
			return &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "too_many_streams",
				Message: "The gateway is serving its maximum number of streams; retry shortly."}
		}
		s.streams.Add(1)
		defer s.streams.Add(-1)
		return s.streamTurn(c, t)
	}
	return s.syncTurn(c, t)
}

// prepareTurn loads the history, resolves references, rehydrates and takes the conversation's turn
// lease. Nothing is written and nothing is sent upstream unless it succeeds.
func (s *Server) prepareTurn(c echo.Context, req *createRequest) (*turn, error) {
	ctx := c.Request().Context()
	tn := tenant(c)
	input, err := rehydrate.ParseInput(req.Input)
	if err != nil {
		return nil, err
	}
	if len(input) > s.cfg.MaxInputItems {
		return nil, wire.Invalid("input", "array_above_max_length", "'input' may have at most %d items.", s.cfg.MaxInputItems)
	}
	var history []wire.Item
	hctx, span := s.tel.tracer.Start(ctx, "history.load")
	defer span.End()
	loadStart := time.Now()
	switch {
	case req.PreviousResponseID != "":
		chain, err := s.store.ResponseChainGet(hctx, &store.ResponseChainGetParams{Tenant: tn, ID: req.PreviousResponseID})
		s.tel.store(ctx, "response_chain_get", loadStart)
		if errors.Is(err, store.ErrNotFound) {
			return nil, wire.Invalid("previous_response_id", "previous_response_not_found",
				"Previous response with id '%s' not found.", req.PreviousResponseID)
		}
		if err != nil {
			return nil, err
		}
		if chain.Missing != "" {
			return nil, wire.Invalid("previous_response_id", "previous_response_not_found",
				"Previous response with id '%s' not found: it is an ancestor of '%s' and was deleted.", chain.Missing, req.PreviousResponseID)
		}
		if n := len(chain.Turns); n > 0 && !store.Terminal(chain.Turns[n-1].Response.Status) {
			return nil, wire.Invalid("previous_response_id", "previous_response_in_progress",
				"Previous response with id '%s' is still in progress.", req.PreviousResponseID)
		}
		for _, ct := range chain.Turns {
			history = append(append(history, ct.Input...), ct.Output...)
		}
	case req.ConversationID != "":
		history, err = s.store.ConversationItemsAll(hctx, &store.ConversationItemsAllParams{Tenant: tn, ConversationID: req.ConversationID})
		s.tel.store(ctx, "conversation_items_all", loadStart)
		if errors.Is(err, store.ErrNotFound) {
			return nil, conversationNotFound(req.ConversationID)
		}
		if err != nil {
			return nil, err
		}
	}
	var lookup rehydrate.MapLookup
	if refs := rehydrate.ReferencedIDs(input); len(refs) > 0 {
		lookup = make(rehydrate.MapLookup, len(refs))
		for _, id := range refs {
			it, err := s.store.ItemGet(ctx, &store.ItemGetParams{Tenant: tn, ID: id})
			if errors.Is(err, store.ErrNotFound) {
				continue // rehydrate answers the 400 naming the reference
			}
			if err != nil {
				return nil, err
			}
			lookup[id] = it
		}
	}
	span.SetAttributes(attribute.Int("respgate.history_items", len(history)))
	span.End()
	historyParam := "previous_response_id"
	if req.ConversationID != "" {
		historyParam = "conversation"
	}
	res, err := rehydrate.Build(&rehydrate.Params{History: history, HistoryParam: historyParam, Input: input, Request: req.raw,
		Lookup: lookup, NewID: wire.NewID})
	if err != nil {
		if ae := (*wire.APIError)(nil); errors.As(err, &ae) && ae.Code == rehydrate.CodeItemIDConflict {
			s.tel.idConflicts.Add(ctx, 1)
		}
		return nil, err
	}
	s.tel.rehydrated(ctx, res.Stats, res.DroppedTools)
	if len(res.DroppedTools) > 0 {
		if s.cfg.ToolPolicy == ToolPolicyReject {
			return nil, wire.Invalid("tools", "unsupported_tool_type",
				"Tool type '%s' cannot be served by the upstream model; only function tools (and namespace tools of function tools) are supported.", res.DroppedTools[0])
		}
		c.Response().Header().Set("X-Respgate-Dropped-Tools", strings.Join(res.DroppedTools, ","))
	}
	echoJSON, err := jsonMarshal(req.echo)
	if err != nil {
		return nil, err
	}
	t := &turn{req: req, input: res.Input, body: res.Body, toolNames: clientToolNames(res.ToolNames), rec: store.Response{
		ID:                 wire.NewID(wire.PrefixResponse),
		Tenant:             tn,
		Status:             store.StatusInProgress,
		Model:              req.Model,
		PreviousResponseID: req.PreviousResponseID,
		ConversationID:     req.ConversationID,
		CreatedAt:          time.Now(),
		Echo:               echoJSON,
	}}
	if req.ConversationID != "" && req.Store {
		err := s.store.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{
			Tenant: tn, ConversationID: req.ConversationID, ResponseID: t.rec.ID, ExpiresAt: time.Now().Add(s.cfg.LeaseTTL)})
		switch {
		case errors.Is(err, store.ErrConflict):
			return nil, &wire.APIError{Status: http.StatusConflict, Type: wire.ErrInvalidRequest, Code: "conversation_locked", Param: "conversation",
				Message: "Another response is in progress for conversation '" + req.ConversationID + "'; retry when it has finished."}
		case errors.Is(err, store.ErrNotFound):
			return nil, conversationNotFound(req.ConversationID)
		case err != nil:
			return nil, err
		}
		t.convTurn.Store(true)
	}
	return t, nil
}

// begin writes the in-progress record concurrently with the upstream connect, so the database's
// commit latency is not added to time-to-first-byte; the caller waits for it before the client can
// see the id.
func (s *Server) begin(ctx context.Context, t *turn) <-chan error {
	ch := make(chan error, 1)
	if !t.req.Store {
		ch <- nil
		return ch
	}
	go func() {
		start := time.Now()
		err := s.store.ResponseBegin(context.WithoutCancel(ctx), &store.ResponseBeginParams{
			Response: t.rec, LeaseOwner: s.owner, LeaseExpiresAt: time.Now().Add(s.cfg.LeaseTTL)})
		s.tel.store(ctx, "response_begin", start)
		ch <- err
	}()
	return ch
}

// clientToolNames converts rehydrate's reverse map of flattened namespace tools for the accumulator.
func clientToolNames(m map[string]rehydrate.ToolName) map[string]accumulator.ToolName {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]accumulator.ToolName, len(m))
	for flat, tn := range m {
		out[flat] = accumulator.ToolName{Namespace: tn.Namespace, Name: tn.Name}
	}
	return out
}

func (s *Server) accOptions(t *turn) accumulator.Options {
	return accumulator.Options{
		ResponseID: t.rec.ID,
		NewID:      wire.NewID,
		ToolNames:  t.toolNames,
		Render: func(snap *accumulator.Snapshot) []byte {
			r := t.rec
			r.Status = snap.Status
			r.Usage, r.IncompleteDetails = snap.Usage, snap.IncompleteDetails
			if snap.Error != nil {
				r.Error = errorJSON(snap.Error.Code, snap.Error.Message)
			}
			return renderResponse(nil, &r, snap.Output)
		},
		MaxItems:      s.cfg.MaxOutputItems,
		MaxItemBytes:  s.cfg.MaxOutputItemBytes,
		MaxTotalBytes: s.cfg.MaxOutputBytes,
	}
}

// finish applies the upstream result to the record and commits it (with retries; the commit is
// idempotent). On failure the result becomes failed, so the client is told the truth
// (DESIGN §1 invariant 2), and the error is returned.
func (s *Server) finish(ctx context.Context, t *turn, r *accumulator.Result) error {
	if r.Status == store.StatusCompleted {
		t.rec.CompletedAt = unixPtr(time.Now())
	}
	s.applyResult(t, r)
	if !t.req.Store {
		return nil
	}
	p := &store.ResponseCommitParams{Response: t.rec, Input: t.input, Output: r.Output}
	if t.convTurn.Load() && (r.Status == store.StatusCompleted || r.Status == store.StatusIncomplete) {
		p.ConversationID = t.req.ConversationID
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	defer cancel()
	ctx, span := s.tel.tracer.Start(ctx, "store.commit", trace.WithAttributes(
		attribute.Int("respgate.input_items", len(t.input)), attribute.Int("respgate.output_items", len(r.Output))))
	defer span.End()
	start := time.Now()
	defer s.tel.store(ctx, "response_commit", start)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.store.ResponseCommit(ctx, p); err == nil || ctx.Err() != nil || errors.Is(err, store.ErrConflict) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 50 * time.Millisecond)
	}
	if p.ConversationID == "" {
		s.releaseConversation(t)
	}
	if err != nil {
		s.log.Error("commit response", "response_id", t.rec.ID, "error", err)
		r.Status = store.StatusFailed
		r.Error = &accumulator.ErrorObject{Code: "server_error", Message: errNotStored}
		if errors.Is(err, store.ErrConflict) {
			// The sweeper failed it after its lease expired (CONTRACT of ResponseCommit).
			r.Error.Message = "The response's lease expired before it could be stored."
		}
		t.rec.CompletedAt = nil
		s.applyResult(t, r)
		return err
	}
	s.log.Info("response stored", "response_id", t.rec.ID, "status", r.Status,
		"input_items", len(t.input), "output_items", len(r.Output))
	return nil
}

func (s *Server) applyResult(t *turn, r *accumulator.Result) {
	t.rec.Status = r.Status
	t.rec.Usage = r.Usage
	t.rec.IncompleteDetails = r.IncompleteDetails
	t.rec.Error = nil
	if r.Error != nil {
		t.rec.Error = errorJSON(r.Error.Code, r.Error.Message)
	}
}

func (s *Server) releaseConversation(t *turn) {
	if !t.convTurn.Swap(false) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CommitTimeout)
	defer cancel()
	if err := s.store.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{
		Tenant: t.rec.Tenant, ConversationID: t.req.ConversationID, ResponseID: t.rec.ID}); err != nil {
		s.log.Error("release conversation turn", "response_id", t.rec.ID, "error", err)
	}
}

// failBeforeStream records a turn that failed before the client saw anything (upstream refused,
// unreachable…): the response is stored as failed so its record is terminal, and the error goes
// to the client as an envelope.
func (s *Server) failBeforeStream(ctx context.Context, t *turn, cause error) error {
	var ue *upstream.Error
	msg := "The upstream model server failed."
	if errors.As(cause, &ue) {
		msg = ue.APIError().Message
	}
	_ = s.finish(ctx, t, &accumulator.Result{Status: store.StatusFailed, Error: &accumulator.ErrorObject{Code: "server_error", Message: msg}})
	return cause
}

// syncTurn serves stream:false: one upstream call, normalised by the accumulator's FromResponse so
// the stored items equal what a streamed turn would have stored.
func (s *Server) syncTurn(c echo.Context, t *turn) error {
	// No in-progress record: the client sees the id only in the final answer, which is sent after
	// the commit, so a crash mid-turn leaves nothing a client could ask for, and the turn saves a
	// write. The conversation's turn lease (if any) is kept alive while vLLM generates.
	ctx := c.Request().Context()
	keeperDone := make(chan struct{})
	defer close(keeperDone)
	if t.convTurn.Load() {
		go s.keepLeases(ctx, t, keeperDone)
	}
	uctx, span := s.tel.tracer.Start(ctx, "upstream.create")
	uctx, cancel := context.WithTimeoutCause(uctx, s.cfg.SyncTimeout, errSyncTimeout)
	defer cancel()
	upStart := time.Now()
	raw, upErr := s.upstream.Create(uctx, t.body)
	if upErr != nil && errors.Is(context.Cause(uctx), errSyncTimeout) && ctx.Err() == nil {
		upErr = &wire.APIError{Status: http.StatusGatewayTimeout, Type: wire.ErrServer, Code: "upstream_timeout",
			Message: "The upstream model server did not answer in time."}
	}
	s.tel.upstreamLatency.Record(ctx, time.Since(upStart).Seconds())
	span.End()
	if upErr != nil {
		if ctx.Err() != nil {
			_ = s.finish(ctx, t, &accumulator.Result{Status: store.StatusCancelled,
				Error: &accumulator.ErrorObject{Code: "client_disconnected", Message: "The client closed the request."}})
			return ctx.Err()
		}
		return s.failBeforeStream(ctx, t, upErr)
	}
	r, err := accumulator.FromResponse(s.accOptions(t), raw)
	if err != nil {
		s.log.Warn("upstream answer not usable", "response_id", t.rec.ID, "bytes", len(raw))
		return s.failBeforeStream(ctx, t, &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer,
			Code: "bad_upstream_response", Message: "The upstream model server sent an answer the gateway cannot read."})
	}
	if err := s.finish(ctx, t, r); err != nil {
		return &wire.APIError{Status: 500, Type: wire.ErrServer, Code: "server_error", Message: r.Error.Message}
	}
	out := renderResponse(make([]byte, 0, 1024), &t.rec, r.Output)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
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

func (w *sseWriter) idleSince() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

const errNotStored = "The response could not be stored."

var errClientGone = errors.New("server: client went away")

// streamTurn serves stream:true. Before the first byte an upstream failure is an error envelope;
// after it, only an in-band response.failed can report it (STYLE: the relay model).
func (s *Server) streamTurn(c echo.Context, t *turn) error {
	reqCtx := c.Request().Context()
	ctx, cancel := context.WithCancelCause(reqCtx)
	defer cancel(nil)

	s.tel.activeStreams.Add(ctx, 1)
	defer s.tel.activeStreams.Add(context.WithoutCancel(ctx), -1)
	began := s.begin(ctx, t)
	uctx, span := s.tel.tracer.Start(ctx, "upstream.stream")
	defer span.End()
	upStart := time.Now()
	up, upErr := s.upstream.Stream(uctx, t.body)
	s.tel.upstreamLatency.Record(ctx, time.Since(upStart).Seconds())
	if err := <-began; err != nil {
		if up != nil {
			_ = up.Close()
		}
		s.releaseConversation(t)
		return err
	}
	t.leased.Store(t.req.Store)
	if upErr != nil {
		if reqCtx.Err() != nil {
			_ = s.finish(ctx, t, &accumulator.Result{Status: store.StatusCancelled,
				Error: &accumulator.ErrorObject{Code: "client_disconnected", Message: "The client closed the request."}})
			return reqCtx.Err()
		}
		return s.failBeforeStream(ctx, t, upErr)
	}
	defer up.Close()

	res := c.Response()
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	res.WriteHeader(http.StatusOK)
	w := &sseWriter{res: res, rc: http.NewResponseController(res), writeTimeout: s.cfg.WriteTimeout}

	// One helper goroutine per stream: keepalive comments during silence, lease renewal, and
	// shutdown past its deadline.
	watchDone := make(chan struct{})
	defer close(watchDone)
	go s.watchStream(ctx, cancel, t, w, watchDone)

	acc := accumulator.New(s.accOptions(t))
	buf := acc.Start(make([]byte, 0, 4096))
	var cause error
	if err := w.write(buf); err != nil {
		cause = errClientGone
	}
	events, firstDelta := int64(0), false
	for cause == nil && !acc.Done() {
		ev, err := up.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cause = err
			break
		}
		events++
		if !firstDelta && strings.HasSuffix(ev.Type, ".delta") {
			firstDelta = true
			d := time.Since(upStart)
			s.tel.ttft.Record(ctx, d.Seconds())
			span.AddEvent("first_token")
		}
		buf, err = acc.Feed(buf[:0], ev)
		if len(buf) > 0 {
			if werr := w.write(buf); werr != nil {
				cause = errClientGone
				break
			}
		}
		if err != nil {
			cause = err
			break
		}
	}
	s.tel.events.Add(context.WithoutCancel(ctx), events)
	clientGone := errors.Is(cause, errClientGone) || reqCtx.Err() != nil
	if cause != nil && !clientGone && errors.Is(context.Cause(ctx), errShutdown) {
		cause = errShutdown // the stream was cut by shutdown, not by upstream
	}
	buf, r := acc.Close(buf[:0], cause)
	s.tel.droppedEvents.Add(context.WithoutCancel(ctx), int64(r.Dropped))
	if errors.Is(cause, errShutdown) && r.Error != nil {
		r.Error.Message = "The gateway shut down before the response finished; retry it."
	}
	if clientGone {
		// The client left: stop upstream at once (deferred Close/cancel), keep what it received,
		// and record the response as cancelled (neither the model's incompleteness nor a gateway
		// failure; see the closing note of the Responses API issue).
		r.Status = store.StatusCancelled
		r.Error = &accumulator.ErrorObject{Code: "client_disconnected", Message: "The client closed the stream."}
		up.Close()
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

func (s *Server) watchStream(ctx context.Context, cancel context.CancelCauseFunc, t *turn, w *sseWriter, done <-chan struct{}) {
	tick := s.cfg.KeepAlive / 2
	if tick > time.Second {
		tick = time.Second
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	lastLease := time.Now()
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
				if w.write([]byte(": keepalive\n\n")) != nil {
					cancel(errClientGone)
					return
				}
			}
			if now.Sub(lastLease) >= s.cfg.LeaseTTL/3 {
				lastLease = now
				s.renewLeases(ctx, t)
			}
		}
	}
}

// keepLeases renews the turn's leases until done closes (non-streamed turns; streams renew from
// watchStream). Without renewal a turn longer than LeaseTTL would be swept as dead, and a second
// turn could start on its conversation.
func (s *Server) keepLeases(ctx context.Context, t *turn, done <-chan struct{}) {
	ticker := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer ticker.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.renewLeases(ctx, t)
		}
	}
}

// renewLeases moves the response's lease and the conversation's turn lease forward.
func (s *Server) renewLeases(ctx context.Context, t *turn) {
	exp := time.Now().Add(s.cfg.LeaseTTL)
	if t.leased.Load() {
		if err := s.store.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: t.rec.Tenant, ID: t.rec.ID,
			LeaseOwner: s.owner, LeaseExpiresAt: exp}); err != nil && ctx.Err() == nil {
			s.log.Warn("extend response lease", "response_id", t.rec.ID, "error", err)
		}
	}
	if t.convTurn.Load() {
		if err := s.store.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: t.rec.Tenant,
			ConversationID: t.req.ConversationID, ResponseID: t.rec.ID, ExpiresAt: exp}); err != nil && ctx.Err() == nil {
			s.log.Warn("extend conversation turn lease", "response_id", t.rec.ID, "error", err)
		}
	}
}

func conversationNotFound(id string) error {
	return wire.NotFound("conversation", "Conversation with id '%s' not found.", id)
}
