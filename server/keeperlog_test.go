package server

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/respgate/respgate/store"
)

// logRecords is a slog handler that keeps each record as "LEVEL message key=value ...".
type logRecords struct {
	mu   sync.Mutex
	list []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "error" {
			s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, s)
	return nil
}

func (l *logRecords) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

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

func (l *lostLeases) ResponseEventAppend(ctx context.Context, _ *store.ResponseEventAppendParams) error {
	return l.fail(ctx)
}

// A renewal or an event flush that fails is a warning naming the response (and whether the
// lease was lost); one that fails because the keeper was stopped is not.
func TestLeaseKeeperWarnsOfFailedRenewalsButNotOfItsOwnStop(t *testing.T) {
	for _, block := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			logs := &logRecords{}
			s := keeperServer(&lostLeases{block: block}, 30*time.Second)
			s.log = slog.New(logs)
			tr := &turn{req: &createRequest{ConversationID: "conv_1"}, rec: store.Response{ID: "resp_1", Tenant: "t1"}, leased: true,
				events: &eventLog{}}
			tr.convTurn.Store(true)
			tr.events.observe(0, "response.created", []byte(`{}`))
			tr.keeper = s.startKeeper(tr)
			if block {
				time.Sleep(eventFlushInterval) // the first flush is under way and blocks
				synctest.Wait()
				tr.keeper.Stop()
				if got := logs.snapshot(); len(got) != 0 {
					t.Fatalf("the keeper's own stop was logged: %q", got)
				}
				return
			}
			time.Sleep(10 * time.Second) // 20 flushes (the first fails) and one renewal of each lease
			synctest.Wait()
			tr.keeper.Stop()
			want := []string{
				"WARN append stream events response_id=resp_1 events=1",
				"WARN extend response lease response_id=resp_1 lost=true",
				"WARN extend conversation turn lease response_id=resp_1 lost=true",
			}
			got := logs.snapshot()
			got = slices.Compact(got) // the failed run is retried (and logged) at every flush
			if !slices.Equal(got, want) {
				t.Fatalf("logs:\n%q\nwant\n%q", got, want)
			}
		})
	}
}
