package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// TestMain fails the package's run if a test leaves a goroutine behind (every goroutine has an
// owner that stops it and waits for it; pgtest.Main runs goleak after stopping a throwaway
// Postgres the context tests may have started).
func TestMain(m *testing.M) { pgtest.Main(m) }

// countingStore is a real SQLite store that counts lease renewals and signals each one.
type countingStore struct {
	store.Store
	extends     atomic.Int32
	convExtends atomic.Int32
	renewed     chan string // "response" or "conversation", at each renewal (never blocks)
}

func (c *countingStore) signal(what string) {
	select {
	case c.renewed <- what:
	default:
	}
}

func (c *countingStore) ResponseLeaseExtend(ctx context.Context, p *store.ResponseLeaseExtendParams) error {
	c.extends.Add(1)
	defer c.signal("response")
	return c.Store.ResponseLeaseExtend(ctx, p)
}

func (c *countingStore) ConversationTurnExtend(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	c.convExtends.Add(1)
	defer c.signal("conversation")
	return c.Store.ConversationTurnExtend(ctx, p)
}

// waitRenewals waits for n renewals of what.
func (c *countingStore) waitRenewals(t *testing.T, what string, n int) {
	t.Helper()
	for n > 0 {
		select {
		case w := <-c.renewed:
			if w == what {
				n--
			}
		case <-t.Context().Done():
			t.Fatalf("still waiting for %d %s renewals", n, what)
		}
	}
}

// newCountingEngine is an Engine on a fresh SQLite store counting renewals, with an upstream
// nothing answers.
func newCountingEngine(t *testing.T, cfg Config) (*Engine, *countingStore) {
	t.Helper()
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	up, err := upstream.New(upstream.Config{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: sq, renewed: make(chan string, 64)}
	return newTestEngine(t, cfg, st, upstream.Single(up)), st
}

// beginTurn stores an in-progress response for a keeper to keep.
func beginTurn(t *testing.T, e *Engine, leaseTTL time.Duration) *Turn {
	t.Helper()
	tr := &Turn{engine: e, store: true, rec: store.Response{ID: wire.NewID(wire.PrefixResponse), Tenant: "t1",
		Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now(), Echo: []byte(`{}`)}}
	err := e.store.ResponseBegin(t.Context(), &store.ResponseBeginParams{Response: tr.rec, LeaseOwner: e.owner,
		LeaseExpiresAt: time.Now().Add(leaseTTL)})
	if err != nil {
		t.Fatal(err)
	}
	tr.leased = true
	return tr
}

// The keeper talks only to the store: it renews a turn's lease for two full lease periods
// while nothing is written to the client, and the sweeper finds nothing to fail.
func TestLeaseKeeperRenewsOnItsOwnForTwoLeasePeriods(t *testing.T) {
	e, st := newCountingEngine(t, Config{LeaseTTL: 150 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	tr := beginTurn(t, e, 150*time.Millisecond)
	tr.keeper = e.startKeeper(tr)
	defer tr.keeper.Stop()
	st.waitRenewals(t, "response", 6) // two full lease periods
	n, err := e.store.ResponseSweep(t.Context(), &store.ResponseSweepParams{Now: time.Now(), Message: MsgSweptExpired})
	if err != nil || n != 0 {
		t.Fatalf("a live turn was swept (%d, %v)", n, err)
	}
}

// Once Stop has returned and the turn released the conversation, another turn can take the
// conversation, and the stopped keeper never extends either lease again.
func TestLeaseKeeperStopWaitsAndTheReleasedConversationIsFree(t *testing.T) {
	e, st := newCountingEngine(t, Config{LeaseTTL: 60 * time.Millisecond, WriteTimeout: 30 * time.Millisecond})
	tr := beginTurn(t, e, 60*time.Millisecond)
	conv := &store.Conversation{ID: wire.NewID("conv_"), Tenant: "t1", CreatedAt: time.Now()}
	if err := e.store.ConversationCreate(t.Context(), &store.ConversationCreateParams{Conversation: *conv}); err != nil {
		t.Fatal(err)
	}
	tr.rec.ConversationID = conv.ID
	if err := e.acquireConversation(t.Context(), tr, nil); err != nil {
		t.Fatal(err)
	}
	tr.keeper = e.startKeeper(tr)
	st.waitRenewals(t, "conversation", 2)
	tr.keeper.Stop()
	tr.keeper.Stop() // idempotent
	before := st.convExtends.Load() + st.extends.Load()
	tr.release()
	tr.release() // once
	other := &store.ConversationTurnAcquireParams{Tenant: "t1", ConversationID: conv.ID, ResponseID: "resp_other",
		ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.store.ConversationTurnAcquire(t.Context(), other); err != nil {
		t.Fatalf("conversation still locked after the turn released it: %v", err)
	}
	if after := st.convExtends.Load() + st.extends.Load(); after != before {
		t.Fatalf("%d renewals after Stop returned", after-before)
	}
	if tr.keeper.task.timer.Stop() {
		t.Fatal("the stopped keeper's timer was still armed")
	}
}

// Drain refuses new turns once it has started and returns once the admitted ones are done.
func TestDrainRefusesNewTurnsAndWaitsForAdmittedOnes(t *testing.T) {
	e, _ := newCountingEngine(t, Config{})
	release := make(chan struct{})
	running := make(chan struct{})
	turnDone := make(chan error, 1)
	go func() {
		turnDone <- e.Admitted(func() error { close(running); <-release; return nil })
	}()
	<-running
	drained := make(chan struct{})
	go func() { e.Drain(context.Background()); close(drained) }()
	// Once Drain has started (it set closing under mu before it waits), no turn is admitted.
	for {
		e.mu.Lock()
		closing := e.closing
		e.mu.Unlock()
		if closing {
			break
		}
		select {
		case <-drained:
			t.Fatal("Drain returned while a turn was in flight")
		case <-time.After(time.Millisecond):
		}
	}
	if err := e.Admitted(func() error { return nil }); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("a turn offered while draining: %v, want shutting_down", err)
	}
	select {
	case <-drained:
		t.Fatal("Drain returned while a turn was in flight")
	default:
	}
	close(release)
	<-drained
	if err := <-turnDone; err != nil {
		t.Fatal(err)
	}
	if _, err := e.Serve(t.Context(), specOf(t, `{"model":"m","input":"hi"}`), &testDoor{}); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("a turn after Drain: %v, want shutting_down", err)
	}
}

// Stop ends the goroutine still storing a failed record, and waits for it (goleak checks).
func TestStopEndsAFailedRecordStillBeingStoredAndWaitsForIt(t *testing.T) {
	e, _ := newCountingEngine(t, Config{})
	down := &unreachableCommits{Store: e.store, called: make(chan struct{}, 8)}
	e.store = down
	tr := beginTurn(t, e, time.Minute)
	e.storeFailure(tr, &store.ResponseCommitParams{Response: tr.rec, Begun: true})
	<-down.called
	<-down.called // it is retrying
	e.Stop(context.Background())
}

type unreachableCommits struct {
	store.Store
	calls  atomic.Int32
	called chan struct{}
}

func (u *unreachableCommits) ResponseCommit(context.Context, *store.ResponseCommitParams) error {
	u.calls.Add(1)
	if u.called != nil {
		select {
		case u.called <- struct{}{}:
		default:
		}
	}
	return errors.New("connection refused (injected)")
}

func TestChainHistoryKeepsACutTurnsInputButOnlyItsFinishedItems(t *testing.T) {

	item := func(id, status string) wire.Item {
		return wire.Item{ID: id, Type: "message", JSON: []byte(`{"id":"` + id + `","type":"message","status":"` + status + `"}`)}
	}
	chain := &store.Chain{Turns: []store.ChainTurn{
		{Response: store.Response{Status: wire.StatusCompleted}, Input: []wire.Item{item("in1", "")}, Output: []wire.Item{item("out1", "completed")}},
		{Response: store.Response{Status: wire.StatusIncomplete}, Input: []wire.Item{item("in2", "")}, Output: []wire.Item{item("out2", "incomplete")}},
		{Response: store.Response{Status: wire.StatusFailed}, Input: []wire.Item{item("in3", "")},
			Output: []wire.Item{item("rs3", "completed"), item("out3", "incomplete")}},
		{Response: store.Response{Status: wire.StatusCancelled}, Input: []wire.Item{item("in4", "")}, Output: []wire.Item{item("out4", "in_progress")}},
	}}
	var got []string
	for _, it := range chainHistory(chain) {
		got = append(got, it.ID)
	}
	want := []string{"in1", "out1", "in2", "out2", "in3", "rs3", "in4"}
	if !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}

func TestCommitRetriesStopWhenTheContextEnds(t *testing.T) {
	s, _ := newCountingEngine(t, Config{CommitTimeout: time.Hour})
	down := &unreachableCommits{Store: s.store}
	s.store = down
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// The wait between attempts ends with its context...
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleepCtx ignored a cancelled context: %v", err)
	}
	// ...so a commit whose deadline (CommitTimeout) passed during its first attempt makes no
	// second one.
	s.cfg.CommitTimeout = time.Millisecond
	err := s.commit(context.Background(), &store.ResponseCommitParams{Response: store.Response{ID: "resp_x", Tenant: "t1"}})
	if err == nil || down.calls.Load() != 1 {
		t.Fatalf("commit under an expired deadline made %d attempts (err %v), want 1", down.calls.Load(), err)
	}
}

func TestEventLogIgnoresEventsAfterTheCommitTookIt(t *testing.T) {
	var l eventLog
	l.observe(0, wire.EventCreated, []byte(`{"type":"response.created","sequence_number":0}`))
	if runs := l.seal(); len(runs) != 1 || runs[0].Seq != 0 {
		t.Fatalf("sealed runs %+v", runs)
	}
	l.observe(1, wire.EventCompleted, []byte(`{"type":"response.completed","sequence_number":1}`))
	if runs := l.take(); len(runs) != 0 {
		t.Fatalf("the terminal event was logged after the commit: %+v", runs)
	}
}
