package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// Stored failure reasons: each says what happened, so a record never blames a restart that did
// not happen (docs/operations.md lists them).
const (
	errNotStored    = "The response could not be stored: the store did not accept it."
	msgLeaseLost    = "The response's lease expired before it could be stored: the gateway could not renew it in time."
	msgDeleted      = "The response was deleted while it was in progress, so it was not stored."
	codeDeleted     = "response_deleted"
	msgSweptExpired = "The response's lease expired before it finished: the gateway serving it stopped, or lost the store, before storing it."
)

// finish applies the upstream result to the record and commits it. It first stops the turn's
// lease keeper and waits for it, so no renewal or event flush can run after the commit. On failure
// the result becomes failed with the reason, so the client is told the truth (docs/design.md §1 invariant
// 2), a failed record is stored as soon as the store takes it, and the error is returned.
func (s *Server) finish(ctx context.Context, t *turn, r *accumulator.Result) error {
	t.keeper.Stop()
	if r.Status == wire.StatusCompleted {
		t.rec.CompletedAt = unixPtr(time.Now())
	}
	s.applyResult(t, r)
	if t.chat != nil {
		t.chat.finished(ctx, r) // commits the replay capture before the terminal frame
	}
	if !t.req.Store {
		return nil
	}
	// A background turn's followers may be on other replicas (Notify wakes them).
	p := &store.ResponseCommitParams{Response: t.rec, Input: t.input, Output: r.Output, Begun: t.leased, Notify: t.claimed}
	if t.events != nil {
		p.Events = t.events.seal()
	}
	if t.convTurn.Load() && (r.Status == wire.StatusCompleted || r.Status == wire.StatusIncomplete) {
		p.ConversationID = t.req.ConversationID
	}
	err := s.commit(ctx, p)
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) && s.commitLanded(ctx, p) {
		err = nil
	}
	if err == nil {
		if p.ConversationID != "" {
			t.convTurn.Store(false) // the commit's append released the conversation's lease
		}
		s.releaseConversation(t)
		if t.chainGenOK {
			// Its continuation replays this history: keep it (chainCache), right while the
			// generation the turn's history was read at holds.
			s.chains.put(t.rec.Tenant, t.rec.ID, t.chainGen, appendTurnHistory(slices.Clip(t.history), p.Response.Status, t.input, p.Output),
				p.Response.Usage, t.projected)
		}
		if t.claimed {
			s.bgWake.wake(t.rec.ID)
		}
		s.logStored(ctx, t.rec.ID, r.Status, len(t.input), len(r.Output), len(p.Events))
		return nil
	}
	s.log.Error("commit response", "response_id", t.rec.ID, "error", err)
	r.Status = wire.StatusFailed
	switch {
	case errors.Is(err, store.ErrNotFound) && p.Begun:
		r.Error = &wire.ErrorObject{Code: codeDeleted, Message: msgDeleted}
	case errors.Is(err, store.ErrConflict):
		// The sweeper failed it after its lease expired (the contract of ResponseCommit).
		r.Error = &wire.ErrorObject{Code: "server_error", Message: msgLeaseLost}
	default:
		r.Error = &wire.ErrorObject{Code: "server_error", Message: errNotStored}
	}
	t.rec.CompletedAt = nil
	s.applyResult(t, r)
	if r.Error.Message == errNotStored && p.Begun {
		// The client has seen the id: store the failure as soon as the store is back, rather
		// than leave the record in progress until its lease expires and the sweeper guesses.
		failed := *p
		failed.Response, failed.Output, failed.ConversationID = t.rec, r.Output, ""
		s.storeFailure(t, &failed)
	} else {
		s.releaseConversation(t)
	}
	return err
}

// commit runs ResponseCommit with a few quick retries (it is idempotent), under CommitTimeout.
func (s *Server) commit(ctx context.Context, p *store.ResponseCommitParams) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	defer cancel()
	ctx, span := s.tel.tracer.Start(ctx, "store.commit", trace.WithAttributes(
		attribute.Int("respgate.input_items", len(p.Input)), attribute.Int("respgate.output_items", len(p.Output))))
	defer span.End()
	start := time.Now()
	defer s.tel.store(ctx, "response_commit", start)
	var err error
	for attempt := 1; ; attempt++ {
		err = s.store.ResponseCommit(ctx, p)
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) || attempt == 3 {
			return err
		}
		if sleepCtx(ctx, time.Duration(attempt)*50*time.Millisecond) != nil {
			return err
		}
	}
}

// commitLanded reads the response back after a commit that failed with an unknown outcome (a
// timeout, or a connection lost after COMMIT was sent): the transaction may have gone through.
// It reports true when the store holds the response with the status being committed, so the
// client is told what the store holds instead of a failure the store contradicts
// (integration/chaos: pg/ambiguous-commit, and the soak, where commits that timed out under load
// were stored completed while their clients were told failed).
func (s *Server) commitLanded(ctx context.Context, p *store.ResponseCommitParams) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.CommitTimeout, 5*time.Second))
	defer cancel()
	rec, _, err := s.store.ResponseGet(rctx, &store.ResponseGetParams{Tenant: p.Response.Tenant, ID: p.Response.ID})
	return err == nil && rec.Status == p.Response.Status
}

// storeFailure keeps trying, in the background, to store p (a failed record) until the store
// takes it, the record is already terminal or gone, or the server shuts down. The goroutine is
// owned by the server: Shutdown stops and waits for it.
func (s *Server) storeFailure(t *turn, p *store.ResponseCommitParams) {
	s.background.Add(1)
	go func() {
		defer s.background.Done()
		defer s.releaseConversation(t)
		wait := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CommitTimeout)
			err := s.store.ResponseCommit(ctx, p)
			cancel()
			if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				s.log.Info("failed response stored after the commit failed", "response_id", p.Response.ID, "error", err)
				return
			}
			select {
			case <-s.quit:
				s.log.Warn("shut down before a failed response could be stored; the sweeper will fail it", "response_id", p.Response.ID)
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
		}
	}()
}

// sleepCtx waits d or until ctx ends; it returns ctx's error if ctx has ended by then (also when
// both happened at once).
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
	return ctx.Err()
}

func (s *Server) applyResult(t *turn, r *accumulator.Result) {
	t.output = r.Output
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
