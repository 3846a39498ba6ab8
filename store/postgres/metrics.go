package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// tracer counts what the store's connections send (round trips, statements) and, once the store
// is instrumented, times each pool acquire: what a turn waits for a connection before its first
// statement is the pool's share of a busy gateway's store latency (docs/scaling.md).
type tracer struct {
	roundTrips *atomic.Int64 // WithRoundTrips's counter, or the tracer's own
	statements atomic.Int64
	wait       atomic.Pointer[metric.Float64Histogram] // nil until Instrument
}

var (
	_ pgx.QueryTracer       = (*tracer)(nil)
	_ pgx.BatchTracer       = (*tracer)(nil)
	_ pgxpool.AcquireTracer = (*tracer)(nil)
)

func newTracer(roundTrips *atomic.Int64) *tracer {
	if roundTrips == nil {
		roundTrips = new(atomic.Int64)
	}
	return &tracer{roundTrips: roundTrips}
}

// A query outside a batch is one round trip and one statement.
func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.roundTrips.Add(1)
	t.statements.Add(1)
	return ctx
}

func (*tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A pipelined batch is one round trip of as many statements as it queues.
func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.roundTrips.Add(1)
	return ctx
}

func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	t.statements.Add(1)
}

func (*tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// acquireStart carries an acquire's start from TraceAcquireStart to TraceAcquireEnd.
type acquireStart struct{}

func (t *tracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if t.wait.Load() == nil {
		return ctx
	}
	return context.WithValue(ctx, acquireStart{}, time.Now())
}

func (t *tracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	h := t.wait.Load()
	start, ok := ctx.Value(acquireStart{}).(time.Time)
	if h == nil || !ok || d.Err != nil {
		return
	}
	(*h).Record(ctx, time.Since(start).Seconds())
}

// waitBuckets are the acquire wait histogram's bounds (seconds): an idle pool answers in
// microseconds, a saturated one in the time its connections' statements take.
var waitBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// Instrument registers the store's instruments with m (server.New, through telemetry, as it does
// the fleet's): the pool's connections by state and its size, the time each acquire waited for a
// connection, and the statements and round trips sent. docs/operations.md lists the series.
func (s *Store) Instrument(m metric.Meter) error {
	wait, err := m.Float64Histogram("respgate.store.pool.acquire_wait", metric.WithUnit("s"),
		metric.WithDescription("time a store call waited for a database connection from the pool"),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	if err != nil {
		return err
	}
	conns, err := m.Int64ObservableGauge("respgate.store.pool.connections",
		metric.WithDescription("the database pool's connections by state: idle, acquired (in use), constructing"))
	if err != nil {
		return err
	}
	maxConns, err := m.Int64ObservableGauge("respgate.store.pool.max_connections",
		metric.WithDescription("the database pool's size (--database-max-conns)"))
	if err != nil {
		return err
	}
	stmts, err := m.Int64ObservableCounter("respgate.store.statements",
		metric.WithDescription("SQL statements sent to the database (each query, each statement of a pipelined batch)"))
	if err != nil {
		return err
	}
	trips, err := m.Int64ObservableCounter("respgate.store.round_trips",
		metric.WithDescription("round trips to the database (each query outside a batch, each pipelined batch)"))
	if err != nil {
		return err
	}
	idle := metric.WithAttributes(attribute.String("state", "idle"))
	acquired := metric.WithAttributes(attribute.String("state", "acquired"))
	constructing := metric.WithAttributes(attribute.String("state", "constructing"))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.pool.Stat()
		o.ObserveInt64(conns, int64(st.IdleConns()), idle)
		o.ObserveInt64(conns, int64(st.AcquiredConns()), acquired)
		o.ObserveInt64(conns, int64(st.ConstructingConns()), constructing)
		o.ObserveInt64(maxConns, int64(st.MaxConns()))
		o.ObserveInt64(stmts, s.tracer.statements.Load())
		o.ObserveInt64(trips, s.tracer.roundTrips.Load())
		return nil
	}, conns, maxConns, stmts, trips)
	if err != nil {
		return err
	}
	s.tracer.wait.Store(&wait)
	return nil
}
