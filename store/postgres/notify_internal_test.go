package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
)

// TestChannelForKeepsSchemasThatFitAndHashesLongerOnes: Postgres cuts identifiers at 63 bytes,
// so a schema whose channel would be longer is hashed, and two such schemas still differ.
func TestChannelForKeepsSchemasThatFitAndHashesLongerOnes(t *testing.T) {
	const prefix = "respgate_events_"
	fits := strings.Repeat("s", 63-len(prefix))
	for _, schema := range []string{"public", fits} {
		if got := channelFor(schema); got != prefix+schema {
			t.Errorf("channelFor(%d bytes) = %q, want %q", len(schema), got, prefix+schema)
		}
	}
	long := channelFor(fits + "x")
	if len(long) > 63 || !strings.HasPrefix(long, prefix) {
		t.Errorf("channelFor(%d bytes) = %q (%d bytes), want a hashed name of at most 63", len(fits)+1, long, len(long))
	}
	if other := channelFor(fits + "y"); other == long {
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

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.DSN(t))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func watch(t *testing.T, s *Store) (*store.EventWatchParams, chan string) {
	t.Helper()
	ch := make(chan string, 16)
	p := &store.EventWatchParams{Wake: func(id string) { ch <- id }}
	if err := s.EventWatchStart(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p, ch
}

func notify(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.pool.Exec(t.Context(), notifySQL, s.watch.channel, id); err != nil {
		t.Fatal(err)
	}
}

// TestTheListenerLivesUntilItsLastWatcherStops: the LISTEN connection's goroutine is the
// watchers' (docs/design.md: every goroutine has an owner that stops it): it keeps serving the
// others when one stops, and is stopped and waited for when the last one does.
func TestTheListenerLivesUntilItsLastWatcherStops(t *testing.T) {
	s := openStore(t)
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
	s.watch.mu.Lock()
	running := s.watch.cancel != nil || s.watch.done != nil
	s.watch.mu.Unlock()
	if running {
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
	s := openStore(t)
	ctx := t.Context()
	p, wakes := watch(t, s)
	t.Cleanup(func() { _ = s.EventWatchStop(ctx, p) })
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("first wake %q, want the listener's start", id)
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{s.watch.channel}.Sanitize()).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("terminate the listener's connection: %d terminated, %v", n, err)
	}
	if id := wakeOf(t, wakes); id != "" {
		t.Fatalf("wake after the lost connection %q, want everything (the reconnection)", id)
	}
	notify(t, s, "resp_2")
	if id := wakeOf(t, wakes); id != "resp_2" {
		t.Fatalf("wake after the reconnection %q, want resp_2", id)
	}
}
