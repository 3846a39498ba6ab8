package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/storetest"
)

// TestConcurrentCommitsShareOneRoundTrip holds every commit lane busy (each lane's commit waits
// on a conversation row another connection has locked), queues commits behind them, then lets
// the lanes go: the queued commits are written as one group, in one round trip, each stored.
// When one of the queued commits cannot be stored, the group's transaction stores nothing, and
// each commit is then written alone: the failing one gets its error, the others are stored.
func TestConcurrentCommitsShareOneRoundTrip(t *testing.T) {
	for _, withFailure := range []bool{false, true} {
		t.Run(fmt.Sprintf("failure=%v", withFailure), func(t *testing.T) {
			ctx := t.Context()
			dsn := pgtest.DSN(t)
			rt := new(atomic.Int64)
			s, err := postgres.Open(ctx, dsn, postgres.WithRoundTrips(rt))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			const tenant = "tenant-a" // storetest.BenchCommitParams's
			var blockers []string
			for i := range s.CommitLanes() {
				id := fmt.Sprintf("conv_block_%d", i)
				blockers = append(blockers, id)
				if err := s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: id, Tenant: tenant}}); err != nil {
					t.Fatal(err)
				}
			}
			// Another connection locks the blockers' conversations, so the lanes' commits wait.
			locker, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer locker.Close(ctx)
			tx, err := locker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // released below; a no-op then
			if _, err := tx.Exec(ctx, `SELECT 1 FROM conversations WHERE id = ANY($1) FOR UPDATE`, blockers); err != nil {
				t.Fatal(err)
			}

			var wg sync.WaitGroup
			errs := map[string]error{}
			var mu sync.Mutex
			commit := func(p *store.ResponseCommitParams) {
				wg.Go(func() {
					err := s.ResponseCommit(ctx, p)
					mu.Lock()
					errs[p.Response.ID] = err
					mu.Unlock()
				})
			}
			for i, conv := range blockers {
				p := storetest.BenchCommitParams(t, fmt.Sprintf("resp_lane_%d", i))
				p.ConversationID, p.Response.ConversationID = conv, conv
				commit(p)
			}
			// Every lane's batch has been sent and waits on the locked rows.
			waitFor(t, "every lane's commit to wait on the locked conversations", func() bool {
				// pg_stat_activity is read once per transaction unless the snapshot is cleared.
				if _, err := tx.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
					t.Fatal(err)
				}
				var blocked int
				err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))`).Scan(&blocked)
				return err == nil && blocked == s.CommitLanes()
			})
			const queued = 8
			for i := range queued {
				p := storetest.BenchCommitParams(t, fmt.Sprintf("resp_queued_%d", i))
				if withFailure && i == 3 {
					p.ConversationID, p.Response.ConversationID = "conv_none", "conv_none"
				}
				commit(p)
			}
			waitFor(t, "the commits to queue", func() bool { _, q := s.CommitLoad(); return q == queued })
			before := rt.Load()
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()

			trips := rt.Load() - before
			want := int64(1) // the group's batch
			if withFailure {
				want += queued // then each alone
			}
			if trips != want {
				t.Errorf("the %d queued commits took %d round trips, want %d", queued, trips, want)
			}
			for id, err := range errs {
				_, out, getErr := s.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenant, ID: id})
				if withFailure && id == "resp_queued_3" {
					if !errors.Is(err, store.ErrNotFound) || !errors.Is(getErr, store.ErrNotFound) {
						t.Errorf("%s (unknown conversation): commit %v, stored %v; want not found and nothing stored", id, err, getErr)
					}
					continue
				}
				if err != nil || getErr != nil || len(out) != 5 {
					t.Errorf("%s: commit %v, read back %v with %d output items; want stored with 5", id, err, getErr, len(out))
				}
			}
			if len(errs) != queued+s.CommitLanes() {
				t.Errorf("%d commits returned, want %d", len(errs), queued+s.CommitLanes())
			}
		})
	}
}

// waitFor waits until ok holds.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound on a hang, not a measurement
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
