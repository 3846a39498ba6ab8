package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/respgate/respgate/store"
)

// eventFlushInterval is how often a running stream's new events are appended to its event log,
// so that a GET ?stream=true on any replica can follow the stream while it runs.
const eventFlushInterval = 250 * time.Millisecond

// eventLog collects a stream's client events (accumulator.Options.Observe) until the lease keeper
// flushes them to the store or the commit takes the rest.
type eventLog struct {
	mu      sync.Mutex
	pending []store.Event
}

func (l *eventLog) observe(seq int64, typ string, data []byte) {
	ev := store.Event{Seq: seq, Type: typ, Data: append([]byte(nil), data...)}
	l.mu.Lock()
	l.pending = append(l.pending, ev)
	l.mu.Unlock()
}

// take removes and returns the pending events.
func (l *eventLog) take() []store.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.pending
	l.pending = nil
	return evs
}

// putBack returns events a failed flush took, ahead of any observed since.
func (l *eventLog) putBack(evs []store.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(evs, l.pending...)
}

// leaseKeeper keeps a turn's leases alive and flushes its event log while the turn runs. Its
// goroutine talks only to the store, never to the client: a client that stops reading must not
// let the lease expire (renewal used to wait behind a blocked write). Start it once the leases are
// held; Stop it, which waits for the goroutine, before the commit, so no renewal can run after
// the turn has released its leases.
type leaseKeeper struct {
	s      *Server
	t      *turn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startKeeper starts the keeper of t. It returns nil when t holds no lease and logs no events.
func (s *Server) startKeeper(t *turn) *leaseKeeper {
	if !t.leased && !t.convTurn.Load() && t.events == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &leaseKeeper{s: s, t: t, cancel: cancel, done: make(chan struct{})}
	go k.run(ctx)
	return k
}

// Stop ends the keeper and waits for it. It is safe on a nil keeper and more than once.
func (k *leaseKeeper) Stop() {
	if k == nil {
		return
	}
	k.once.Do(k.cancel)
	<-k.done
}

func (k *leaseKeeper) run(ctx context.Context) {
	defer close(k.done)
	renewEvery := k.s.cfg.LeaseTTL / 3
	tick := renewEvery
	if k.t.events != nil && eventFlushInterval < tick {
		tick = eventFlushInterval
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	lastRenew := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			if k.t.events != nil {
				k.flush(ctx)
			}
			if now.Sub(lastRenew) >= renewEvery {
				lastRenew = now
				k.renew(ctx)
			}
		}
	}
}

// flush appends the pending events to the store; on failure they stay pending for the next flush
// or the commit (appending is idempotent by sequence number).
func (k *leaseKeeper) flush(ctx context.Context) {
	evs := k.t.events.take()
	if len(evs) == 0 {
		return
	}
	err := k.s.store.ResponseEventAppend(ctx, &store.ResponseEventAppendParams{
		Tenant: k.t.rec.Tenant, ResponseID: k.t.rec.ID, Events: evs})
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
			ConversationID: t.req.ConversationID, ResponseID: t.rec.ID, ExpiresAt: exp})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("extend conversation turn lease", "response_id", t.rec.ID, "lost", errors.Is(err, store.ErrNotFound), "error", err)
		}
	}
}
