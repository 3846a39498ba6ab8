package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/respgate/respgate/store"
)

// eventAppender appends the event logs of the engine's running foreground streams to the store,
// every eventFlushInterval, all of them in one store call (store.Store.ResponseEventAppend: one
// statement on Postgres, one transaction on SQLite). A store round trip per stream and flush
// was most of what storing cost a relayed event at 256 streams; one for all of them costs the
// bytes (docs/scaling.md, "One append for every stream"). A background turn's log is not here: its readers
// read only the log, so its lease keeper flushes it at once and wakes them (bgFlushInterval).
//
// One goroutine, started with the first stream and owned by the engine (Stop ends it and waits
// for it), runs the flushes; while no stream is logged it waits without a timer. A flush with
// more than maxAppendBytes of events makes several calls, one after another, so that no
// statement holds more.
type eventAppender struct {
	st       store.Store
	log      *slog.Logger
	timeout  time.Duration // bounds each store call
	maxBytes int           // of events per store call (a call has at least one stream's runs)

	// The loop runs on a goroutine counted in owner until quit closes.
	owner *sync.WaitGroup
	quit  <-chan struct{}

	mu      sync.Mutex
	turns   map[*Turn]struct{}
	started bool
	wake    chan struct{} // a stream was added to none: the loop starts its ticker
}

func newEventAppender(st store.Store, log *slog.Logger, timeout time.Duration, owner *sync.WaitGroup, quit <-chan struct{}) *eventAppender {
	return &eventAppender{st: st, log: log, timeout: timeout, maxBytes: maxAppendBytes, owner: owner, quit: quit,
		turns: map[*Turn]struct{}{}, wake: make(chan struct{}, 1)}
}

// add logs t's events from the next flush on, starting the loop with the first stream. t.events
// must be set and not change until remove.
func (a *eventAppender) add(t *Turn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.started {
		a.started = true
		a.owner.Add(1)
		go func() {
			defer a.owner.Done()
			a.loop()
		}()
	}
	a.turns[t] = struct{}{}
	if len(a.turns) == 1 {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// remove stops logging t's events and waits for a flush that holds some of them to end: what it
// could not store is back in t.events, for the commit. Removing a turn not added does nothing.
func (a *eventAppender) remove(t *Turn) {
	a.mu.Lock()
	_, ok := a.turns[t]
	delete(a.turns, t)
	a.mu.Unlock()
	if ok {
		t.events.flushing.Wait()
	}
}

// loop flushes every eventFlushInterval while streams are logged, until quit closes.
func (a *eventAppender) loop() {
	for {
		select {
		case <-a.quit:
			return
		case <-a.wake:
		}
		tick := time.NewTicker(eventFlushInterval)
		for more := true; more; {
			select {
			case <-a.quit:
				tick.Stop()
				return
			case <-tick.C:
			}
			more = a.flush()
		}
		tick.Stop()
	}
}

// flush appends the events every logged stream gathered since the last flush, in one store call
// per maxBytes of them, and says whether streams are still logged. The runs of a failed call go
// back to their logs, unchanged, for the next flush or the commit (appending is idempotent by
// sequence number); the runs of a response that no longer exists are dropped (its commit will
// find it gone too).
func (a *eventAppender) flush() (more bool) {
	a.mu.Lock()
	var calls []appendCall
	var c appendCall
	for t := range a.turns {
		runs := t.events.take()
		if len(runs) == 0 {
			continue
		}
		t.events.flushing.Add(1) // under a.mu, while t is here: remove waits for it
		c.ps = append(c.ps, store.ResponseEventAppendParams{Tenant: t.rec.Tenant, ResponseID: t.rec.ID, Events: runs})
		c.logs = append(c.logs, t.events)
		for _, r := range runs {
			c.bytes += len(r.Data)
		}
		if c.bytes >= a.maxBytes {
			calls, c = append(calls, c), appendCall{}
		}
	}
	if len(c.ps) > 0 {
		calls = append(calls, c)
	}
	more = len(a.turns) > 0
	a.mu.Unlock()
	for _, c := range calls {
		a.append(c)
	}
	return more
}

// maxAppendBytes bounds the events of one store call of the appender (a few hundred streams'
// half second).
const maxAppendBytes = 4 << 20

// appendCall is one store call of a flush: its streams' runs, their logs and their size.
type appendCall struct {
	ps    []store.ResponseEventAppendParams
	logs  []*eventLog
	bytes int
}

// append makes c's store call, gives the runs of a failed one back and releases the logs.
func (a *eventAppender) append(c appendCall) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	missing, err := a.st.ResponseEventAppend(ctx, c.ps)
	cancel()
	if err != nil {
		a.log.Warn("append stream events", "streams", len(c.ps), "error", err)
	}
	for _, i := range missing {
		a.log.Warn("append stream events", "response_id", c.ps[i].ResponseID, "events", len(c.ps[i].Events), "error", store.ErrNotFound)
	}
	for i, l := range c.logs {
		if err != nil {
			l.putBack(c.ps[i].Events)
		}
		l.flushing.Done()
	}
}
