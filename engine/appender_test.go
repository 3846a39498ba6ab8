package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/internal/logtest"
	"github.com/respgate/respgate/store"
)

// These tests run in synctest.Test: the appender's ticker runs on the bubble's fake clock, so
// each asserts what happens at an exact moment.

// appendStore records the appender's calls: each call as "response:first seq-last type" per run,
// in the order given. fail fails the next calls; gone names responses that do not exist; hold,
// when set, makes a call wait until it is closed.
type appendStore struct {
	store.Store
	mu    sync.Mutex
	calls [][]string
	fail  int
	gone  map[string]bool
	hold  chan struct{}
}

func (s *appendStore) ResponseEventAppend(_ context.Context, ps []store.ResponseEventAppendParams) ([]int, error) {
	s.mu.Lock()
	var call []string
	var missing []int
	for i, p := range ps {
		for _, e := range p.Events {
			call = append(call, fmt.Sprintf("%s:%d-%s", p.ResponseID, e.Seq, e.Type))
		}
		if s.gone[p.ResponseID] {
			missing = append(missing, i)
		}
	}
	slices.Sort(call) // the appender's order of responses is its map's
	s.calls = append(s.calls, call)
	failed := s.fail > 0
	if failed {
		s.fail--
	}
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if failed {
		return nil, errors.New("store unreachable (injected)")
	}
	return missing, nil
}

func (s *appendStore) snapshot() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// appenderRig is an appender over st, its owner's WaitGroup and quit channel; stop closes quit
// and waits for the appender's goroutine. A nil log discards.
type appenderRig struct {
	a    *eventAppender
	wg   sync.WaitGroup
	quit chan struct{}
}

func newAppenderRig(st store.Store, log *slog.Logger) *appenderRig {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r := &appenderRig{quit: make(chan struct{})}
	r.a = newEventAppender(st, log, time.Second, &r.wg, r.quit)
	return r
}

func (r *appenderRig) stop() {
	close(r.quit)
	r.wg.Wait()
}

func loggedTurn(id string) *Turn {
	return &Turn{rec: store.Response{ID: id, Tenant: "t1"}, events: &eventLog{}}
}

func checkCalls(t *testing.T, when string, got [][]string, want ...[]string) {
	t.Helper()
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("%s: calls\n%q\nwant\n%q", when, got, want)
	}
}

// Every stream's new events go to the store in one call per interval, the first a whole interval
// after the first stream came; an interval with nothing new makes no call.
func TestEventAppenderAppendsEveryStreamInOneCallPerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &appendStore{}
		r := newAppenderRig(st, nil)
		defer r.stop()
		t1, t2 := loggedTurn("resp_1"), loggedTurn("resp_2")
		r.a.add(t1)
		r.a.add(t2)
		t1.events.observe(0, "response.created", []byte(`{}`))
		t1.events.observe(1, "response.in_progress", []byte(`{}`))
		t2.events.observe(0, "response.created", []byte(`{}`))
		time.Sleep(eventFlushInterval - time.Millisecond)
		synctest.Wait()
		checkCalls(t, "before the first interval", st.snapshot())
		time.Sleep(time.Millisecond)
		synctest.Wait()
		first := []string{"resp_1:0-response.in_progress", "resp_2:0-response.created"}
		checkCalls(t, "at the first interval", st.snapshot(), first)

		t2.events.observe(1, "response.output_text.delta", []byte(`{}`))
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		second := []string{"resp_2:1-response.output_text.delta"}
		checkCalls(t, "at the second", st.snapshot(), first, second)
		time.Sleep(3 * eventFlushInterval)
		synctest.Wait()
		checkCalls(t, "with nothing new", st.snapshot(), first, second)

		// Removed, a stream is no longer flushed: its events stay for the commit.
		r.a.remove(t1)
		t1.events.observe(2, "response.output_item.added", []byte(`{}`))
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		checkCalls(t, "after a removal", st.snapshot(), first, second)
		if left := runs(t1.events.seal()); left != "[2:response.output_item.added]" {
			t.Fatalf("the removed stream's log holds %s, want its event after the removal", left)
		}
	})
}

// A call that fails gives its runs back: the next call writes them unchanged before the newer
// events.
func TestEventAppenderRetriesAFailedCallUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &appendStore{fail: 1}
		logs := &logtest.Records{}
		r := newAppenderRig(st, slog.New(logs))
		defer r.stop()
		tr := loggedTurn("resp_1")
		r.a.add(tr)
		tr.events.observe(0, "response.created", []byte(`{"a":0}`))
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		tr.events.observe(1, "response.in_progress", []byte(`{"a":1}`))
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		checkCalls(t, "after a failed call", st.snapshot(),
			[]string{"resp_1:0-response.created"},
			[]string{"resp_1:0-response.created", "resp_1:1-response.in_progress"})
		if got := logs.Snapshot(); !slices.Equal(got, []string{"WARN append stream events streams=1"}) {
			t.Fatalf("logs %q, want one warning of the failed call", got)
		}
	})
}

// The runs of a response the store no longer has are dropped with a warning naming it; the
// other streams' runs are logged.
func TestEventAppenderDropsTheRunsOfAResponseThatIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &appendStore{gone: map[string]bool{"resp_gone": true}}
		logs := &logtest.Records{}
		r := newAppenderRig(st, slog.New(logs))
		defer r.stop()
		gone, kept := loggedTurn("resp_gone"), loggedTurn("resp_kept")
		r.a.add(gone)
		r.a.add(kept)
		gone.events.observe(0, "response.created", []byte(`{}`))
		kept.events.observe(0, "response.created", []byte(`{}`))
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		if left := runs(gone.events.take()); left != "[]" {
			t.Fatalf("the gone response's log holds %s after the flush, want nothing", left)
		}
		if got := logs.Snapshot(); !slices.Equal(got, []string{"WARN append stream events response_id=resp_gone events=1"}) {
			t.Fatalf("logs %q, want a warning naming the gone response", got)
		}
	})
}

// remove waits for a flush in progress that holds runs of the stream: when it returns, what the
// store did not take is back in the log, for the commit.
func TestEventAppenderRemoveWaitsForAFlushHoldingTheStreamsRuns(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := &appendStore{hold: make(chan struct{})}
				if fail {
					st.fail = 1
				}
				r := newAppenderRig(st, nil)
				defer r.stop()
				tr := loggedTurn("resp_1")
				r.a.add(tr)
				tr.events.observe(0, "response.created", []byte(`{}`))
				time.Sleep(eventFlushInterval)
				synctest.Wait() // the flush holds the run, in the store
				removed := make(chan struct{})
				go func() { r.a.remove(tr); close(removed) }()
				synctest.Wait()
				select {
				case <-removed:
					t.Fatal("remove returned while a flush held the stream's runs")
				default:
				}
				close(st.hold)
				<-removed
				want := "[]"
				if fail {
					want = "[0:response.created]"
				}
				if left := runs(tr.events.seal()); left != want {
					t.Fatalf("after remove the log holds %s, want %s", left, want)
				}
			})
		})
	}
}

// The appender's goroutine starts with the first stream, and stopping its owner ends it, also
// while streams are logged.
func TestEventAppenderGoroutineStartsWithTheFirstStreamAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newAppenderRig(&appendStore{}, nil)
		if r.a.started {
			t.Fatal("the appender started before any stream")
		}
		r.a.add(loggedTurn("resp_1"))
		r.a.add(loggedTurn("resp_2"))
		if !r.a.started {
			t.Fatal("the appender did not start with its first stream")
		}
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		r.stop() // returns only once the goroutine ended (synctest reports a leaked one)
	})
}

// A flush with more events than a call may hold makes several calls, each with whole streams,
// together holding every stream's runs once.
func TestEventAppenderSplitsAFlushIntoCallsOfBoundedSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &appendStore{}
		r := newAppenderRig(st, nil)
		defer r.stop()
		var turns []*Turn
		for _, id := range []string{"resp_1", "resp_2", "resp_3"} {
			tr := loggedTurn(id)
			tr.events.observe(0, "response.created", []byte(`{"same":"size"}`))
			turns = append(turns, tr)
		}
		r.a.maxBytes = 2 * len(turns[0].events.open.Data) // two streams reach it
		for _, tr := range turns {
			r.a.add(tr)
		}
		time.Sleep(eventFlushInterval)
		synctest.Wait()
		calls := st.snapshot()
		var all []string
		var sizes []int
		for _, c := range calls {
			all = append(all, c...)
			sizes = append(sizes, len(c))
		}
		slices.Sort(all)
		if !slices.Equal(sizes, []int{2, 1}) || !slices.Equal(all, []string{
			"resp_1:0-response.created", "resp_2:0-response.created", "resp_3:0-response.created"}) {
			t.Fatalf("calls %q, want one of two streams then one of the third", calls)
		}
	})
}
