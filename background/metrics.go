package background

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// metrics are the background queue's instruments (docs/background.md, "Metrics"); the queue
// depth gauge is the server's (it reads the store).
type metrics struct {
	wait    metric.Float64Histogram // created → a worker started it
	running metric.Int64UpDownCounter
	started func(ctx context.Context, created time.Time)
}

func newMetrics(m metric.Meter) (*metrics, error) {
	if m == nil {
		m = noop.NewMeterProvider().Meter("respgate")
	}
	out := &metrics{}
	var err error
	out.wait, err = m.Float64Histogram("respgate.background.job_wait", metric.WithUnit("s"),
		metric.WithDescription("time a background turn waited in the queue before a worker started it"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800))
	if err != nil {
		return nil, fmt.Errorf("background metrics: %w", err)
	}
	out.running, err = m.Int64UpDownCounter("respgate.background.running",
		metric.WithDescription("background turns running in this process"))
	if err != nil {
		return nil, fmt.Errorf("background metrics: %w", err)
	}
	out.started = func(ctx context.Context, created time.Time) {
		out.wait.Record(ctx, time.Since(created).Seconds())
		out.running.Add(ctx, 1)
	}
	return out, nil
}
