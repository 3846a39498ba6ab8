package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

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
	if id := <-wakes; id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	if id := <-foreign; id != "" {
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
	if err := writer.ResponseEventAppend(ctx, &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_0", Events: ev(0)}); err != nil {
		t.Fatal(err)
	}
	if err := writer.ResponseEventAppend(ctx, &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_1", Events: ev(1), Notify: true}); err != nil {
		t.Fatal(err)
	}
	if id := <-wakes; id != "resp_1" {
		t.Fatalf("wake after the notified append %q, want resp_1", id)
	}
	done := time.Now()
	r.Status, r.CompletedAt = wire.StatusCompleted, &done
	if err := writer.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Begun: true, Events: ev(2), Notify: true}); err != nil {
		t.Fatal(err)
	}
	if id := <-wakes; id != "resp_1" {
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
	if id := <-wakes; id != "resp_queued" {
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
		err := writer.ResponseEventAppend(b.Context(), &store.ResponseEventAppendParams{Tenant: "t", ResponseID: "resp_1", Notify: notify,
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
