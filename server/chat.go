package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/chatbridge"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// The Chat Completions front door (docs/chat-completions.md, issue 18). A chat request is
// translated (chatbridge) into the Responses request the ordinary turn runs (serveTurn,
// prepareTurn, syncTurn, streamTurn: one upstream call, one accumulator), with the assistant
// messages whose visible identity matches a stored record replaced by the record's original
// items, reasoning included. The client sees chat chunks or a chat completion built from the
// accumulator's events and result, and the turn's items are captured as a new record before the
// terminal frame. Chat turns are not stored as responses (store:false).

// chatTurn is the chat face of one turn.
type chatTurn struct {
	s      *Server
	tenant string
	hist   *chatbridge.History // nil: over the canonical limits, no replay and no capture
	plan   *chatbridge.Plan
	chunks chatbridge.Chunker
	model  string
}

// createChatCompletion serves POST /v1/chat/completions.
func (s *Server) createChatCompletion(c echo.Context) error {
	ct, spec, origin, err := s.prepareChat(c)
	if err != nil {
		return err
	}
	out, err := s.engine.Serve(c.Request().Context(), spec, &chatDoor{httpDoor: httpDoor{s: s, c: c}, ct: ct})
	switch {
	case err != nil:
		return chatParam(err, origin)
	case spec.Stream:
		return nil // the chunks have been written
	}
	return ct.respond(c, out.Result)
}

// prepareChat reads and translates a chat request and plans its replay from the tenant's
// records (one store round trip): the Responses turn's spec, and the chat message each of its
// input items came from.
func (s *Server) prepareChat(c echo.Context) (*chatTurn, *engine.Spec, []int, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, nil, nil, err
	}
	members, err := scanObject(body, min(s.cfg.MaxJSONDepth, jsonscan.MaxDepth+1))
	if err != nil {
		return nil, nil, nil, err
	}
	req, err := chatbridge.Decode(members)
	if err != nil {
		return nil, nil, nil, err
	}
	ct := &chatTurn{s: s, tenant: tenant(c), plan: &chatbridge.Plan{}, model: req.Model}
	ct.chunks.IncludeUsage = req.IncludeUsage
	if s.cfg.ReasoningExposure == ExposureHidden {
		ct.chunks.Exposure = chatbridge.ExposeHidden // captured and replayed, never shown
	}
	ct.planReplay(c.Request().Context(), req)
	tr, err := req.ToResponses(ct.plan.Replace)
	if err != nil {
		return nil, nil, nil, err
	}
	creq, err := decodeCreate(tr.Body, s.cfg.MaxJSONDepth)
	if err != nil {
		return nil, nil, nil, chatParam(err, tr.Origin)
	}
	spec, err := creq.spec(tenant(c))
	if err != nil {
		return nil, nil, nil, err
	}
	spec.Face = ct
	return ct, spec, tr.Origin, nil
}

// chatDoor is a chat turn's engine.Door: its stream carries chat chunks.
type chatDoor struct {
	httpDoor
	ct *chatTurn
}

func (d *chatDoor) Prepared(p engine.Prepared) {
	d.httpDoor.Prepared(p)
	d.ct.chunks.Meta = chatbridge.Meta{ID: "chatcmpl-" + strings.TrimPrefix(p.ID, wire.PrefixResponse),
		Created: p.CreatedAt.Unix(), Model: d.ct.model}
}

func (d *chatDoor) Open() engine.Sink { return &chatSink{Sink: d.httpDoor.Open(), ct: d.ct} }

// planReplay identifies the request's visible history and plans its replay. A history over the
// canonical limits, or a store that cannot list records, means no replay, never an error.
func (ct *chatTurn) planReplay(ctx context.Context, req *chatbridge.Request) {
	s := ct.s
	hist, ok := chatbridge.Identify(req.Scope(ct.tenant), req.Messages, chatbridge.Limits{})
	if !ok {
		return
	}
	ct.hist = hist
	ends := hist.Candidates(req.Messages)
	if len(ends) == 0 {
		return
	}
	start := time.Now()
	recs, err := s.store.ReplayRecordList(ctx, &store.ReplayRecordListParams{Tenant: ct.tenant, Scope: hist.Scope, Ends: ends})
	s.tel.Store(ctx, "replay_record_list", start)
	if err != nil {
		s.log.Warn("chat replay records not loaded; sending the visible history as is", "error", err)
		return
	}
	records := make([]chatbridge.Record, len(recs))
	for i, r := range recs {
		records[i] = chatbridge.Record{Start: r.Start, End: r.End, Envelope: r.Envelope, Parent: r.Parent,
			Payload: r.Payload, Items: r.Items, Blocked: r.Blocked}
	}
	ct.plan = hist.Plan(req.Messages, records, s.cfg.ChatReplayMaxBytes)
	s.tel.ReplayHits.Add(ctx, int64(ct.plan.Hits))
	s.tel.ReplayMisses.Add(ctx, int64(ct.plan.Misses))
	s.tel.ReplayConflicts.Add(ctx, int64(ct.plan.Conflicts))
	s.tel.ReplayBytes.Add(ctx, int64(ct.plan.Bytes))
}

// chatParam makes a 400 about the translated Responses request name the chat message it came
// from.
func chatParam(err error, origin []int) error {
	var ae *wire.APIError
	if !errors.As(err, &ae) || ae.Param == "" {
		return err
	}
	out := *ae
	out.Param = chatbridge.MessageParam(ae.Param, origin)
	if out.Param != ae.Param {
		out.Message = strings.ReplaceAll(out.Message, ae.Param, out.Param)
	}
	return &out
}

// Observe is the accumulator's Observe (engine.Face): every client event becomes chat chunks.
func (ct *chatTurn) Observe(_ int64, typ wire.EventType, data []byte) { ct.chunks.Event(typ, data) }

// chatSink writes the chat chunks built from the events the relay would have written.
type chatSink struct {
	engine.Sink
	ct  *chatTurn
	buf []byte
}

func (k *chatSink) Write([]byte) error {
	k.buf = k.ct.chunks.Take(k.buf[:0])
	if len(k.buf) == 0 {
		return nil
	}
	return k.Sink.Write(k.buf)
}

func outcome(r *accumulator.Result) *chatbridge.Outcome {
	return &chatbridge.Outcome{Status: r.Status, Items: r.Output, Usage: r.Usage, IncompleteDetails: r.IncompleteDetails}
}

// Finished runs when the turn's result is final (engine.Face), before its terminal frame: it
// commits the capture, then queues the final chunks.
func (ct *chatTurn) Finished(ctx context.Context, r *accumulator.Result) {
	ct.capture(ctx, r)
	ct.chunks.Finish(outcome(r), r.Error)
}

// capture stores what the turn taught (issue 18 item 3): a completed turn's items as a record
// under the history it answered and the envelope its client will send back, descending from the
// last record replayed into it; a failed, incomplete or oversized turn stores nothing replayable
// and blocks the older records at its position. Records replayed into it are marked used. A
// capture that cannot be stored costs replay later, never this answer.
func (ct *chatTurn) capture(ctx context.Context, r *accumulator.Result) {
	s := ct.s
	if ct.hist == nil {
		return
	}
	p := &store.ReplayRecordSaveParams{Tenant: ct.tenant, Scope: ct.hist.Scope, Used: ct.plan.Used, Now: time.Now(),
		MaxPerScope: s.cfg.ChatReplayMaxRecords, Block: ct.hist.Position()}
	if r.Status == wire.StatusCompleted {
		if rec, ok := ct.hist.Capture(r.Output, ct.plan.Last); ok && rec.Bytes() <= s.cfg.ChatReplayMaxRecordBytes {
			p.Block = ""
			p.Record = &store.ReplayRecord{End: rec.End, Start: rec.Start, Envelope: rec.Envelope, Parent: rec.Parent,
				Payload: rec.Payload, Items: rec.Items}
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	defer cancel()
	start := time.Now()
	err := s.store.ReplayRecordSave(cctx, p)
	s.tel.Store(ctx, "replay_record_save", start)
	if err != nil {
		s.log.Warn("chat replay record not saved", "error", err)
	}
}

// respond writes a non-streamed chat completion, or the error of a turn that failed.
func (ct *chatTurn) respond(c echo.Context, r *accumulator.Result) error {
	if r.Status == wire.StatusFailed || r.Status == wire.StatusCancelled {
		e := r.Error
		if e == nil {
			e = &wire.ErrorObject{Code: "server_error", Message: "The response failed."}
		}
		return &wire.APIError{Status: http.StatusBadGateway, Type: wire.ErrServer, Code: e.Code, Message: e.Message}
	}
	out := chatbridge.AppendCompletion(make([]byte, 0, 1024), &ct.chunks.Meta, outcome(r), ct.chunks.Exposure)
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, out)
}
