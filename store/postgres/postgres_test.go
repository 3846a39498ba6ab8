package postgres_test

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/storetest"
	"github.com/respgate/respgate/wire"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newStore opens a store in a fresh schema of its own, dropped when tb ends.
func newStore(tb testing.TB) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(tb.Context(), pgtest.DSN(tb))
	if err != nil {
		tb.Fatalf("open postgres store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return newStore(t) })
}

func TestOpenTwiceOnOneSchemaMigratesOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	for i := range 2 {
		s, err := postgres.Open(t.Context(), dsn)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		_ = s.Close()
	}
}

func TestWithSchemaSelectsTheSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	s, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ConversationCreate(t.Context(), &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_1", Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	// Another schema's DSN, overridden by WithSchema, lands in the first schema.
	s2, err := postgres.Open(t.Context(), pgtest.DSN(t), postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.ConversationGet(t.Context(), &store.ConversationGetParams{Tenant: "t", ID: "conv_1"}); err != nil {
		t.Fatalf("conversation not found through WithSchema(%s): %v", schema, err)
	}
}

// The benchmarks report the round trips of one operation, counted after the timed loop
// (postgres.WithRoundTrips), beside time and allocations.

func BenchmarkCommitTurn(b *testing.B) {
	s, rt := countedStore(b)
	storetest.BenchmarkCommit(b, s)
	reportRoundTrips(b, rt, func() error { return s.ResponseCommit(b.Context(), storetest.BenchCommitParams(b, "resp_counted")) })
}

func BenchmarkBegin(b *testing.B) {
	storetest.BenchmarkBegin(b, newStore(b))
}

func BenchmarkChainGet(b *testing.B) {
	for _, depth := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s, rt := countedStore(b)
			storetest.BenchmarkChainGet(b, s, depth)
			tenant, id := storetest.BenchChainHead(depth)
			reportRoundTrips(b, rt, func() error {
				_, err := s.ResponseChainGet(b.Context(), &store.ResponseChainGetParams{Tenant: tenant, ID: id})
				return err
			})
		})
	}
}

func BenchmarkChainWarm(b *testing.B) {
	for _, depth := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s, rt := countedStore(b)
			storetest.BenchmarkChainWarm(b, s, depth)
			tenant, _ := storetest.BenchChainHead(depth)
			reportRoundTrips(b, rt, func() error {
				_, err := s.ChainGeneration(b.Context(), &store.ChainGenerationParams{Tenant: tenant})
				return err
			})
		})
	}
}

func BenchmarkChainForked(b *testing.B) {
	s, rt := countedStore(b)
	storetest.BenchmarkChainForked(b, s, 1000, 10)
	tenant, id := storetest.BenchChainHead(1000)
	reportRoundTrips(b, rt, func() error {
		_, err := s.ResponseChainGet(b.Context(), &store.ResponseChainGetParams{Tenant: tenant, ID: id})
		return err
	})
}

// countedStore is newStore counting round trips (postgres.WithRoundTrips).
func countedStore(b *testing.B) (*postgres.Store, *atomic.Int64) {
	b.Helper()
	rt := new(atomic.Int64)
	s, err := postgres.Open(b.Context(), pgtest.DSN(b), postgres.WithRoundTrips(rt))
	if err != nil {
		b.Fatalf("open postgres store: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, rt
}

// reportRoundTrips runs op once more, after the timed loop, and reports its round trips.
func reportRoundTrips(b *testing.B, rt *atomic.Int64, op func() error) {
	b.Helper()
	rt.Store(0)
	if err := op(); err != nil {
		b.Fatalf("counted operation: %v", err)
	}
	b.ReportMetric(float64(rt.Load()), "roundtrips/op")
}

func BenchmarkCommitParallel(b *testing.B) {
	b.SetParallelism(8)
	storetest.BenchmarkCommitParallel(b, newStore(b))
}

// The statements of a turn find the response by its primary key, and a chain read goes by the
// lineage indexes, in the generic plans a pooled connection's cached statements get, also while
// the tables are young and not yet analyzed. An index that leads with tenant (before
// migrations/postgres/011) was costed the same as the primary key on such a table, and a plan
// through it read every response of the tenant until autovacuum's first ANALYZE: each turn's
// round trips grew with the table.
func TestTurnStatementsUseTheirIndexesOnAYoungTable(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	prev := ""
	for i := range 100 {
		p := storetest.BenchCommitParams(t, fmt.Sprintf("resp_%d", i))
		p.Response.PreviousResponseID = prev
		for j := range p.Input {
			p.Input[j].ID = fmt.Sprintf("in_%d_%d", i, j)
			p.Output[j].ID = fmt.Sprintf("out_%d_%d", i, j)
		}
		if err := s.ResponseCommit(ctx, p); err != nil {
			t.Fatal(err)
		}
		prev = p.Response.ID
	}
	byKey := []string{"responses_pkey"}
	for _, c := range []struct {
		name, sql, args string
		indexes         []string // the indexes its reads of responses and items may use
	}{
		{"begin", postgres.ResponseBeginSQL, `'tenant-a', 'resp_new', 'in_progress', 'm', 'resp_19', NULL, now(), NULL, '{}', NULL, NULL, NULL, 'o', now(), NULL, false`, byKey},
		{"finish", postgres.FinishSQL, `'tenant-a', 'resp_1', 'completed', 'm', NULL, NULL, now(), '{}', NULL, NULL, NULL, NULL, false`, byKey},
		{"upsert", postgres.UpsertSQL, `'tenant-a', 'resp_new', 'completed', 'm', 'resp_19', NULL, now(), now(), '{}', NULL, NULL, NULL, NULL, false`, byKey},
		{"items", postgres.InsertItemsSQL, `'tenant-a', 'resp_1', '{input}', '{0}', '{msg_1}', '{message}', '{"{}"}', NULL`, byKey},
		{"events", postgres.AppendEventsSQL, `'{tenant-a}', '{resp_1}', '{1}', '{1}', '{response.output_text.delta}', '{"\\x00"}'`, byKey},
		{"chain", postgres.ResponseChainSQL, `'tenant-a', 'resp_19', 2000`, []string{"responses_pkey", "responses_branch_depth_idx", "items_branch_depth_idx"}},
	} {
		plan, err := s.GenericPlan(ctx, c.sql, c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		reads := 0
		for line := range strings.Lines(plan) {
			m := planRead.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			reads++
			if index := m[1] + m[2]; !slices.Contains(c.indexes, index) {
				t.Errorf("%s: the generic plan reads %q, not by %v:\n%s", c.name, strings.TrimSpace(line), c.indexes, plan)
				break
			}
		}
		if reads == 0 {
			t.Errorf("%s: no read of responses or items in the plan:\n%s", c.name, plan)
		}
	}
}

// planRead matches a plan line that reads responses or items: the index it goes by (submatch 1
// or 2), none for a sequential scan.
var planRead = regexp.MustCompile(`(?:Index(?: Only)? Scan(?: Backward)? using (\S+) on (?:responses|items)\b|Bitmap Index Scan on (\S+)|Seq Scan on (?:responses|items)\b)`)

// The in-progress record commits without waiting for the WAL flush (docs/design.md §1: it must
// not add a flush to time to first byte); the final commit is the durable one.
func TestBeginCommitsAsynchronously(t *testing.T) {
	s := newStore(t)
	p := &store.ResponseBeginParams{Response: store.Response{ID: "resp_1", Tenant: "t", Status: wire.StatusInProgress,
		Model: "m", CreatedAt: time.Now(), Echo: []byte(`{}`)}, Input: []wire.Item{{ID: "msg_1", Type: "message",
		JSON: []byte(`{"id":"msg_1","type":"message","role":"user","content":[]}`)}},
		LeaseOwner: "o", LeaseExpiresAt: time.Now().Add(time.Hour)}
	got, err := s.SynchronousCommitAfterBegin(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got != "off" {
		t.Fatalf("the in-progress record's transaction commits with synchronous_commit=%s, want off", got)
	}
}

// A running stream's event-log append commits without waiting for the WAL flush, as the
// in-progress record does: it must not hold a pooled connection through a flush (the final commit
// flushes past it).
func TestEventAppendCommitsAsynchronously(t *testing.T) {
	s := newStore(t)
	got, err := s.SynchronousCommitAfterAppend(t.Context(), "t", "resp_none")
	if err != nil {
		t.Fatal(err)
	}
	if got != "off" {
		t.Fatalf("the append's transaction commits with synchronous_commit=%s, want off", got)
	}
}
