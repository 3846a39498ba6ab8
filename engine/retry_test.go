package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/internal/telemetry"
	"github.com/respgate/respgate/store"
)

// The commit retries and the background store of a failed record, on the bubble's fake clock
// (synctest): each asserts when every attempt was made.

// commitClock is a store whose first fail ResponseCommit calls fail with err (a transient error
// when nil), recording the bubble's time of every call.
type commitClock struct {
	store.Store
	mu    sync.Mutex
	fail  int
	err   error
	calls []time.Duration // since start
	start time.Time
}

func (c *commitClock) ResponseCommit(context.Context, *store.ResponseCommitParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, time.Since(c.start))
	if len(c.calls) <= c.fail {
		if c.err != nil {
			return c.err
		}
		return errors.New("connection reset (injected)")
	}
	return nil
}

func retryServer(t *testing.T, st store.Store) *Engine {
	t.Helper()
	s := keeperServer(st, time.Minute)
	s.cfg.CommitTimeout = time.Minute
	tel, err := telemetry.New(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.tel, s.quit = tel, make(chan struct{})
	return s
}

func TestCommitRetriesTwiceAfter50And100Milliseconds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  int
		err   error
		calls []time.Duration
		ok    bool
	}{
		{"transient, then stored", 2, nil, []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond}, true},
		{"transient three times", 5, nil, []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond}, false},
		{"conflict", 5, store.ErrConflict, []time.Duration{0}, false},
		{"not found", 5, store.ErrNotFound, []time.Duration{0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &commitClock{fail: tc.fail, err: tc.err, start: time.Now()}
				err := retryServer(t, st).commit(t.Context(), &store.ResponseCommitParams{})
				if (err == nil) != tc.ok || !slices.Equal(st.calls, tc.calls) {
					t.Fatalf("commit: %v after attempts at %v, want ok=%t after %v", err, st.calls, tc.ok, tc.calls)
				}
			})
		})
	}
}

func TestAFailedRecordIsStoredWithDoublingWaitsUpToFiveSeconds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  int
		err   error
		calls []time.Duration
	}{
		{"stored at the fifth attempt", 4, nil, []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond,
			700 * time.Millisecond, 1500 * time.Millisecond}},
		{"waits stop growing at 5s", 8, nil, []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond,
			700 * time.Millisecond, 1500 * time.Millisecond, 3100 * time.Millisecond, 6300 * time.Millisecond,
			11300 * time.Millisecond, 16300 * time.Millisecond}},
		{"a conflict ends it", 8, store.ErrConflict, []time.Duration{0}},
		{"a missing record ends it", 8, store.ErrNotFound, []time.Duration{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &commitClock{fail: tc.fail, err: tc.err, start: time.Now()}
				s := retryServer(t, st)
				s.storeFailure(&Turn{engine: s}, &store.ResponseCommitParams{Begun: true})
				s.background.Wait()
				if !slices.Equal(st.calls, tc.calls) {
					t.Fatalf("attempts at %v, want %v", st.calls, tc.calls)
				}
			})
		})
	}
}

func TestShutdownEndsTheBackgroundStoreOfAFailedRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &commitClock{fail: 1 << 30, start: time.Now()}
		s := retryServer(t, st)
		s.storeFailure(&Turn{engine: s}, &store.ResponseCommitParams{Begun: true})
		time.Sleep(time.Second)
		close(s.quit)
		s.background.Wait()
		if n := len(st.calls); n != 4 { // at 0, 100, 300 and 700 ms
			t.Fatalf("%d attempts in the second before shutdown, want 4", n)
		}
	})
}
