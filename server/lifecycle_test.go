package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// TestMain fails the package's run if a test leaves a goroutine behind (every goroutine has an
// owner that stops it and waits for it).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingStore is a real SQLite store that counts lease renewals.
type countingStore struct {
	store.Store
	extends     atomic.Int32
	convExtends atomic.Int32
}

func (c *countingStore) ResponseLeaseExtend(ctx context.Context, p *store.ResponseLeaseExtendParams) error {
	c.extends.Add(1)
	return c.Store.ResponseLeaseExtend(ctx, p)
}

func (c *countingStore) ConversationTurnExtend(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	c.convExtends.Add(1)
	return c.Store.ConversationTurnExtend(ctx, p)
}

func newTestServer(t *testing.T, cfg Config) (*Server, *countingStore) {
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
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	st := &countingStore{Store: sq}
	s, err := New(t.Context(), cfg, st, upstream.Single(up))
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestNewRefusesALeaseNoLongerThanTheWriteTimeout(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	_, err = New(t.Context(), Config{LeaseTTL: 15 * time.Second, WriteTimeout: 30 * time.Second}, sq, nil)
	if err == nil || !strings.Contains(err.Error(), "write timeout") {
		t.Fatalf("New with lease 15s < write timeout 30s: %v", err)
	}
}

// beginTurn stores an in-progress response for a keeper to keep.
func beginTurn(t *testing.T, s *Server, leaseTTL time.Duration) *turn {
	t.Helper()
	tr := &turn{req: &createRequest{Store: true}, rec: store.Response{ID: wire.NewID(wire.PrefixResponse), Tenant: "t1",
		Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now(), Echo: []byte(`{}`)}}
	err := s.store.ResponseBegin(t.Context(), &store.ResponseBeginParams{Response: tr.rec, LeaseOwner: s.owner,
		LeaseExpiresAt: time.Now().Add(leaseTTL)})
	if err != nil {
		t.Fatal(err)
	}
	tr.leased = true
	return tr
}

func TestLeaseKeeperRenewsWhileTheClientWriteIsBlocked(t *testing.T) {
	s, st := newTestServer(t, Config{LeaseTTL: 150 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	tr := beginTurn(t, s, 150*time.Millisecond)
	// A client that does not read: the stream's writer is held by a write that does not return.
	w := &sseWriter{}
	w.mu.Lock()
	defer w.mu.Unlock()
	tr.keeper = s.startKeeper(tr)
	defer tr.keeper.Stop()
	for st.extends.Load() < 6 { // two full lease periods
		time.Sleep(5 * time.Millisecond)
	}
	n, err := s.store.ResponseSweep(t.Context(), &store.ResponseSweepParams{Now: time.Now(), Message: msgSweptExpired})
	if err != nil || n != 0 {
		t.Fatalf("a live turn was swept (%d, %v) while its client write was blocked", n, err)
	}
}

func TestLeaseKeeperStopWaitsAndNothingRenewsAfterIt(t *testing.T) {
	s, st := newTestServer(t, Config{LeaseTTL: 60 * time.Millisecond, WriteTimeout: 30 * time.Millisecond})
	tr := beginTurn(t, s, 60*time.Millisecond)
	conv := &store.Conversation{ID: wire.NewID("conv_"), Tenant: "t1", CreatedAt: time.Now()}
	if err := s.store.ConversationCreate(t.Context(), &store.ConversationCreateParams{Conversation: *conv}); err != nil {
		t.Fatal(err)
	}
	tr.req.ConversationID = conv.ID
	if err := s.acquireConversation(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	tr.keeper = s.startKeeper(tr)
	for st.convExtends.Load() < 2 {
		time.Sleep(2 * time.Millisecond)
	}
	tr.keeper.Stop()
	tr.keeper.Stop() // idempotent
	s.releaseConversation(tr)
	before := st.convExtends.Load() + st.extends.Load()
	// Another turn takes the free lease; the stopped keeper must never take it back.
	other := &store.ConversationTurnAcquireParams{Tenant: "t1", ConversationID: conv.ID, ResponseID: "resp_other",
		ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.store.ConversationTurnAcquire(t.Context(), other); err != nil {
		t.Fatalf("conversation still locked after the turn released it: %v", err)
	}
	time.Sleep(150 * time.Millisecond) // more than two renewal periods
	if after := st.convExtends.Load() + st.extends.Load(); after != before {
		t.Fatalf("%d renewals after Stop returned", after-before)
	}
}

func TestShutdownRefusesNewTurnsAndWaitsForAdmittedOnes(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	if !s.admit() {
		t.Fatal("a new server refused a turn")
	}
	stopped := make(chan struct{})
	go func() { s.Shutdown(context.Background()); close(stopped) }()
	// Once Shutdown has started, no turn is admitted...
	for s.admit() {
		s.inflight.Done()
		time.Sleep(time.Millisecond)
	}
	select {
	case <-stopped:
		t.Fatal("Shutdown returned while a turn was in flight")
	default:
	}
	// ...and Shutdown returns once the admitted one is done.
	s.inflight.Done()
	<-stopped
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"m","input":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting_down") {
		t.Fatalf("turn after shutdown: %d %s", rec.Code, rec.Body)
	}
}

func TestShutdownStopsAFailedRecordStillBeingStoredAndWaitsForIt(t *testing.T) {
	s, _ := newTestServer(t, Config{})
	down := &unreachableCommits{Store: s.store}
	s.store = down
	tr := beginTurn(t, s, time.Minute)
	s.storeFailure(tr, &store.ResponseCommitParams{Response: tr.rec, Begun: true})
	for down.calls.Load() < 2 { // it is retrying
		time.Sleep(time.Millisecond)
	}
	s.Shutdown(context.Background()) // returns only once the retrying goroutine has ended (goleak checks)
}

type unreachableCommits struct {
	store.Store
	calls atomic.Int32
}

func (u *unreachableCommits) ResponseCommit(context.Context, *store.ResponseCommitParams) error {
	u.calls.Add(1)
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

func TestPaginateWalksTheContextBothWays(t *testing.T) {
	var items []wire.Item
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		items = append(items, wire.Item{ID: id})
	}
	ids := func(p *store.ItemPage) string {
		var s []string
		for _, it := range p.Items {
			s = append(s, it.ID)
		}
		return strings.Join(s, "")
	}
	for _, tc := range []struct {
		pg   pageQuery
		want string
		more bool
	}{
		{pageQuery{limit: 2, order: store.OrderAsc}, "ab", true},
		{pageQuery{after: "b", limit: 2, order: store.OrderAsc}, "cd", true},
		{pageQuery{after: "d", limit: 2, order: store.OrderAsc}, "e", false},
		{pageQuery{limit: 3, order: store.OrderDesc}, "edc", true},
		{pageQuery{after: "c", limit: 3, order: store.OrderDesc}, "ba", false},
	} {
		p, err := paginate(items, tc.pg)
		if err != nil || ids(p) != tc.want || p.HasMore != tc.more {
			t.Fatalf("%+v: %q more=%v err=%v, want %q more=%v", tc.pg, ids(p), p.HasMore, err, tc.want, tc.more)
		}
	}
	if _, err := paginate(items, pageQuery{after: "zz", limit: 2}); err == nil {
		t.Fatal("an unknown cursor was accepted")
	}
	if items[0].ID != "a" || items[4].ID != "e" {
		t.Fatal("paginate reordered its input")
	}
}

func TestReplayOfAnUnreadableItemFailsInsteadOfLeavingAGap(t *testing.T) {
	r := &store.Response{ID: "resp_1", Status: wire.StatusCompleted, CreatedAt: time.Unix(1, 0), Echo: []byte(`{}`)}
	out := []wire.Item{
		{ID: "msg_1", Type: "message", JSON: []byte(`{"id":"msg_1","type":"message","status":"completed","content":[]}`)},
		{ID: "msg_2", Type: "message", JSON: []byte(`{"id":"msg_2","type":"message","status":"completed","content":"not parts"}`)},
	}
	if b, err := replayEvents(nil, r, out, -1); err == nil {
		t.Fatalf("replay of an unreadable item succeeded:\n%s", b)
	}
}

func TestCommitRetriesStopWhenTheContextEnds(t *testing.T) {
	s, _ := newTestServer(t, Config{CommitTimeout: time.Hour})
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
