package fleet

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/respgate/respgate/upstream"
)

// meters are the fleet's instruments (docs/fleet.md, "Metrics"). A nil *meters records
// nothing: a Fleet without Instrument.
type meters struct {
	requests  metric.Int64Counter
	failures  metric.Int64Counter
	routes    metric.Int64Counter
	failovers metric.Int64Counter
	input     metric.Int64Counter
	cached    metric.Int64Counter
}

// Instrument registers the fleet's instruments with meter (server.New calls it with the meter
// behind /metrics): per replica, calls in flight and health (gauges read at collection), calls
// and failures; per pool, calls by routing outcome (first_choice is an affinity hit, spilled a
// bounded-load walk) and failovers; input and cached tokens of non-streamed answers and of what
// ObserveUsage reports, whose ratio is the prefix-cache hit ratio. Call it once, before serving.
func (f *Fleet) Instrument(meter metric.Meter) error {
	m := &meters{}
	for _, c := range []struct {
		dst        *metric.Int64Counter
		name, desc string
	}{
		{&m.requests, "respgate.upstream.replica.requests", "calls sent to an upstream replica, by pool and replica"},
		{&m.failures, "respgate.upstream.replica.failures", "calls an upstream replica failed before answering, by pool, replica and kind"},
		{&m.routes, "respgate.upstream.pool.routed", "calls routed, by pool and outcome (first_choice: affinity hit; preferred: the chain's last replica; spilled: bounded-load walk; returned: the first choice again after it came back; balanced; none)"},
		{&m.failovers, "respgate.upstream.pool.failovers", "calls moved to the next replica after a failure before the first byte, by pool"},
		{&m.input, "respgate.upstream.input_tokens", "input tokens upstream reported, by pool and replica"},
		{&m.cached, "respgate.upstream.cached_tokens", "input tokens upstream served from its prefix cache, by pool and replica"},
	} {
		v, err := meter.Int64Counter(c.name, metric.WithDescription(c.desc))
		if err != nil {
			return err
		}
		*c.dst = v
	}
	inFlight, err := meter.Int64ObservableGauge("respgate.upstream.replica.in_flight", metric.WithDescription("calls in flight on an upstream replica"))
	if err != nil {
		return err
	}
	healthy, err := meter.Int64ObservableGauge("respgate.upstream.replica.healthy", metric.WithDescription("1 while an upstream replica is healthy, 0 while it is down"))
	if err != nil {
		return err
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, p := range f.gen.Load().pools {
			for _, r := range p.replicas {
				attrs := metric.WithAttributes(attribute.String("pool", p.cfg.Name), attribute.String("replica", r.id))
				o.ObserveInt64(inFlight, r.inFlight.Load(), attrs)
				h := int64(0)
				if r.healthy.Load() {
					h = 1
				}
				o.ObserveInt64(healthy, h, attrs)
			}
		}
		return nil
	}, inFlight, healthy); err != nil {
		return err
	}
	f.met.Store(m)
	return nil
}

func replicaAttrs(r *replica) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("pool", r.pool), attribute.String("replica", r.id))
}

func (m *meters) request(ctx context.Context, r *replica) {
	if m != nil {
		m.requests.Add(ctx, 1, replicaAttrs(r))
	}
}

func (m *meters) failure(ctx context.Context, r *replica, err error) {
	if m == nil {
		return
	}
	kind := "other"
	var e *upstream.Error
	if errors.As(err, &e) {
		kind = e.Kind.String()
	}
	m.failures.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", r.pool), attribute.String("replica", r.id), attribute.String("kind", kind)))
}

func (m *meters) routed(ctx context.Context, pool string, o Outcome) {
	if m != nil {
		m.routes.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool), attribute.String("outcome", o.String())))
	}
}

func (m *meters) failover(ctx context.Context, pool string) {
	if m != nil {
		m.failovers.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool)))
	}
}

// usage counts the input and cached tokens of a non-streamed answer.
func (m *meters) usage(ctx context.Context, r *replica, raw []byte) {
	if m == nil {
		return
	}
	var resp struct {
		Usage *struct {
			InputTokens        int64 `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(raw, &resp) != nil || resp.Usage == nil {
		return
	}
	m.tokens(ctx, r, resp.Usage.InputTokens, resp.Usage.InputTokensDetails.CachedTokens)
}

func (m *meters) tokens(ctx context.Context, r *replica, input, cached int64) {
	attrs := replicaAttrs(r)
	m.input.Add(ctx, input, attrs)
	m.cached.Add(ctx, cached, attrs)
}

// ObserveUsage records the usage of a streamed answer from replica (the id StreamLent
// returned): the fleet does not read streams, the turn does. Unknown replicas are ignored.
func (f *Fleet) ObserveUsage(ctx context.Context, replica string, inputTokens, cachedTokens int64) {
	m := f.met.Load()
	if m == nil || replica == "" {
		return
	}
	for _, p := range f.gen.Load().pools {
		for _, r := range p.replicas {
			if r.id == replica {
				m.tokens(ctx, r, inputTokens, cachedTokens)
				return
			}
		}
	}
}
