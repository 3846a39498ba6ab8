package postgres_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/wire"
)

// poolReading is what the store's instruments read at one collection.
type poolReading struct {
	statements, roundTrips int64
	acquires               uint64 // observations of the acquire wait histogram
	conns                  map[string]int64
	max                    int64
}

func readPool(t *testing.T, r *metric.ManualReader) poolReading {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := poolReading{conns: map[string]int64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				switch m.Name {
				case "respgate.store.statements":
					out.statements = d.DataPoints[0].Value
				case "respgate.store.round_trips":
					out.roundTrips = d.DataPoints[0].Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if m.Name == "respgate.store.pool.max_connections" {
						out.max = p.Value
						continue
					}
					state, _ := p.Attributes.Value("state")
					out.conns[state.AsString()] = p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name == "respgate.store.pool.acquire_wait" {
					out.acquires = d.DataPoints[0].Count
				}
			}
		}
	}
	return out
}

// The store's instruments count what it sends and time each pool acquire: a call of one
// statement moves the statement and round-trip counters by one and adds one acquire wait; a
// pipelined batch adds one round trip and one statement per queued statement; the connection
// gauges show the pool's size and, between calls, no connection in use.
func TestInstrumentCountsStatementsAndTimesEachAcquire(t *testing.T) {
	s, err := postgres.Open(t.Context(), pgtest.DSN(t), postgres.WithMaxConns(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reader := metric.NewManualReader()
	if err := s.Instrument(metric.NewMeterProvider(metric.WithReader(reader)).Meter("test")); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.ConversationCreate(ctx, &store.ConversationCreateParams{Conversation: store.Conversation{ID: "conv_1", Tenant: "t", CreatedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	before := readPool(t, reader)

	// One statement: the turn lease of a turn without client ids.
	if err := s.ConversationTurnAcquire(ctx, &store.ConversationTurnAcquireParams{Tenant: "t", ConversationID: "conv_1", ResponseID: "resp_1", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	one := readPool(t, reader)
	if d := (poolReading{statements: one.statements - before.statements, roundTrips: one.roundTrips - before.roundTrips, acquires: one.acquires - before.acquires}); d.statements != 1 || d.roundTrips != 1 || d.acquires != 1 {
		t.Errorf("a one-statement call moved statements %d, round trips %d, acquires %d; want 1, 1, 1", d.statements, d.roundTrips, d.acquires)
	}

	// One batch: the in-progress record with input (synchronous_commit off, the record, the items).
	in, err := wire.ParseItem([]byte(`{"id":"msg_1","type":"message","role":"user","content":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	r := store.Response{ID: "resp_2", Tenant: "t", Status: wire.StatusInProgress, Model: "m", CreatedAt: time.Now()}
	if err := s.ResponseBegin(ctx, &store.ResponseBeginParams{Response: r, Input: []wire.Item{in}, LeaseOwner: "w", LeaseExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	two := readPool(t, reader)
	if st, rt, aq := two.statements-one.statements, two.roundTrips-one.roundTrips, two.acquires-one.acquires; st != 3 || rt != 1 || aq != 1 {
		t.Errorf("a batch of three statements moved statements %d, round trips %d, acquires %d; want 3, 1, 1", st, rt, aq)
	}
	if two.max != 3 || two.conns["acquired"] != 0 || two.conns["constructing"] != 0 || two.conns["idle"] < 1 || two.conns["idle"] > 3 {
		t.Errorf("pool gauges %v, max %d; want max 3, none acquired or constructing, 1 to 3 idle", two.conns, two.max)
	}
}
