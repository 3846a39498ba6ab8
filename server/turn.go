package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"

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
	// history is what the turn continues (previous turns' items or the conversation's), and
	// output the response's items once it has ended: a WebSocket connection caches both.
	history, output []wire.Item
	// projected is the history's projection (rehydrate.Result.History; nil if none), which the
	// chain cache keeps with the committed turn's history for its continuation.
	projected *rehydrate.History
	// droppedTools names the request tools the model cannot be given (ToolPolicyDrop).
	droppedTools []string
	body         []byte // the vLLM-bound request
	// bodyBuf holds body's buffer (bodyBufs) until a streamed turn lends it to the upstream
	// transport, which gives it back (connect); nil once lent.
	bodyBuf *[]byte
	// leased: ResponseBegin stored the in-progress record (and the input). It is set before the
	// keeper starts and not changed after.
	leased bool
	// claimed: a background worker claimed the queued record (server/background.go), so there
	// is no in-progress record to write.
	claimed bool
	// convTurn: the conversation's turn lease is held (atomic: released at most once).
	convTurn atomic.Bool
	// keeper renews the leases and flushes events while the turn runs (nil: nothing to keep).
	keeper *leaseKeeper
	// events collects a stored stream's client events for its event log (nil: not logged).
	events *eventLog
	// view is how this turn's reasoning items reach the client (exposure policy, include).
	view itemView
	// toolNames maps the flat names of namespaced function tools back to the client's
	// (rehydrate.Result.ToolNames), for the accumulator.
	toolNames map[string]wire.ToolName
	// chat, when set, is a Chat Completions turn (server/chat.go): the client sees chat chunks
	// or a chat completion, and the result is captured for replay before the terminal frame.
	chat *chatTurn
	// chainGen is the lineage generation the previous_response_id history was read at (valid
	// when chainGenOK): the committed turn's history is cached for its continuation (chainCache).
	chainGen   int64
	chainGenOK bool
	// truncated counts the history items truncation:"auto" left out (X-Respgate-Truncated-Items).
	truncated int
	// prepend leads the output: the compaction item of automatic compaction (server/context.go),
	// streamed before the model's items and stored as the first output item.
	prepend []wire.Item
}

// createResponse is the turn lifecycle of docs/design.md §1: validate, load history in one round trip,
// rehydrate (which may reject), mark in progress concurrently with the upstream connect, relay,
// commit, and only then send the terminal event.
func (s *Server) createResponse(c echo.Context) error {
	return s.serveTurn(c, func(c echo.Context) (*turn, error) {
		req, err := s.readCreate(c)
		if err != nil {
			return nil, err
		}
		if req.echo.Background {
			req.body.Stream = true // its worker streams from vLLM into the event log (docs/background.md)
		}
		return s.prepareTurn(c.Request().Context(), tenant(c), req, nil)
	})
}

// serveTurn admits a turn, prepares it (prepare reads and validates the request; it writes
// nothing) and runs it streamed or not: the one lifecycle of POST /v1/responses and POST
// /v1/chat/completions (server/chat.go).
func (s *Server) serveTurn(c echo.Context, prepare func(echo.Context) (*turn, error)) error {
	return s.admitted(func() error {
		t, err := prepare(c)
		if err != nil {
			return err
		}
		if len(t.droppedTools) > 0 {
			c.Response().Header().Set("X-Respgate-Dropped-Tools", strings.Join(t.droppedTools, ","))
		}
		if t.truncated > 0 {
			c.Response().Header().Set("X-Respgate-Truncated-Items", strconv.Itoa(t.truncated))
		}
		if t.req.echo.Background {
			return s.serveBackground(c, t) // docs/background.md
		}
		if t.req.Stream {
			release, err := s.holdStream(t)
			if err != nil {
				return err
			}
			defer release()
			return s.streamTurn(c.Request().Context(), t, func() eventSink { return s.openStream(c) })
		}
		return s.syncTurn(c, t)
	})
}

var errShuttingDown = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "shutting_down",
	Message: "The gateway is shutting down; retry on another instance."}

// holdStream counts a streamed turn (HTTP or WebSocket) against MaxConcurrentStreams; past it the
// turn's conversation lease is released and the answer is 503. Call release when the turn ends.
func (s *Server) holdStream(t *turn) (release func(), err error) {
	if max := s.cfg.MaxConcurrentStreams; max > 0 && s.streams.Load() >= int64(max) {
		s.releaseConversation(t)
		return nil, &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "too_many_streams",
			Message: "The gateway is serving its maximum number of streams; retry shortly."}
	}
	s.streams.Add(1)
	return func() { s.streams.Add(-1) }, nil
}

// prepareTurn loads the history, resolves references, rehydrates and takes the conversation's turn
// lease. Nothing is written and nothing is sent upstream unless it succeeds. local, when not nil,
// is a WebSocket connection's cache of its store:false responses (socketCache).
func (s *Server) prepareTurn(ctx context.Context, tn string, req *createRequest, local *socketCache) (*turn, error) {
	src, err := s.loadSources(ctx, tn, req, local)
	if err != nil {
		return nil, err
	}
	history, gen, ex := src.history, src.info, src.ex
	// The previous response's usage sizes the turn (server/tokens.go); the id is minted before
	// compaction, whose archive record names the turn.
	ex.prevUsage = gen.usage
	respID := wire.NewID(wire.PrefixResponse)
	if err := s.manageContext(ctx, tn, req, ex, respID); err != nil { // compaction, truncation (server/context.go)
		return nil, err
	}
	bodyBuf := s.getBodyBuf()
	res, err := s.rehydrate(tn, req, src, bodyBuf)
	if err != nil {
		s.putBodyBuf(bodyBuf)
		if ae := (*wire.APIError)(nil); errors.As(err, &ae) && ae.Code == rehydrate.CodeItemIDConflict {
			s.tel.idConflicts.Add(ctx, 1)
		}
		return nil, err
	}
	s.tel.rehydrated(ctx, res.Stats, res.DroppedTools)
	if gen.ok && res.History != nil {
		s.chains.keepProjection(tn, req.PreviousResponseID, gen.gen, res.History)
	}
	if len(res.DroppedTools) > 0 {
		if s.cfg.ToolPolicy == ToolPolicyReject {
			return nil, wire.Invalid("tools", "unsupported_tool_type",
				"Tool type '%s' cannot be served by the upstream model; only function tools (and namespace tools of function tools) are supported.", res.DroppedTools[0])
		}
	}
	echoJSON, err := jsonMarshal(req.echo)
	if err != nil {
		return nil, err
	}
	t := &turn{req: req, history: history, projected: res.History, chainGen: gen.gen, chainGenOK: gen.ok, input: res.Input, truncated: ex.truncated, prepend: ex.output, body: res.Body, bodyBuf: bodyBuf, toolNames: res.ToolNames, droppedTools: res.DroppedTools,
		view: s.view(tn, req.body.Includes(wire.IncludeEncryptedReasoning)), rec: store.Response{
			ID:                 respID,
			Tenant:             tn,
			Status:             wire.StatusInProgress,
			Model:              req.Model,
			PreviousResponseID: req.PreviousResponseID,
			ConversationID:     req.ConversationID,
			CreatedAt:          time.Now(),
			Echo:               echoJSON,
		}}
	if req.ConversationID != "" && req.Store {
		if err := s.acquireConversation(ctx, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// turnSources is what a turn (or a compaction) is built from: the request's parsed input, the
// history it continues, the items its references name, and both with compaction items expanded.
type turnSources struct {
	history []wire.Item
	info    historyInfo
	lookup  rehydrate.MapLookup
	param   string // the member that named the history: previous_response_id or conversation
	ex      *expanded
}

// loadSources parses and bounds the input, loads the history and the referenced items, and
// expands compaction items (server/compact.go). Nothing is written.
func (s *Server) loadSources(ctx context.Context, tn string, req *createRequest, local *socketCache) (*turnSources, error) {
	input, err := rehydrate.ParseInput(req.Input)
	if err != nil {
		return nil, err
	}
	if len(input) > s.cfg.MaxInputItems {
		return nil, wire.Invalid("input", "array_above_max_length", "'input' may have at most %d items.", s.cfg.MaxInputItems)
	}
	src := &turnSources{param: "previous_response_id"}
	if req.ConversationID != "" {
		src.param = "conversation"
	}
	if src.history, src.info, err = s.loadHistory(ctx, tn, req, local); err != nil {
		return nil, err
	}
	if src.lookup, err = s.resolveReferences(ctx, tn, input); err != nil {
		return nil, err
	}
	if src.ex, err = s.expandCompactions(tn, src.history, input, src.param); err != nil {
		return nil, err
	}
	return src, nil
}

// rehydrate builds the vLLM-bound request from the (expanded) sources; its input is returned
// with compaction items restored.
// Its History is the projection of the loaded history (src.history), or nil when compaction or
// truncation replayed another one.
func (s *Server) rehydrate(tn string, req *createRequest, src *turnSources, buf *[]byte) (*rehydrate.Result, error) {
	p := &rehydrate.Params{History: src.ex.history, HistoryParam: src.param, Input: src.ex.input, Request: req.body,
		Lookup: src.lookup, NewID: wire.NewID, Keys: s.ring, Tenant: tn, ReasoningContext: s.reasoningContext(req.body)}
	loaded := sameItems(src.ex.history, src.history)
	if loaded {
		p.Prepared = src.info.prep
	}
	if buf != nil {
		p.Buf = *buf
	}
	res, err := rehydrate.Build(p)
	if err != nil {
		return nil, err
	}
	if buf != nil {
		*buf = res.Body
	}
	if !loaded {
		res.History = nil
	}
	res.Input = src.ex.restore(res.Input)
	return res, nil
}

// sameItems reports whether a and b are the same slice of items (not merely equal ones).
func sameItems(a, b []wire.Item) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// loadHistory loads the history a turn continues, in one round trip: a previous_response_id
// chain (chainHistory) or a conversation's items. A store:false turn on a WebSocket connection
// first looks in the connection's cache (local), without a round trip.
func (s *Server) loadHistory(ctx context.Context, tn string, req *createRequest, local *socketCache) ([]wire.Item, historyInfo, error) {
	if req.PreviousResponseID == "" && req.ConversationID == "" {
		return nil, historyInfo{}, nil
	}
	if !req.Store && req.PreviousResponseID != "" {
		if history, info, ok := local.get(req.PreviousResponseID); ok {
			return history, info, nil
		}
	}
	hctx, span := s.tel.tracer.Start(ctx, "history.load")
	defer span.End()
	start := time.Now()
	if req.ConversationID != "" {
		history, err := s.store.ConversationItemsAll(hctx, &store.ConversationItemsAllParams{Tenant: tn, ConversationID: req.ConversationID})
		s.tel.store(ctx, "conversation_items_all", start)
		if errors.Is(err, store.ErrNotFound) {
			return nil, historyInfo{}, conversationNotFound(req.ConversationID)
		}
		span.SetAttributes(attribute.Int("respgate.history_items", len(history)))
		return history, historyInfo{}, err
	}
	if history, info, ok := s.chains.get(hctx, s.store, tn, req.PreviousResponseID); ok {
		s.tel.store(ctx, "chain_generation", start)
		span.SetAttributes(attribute.Int("respgate.history_items", len(history)), attribute.Bool("respgate.history_cached", true))
		return history, info, nil
	}
	history, info, err := s.loadChain(hctx, tn, req.PreviousResponseID)
	s.tel.store(ctx, "response_chain_get", start)
	if err != nil {
		return nil, historyInfo{}, err
	}
	s.chains.put(tn, req.PreviousResponseID, info.gen, history, info.usage, nil)
	span.SetAttributes(attribute.Int("respgate.history_items", len(history)))
	return history, info, nil
}

// historyInfo is what a turn knows of the history it loaded beyond its items: the lineage
// generation a previous_response_id history was read at (valid when ok), and the previous
// response's usage (JSON; nil when unknown, e.g. a conversation), which sizes the turn for
// automatic compaction (server/tokens.go).
type historyInfo struct {
	gen   int64
	ok    bool
	usage json.RawMessage
	// prep is the projection of a prefix of the history, from the chain cache (chainEntry.prep).
	prep *rehydrate.History
}

// loadChain loads the history a continuation of id replays from the store, with the lineage
// generation it was read at.
func (s *Server) loadChain(ctx context.Context, tn, id string) ([]wire.Item, historyInfo, error) {
	req := &createRequest{PreviousResponseID: id}
	chain, err := s.store.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tn, ID: id})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_not_found",
			"Previous response with id '%s' not found.", req.PreviousResponseID)
	case err != nil:
		return nil, historyInfo{}, err
	case chain.Missing != "":
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_not_found",
			"Previous response with id '%s' not found: it is an ancestor of '%s' and was deleted.", chain.Missing, req.PreviousResponseID)
	}
	if n := len(chain.Turns); n > 0 && !chain.Turns[n-1].Response.Status.Terminal() {
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_in_progress",
			"Previous response with id '%s' is still in progress.", req.PreviousResponseID)
	}
	info := historyInfo{gen: chain.Generation, ok: true}
	if n := len(chain.Turns); n > 0 {
		info.usage = chain.Turns[n-1].Response.Usage
	}
	return chainHistory(chain), info, nil
}

// chainHistory flattens a chain into the history a continuation replays: each turn's input then
// its output, oldest first. A turn that failed or was cancelled (a cut stream, a crash) keeps its
// input, so the user's turn is never dropped, but of its output only the items that finished: an
// item cut short (status other than "completed") is not replayed as if the model had said it
// (docs/clients.md, "Continuing from a failed response"). An incomplete response (e.g. its
// max_output_tokens ran out) is replayed whole, as OpenAI does.
func chainHistory(chain *store.Chain) []wire.Item {
	n := 0
	for _, ct := range chain.Turns {
		n += len(ct.Input) + len(ct.Output)
	}
	history := make([]wire.Item, 0, n)
	for _, ct := range chain.Turns {
		history = appendTurnHistory(history, ct.Response.Status, ct.Input, ct.Output)
	}
	return history
}

// itemFinished reports whether a stored output item has status "completed".
func itemFinished(it wire.Item) bool {
	var v struct {
		Status string `json:"status"`
	}
	return json.Unmarshal(it.JSON, &v) == nil && v.Status == "completed"
}

// resolveReferences loads the stored items that input's item_reference entries name, in one
// query. A reference not found is left out: rehydrate answers the 400 that names it.
func (s *Server) resolveReferences(ctx context.Context, tn string, input []wire.Item) (rehydrate.MapLookup, error) {
	refs := rehydrate.ReferencedIDs(input)
	if len(refs) == 0 {
		return nil, nil
	}
	found, err := s.store.ItemGetMany(ctx, &store.ItemGetManyParams{Tenant: tn, IDs: refs})
	return rehydrate.MapLookup(found), err
}

// acquireConversation takes the conversation's turn lease for t (409 while another turn holds it).
func (s *Server) acquireConversation(ctx context.Context, t *turn) error {
	id := t.req.ConversationID
	err := s.store.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{
		Tenant: t.rec.Tenant, ConversationID: id, ResponseID: t.rec.ID, ExpiresAt: time.Now().Add(s.cfg.LeaseTTL)})
	switch {
	case errors.Is(err, store.ErrConflict):
		return wire.Conflict("conversation", "conversation_locked",
			"Another response is in progress for conversation '%s'; retry when it has finished.", id)
	case errors.Is(err, store.ErrNotFound):
		return conversationNotFound(id)
	case err != nil:
		return err
	}
	t.convTurn.Store(true)
	return nil
}

// begin writes the in-progress record concurrently with the upstream connect, so the database's
// commit latency is not added to time-to-first-byte; the caller waits for it before the client can
// see the id.
func (s *Server) begin(ctx context.Context, t *turn) <-chan error {
	ch := make(chan error, 1)
	if !t.req.Store || t.claimed {
		ch <- nil
		return ch
	}
	go func() {
		start := time.Now()
		err := s.store.ResponseBegin(context.WithoutCancel(ctx), &store.ResponseBeginParams{
			Response: t.rec, Input: t.input, LeaseOwner: s.owner, LeaseExpiresAt: time.Now().Add(s.cfg.LeaseTTL)})
		s.tel.store(ctx, "response_begin", start)
		ch <- err
	}()
	return ch
}

func (s *Server) accOptions(t *turn) accumulator.Options {
	var observe func(int64, wire.EventType, []byte)
	switch {
	case t.events != nil:
		observe = t.events.observe
	case t.chat != nil:
		observe = t.chat.observe
	}
	return accumulator.Options{
		ResponseID:    t.rec.ID,
		NewID:         wire.NewID,
		ToolNames:     t.toolNames,
		Observe:       observe,
		MaxItems:      s.cfg.MaxOutputItems,
		MaxItemBytes:  s.cfg.MaxOutputItemBytes,
		MaxTotalBytes: s.cfg.MaxOutputBytes,
		Reasoning:     accumulator.ReasoningOptions{Seal: t.view.sealer(), Hide: t.view.hide},
		Prepend:       t.prepend,
		Render: func(snap *accumulator.Snapshot) []byte {
			r := t.rec
			r.Status = snap.Status
			r.Usage, r.IncompleteDetails = snap.Usage, snap.IncompleteDetails
			if snap.Error != nil {
				r.Error = errorJSON(snap.Error.Code, snap.Error.Message)
			}
			return renderResponse(nil, &r, t.view.items(snap.Output))
		},
	}
}

// failBeforeStream records a turn that failed before the client saw anything (upstream refused,
// unreachable…): the response is stored as failed so its record is terminal, and the error goes
// to the client as an envelope.
func (s *Server) failBeforeStream(ctx context.Context, t *turn, cause error) error {
	// The stored error is the one the client gets (code and message), e.g. rate_limit_exceeded
	// or upstream_timeout, never a vaguer one.
	obj := failureObject(cause)
	if obj == nil {
		obj = &wire.ErrorObject{Code: "server_error", Message: "The upstream model server failed."}
	}
	_ = s.finish(ctx, t, &accumulator.Result{Status: wire.StatusFailed, Error: obj})
	return cause
}

// createSync is one non-streamed upstream call, traced as span and timed, cut past SyncTimeout
// (upstream maps the caller's deadline to 504 upstream_timeout).
func (s *Server) createSync(ctx context.Context, span string, body []byte) ([]byte, error) {
	uctx, sp := s.tel.tracer.Start(ctx, span)
	defer sp.End()
	uctx, cancel := context.WithTimeoutCause(uctx, s.cfg.SyncTimeout, errSyncTimeout)
	defer cancel()
	start := time.Now()
	raw, _, err := s.upstream.Create(uctx, upstream.Route{}, body)
	s.tel.upstreamLatency.Record(ctx, time.Since(start).Seconds())
	return raw, err
}

// syncTurn serves stream:false: one upstream call, normalised by the accumulator's FromResponse so
// the stored items equal what a streamed turn would have stored.
func (s *Server) syncTurn(c echo.Context, t *turn) error {
	// No in-progress record: the client sees the id only in the final answer, which is sent after
	// the commit, so a crash mid-turn leaves nothing a client could ask for, and the turn saves a
	// write. The conversation's turn lease (if any) is kept alive while vLLM generates.
	ctx := c.Request().Context()
	t.keeper = s.startKeeper(t)
	defer t.keeper.Stop()
	raw, upErr := s.createSync(ctx, "upstream.create", t.body)
	if upErr != nil {
		if ctx.Err() != nil {
			_ = s.finish(ctx, t, &accumulator.Result{Status: wire.StatusCancelled,
				Error: &wire.ErrorObject{Code: "client_disconnected", Message: "The client closed the request."}})
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
	if t.chat != nil {
		return t.chat.respond(c, r)
	}
	out := renderResponse(make([]byte, 0, 1024), &t.rec, t.view.items(r.Output))
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
}
