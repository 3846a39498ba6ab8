package engine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/internal/logtest"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// lostLeases is a keeper's store whose renewals and appends fail: with ErrNotFound (the lease
// was lost), or, with block set, only when their context ends.
type lostLeases struct {
	store.Store
	block bool
}

func (l *lostLeases) fail(ctx context.Context) error {
	if l.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return store.ErrNotFound
}

func (l *lostLeases) ResponseLeaseExtend(ctx context.Context, _ *store.ResponseLeaseExtendParams) error {
	return l.fail(ctx)
}

func (l *lostLeases) ConversationTurnExtend(ctx context.Context, _ *store.ConversationTurnAcquireParams) error {
	return l.fail(ctx)
}

func (l *lostLeases) ResponseEventAppend(ctx context.Context, ps []store.ResponseEventAppendParams) ([]int, error) {
	if err := l.fail(ctx); !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	return []int{0}, nil // the response is gone
}

// A renewal or an event flush that fails is a warning naming the response (and whether the
// lease was lost); one that fails because the keeper was stopped is not.
func TestLeaseKeeperWarnsOfFailedRenewalsButNotOfItsOwnStop(t *testing.T) {
	for _, block := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			logs := &logtest.Records{}
			s := keeperServer(&lostLeases{block: block}, 30*time.Second)
			s.log = slog.New(logs)
			tr := &Turn{rec: store.Response{ID: "resp_1", Tenant: "t1", ConversationID: "conv_1"}, leased: true,
				events: &eventLog{}, claimed: true}
			tr.convTurn.Store(true)
			tr.events.observe(0, "response.created", []byte(`{}`))
			tr.keeper = s.startKeeper(tr)
			if block {
				time.Sleep(bgFlushInterval) // the first flush is under way and blocks
				synctest.Wait()
				tr.keeper.Stop()
				if got := logs.Snapshot(); len(got) != 0 {
					t.Fatalf("the keeper's own stop was logged: %q", got)
				}
				return
			}
			time.Sleep(10 * time.Second) // 200 flushes (the first fails) and one renewal of each lease
			synctest.Wait()
			tr.keeper.Stop()
			want := []string{
				"WARN append stream events response_id=resp_1 events=1",
				"WARN extend response lease response_id=resp_1 lost=true",
				"WARN extend conversation turn lease response_id=resp_1 lost=true",
			}
			got := logs.Snapshot()
			got = slices.Compact(got) // the failed run is retried (and logged) at every flush
			if !slices.Equal(got, want) {
				t.Fatalf("logs:\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// A run taken from the event log is the store's to keep: events logged after it go to a run of
// their own and never change it, and the log's end (seal) stops logging.
func TestEventLogRunsAreCopiesTheLaterEventsNeverTouch(t *testing.T) {
	l := &eventLog{}
	l.observe(0, wire.EventCreated, []byte(`{"a":0}`))
	l.observe(1, wire.EventInProgress, []byte(`{"a":1}`))
	first := l.take()
	want := "event: response.created\ndata: {\"a\":0}\n\nevent: response.in_progress\ndata: {\"a\":1}\n\n"
	if len(first) != 1 || first[0].Seq != 0 || first[0].Type != wire.EventInProgress || string(first[0].Data) != want {
		t.Fatalf("first run %+v", first)
	}
	l.observe(2, wire.EventTextDelta, []byte(`{"b":2222222222222222222222222222222222222}`))
	if string(first[0].Data) != want {
		t.Fatalf("a later event changed a taken run: %q", first[0].Data)
	}
	rest := l.seal()
	if len(rest) != 1 || rest[0].Seq != 2 || !strings.HasPrefix(string(rest[0].Data), "event: response.output_text.delta\n") {
		t.Fatalf("sealed runs %+v", rest)
	}
	l.observe(3, wire.EventCompleted, []byte(`{}`))
	if got := l.take(); len(got) != 0 || string(first[0].Data) != want || string(rest[0].Data) != "event: response.output_text.delta\ndata: {\"b\":2222222222222222222222222222222222222}\n\n" {
		t.Fatalf("after seal: logged %+v; runs %q %q", got, first[0].Data, rest[0].Data)
	}
}

// A model faster than the flushes fills runs up to maxRunBytes, not one buffer holding the whole
// answer: the runs come out in order, each starting at the sequence number after the last one's
// end, and together they are every frame once.
func TestEventLogEndsARunAtItsSizeBound(t *testing.T) {
	l := &eventLog{}
	var all strings.Builder
	delta := []byte(`{"delta":"` + strings.Repeat("x", 300) + `"}`)
	const n = 500
	for seq := range int64(n) {
		l.observe(seq, wire.EventTextDelta, delta)
		all.WriteString("event: response.output_text.delta\ndata: " + string(delta) + "\n\n")
	}
	runs := l.seal()
	frame := len(all.String()) / n
	if len(runs) < all.Len()/(maxRunBytes+frame) {
		t.Fatalf("%d runs for %d bytes: runs are not bounded by %d bytes", len(runs), all.Len(), maxRunBytes)
	}
	var got strings.Builder
	next := int64(0)
	for i, r := range runs {
		if r.Seq != next {
			t.Fatalf("run %d starts at %d, want %d", i, r.Seq, next)
		}
		if len(r.Data) >= maxRunBytes+frame {
			t.Fatalf("run %d holds %d bytes, past the bound %d plus one frame", i, len(r.Data), maxRunBytes)
		}
		next += int64(strings.Count(string(r.Data), "event: "))
		got.Write(r.Data)
	}
	if next != n || got.String() != all.String() {
		t.Fatalf("the runs hold %d events, %d bytes; want %d, %d", next, got.Len(), n, all.Len())
	}
}
