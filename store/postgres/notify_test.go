package postgres_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/wire"
)

// TestEventNotificationsReachAnotherStoreOnTheDatabase: a background turn's event append and
// commit (Notify) in one store wake the watchers of another store on the same schema, by
// response id, in order; a store in another schema hears nothing; a write without Notify
// wakes nobody.
func TestEventNotificationsReachAnotherStoreOnTheDatabase(t *testing.T) {
	dsn := pgtest.DSN(t)
	writer := newStoreAt(t, dsn)
	reader := newStoreAt(t, dsn)
	other := newStore(t) // another schema

	wakes := make(chan string, 16)
	foreign := make(chan string, 16)
	p := &store.EventWatchParams{Wake: func(id string) { wakes <- id }}
	q := &store.EventWatchParams{Wake: func(id string) { foreign <- id }}
	if err := reader.EventWatchStart(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if err := other.EventWatchStart(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	// Listening: each listener says so first with a wake of everything ("").
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	if id := wakeOf(t, foreign); id != "" {
		t.Fatalf("first wake of the other schema %q, want the listener's start", id)
	}

	ctx := t.Context()
	r := store.Response{ID: "resp_1", Tenant: "t", Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now(),
		Echo: json.RawMessage(`{"model":"m","background":true}`)}
	for _, id := range []string{"resp_0", "resp_1"} {
		r := r
		r.ID = id
		if err := writer.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, LeaseOwner: "gw", LeaseExpiresAt: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(seq int64) []store.Event {
		return []store.Event{{Seq: seq, Type: "response.in_progress", Data: []byte("event: x\ndata: {}\n\n")}}
	}
	// Without Notify: silence. Notifications arrive in commit order, so a wake for resp_0 would
	// come before the one of resp_1's notified append.
	if err := store.AppendEvents(ctx, writer, &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_0", Events: ev(0)}); err != nil {
		t.Fatal(err)
	}
	if err := store.AppendEvents(ctx, writer, &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_1", Events: ev(1), Notify: true}); err != nil {
		t.Fatal(err)
	}
	if id := wakeOf(t, wakes); id != "resp_1" {
		t.Fatalf("wake after the notified append %q, want resp_1", id)
	}
	done := time.Now()
	r.Status, r.CompletedAt = wire.StatusCompleted, &done
	if err := writer.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Begun: true, Events: ev(2), Notify: true}); err != nil {
		t.Fatal(err)
	}
	if id := wakeOf(t, wakes); id != "resp_1" {
		t.Fatalf("wake after the notified commit %q, want resp_1", id)
	}
	// The cancel of a queued background response is its end: its followers are woken. A claimed
	// one ends when its worker commits, so its cancel wakes nobody; it is cancelled first, so a
	// wake for it would come before the queued one's.
	for _, id := range []string{"resp_run", "resp_queued"} {
		q := store.Response{ID: id, Tenant: "t", Status: wire.StatusQueued, Model: "m", CreatedAt: time.Now(), Echo: r.Echo}
		if err := writer.ResponseEnqueueBackground(ctx, &store.ResponseEnqueueBackgroundParams{Response: q,
			Turn: store.BackgroundTurn{Body: []byte(`{}`), State: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := writer.ResponseBackgroundClaim(ctx, &store.ResponseBackgroundClaimParams{Tenant: "t", ID: "resp_run", LeaseOwner: "gw", LeaseExpiresAt: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		want store.CancelOutcome
	}{{"resp_run", store.CancelRunning}, {"resp_queued", store.CancelQueued}} {
		if out, err := writer.ResponseCancelBackground(ctx, &store.ResponseCancelBackgroundParams{Tenant: "t", ID: c.id}); err != nil || out != c.want {
			t.Fatalf("cancel %s: %d %v, want %d", c.id, out, err, c.want)
		}
	}
	if id := wakeOf(t, wakes); id != "resp_queued" {
		t.Fatalf("wake after the cancels %q, want resp_queued", id)
	}
	if err := reader.EventWatchStop(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := other.EventWatchStop(ctx, q); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-foreign:
		t.Fatalf("the store of another schema was woken for %q", id)
	default:
	}
}

// TestChannelForKeepsSchemasThatFitAndHashesLongerOnes: Postgres cuts identifiers at 63 bytes,
// so a schema whose channel would be longer is hashed, and two such schemas still differ.
func TestChannelForKeepsSchemasThatFitAndHashesLongerOnes(t *testing.T) {
	const prefix = "respgate_events_"
	fits := strings.Repeat("s", 63-len(prefix))
	for _, schema := range []string{"public", fits} {
		if got := postgres.ChannelFor(schema); got != prefix+schema {
			t.Errorf("postgres.ChannelFor(%d bytes) = %q, want %q", len(schema), got, prefix+schema)
		}
	}
	long := postgres.ChannelFor(fits + "x")
	if len(long) > 63 || !strings.HasPrefix(long, prefix) {
		t.Errorf("postgres.ChannelFor(%d bytes) = %q (%d bytes), want a hashed name of at most 63", len(fits)+1, long, len(long))
	}
	if other := postgres.ChannelFor(fits + "y"); other == long {
		t.Errorf("two long schemas share channel %q", long)
	}
}

// wakeOf waits for the next wake on ch. The guard only turns a listener that never wakes into
// a failure instead of a hung test.
func wakeOf(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case id := <-ch:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no wake within 30 s")
		return ""
	}
}

func watch(t *testing.T, s *postgres.Store) (*store.EventWatchParams, chan string) {
	t.Helper()
	ch := make(chan string, 16)
	p := &store.EventWatchParams{Wake: func(id string) { ch <- id }}
	if err := s.EventWatchStart(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p, ch
}

func notify(t *testing.T, s *postgres.Store, id string) {
	t.Helper()
	if err := s.Notify(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

// TestTheListenerLivesUntilItsLastWatcherStops: the LISTEN connection's goroutine is the
// watchers' (docs/design.md: every goroutine has an owner that stops it): it keeps serving the
// others when one stops, and is stopped and waited for when the last one does.
func TestTheListenerLivesUntilItsLastWatcherStops(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	p1, wakes1 := watch(t, s)
	if id := wakeOf(t, wakes1); id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	p2, wakes2 := watch(t, s)
	if err := s.EventWatchStop(ctx, p1); err != nil {
		t.Fatal(err)
	}
	notify(t, s, "resp_1")
	if id := wakeOf(t, wakes2); id != "resp_1" {
		t.Fatalf("wake of the remaining watcher %q, want resp_1", id)
	}
	if err := s.EventWatchStop(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if s.ListenerRunning() {
		t.Fatal("the listener still runs after its last watcher stopped")
	}
	if err := s.EventWatchStop(ctx, p2); err != nil {
		t.Fatalf("a second stop of a stopped watcher: %v", err)
	}
	select {
	case id := <-wakes1:
		t.Fatalf("a stopped watcher was woken for %q", id)
	default:
	}
}

// TestTheListenerReconnectsAndWakesEveryone: when its connection is lost, the listener connects
// again (after listenRetry) and wakes every watcher, since notifications sent in between are
// lost; notifications then arrive again.
func TestTheListenerReconnectsAndWakesEveryone(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	p, wakes := watch(t, s)
	t.Cleanup(func() { _ = s.EventWatchStop(ctx, p) })
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	err := s.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{s.Channel()}.Sanitize())
	if err != nil {
		t.Fatalf("terminate the listener's connection: %v", err)
	}
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("wake after the lost connection %q, want everything (the reconnection)", id)
	}
	notify(t, s, "resp_2")
	if id := wakeOf(t, wakes); id != "resp_2" {
		t.Fatalf("wake after the reconnection %q, want resp_2", id)
	}
}

// TestEventWatchStopWaitsForTheListener: the last watcher's stop returns only once the listener's
// goroutine has returned, even when the caller's context has already ended, so no listener
// outlives its watchers or runs beside the next one.
func TestEventWatchStopWaitsForTheListener(t *testing.T) {
	s := newStore(t)
	for round := range 3 {
		p, wakes := watch(t, s)
		if id := wakeOf(t, wakes); id != "" {
			t.Fatalf("round %d: first wake %q, want the listener's start", round, id)
		}
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		if err := s.EventWatchStop(ended, p); err != nil {
			t.Fatalf("round %d: stop under an ended context: %v", round, err)
		}
		if n := s.ListenerGoroutines(); n != 0 {
			t.Fatalf("round %d: %d listener goroutines still running after the last watcher stopped", round, n)
		}
	}
}

// TestTheListenerLogsALostConnection: a listener that loses its connection says so in the
// store's log (WithLogger) before it reconnects, so an operator sees why followers fell back to
// polling.
func TestTheListenerLogsALostConnection(t *testing.T) {
	records := make(chan slog.Record, 16)
	s, err := postgres.Open(t.Context(), pgtest.DSN(t), postgres.WithLogger(slog.New(recordHandler(records))))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	p, wakes := watch(t, s)
	t.Cleanup(func() { _ = s.EventWatchStop(context.Background(), p) })
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	select {
	case r := <-records:
		t.Fatalf("logged %q before anything went wrong", r.Message)
	default:
	}
	err = s.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{s.Channel()}.Sanitize())
	if err != nil {
		t.Fatalf("terminate the listener's connection: %v", err)
	}
	var r slog.Record
	select {
	case r = <-records:
	case <-time.After(30 * time.Second): // a guard against a hung test, not a timing assertion
		t.Fatal("nothing logged within 30 s of the lost connection")
	}
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	if r.Level != slog.LevelWarn || !strings.Contains(r.Message, "event listener") || attrs["err"] == "" || attrs["channel"] != s.Channel() {
		t.Errorf("logged %v %q %v, want a warning naming the channel and the error", r.Level, r.Message, attrs)
	}
}

// recordHandler sends records to ch, dropping those that do not fit (a listener that keeps
// reconnecting must not block on a test that has stopped reading).
type recordHandler chan<- slog.Record

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

func newStoreAt(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(tb.Context(), dsn)
	if err != nil {
		tb.Fatalf("open postgres store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkEventAppend measures a background turn's event append with and without its
// notification (the writer's cost), and with it until another store's watcher is woken (the
// follower's latency on another replica, apart from its read).
func BenchmarkEventAppend(b *testing.B) {
	dsn := pgtest.DSN(b)
	writer := newStoreAt(b, dsn)
	reader := newStoreAt(b, dsn)
	wakes := make(chan string, 1024)
	p := &store.EventWatchParams{Wake: func(id string) {
		if id != "" {
			wakes <- id
		}
	}}
	if err := reader.EventWatchStart(b.Context(), p); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reader.EventWatchStop(context.Background(), p) })
	r := store.Response{ID: "resp_1", Tenant: "t", Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now(), Echo: json.RawMessage(`{}`)}
	if err := writer.ResponseBegin(b.Context(), &store.ResponseBeginParams{Response: r, LeaseOwner: "gw", LeaseExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	var seq int64
	appendOne := func(notify bool) {
		seq++
		err := store.AppendEvents(b.Context(), writer, &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_1", Notify: notify,
			Events: []store.Event{{Seq: seq, Type: "response.output_text.delta", Data: []byte("event: response.output_text.delta\ndata: {}\n\n")}}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			appendOne(false)
		}
	})
	b.Run("notify", func(b *testing.B) {
		for b.Loop() {
			appendOne(true)
		}
		b.StopTimer()
		for range b.N {
			<-wakes
		}
	})
	b.Run("notify-until-woken", func(b *testing.B) {
		for b.Loop() {
			appendOne(true)
			<-wakes
		}
	})
}
