package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// eventFlushInterval is how often the running streams' new events are appended to their event
// logs (eventAppender), so that a GET ?stream=true on any replica can follow a stream while it
// runs.
const eventFlushInterval = 500 * time.Millisecond

// eventLog collects a stream's client events (accumulator.Options.Observe) until they are flushed
// to the store (by the engine's eventAppender; a background turn's by its lease keeper) or the
// commit takes the rest. Events are logged in runs: each run is
// one store.Event holding the SSE frames of consecutive sequence numbers, so a flush writes one
// row however many tokens it covers. A run handed to the store is never merged with later events,
// so a retried run is the same entry (idempotent by its first sequence number).
//
// A run's buffer is sized from the run before it (a paced stream's runs are alike), so it is
// about one allocation of its size rather than a doubling series from 1 KiB: a stored stream
// paced at 20 ms a token allocates 2.24 KB per relayed event instead of 2.75 (issue 25). A run
// ends at maxRunBytes, so a long answer faster than the flushes is logged in buffers of that
// size, not one that doubles up to the whole answer. The store keeps the buffers it is given.
type eventLog struct {
	mu      sync.Mutex
	closed  []store.Event // runs ended at maxRunBytes, and runs a failed flush took, in order
	open    store.Event   // the run being built (Data empty: none)
	pending bool
	sealed  bool // the commit took the log: later events (the terminal one) are not logged
	lastLen int  // the length the last run reached
	// flushing counts the engine's flushes (eventAppender) that hold runs of this log.
	flushing sync.WaitGroup
}

// A run's buffer starts at minRunCap, or a quarter over the last run's length, at most
// maxRunBytes plus room for the frame that ends it.
const (
	minRunCap   = 1 << 10
	maxRunBytes = 32 << 10
)

func (l *eventLog) observe(seq int64, typ wire.EventType, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sealed {
		return
	}
	if !l.pending {
		l.open = store.Event{Seq: seq, Data: make([]byte, 0, min(max(l.lastLen+l.lastLen/4, minRunCap), maxRunBytes+maxRunBytes/8))}
		l.pending = true
	}
	l.open.Type = typ
	l.open.Data = wire.Event{Type: typ, Data: data}.AppendSSE(l.open.Data)
	if len(l.open.Data) >= maxRunBytes {
		l.closed = append(l.closed, l.endOpen())
	}
}

// endOpen ends the open run and returns it.
func (l *eventLog) endOpen() store.Event {
	run := l.open
	l.lastLen = len(run.Data)
	l.open, l.pending = store.Event{}, false
	return run
}

// take removes and returns the runs not yet stored, closing the open one.
func (l *eventLog) take() []store.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.takeLocked()
}

func (l *eventLog) takeLocked() []store.Event {
	runs := l.closed
	if l.pending {
		runs = append(runs, l.endOpen())
	}
	l.closed = nil
	return runs
}

// seal takes the remaining runs for the commit and stops logging: the terminal event that follows
// is rendered from the stored record on replay, so copying it (the whole response) would be waste.
func (l *eventLog) seal() []store.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sealed = true
	return l.takeLocked()
}

// putBack returns runs a failed flush took, to be written again unchanged.
func (l *eventLog) putBack(runs []store.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = append(runs, l.closed...)
}

// leaseKeeper keeps a turn's leases alive (and flushes a background turn's event log) while the
// turn runs. It talks only to the store, never to the client: a client that stops reading must
// not let the lease expire (renewal used to wait behind a blocked write). It is a timer, not a goroutine: its work
// runs on a short-lived goroutine when due (issue 25: goroutines per open stream). Start it once
// the leases are held; Stop it, which waits for work in progress, before the commit, so no
// renewal can run after the turn has released its leases.
type leaseKeeper struct {
	s      *Engine
	t      *Turn
	ctx    context.Context // ends at Stop: aborts a store call in progress
	cancel context.CancelFunc
	once   sync.Once

	tick, renewEvery time.Duration
	next, lastRenew  time.Time    // used only by the callback (one at a time: it re-arms the timer last)
	lastFlush        atomic.Int64 // when the callback last flushed the event log (Unix ns)
	task             timerTask
}

// flushSoon asks the keeper to flush the event log now (a background turn's sink: its readers
// read only the log), unless it flushed within bgFlushInterval or is flushing now: then its next
// tick takes the events. Safe on a nil keeper.
func (k *leaseKeeper) flushSoon() {
	if k == nil {
		return
	}
	k.task.fireNow(func() bool { return time.Since(time.Unix(0, k.lastFlush.Load())) >= bgFlushInterval })
}

// keeperFlushes: t's lease keeper flushes its event log, a claimed background turn's, whose
// readers read only the log; a foreground stream's is flushed with the others (eventAppender).
func (t *Turn) keeperFlushes() bool { return t.claimed && t.events != nil }

// startKeeper starts the keeper of t. It returns nil when t holds no lease and flushes no log.
func (e *Engine) startKeeper(t *Turn) *leaseKeeper {
	if !t.leased && !t.convTurn.Load() && !t.keeperFlushes() {
		return nil
	}
	k := &leaseKeeper{s: e, t: t, renewEvery: e.cfg.LeaseTTL / 3}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.tick = k.renewEvery
	if t.keeperFlushes() {
		k.tick = min(k.tick, bgFlushInterval) // a background turn's readers read only the log
	}
	now := time.Now()
	k.lastRenew, k.next = now, now.Add(k.tick)
	k.task.start(k.tick, k.run)
	return k
}

// Stop ends the keeper and waits for work in progress. It is safe on a nil keeper and more than
// once.
func (k *leaseKeeper) Stop() {
	if k == nil {
		return
	}
	k.once.Do(func() {
		k.task.halt()
		k.cancel() // ends a store call in progress
	})
	k.task.stop() // waits for work in progress (every Stop does)
}

// run is one tick: flush the events, renew the leases when a third of the TTL has passed, and
// arm the timer for the next tick (ticks missed while the store was slow are skipped, as a
// time.Ticker drops them).
func (k *leaseKeeper) run() (time.Duration, bool) {
	now := time.Now()
	if k.t.keeperFlushes() {
		k.flush(k.ctx)
	}
	if now.Sub(k.lastRenew) >= k.renewEvery {
		k.lastRenew = now
		k.renew(k.ctx)
	}
	k.next = k.next.Add(k.tick)
	for after := time.Now(); !k.next.After(after); {
		k.next = k.next.Add(k.tick)
	}
	k.lastFlush.Store(now.UnixNano())
	return time.Until(k.next), true
}

// flush appends the pending events to the store; on failure they stay pending for the next flush
// or the commit (appending is idempotent by sequence number).
func (k *leaseKeeper) flush(ctx context.Context) {
	evs := k.t.events.take()
	if len(evs) == 0 { // nothing new
		return
	}
	err := store.AppendEvents(ctx, k.s.store, &store.ResponseEventAppendParams{
		Tenant: k.t.rec.Tenant, ResponseID: k.t.rec.ID, Events: evs, Notify: k.t.claimed})
	if err == nil && k.t.claimed {
		k.s.bgWake.wake(k.t.rec.ID)
	}
	if err != nil {
		k.t.events.putBack(evs)
		if ctx.Err() == nil {
			k.s.log.Warn("append stream events", "response_id", k.t.rec.ID, "events", len(evs), "error", err)
		}
	}
}

// renew moves the response's lease and the conversation's turn lease forward. Both renewals only
// extend a lease this turn holds; a lease lost (swept, or retaken after expiry) stays lost and the
// commit reports it.
func (k *leaseKeeper) renew(ctx context.Context) {
	s, t := k.s, k.t
	exp := time.Now().Add(s.cfg.LeaseTTL)
	if t.leased {
		err := s.store.ResponseLeaseExtend(ctx, &store.ResponseLeaseExtendParams{Tenant: t.rec.Tenant, ID: t.rec.ID,
			LeaseOwner: s.owner, LeaseExpiresAt: exp})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("extend response lease", "response_id", t.rec.ID, "lost", errors.Is(err, store.ErrNotFound), "error", err)
		}
	}
	if t.convTurn.Load() {
		err := s.store.ConversationTurnExtend(ctx, &store.ConversationTurnAcquireParams{Tenant: t.rec.Tenant,
			ConversationID: t.rec.ConversationID, ResponseID: t.rec.ID, ExpiresAt: exp})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("extend conversation turn lease", "response_id", t.rec.ID, "lost", errors.Is(err, store.ErrNotFound), "error", err)
		}
	}
}
