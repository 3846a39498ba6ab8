package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/store"
)

// Event notifications (store.EventWatcher, docs/background.md "Following a running response"):
// a background turn's event appends and commit, and the cancel of a queued background response,
// NOTIFY the store's channel with the response id in their own transaction (delivered when it
// commits); every store on the database LISTENs on a dedicated connection and hands the ids to
// its watchers. Only background turns notify: a notifying commit takes Postgres's notify queue
// lock, which serialises such commits database-wide, so foreground streams do not pay for it.

// notifySQL notifies channel $1 with payload $2 (a response id).
const notifySQL = `SELECT pg_notify($1, $2)`

// channelFor is the notification channel of the store in schema: stores of other schemas on
// the same database (tests, several deployments) do not wake each other. Postgres cuts channel
// names at 63 bytes; a long schema name is hashed.
func channelFor(schema string) string {
	const prefix = "respgate_events_"
	if len(prefix)+len(schema) <= 63 {
		return prefix + schema
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}

// listenRetry bounds the wait before the listener reconnects after losing its connection.
const listenRetry = 2 * time.Second

// listenerCloseTimeout bounds the close of the listener's connection (EventWatchStop waits for it).
const listenerCloseTimeout = time.Second

// watcher is the store's LISTEN connection and its watchers. Safe for concurrent use.
type watcher struct {
	conn    *pgx.ConnConfig // a copy of the pool's, without its tracer
	channel string
	log     *slog.Logger

	mu     sync.Mutex
	subs   map[*store.EventWatchParams]struct{}
	cancel context.CancelFunc
	done   chan struct{} // closed when the listener goroutine has returned

	running atomic.Int32 // listener goroutines that have not returned (tests read it)
}

func newWatcher(cc *pgx.ConnConfig, channel string, log *slog.Logger) *watcher {
	c := cc.Copy()
	c.Tracer = nil // the round-trip count is the store's queries (WithRoundTrips)
	return &watcher{conn: c, channel: channel, log: log, subs: map[*store.EventWatchParams]struct{}{}}
}

// EventWatchStart adds a watcher (store.EventWatcher).
func (s *Store) EventWatchStart(ctx context.Context, p *store.EventWatchParams) error {
	if p == nil || p.Wake == nil {
		return errors.New("event watch: Wake is required")
	}
	w := s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs[p] = struct{}{}
	if w.cancel == nil {
		// The listener lives until the last watcher stops, not until the caller's ctx ends.
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.cancel, w.done = cancel, make(chan struct{})
		w.running.Add(1)
		go w.run(lctx, w.done)
	}
	return nil
}

// EventWatchStop removes a watcher and stops the listener after the last one (store.EventWatcher).
// It returns once the listener has ended, whatever ctx: a stopped listener's goroutine and
// connection are gone, and a watcher started next never runs beside it. The wait is short: the
// listener's connect and wait for notifications end with its context, and its connection's
// close is bounded (listenerCloseTimeout).
func (s *Store) EventWatchStop(_ context.Context, p *store.EventWatchParams) error {
	w := s.watch
	w.mu.Lock()
	delete(w.subs, p)
	if len(w.subs) > 0 || w.cancel == nil {
		w.mu.Unlock()
		return nil
	}
	cancel, done := w.cancel, w.done
	w.cancel, w.done = nil, nil
	w.mu.Unlock()
	cancel()
	<-done
	return nil
}

// stop ends the listener whatever its watchers (Close) and waits for it.
func (w *watcher) stop() {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.cancel, w.done = nil, nil
	clear(w.subs)
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// wake tells every watcher about id ("" : everything).
func (w *watcher) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.subs {
		p.Wake(id)
	}
}

// run listens until ctx ends, reconnecting after a lost connection. Each (re)connection wakes
// every follower: what was notified while nothing listened is read by their next look.
func (w *watcher) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer w.running.Add(-1)
	for {
		err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		// The followers' fallback poll covers the gap; the next connection wakes them.
		w.log.Warn("event listener lost its connection; reconnecting", "channel", w.channel,
			"retry", listenRetry, "err", err)
		t := time.NewTimer(listenRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listen runs one connection: LISTEN, wake everyone, then hand each notification's payload to
// the watchers until the connection or ctx ends.
func (w *watcher) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, w.conn)
	if err != nil {
		return fmt.Errorf("event listener: connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenerCloseTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize()); err != nil {
		return fmt.Errorf("event listener: listen: %w", err)
	}
	w.wake("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("event listener: %w", err)
		}
		w.wake(n.Payload)
	}
}
