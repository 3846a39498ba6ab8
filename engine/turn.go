package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// Spec is one turn as a front door decoded it: the typed request, the members the lifecycle
// reads, and how the turn is to run.
type Spec struct {
	Tenant string
	// Request is the typed body (rehydrate reads it); Input its raw input.
	Request            *wire.CreateRequest
	Input              json.RawMessage
	Model              string
	PreviousResponseID string
	ConversationID     string
	Store              bool
	// Stream: the client's events go to the door's Sink as they happen; otherwise the turn is
	// one non-streamed upstream call and the door renders the Outcome.
	Stream bool
	// Background: the turn is stored queued with its job and run by a worker (docs/background.md).
	Background bool
	// WarmUp prepares the turn and runs no model ("generate": false): response.created then
	// response.completed with no output and zero usage, continuable like any other response.
	WarmUp bool
	// Echo is the response object's request-derived members, stored verbatim.
	Echo json.RawMessage
	// CompactThreshold is the request's context_management compaction threshold in tokens (0:
	// none; context.go).
	CompactThreshold int
	// Local is a WebSocket connection's cache of its store:false responses (nil: none).
	Local *SocketCache
	// Face, when set, sees the turn's client events and its final result (Chat Completions).
	Face Face
	// Steer, when set, lets the front door cut the streamed turn at its next output-item
	// boundary (steering: the turn ends incomplete, reason "steered").
	Steer *Steer
}

// Face is what a front door adds to a turn beyond its Sink: it observes every client event as
// the accumulator emits it, and hears the turn's final result before the terminal event is
// written (the Chat Completions door captures its replay record there).
type Face interface {
	Observe(seq int64, typ wire.EventType, data []byte)
	Finished(ctx context.Context, r *accumulator.Result)
}

// Door is a front door's side of one turn.
type Door interface {
	// Prepared is called once the turn is prepared, before anything is stored or sent upstream.
	Prepared(p Prepared)
	// Open opens the client's event stream (a streamed turn, once upstream has answered; a
	// warm-up at once).
	Open() Sink
}

// Prepared is what a door learns of a turn before it runs.
type Prepared struct {
	ID           string
	CreatedAt    time.Time
	DroppedTools []string // request tools the model cannot be given (ToolPolicyDrop)
	Truncated    int      // history items truncation:"auto" left out
}

// Outcome is what a turn came to.
type Outcome struct {
	// Response is the record as stored (or, store:false, as it would have been).
	Response store.Response
	// Result is the accumulated result (nil for a queued background turn or a warm-up).
	Result *accumulator.Result
	// History, Input and Output are what the turn continued, its new input and its output (raw,
	// as stored); Projected is the history's projection (nil if none). A WebSocket connection
	// caches them for the continuation of a store:false response.
	History, Input, Output []wire.Item
	Projected              *rehydrate.History
	view                   ItemView
}

// Visible is the output as the turn's client sees it (the reasoning exposure policy).
func (o *Outcome) Visible() []wire.Item { return o.view.Items(o.Output) }

// Turn is one turn in flight.
type Turn struct {
	engine *Engine
	rec    store.Response // the response record; Status etc. are final after the upstream ends
	store  bool           // the request's store
	input  []wire.Item    // the new input items to store
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
	// claimed: a background worker claimed the queued record (background.go), so there is no
	// in-progress record to write.
	claimed bool
	// include: the request asked for reasoning.encrypted_content (a background turn's worker
	// builds its view from it).
	include bool
	// convTurn: the conversation's turn lease is held. One owner releases it: the deferred
	// release of the entry path that took it (Serve, RunBackground), unless it was handed off
	// (handOff: a commit's conversation append ended it, the queue or storeFailure took it).
	convTurn atomic.Bool
	// keeper renews the leases and flushes events while the turn runs (nil: nothing to keep).
	keeper *leaseKeeper
	// events collects a stored stream's client events for its event log (nil: not logged).
	events *eventLog
	// view is how this turn's reasoning items reach the client (exposure policy, include).
	view ItemView
	// toolNames maps the flat names of namespaced function tools back to the client's
	// (rehydrate.Result.ToolNames), for the accumulator.
	toolNames map[string]wire.ToolName
	// face, when set, sees the client events and the final result (Spec.Face).
	face Face
	// chainGen is the lineage generation the previous_response_id history was read at (valid
	// when chainGenOK): the committed turn's history is cached for its continuation (chainCache).
	chainGen   int64
	chainGenOK bool
	// truncated counts the history items truncation:"auto" left out (X-Respgate-Truncated-Items).
	truncated int
	// routeKey keeps the turns of one chain on one upstream replica (upstream.Route.Key), and
	// prev is where the previous turn ran (upstream.Route.Prefer and Away).
	routeKey string
	prev     upstream.Served
	// prepend leads the output: the compaction item of automatic compaction (context.go),
	// streamed before the model's items and stored as the first output item.
	prepend []wire.Item
	// steer, when set, cuts the stream at its next output-item boundary (Spec.Steer).
	steer *Steer
}

// outcome is what t came to, with r its result (nil: none).
func (t *Turn) outcome(r *accumulator.Result) *Outcome {
	return &Outcome{Response: t.rec, Result: r, History: t.history, Input: t.input, Output: t.output,
		Projected: t.projected, view: t.view}
}

// Serve is the one lifecycle of a front door's turn (docs/design.md §1): admit it, prepare it
// (every 400 before anything is written or sent upstream), and run it as spec asks: queued
// (Background), prepared only (WarmUp), streamed into the door's Sink, or as one non-streamed
// call. The conversation lease Prepare takes is released here, in one deferred call, unless the
// turn handed it off. An error is returned only when nothing reached the client (the door
// renders it); a failure after the stream opened is in the stream and in the Outcome.
func (e *Engine) Serve(ctx context.Context, spec *Spec, door Door) (out *Outcome, err error) {
	err = e.Admitted(func() error {
		t, err := e.Prepare(ctx, spec)
		if err != nil {
			return err
		}
		defer t.release()
		door.Prepared(Prepared{ID: t.rec.ID, CreatedAt: t.rec.CreatedAt, DroppedTools: t.droppedTools, Truncated: t.truncated})
		switch {
		case spec.Background:
			out, err = e.enqueue(ctx, t)
		case spec.WarmUp:
			out, err = e.warmUp(ctx, t, spec.Stream, door.Open)
		case spec.Stream:
			out, err = e.streamHeld(ctx, t, door.Open)
		default:
			out, err = e.syncTurn(ctx, t)
		}
		return err
	})
	return out, err
}

// streamHeld counts a streamed turn against MaxConcurrentStreams (past it the answer is 503) and
// streams it.
func (e *Engine) streamHeld(ctx context.Context, t *Turn, open func() Sink) (*Outcome, error) {
	if max := e.cfg.MaxConcurrentStreams; max > 0 && e.streams.Load() >= int64(max) {
		return nil, &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "too_many_streams",
			Message: "The gateway is serving its maximum number of streams; retry shortly."}
	}
	e.streams.Add(1)
	defer e.streams.Add(-1)
	if err := e.streamTurn(ctx, t, open); err != nil {
		return nil, err
	}
	return t.outcome(nil), nil
}

// Prepare loads the history, resolves references, rehydrates and takes the conversation's turn
// lease. Nothing is written and nothing is sent upstream unless it succeeds; the caller owns the
// lease it took (release).
func (e *Engine) Prepare(ctx context.Context, spec *Spec) (*Turn, error) {
	return e.prepareTurn(ctx, spec.Tenant, spec, spec.Local)
}

// prepareTurn loads the history, resolves references, rehydrates and takes the conversation's turn
// lease. Nothing is written and nothing is sent upstream unless it succeeds. local, when not nil,
// is a WebSocket connection's cache of its store:false responses (socketCache).
func (e *Engine) prepareTurn(ctx context.Context, tn string, req *Spec, local *SocketCache) (*Turn, error) {
	src, err := e.loadSources(ctx, tn, req, local)
	if err != nil {
		return nil, err
	}
	history, gen, ex := src.history, src.info, src.ex
	// The previous response's usage sizes the turn (server/tokens.go); the id is minted before
	// compaction, whose archive record names the turn.
	ex.prevUsage = gen.usage
	respID := wire.NewID(wire.PrefixResponse)
	if err := e.manageContext(ctx, tn, req, ex, respID); err != nil { // compaction, truncation (server/context.go)
		return nil, err
	}
	bodyBuf := e.getBodyBuf()
	res, err := e.rehydrate(tn, req, src, bodyBuf)
	if err != nil {
		e.putBodyBuf(bodyBuf)
		if ae := (*wire.APIError)(nil); errors.As(err, &ae) && ae.Code == rehydrate.CodeItemIDConflict {
			e.tel.IdConflicts.Add(ctx, 1)
		}
		return nil, err
	}
	e.tel.Rehydrated(ctx, res.Stats, res.DroppedTools)
	if gen.ok && res.History != nil {
		e.chains.keepProjection(tn, req.PreviousResponseID, gen.gen, res.History)
	}
	if len(res.DroppedTools) > 0 {
		if e.cfg.ToolPolicy == ToolPolicyReject {
			return nil, wire.Invalid("tools", "unsupported_tool_type",
				"Tool type '%s' cannot be served by the upstream model; only function tools (and namespace tools of function tools) are supported.", res.DroppedTools[0])
		}
	}
	include := req.Request.Includes(wire.IncludeEncryptedReasoning)
	t := &Turn{engine: e, store: req.Store, include: include, face: req.Face, history: history, projected: res.History, chainGen: gen.gen, chainGenOK: gen.ok,
		input: res.Input, truncated: ex.truncated, prepend: ex.output, body: res.Body, bodyBuf: bodyBuf, toolNames: res.ToolNames,
		droppedTools: res.DroppedTools, view: e.View(tn, include), steer: req.Steer, rec: store.Response{
			ID:                 respID,
			Tenant:             tn,
			Status:             wire.StatusInProgress,
			Model:              req.Model,
			PreviousResponseID: req.PreviousResponseID,
			ConversationID:     req.ConversationID,
			CreatedAt:          time.Now(),
			Echo:               req.Echo,
		}}
	t.prev = gen.served
	switch {
	case len(history) > 0:
		t.routeKey = routeKey(tn, req, &history[0])
	case len(res.Input) > 0:
		t.routeKey = routeKey(tn, req, &res.Input[0])
	default:
		t.routeKey = routeKey(tn, req, nil)
	}
	if req.ConversationID != "" && req.Store {
		if err := e.acquireConversation(ctx, t, clientItems(res.Input, src.clientIDs)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// clientItems is the items of input whose id the client gave (ids), which a conversation's turn
// lease keeps (store.ConversationTurnAcquireParams.Items): minted ids cannot collide.
func clientItems(input []wire.Item, ids map[string]bool) []wire.Item {
	var out []wire.Item
	for _, it := range input {
		if ids[it.ID] {
			out = append(out, it)
		}
	}
	return out
}

// turnSources is what a turn (or a compaction) is built from: the request's parsed input, the
// history it continues, the items its references name, and both with compaction items expanded.
type turnSources struct {
	history []wire.Item
	info    historyInfo
	lookup  rehydrate.MapLookup
	param   string // the member that named the history: previous_response_id or conversation
	ex      *expanded
	// clientIDs are the ids the request's input items carry (a conversation turn's only).
	clientIDs map[string]bool
}

// loadSources parses and bounds the input, loads the history and the referenced items, and
// expands compaction items (server/compact.go). Nothing is written.
func (e *Engine) loadSources(ctx context.Context, tn string, req *Spec, local *SocketCache) (*turnSources, error) {
	input, err := rehydrate.ParseInput(req.Input)
	if err != nil {
		return nil, err
	}
	if len(input) > e.cfg.MaxInputItems {
		return nil, wire.Invalid("input", "array_above_max_length", "'input' may have at most %d items.", e.cfg.MaxInputItems)
	}
	src := &turnSources{param: "previous_response_id"}
	if req.ConversationID != "" {
		src.param = "conversation"
		for _, it := range input {
			if it.ID != "" {
				if src.clientIDs == nil {
					src.clientIDs = make(map[string]bool)
				}
				src.clientIDs[it.ID] = true
			}
		}
	}
	if src.history, src.info, err = e.loadHistory(ctx, tn, req, local); err != nil {
		return nil, err
	}
	if src.lookup, err = e.resolveReferences(ctx, tn, input); err != nil {
		return nil, err
	}
	if src.ex, err = e.expandCompactions(tn, src.history, input, src.param); err != nil {
		return nil, err
	}
	return src, nil
}

// rehydrate builds the vLLM-bound request from the (expanded) sources; its input is returned
// with compaction items restored.
// Its History is the projection of the loaded history (src.history), or nil when compaction or
// truncation replayed another one.
func (e *Engine) rehydrate(tn string, req *Spec, src *turnSources, buf *[]byte) (*rehydrate.Result, error) {
	p := &rehydrate.Params{History: src.ex.history, HistoryParam: src.param, Input: src.ex.input, Request: req.Request,
		Lookup: src.lookup, NewID: wire.NewID, Keys: e.ring, Tenant: tn, ReasoningContext: e.reasoningContext(req.Request)}
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
func (e *Engine) loadHistory(ctx context.Context, tn string, req *Spec, local *SocketCache) ([]wire.Item, historyInfo, error) {
	if req.PreviousResponseID == "" && req.ConversationID == "" {
		return nil, historyInfo{}, nil
	}
	if !req.Store && req.PreviousResponseID != "" {
		if history, info, ok := local.get(req.PreviousResponseID); ok {
			return history, info, nil
		}
	}
	hctx, span := e.tel.Tracer.Start(ctx, "history.load")
	defer span.End()
	start := time.Now()
	if req.ConversationID != "" {
		history, err := e.store.ConversationItemsAll(hctx, &store.ConversationItemsAllParams{Tenant: tn, ConversationID: req.ConversationID})
		e.tel.Store(ctx, "conversation_items_all", start)
		if errors.Is(err, store.ErrNotFound) {
			return nil, historyInfo{}, conversationNotFound(req.ConversationID)
		}
		span.SetAttributes(attribute.Int("respgate.history_items", len(history)))
		return history, historyInfo{}, err
	}
	if history, info, ok := e.chains.get(hctx, e.store, tn, req.PreviousResponseID); ok {
		e.tel.Store(ctx, "chain_generation", start)
		span.SetAttributes(attribute.Int("respgate.history_items", len(history)), attribute.Bool("respgate.history_cached", true))
		return history, info, nil
	}
	history, info, err := e.loadChain(hctx, tn, req.PreviousResponseID)
	e.tel.Store(ctx, "response_chain_get", start)
	if err != nil {
		return nil, historyInfo{}, err
	}
	e.chains.put(tn, req.PreviousResponseID, info.gen, history, historyInfo{usage: info.usage, served: info.served})
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
	// served is where the previous response ran: that replica's prefix cache holds the chain
	// (upstream.Route.Prefer and Away).
	served upstream.Served
}

// loadChain loads the history a continuation of id replays from the store, with the lineage
// generation it was read at.
func (e *Engine) loadChain(ctx context.Context, tn, id string) ([]wire.Item, historyInfo, error) {
	chain, err := e.store.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: tn, ID: id})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_not_found",
			"Previous response with id '%s' not found.", id)
	case err != nil:
		return nil, historyInfo{}, err
	case chain.Missing != "":
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_not_found",
			"Previous response with id '%s' not found: it is an ancestor of '%s' and was deleted.", chain.Missing, id)
	}
	if n := len(chain.Turns); n > 0 && !chain.Turns[n-1].Response.Status.Terminal() {
		return nil, historyInfo{}, wire.Invalid("previous_response_id", "previous_response_in_progress",
			"Previous response with id '%s' is still in progress.", id)
	}
	info := historyInfo{gen: chain.Generation, ok: true}
	if n := len(chain.Turns); n > 0 {
		last := &chain.Turns[n-1].Response
		info.usage, info.served = last.Usage, servedOf(last)
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
func (e *Engine) resolveReferences(ctx context.Context, tn string, input []wire.Item) (rehydrate.MapLookup, error) {
	refs := rehydrate.ReferencedIDs(input)
	if len(refs) == 0 {
		return nil, nil
	}
	found, err := e.store.ItemGetMany(ctx, &store.ItemGetManyParams{Tenant: tn, IDs: refs})
	return rehydrate.MapLookup(found), err
}

// acquireConversation takes the conversation's turn lease for t (409 while another turn holds it),
// keeping items, the input items that carry the client's ids: an item added to the conversation
// since the turn read it with one of their ids and other content is a 400, as rehydration's
// check of the history read is, and none can be added while the lease is held.
func (e *Engine) acquireConversation(ctx context.Context, t *Turn, items []wire.Item) error {
	id := t.rec.ConversationID
	err := e.store.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{
		Tenant: t.rec.Tenant, ConversationID: id, ResponseID: t.rec.ID, ExpiresAt: time.Now().Add(e.cfg.LeaseTTL), Items: items})
	var ce *store.ItemIDConflictError
	switch {
	case errors.As(err, &ce) && ce.Index < len(items):
		e.tel.IdConflicts.Add(ctx, 1)
		return wire.Invalid("input", rehydrate.CodeItemIDConflict,
			"Item '%s' in 'input' has the same id as an item of conversation '%s' but different content; an id must always name the same item.",
			wire.Clip(items[ce.Index].ID), id)
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
func (e *Engine) begin(ctx context.Context, t *Turn) <-chan error {
	ch := make(chan error, 1)
	if !t.store || t.claimed {
		ch <- nil
		return ch
	}
	// The record as it is now: the connect that runs meanwhile sets t.rec.Replica (the commit
	// stores it).
	p := &store.ResponseBeginParams{Response: t.rec, Input: t.input, LeaseOwner: e.owner, LeaseExpiresAt: time.Now().Add(e.cfg.LeaseTTL)}
	go func() {
		// Bounded as the commit is: a stalled store fails the turn with a clear error within
		// CommitTimeout instead of holding the connect and the shutdown drain.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CommitTimeout)
		defer cancel()
		start := time.Now()
		err := e.store.ResponseBegin(bctx, p)
		e.tel.Store(ctx, "response_begin", start)
		if err != nil && bctx.Err() != nil {
			err = errStoreStalled
		}
		ch <- err
	}()
	return ch
}

// errStoreStalled answers a turn whose in-progress record the store did not take within
// CommitTimeout: nothing was stored, and no id was sent.
var errStoreStalled = &wire.APIError{Status: http.StatusServiceUnavailable, Type: wire.ErrServer, Code: "store_unavailable",
	Message: "The gateway's store did not answer in time; nothing was stored. Retry shortly.", RetryAfter: retryAfter}

// servedOf is where stored response r ran (upstream.Served), and setServed records on r where
// its call ran: the two columns the next turn's route reads back.
func servedOf(r *store.Response) upstream.Served {
	return upstream.Served{Replica: r.Replica, Away: r.ReplicaAway}
}

func setServed(r *store.Response, s upstream.Served) { r.Replica, r.ReplicaAway = s.Replica, s.Away }

// route is what the upstream is told of t's call (upstream.Route).
func (e *Engine) route(t *Turn) upstream.Route {
	return upstream.Route{Model: t.rec.Model, Key: t.routeKey, Prefer: t.prev.Replica, Away: t.prev.Away}
}

func (e *Engine) accOptions(t *Turn) accumulator.Options {
	var observe func(int64, wire.EventType, []byte)
	switch {
	case t.events != nil:
		observe = t.events.observe
	case t.face != nil:
		observe = t.face.Observe
	}
	return accumulator.Options{
		ResponseID:    t.rec.ID,
		NewID:         wire.NewID,
		ToolNames:     t.toolNames,
		Observe:       observe,
		MaxItems:      e.cfg.MaxOutputItems,
		MaxItemBytes:  e.cfg.MaxOutputItemBytes,
		MaxTotalBytes: e.cfg.MaxOutputBytes,
		Reasoning:     accumulator.ReasoningOptions{Seal: t.view.sealer(), Hide: t.view.hide},
		Prepend:       t.prepend,
		Render: func(snap *accumulator.Snapshot) []byte {
			r := t.rec
			r.Status = snap.Status
			r.Usage, r.IncompleteDetails = snap.Usage, snap.IncompleteDetails
			if snap.Error != nil {
				r.Error = errorJSON(snap.Error.Code, snap.Error.Message)
			}
			return RenderResponse(nil, &r, t.view.Items(snap.Output))
		},
	}
}

// failBeforeStream records a turn that failed before the client saw anything (upstream refused,
// unreachable…): the response is stored as failed so its record is terminal, and the error goes
// to the client as an envelope.
func (e *Engine) failBeforeStream(ctx context.Context, t *Turn, cause error) error {
	// The stored error is the one the client gets (code and message), e.g. rate_limit_exceeded
	// or upstream_timeout, never a vaguer one.
	obj := failureObject(cause)
	if obj == nil {
		obj = &wire.ErrorObject{Code: "server_error", Message: "The upstream model server failed."}
	}
	_ = e.finish(ctx, t, &accumulator.Result{Status: wire.StatusFailed, Error: obj})
	return cause
}

// createSync is one non-streamed upstream call, traced as span and timed, cut past SyncTimeout
// (upstream maps the caller's deadline to 504 upstream_timeout).
func (e *Engine) createSync(ctx context.Context, span string, rt upstream.Route, body []byte) ([]byte, upstream.Served, error) {
	uctx, sp := e.tel.Tracer.Start(ctx, span)
	defer sp.End()
	uctx, cancel := context.WithTimeoutCause(uctx, e.cfg.SyncTimeout, errSyncTimeout)
	defer cancel()
	start := time.Now()
	raw, served, err := e.upstream.Create(uctx, rt, body)
	e.tel.UpstreamLatency.Record(ctx, time.Since(start).Seconds())
	return raw, served, err
}

// syncTurn serves stream:false: one upstream call, normalised by the accumulator's FromResponse so
// the stored items equal what a streamed turn would have stored.
func (e *Engine) syncTurn(ctx context.Context, t *Turn) (*Outcome, error) {
	// No in-progress record: the client sees the id only in the final answer, which is sent after
	// the commit, so a crash mid-turn leaves nothing a client could ask for, and the turn saves a
	// write. The conversation's turn lease (if any) is kept alive while vLLM generates.
	t.keeper = e.startKeeper(t)
	defer t.keeper.Stop()
	raw, served, upErr := e.createSync(ctx, "upstream.create", e.route(t), t.body)
	setServed(&t.rec, served)
	if upErr != nil {
		if ctx.Err() != nil {
			_ = e.finish(ctx, t, &accumulator.Result{Status: wire.StatusCancelled,
				Error: &wire.ErrorObject{Code: "client_disconnected", Message: "The client closed the request."}})
			return nil, ctx.Err()
		}
		return nil, e.failBeforeStream(ctx, t, upErr)
	}
	r, err := accumulator.FromResponse(e.accOptions(t), raw)
	if err != nil {
		e.log.Warn("upstream answer not usable", "response_id", t.rec.ID, "bytes", len(raw))
		return nil, e.failBeforeStream(ctx, t, &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer,
			Code: "bad_upstream_response", Message: "The upstream model server sent an answer the gateway cannot read."})
	}
	if err := e.finish(ctx, t, r); err != nil {
		return nil, &wire.APIError{Status: http.StatusInternalServerError, Type: wire.ErrServer, Code: "server_error", Message: r.Error.Message}
	}
	return t.outcome(r), nil
}
