package engine

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
	MsgNotStored    = "The response could not be stored: the store did not accept it."
	MsgLeaseLost    = "The response's lease expired before it could be stored: the gateway could not renew it in time."
	MsgDeleted      = "The response was deleted while it was in progress, so it was not stored."
	CodeDeleted     = "response_deleted"
	MsgSweptExpired = "The response's lease expired before it finished: the gateway serving it stopped, or lost the store, before storing it."
)

// finish applies the upstream result to the record and commits it. It first stops the turn's
// lease keeper and the engine's flushes of its event log and waits for them, so no renewal or
// event flush can run after the commit. On failure the result becomes failed with the reason, so
// the client is told the truth (docs/design.md §1 invariant 2), a failed record is stored as soon
// as the store takes it, and the error is returned.
func (e *Engine) finish(ctx context.Context, t *Turn, r *accumulator.Result) error {
	t.keeper.Stop()
	e.appender.remove(t)
	if r.Status == wire.StatusCompleted {
		t.rec.CompletedAt = unixPtr(time.Now())
	}
	e.applyResult(t, r)
	if t.face != nil {
		t.face.Finished(ctx, r) // e.g. the chat door commits its replay capture before the terminal frame
	}
	if !t.store {
		return nil
	}
	// A background turn's followers may be on other replicas (Notify wakes them).
	p := &store.ResponseCommitParams{Response: t.rec, Input: t.input, Output: r.Output, Begun: t.leased, Notify: t.claimed}
	if t.events != nil {
		p.Events = t.events.seal()
	}
	if t.convTurn.Load() {
		// The terminal record ends the conversation's turn lease in its own transaction: with
		// the append of a turn that finished, without one otherwise, so the conversation is free
		// the moment its client can see the turn ended.
		if r.Status == wire.StatusCompleted || r.Status == wire.StatusIncomplete {
			p.ConversationID = t.rec.ConversationID
		} else {
			p.ReleaseTurn = t.rec.ConversationID
		}
	}
	err := e.commit(ctx, p)
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) && e.commitLanded(ctx, p) {
		err = nil
	}
	if err == nil {
		if p.ConversationID != "" || p.ReleaseTurn != "" {
			t.handOff() // the commit ended the conversation's lease
		}
		if t.chainGenOK {
			// Its continuation replays this history: keep it (chainCache), right while the
			// generation the turn's history was read at holds.
			e.chains.put(t.rec.Tenant, t.rec.ID, t.chainGen, appendTurnHistory(slices.Clip(t.history), p.Response.Status, t.input, p.Output),
				historyInfo{usage: p.Response.Usage, prep: t.projected, served: servedOf(&p.Response)})
		}
		if t.claimed {
			e.bgWake.wake(t.rec.ID)
		}
		e.logStored(ctx, t.rec.ID, r.Status, len(t.input), len(r.Output), len(p.Events))
		return nil
	}
	e.log.Error("commit response", "response_id", t.rec.ID, "error", err)
	r.Status = wire.StatusFailed
	switch {
	case errors.Is(err, store.ErrNotFound) && p.Begun:
		r.Error = &wire.ErrorObject{Code: CodeDeleted, Message: MsgDeleted}
	case errors.Is(err, store.ErrConflict):
		// The sweeper failed it after its lease expired (the contract of ResponseCommit).
		r.Error = &wire.ErrorObject{Code: "server_error", Message: MsgLeaseLost}
	default:
		r.Error = &wire.ErrorObject{Code: "server_error", Message: MsgNotStored}
	}
	t.rec.CompletedAt = nil
	e.applyResult(t, r)
	if r.Error.Message == MsgNotStored && p.Begun {
		// The client has seen the id: store the failure as soon as the store is back, rather
		// than leave the record in progress until its lease expires and the sweeper guesses.
		failed := *p
		failed.Response, failed.Output, failed.ConversationID, failed.ReleaseTurn = t.rec, r.Output, "", p.ConversationID+p.ReleaseTurn
		e.storeFailure(t, &failed)
	}
	return err
}

// commit runs ResponseCommit with a few quick retries (it is idempotent), under CommitTimeout.
func (e *Engine) commit(ctx context.Context, p *store.ResponseCommitParams) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CommitTimeout)
	defer cancel()
	ctx, span := e.tel.Tracer.Start(ctx, "store.commit", trace.WithAttributes(
		attribute.Int("respgate.input_items", len(p.Input)), attribute.Int("respgate.output_items", len(p.Output))))
	defer span.End()
	start := time.Now()
	defer e.tel.Store(ctx, "response_commit", start)
	var err error
	for attempt := 1; ; attempt++ {
		err = e.store.ResponseCommit(ctx, p)
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
func (e *Engine) commitLanded(ctx context.Context, p *store.ResponseCommitParams) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(e.cfg.CommitTimeout, 5*time.Second))
	defer cancel()
	rec, _, err := e.store.ResponseGet(rctx, &store.ResponseGetParams{Tenant: p.Response.Tenant, ID: p.Response.ID})
	return err == nil && rec.Status == p.Response.Status
}

// storeFailure keeps trying, in the background, to store p (a failed record) until the store
// takes it, the record is already terminal or gone, or the server shuts down. The goroutine is
// owned by the server: Shutdown stops and waits for it.
func (e *Engine) storeFailure(t *Turn, p *store.ResponseCommitParams) {
	e.background.Add(1)
	// The conversation stays locked until the failure is stored: the goroutine owns its lease.
	lease := t.handOff()
	go func() {
		defer e.background.Done()
		defer lease.release()
		wait := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CommitTimeout)
			err := e.store.ResponseCommit(ctx, p)
			cancel()
			if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				e.log.Info("failed response stored after the commit failed", "response_id", p.Response.ID, "error", err)
				return
			}
			select {
			case <-e.quit:
				e.log.Warn("shut down before a failed response could be stored; the sweeper will fail it", "response_id", p.Response.ID)
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

func (e *Engine) applyResult(t *Turn, r *accumulator.Result) {
	t.output = r.Output
	t.rec.Status = r.Status
	t.rec.Usage = r.Usage
	t.rec.IncompleteDetails = r.IncompleteDetails
	t.rec.Error = nil
	if r.Error != nil {
		t.rec.Error = errorJSON(r.Error.Code, r.Error.Message)
	}
}

// convLease is a conversation's turn lease taken from a turn (handOff): its new owner releases
// it. The zero value holds nothing.
type convLease struct {
	e                            *Engine
	tenant, conversation, holder string
}

// handOff takes the conversation's turn lease from t, which no longer releases it: the caller
// now owns it (release), or it was ended another way (a commit's conversation append). It is
// the zero convLease when t holds none.
func (t *Turn) handOff() convLease {
	if !t.convTurn.Swap(false) {
		return convLease{}
	}
	return convLease{e: t.engine, tenant: t.rec.Tenant, conversation: t.rec.ConversationID, holder: t.rec.ID}
}

// release releases the conversation's turn lease t holds, if it still holds one: the one
// deferred release of every entry path (Serve, RunBackground).
func (t *Turn) release() { t.handOff().release() }

func (l convLease) release() {
	if l.e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.e.cfg.CommitTimeout)
	defer cancel()
	if err := l.e.store.ConversationTurnRelease(ctx, &store.ConversationTurnReleaseParams{
		Tenant: l.tenant, ConversationID: l.conversation, ResponseID: l.holder}); err != nil {
		l.e.log.Error("release conversation turn", "response_id", l.holder, "error", err)
	}
}
