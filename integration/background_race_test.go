package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

// The races of a background run's first moments (issue 38 items 1 and 2), made deterministic: a
// real store (Postgres or SQLite) with a real River is wrapped so that the one background run of
// the test stops at a chosen point until the test lets it go, instead of hoping a timed cancel
// lands there.

// raceStore is a real store whose first background run stops where the test says.
type raceStore struct {
	store.Store
	store.Jobs

	// fetched is closed when a worker first asks for its turn (River has handed it the job);
	// the call then waits for proceed.
	fetched, proceed chan struct{}
	// claimed is closed when the first claim has landed; with cutClaim the claim then waits
	// for a cancel to be committed and reports the error a statement cut by its context
	// reports after it committed.
	claimed  chan struct{}
	cutClaim bool
	// cancelled is closed when the first ResponseCancelBackground has committed.
	cancelled chan struct{}
	// claims receives every claim's outcome, in order.
	claims chan error

	fetchOnce, claimOnce, cancelOnce sync.Once
}

func newRaceStore(t *testing.T, newStore func(t *testing.T) store.Store) *raceStore {
	t.Helper()
	st := realStore(t, newStore)
	return &raceStore{Store: st, Jobs: st.(store.Jobs), fetched: make(chan struct{}), proceed: make(chan struct{}),
		claimed: make(chan struct{}), cancelled: make(chan struct{}), claims: make(chan error, 8)}
}

// letGo lets the stopped worker go on (once; also at the test's end, before the gateway stops).
func (s *raceStore) letGo() {
	select {
	case <-s.proceed:
	default:
		close(s.proceed)
	}
}

func (s *raceStore) BackgroundTurnGet(ctx context.Context, p *store.BackgroundTurnGetParams) (*store.BackgroundTurn, error) {
	first := false
	s.fetchOnce.Do(func() { first = true })
	if first {
		close(s.fetched)
		<-s.proceed
	}
	return s.Store.BackgroundTurnGet(ctx, p)
}

func (s *raceStore) ResponseBackgroundClaim(ctx context.Context, p *store.ResponseBackgroundClaimParams) error {
	first := false
	s.claimOnce.Do(func() { first = true })
	if !first {
		err := s.Store.ResponseBackgroundClaim(ctx, p)
		s.claims <- err
		return err
	}
	err := s.Store.ResponseBackgroundClaim(context.WithoutCancel(ctx), p)
	if err == nil {
		close(s.claimed)
		if s.cutClaim {
			<-s.cancelled
			// What pgx answers for a statement whose context River's cancel ended while it
			// ran: the update may well have committed.
			err = fmt.Errorf("claim background response: %w", context.Canceled)
		}
	}
	s.claims <- err
	return err
}

func (s *raceStore) ResponseCancelBackground(ctx context.Context, p *store.ResponseCancelBackgroundParams) (store.CancelOutcome, error) {
	out, err := s.Store.ResponseCancelBackground(ctx, p)
	s.cancelOnce.Do(func() { close(s.cancelled) })
	return out, err
}

// raceGateway starts a gateway on s; the stopped worker is let go before the gateway stops.
func raceGateway(t *testing.T, s *raceStore, cfg server.Config) *gw {
	t.Helper()
	g := newGateway(t, s, respgatetest.Options{Server: cfg})
	t.Cleanup(s.letGo) // runs before the gateway's own cleanup
	return g
}

// cancelNow cancels id and returns what the cancel answered.
func cancelNow(t *testing.T, g *gw, id string) *responses.Response {
	t.Helper()
	c, err := g.client.Responses.Cancel(t.Context(), id)
	if err != nil {
		t.Fatalf("cancel %s: %v", id, err)
	}
	return c
}

// Issue 38 item 1: a cancel that reaches the worker while its claim is in flight (the claim
// committed, the worker was told it was cut). The claimed turn must still end cancelled, and the
// cancel must answer that, not in_progress after its 10 s wait (and a false "gateway stopped"
// from the sweeper a lease later).
func TestBackgroundCancelDuringTheClaimEndsItCancelled(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		s := newRaceStore(t, newStore)
		s.cutClaim = true
		s.letGo() // no stop at the fetch
		g := raceGateway(t, s, server.Config{})
		r := g.create(t, `{"model":"`+harmony+`?delay_ms=50&tokens=2000","input":"cut claim","background":true}`)
		<-s.claimed
		c := cancelNow(t, g, r.ID)
		if c.Status != "cancelled" || c.Error.Code != "" {
			t.Fatalf("cancel answered %s with error %+v, want cancelled with none", c.Status, c.Error)
		}
		stored := pollResponse(t, g, r.ID, terminal)
		if stored.Status != "cancelled" || stored.Error.Code != "" {
			t.Fatalf("stored %s with error %+v", stored.Status, stored.Error)
		}
	})
}

// Issue 38 item 2: River handed the job to a worker that stopped (died) before claiming the
// response. Its cancel ends it at once, and the worker, should it come back, runs nothing.
func TestBackgroundCancelOfAJobFetchedButNotClaimedEndsItAtOnce(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		s := newRaceStore(t, newStore)
		g := raceGateway(t, s, server.Config{})
		r := g.create(t, `{"model":"`+harmony+`","input":"held by the dead","background":true}`)
		<-s.fetched
		c := cancelNow(t, g, r.ID)
		if c.Status != "cancelled" || c.Error.Code != "" {
			t.Fatalf("cancel answered %s with error %+v, want cancelled at once", c.Status, c.Error)
		}
		s.letGo()
		if err := <-s.claims; !errors.Is(err, store.ErrConflict) {
			t.Fatalf("the worker's late claim: %v, want a conflict", err)
		}
		if sentToModel(g, "held by the dead") {
			t.Fatal("a cancelled response reached the model")
		}
	})
}

// Issue 38 item 2: a job whose worker stopped between River's fetch and the claim is given a new
// job, which another worker runs, long before River's own rescue (--background-timeout + 5 min).
// The stopped worker, coming back, runs nothing: the turn reaches the model once.
func TestBackgroundJobStrandedBeforeItsClaimIsRequeuedAndRunOnce(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		s := newRaceStore(t, newStore)
		g := raceGateway(t, s, server.Config{BackgroundWorkers: 2})
		r := g.create(t, `{"model":"`+harmony+`","input":"stranded turn","background":true}`)
		<-s.fetched
		n, err := s.Jobs.ResponseBackgroundRequeue(t.Context(), &store.ResponseBackgroundRequeueParams{FetchedBefore: time.Now(), Limit: 10})
		if err != nil || n != 1 {
			t.Fatalf("requeue: %d, %v; want 1", n, err)
		}
		done := pollResponse(t, g, r.ID, terminal)
		if done.Status != "completed" {
			t.Fatalf("requeued response ended %s", done.Status)
		}
		if err := <-s.claims; err != nil {
			t.Fatalf("the new job's claim: %v", err)
		}
		s.letGo()
		if err := <-s.claims; !errors.Is(err, store.ErrConflict) {
			t.Fatalf("the stopped worker's late claim: %v, want a conflict", err)
		}
		runs := 0
		for _, b := range g.UpstreamRequests() {
			if strings.Contains(string(b), "stranded turn") {
				runs++
			}
		}
		if runs != 1 {
			t.Fatalf("the turn reached the model %d times", runs)
		}
		// Nothing more to requeue: the response is no longer queued.
		if n, err := s.Jobs.ResponseBackgroundRequeue(t.Context(), &store.ResponseBackgroundRequeueParams{FetchedBefore: time.Now(), Limit: 10}); err != nil || n != 0 {
			t.Fatalf("second requeue: %d, %v", n, err)
		}
	})
}
