package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/store"
)

// These tests run in synctest.Test: the keeper's ticker and Shutdown's deadline run on the
// bubble's fake clock, so each asserts what happens at an exact moment, and no store is real
// (database/sql's goroutines would live outside the bubble).

// keeperStore records the lease keeper's calls with the bubble's time. Every other method is
// unimplemented (nil Store): the keeper must call nothing else.
type keeperStore struct {
	store.Store
	mu         sync.Mutex
	renewals   []renewal
	appends    [][]store.Event
	failAppend int // the next failAppend appends fail
}

type renewal struct {
	what      string // "response" or "conversation"
	at, until time.Time
}

func (k *keeperStore) ResponseLeaseExtend(_ context.Context, p *store.ResponseLeaseExtendParams) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.renewals = append(k.renewals, renewal{"response", time.Now(), p.LeaseExpiresAt})
	return nil
}

func (k *keeperStore) ConversationTurnExtend(_ context.Context, p *store.ConversationTurnAcquireParams) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.renewals = append(k.renewals, renewal{"conversation", time.Now(), p.ExpiresAt})
	return nil
}

// ResponseEventAppend records each call as the runs of its responses, in the order given.
func (k *keeperStore) ResponseEventAppend(_ context.Context, ps []store.ResponseEventAppendParams) ([]int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var evs []store.Event
	for _, p := range ps {
		evs = append(evs, p.Events...)
	}
	k.appends = append(k.appends, evs)
	if k.failAppend > 0 {
		k.failAppend--
		return nil, errors.New("store unreachable (injected)")
	}
	return nil, nil
}

// appendCount is the number of ResponseEventAppend calls so far.
func (k *keeperStore) appendCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.appends)
}

// keeperServer is the part of a Server the lease keeper uses.
func keeperServer(st store.Store, leaseTTL time.Duration) *Engine {
	return &Engine{cfg: Config{LeaseTTL: leaseTTL}, store: st, owner: "gw_test",
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func TestLeaseKeeperRenewsBothLeasesEveryThirdOfTheTTLForAFullTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &keeperStore{}
		s := keeperServer(st, 30*time.Second)
		tr := &Turn{rec: store.Response{ID: "resp_1", Tenant: "t1", ConversationID: "conv_1"}, leased: true}
		tr.convTurn.Store(true)
		start := time.Now()
		tr.keeper = s.startKeeper(tr)
		time.Sleep(35 * time.Second)
		tr.keeper.Stop()
		var got []string
		for _, r := range st.renewals {
			got = append(got, r.what+" at "+r.at.Sub(start).String()+" until "+r.until.Sub(start).String())
		}
		want := []string{
			"response at 10s until 40s", "conversation at 10s until 40s",
			"response at 20s until 50s", "conversation at 20s until 50s",
			"response at 30s until 1m0s", "conversation at 30s until 1m0s",
		}
		if !slices.Equal(got, want) {
			t.Errorf("renewals:\n%q\nwant\n%q", got, want)
		}
	})
}

func TestLeaseKeeperStartsOnlyWithSomethingToKeep(t *testing.T) {
	s := keeperServer(&keeperStore{}, time.Minute)
	if k := s.startKeeper(&Turn{engine: s}); k != nil {
		k.Stop()
		t.Fatal("a keeper started for a turn without a lease or an event log")
	}
	var k *leaseKeeper
	k.Stop() // a nil keeper's Stop is a no-op
}

func TestLeaseKeeperFlushesABackgroundTurnsLogAndRetriesAFailedRunUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &keeperStore{failAppend: 1}
		// A lease of an hour renews every 20 minutes: every tick here is an event flush.
		s := keeperServer(st, time.Hour)
		tr := &Turn{rec: store.Response{ID: "resp_1", Tenant: "t1"}, events: &eventLog{}, claimed: true}
		tr.keeper = s.startKeeper(tr)
		defer tr.keeper.Stop()
		tr.events.observe(0, "response.created", []byte(`{"a":0}`))
		tr.events.observe(1, "response.in_progress", []byte(`{"a":1}`))
		time.Sleep(bgFlushInterval) // the first flush fails
		synctest.Wait()
		tr.events.observe(2, "response.output_text.delta", []byte(`{"a":2}`))
		time.Sleep(bgFlushInterval) // the second writes the failed run again, then the new one
		synctest.Wait()
		time.Sleep(3 * bgFlushInterval) // nothing new: no more writes
		synctest.Wait()
		tr.keeper.Stop()

		if len(st.appends) != 2 {
			t.Fatalf("%d appends, want 2 (a failed one, its retry with the new run; none when idle)", len(st.appends))
		}
		first, second := st.appends[0], st.appends[1]
		if len(first) != 1 || first[0].Seq != 0 || first[0].Type != "response.in_progress" {
			t.Fatalf("first flush %s, want one run from seq 0 to the in_progress event", runs(first))
		}
		if len(second) != 2 || second[0].Seq != 0 || string(second[0].Data) != string(first[0].Data) ||
			second[1].Seq != 2 || second[1].Type != "response.output_text.delta" {
			t.Fatalf("second flush %s, want the failed run unchanged, then a run from seq 2", runs(second))
		}
		if len(st.renewals) != 0 {
			t.Errorf("%d lease renewals for a turn that holds no lease", len(st.renewals))
		}
	})
}

func TestShutdownPastItsDeadlineCutsStreamsAndStillWaitsForThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Engine{quit: make(chan struct{})}
		s.stopCtx, s.stopCancel = context.WithCancel(context.Background())
		if !s.AdmitInto(&s.inflight) {
			t.Fatal("a new server refused a turn")
		}
		var once sync.Once
		finishTurn := func() { once.Do(s.inflight.Done) }
		defer finishTurn() // also on a failure, so Shutdown's goroutines end with the bubble
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		returned := make(chan time.Duration, 1)
		go func() { s.Drain(ctx); s.Stop(ctx); returned <- time.Since(start) }()

		synctest.Wait() // Shutdown waits for the turn; its deadline has not passed
		if closed(s.stopCtx.Done()) || closed(s.quit) {
			t.Fatal("Shutdown cut the streams or stopped background work before its deadline")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !closed(s.stopCtx.Done()) {
			t.Fatal("the deadline passed and the running streams were not told to stop")
		}
		// The cut streams still store their failed record: Shutdown waits for them, and keeps
		// the background work (a record still being stored) running until they are done.
		select {
		case <-returned:
			t.Fatal("Shutdown returned at its deadline with a turn still in flight")
		default:
		}
		if closed(s.quit) {
			t.Fatal("background work stopped while a turn was still in flight")
		}
		time.Sleep(time.Second) // the cut turn takes a second to store its record
		finishTurn()
		if d := <-returned; d != 6*time.Second {
			t.Errorf("Shutdown returned after %s, want 6s (once the cut turn was done)", d)
		}
		if !closed(s.quit) {
			t.Error("Shutdown returned without stopping the background work")
		}
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runs prints event-log runs as "seq:last type" for messages.
func runs(evs []store.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d:%s", e.Seq, e.Type))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// The keeper of a claimed background turn ticks at the shortest of its duties: a third of the
// lease TTL, the background flush interval. The first flush lands exactly one tick after the
// start, not a moment before. A successful flush wakes the readers of its log; a failed one does
// not.
func TestLeaseKeeperTicksAtItsShortestDutyAndWakesReadersOfAClaimedLog(t *testing.T) {
	cases := []struct {
		name     string
		ttl      time.Duration
		claimed  bool
		fail     bool
		want     time.Duration
		wantWake bool
	}{
		{name: "claimed background turn", ttl: time.Hour, claimed: true, want: bgFlushInterval, wantWake: true},
		{name: "claimed background turn, short lease", ttl: 90 * time.Millisecond, claimed: true, want: 30 * time.Millisecond, wantWake: true},
		{name: "claimed background turn whose flush fails", ttl: time.Hour, claimed: true, fail: true, want: bgFlushInterval},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &keeperStore{}
				if tc.fail {
					st.failAppend = 1
				}
				s := keeperServer(st, tc.ttl)
				tr := &Turn{rec: store.Response{ID: "resp_1", Tenant: "t1"}, events: &eventLog{}, claimed: tc.claimed}
				tr.events.observe(0, "response.created", []byte(`{"a":0}`))
				woken := s.WakeOn("resp_1")
				tr.keeper = s.startKeeper(tr)
				defer tr.keeper.Stop()
				time.Sleep(tc.want - time.Millisecond)
				synctest.Wait()
				if n := st.appendCount(); n != 0 {
					t.Fatalf("%d appends before the first tick at %s", n, tc.want)
				}
				time.Sleep(time.Millisecond)
				synctest.Wait()
				if n := st.appendCount(); n != 1 {
					t.Fatalf("%d appends at %s, want the first flush", n, tc.want)
				}
				select {
				case <-woken:
					if !tc.wantWake {
						t.Fatal("readers of the log were woken without a flushed event")
					}
				default:
					if tc.wantWake {
						t.Fatal("a claimed turn flushed its log and did not wake its readers")
					}
				}
			})
		})
	}
}
