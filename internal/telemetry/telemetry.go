// Package telemetry holds respgate's OpenTelemetry instruments, shared by the front doors (package
// server) and the turn engine (package engine).
package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/respgate/respgate/internal/version"
	"github.com/respgate/respgate/rehydrate"
)

// Set holds respgate's OpenTelemetry instruments: metrics exported through the Prometheus
// exporter on /metrics, and spans through the configured (or global) tracer provider. Only safe
// values are recorded: routes, statuses, counts, sizes, durations, item and tool types; never
// content, ids of secrets or keys (docs/design.md §1 invariant 6).
type Set struct {
	Tracer  trace.Tracer
	Handler http.Handler
	Meter   metric.Meter // the background package's instruments register here too

	Requests        metric.Int64Counter
	RequestDuration metric.Float64Histogram
	UpstreamLatency metric.Float64Histogram
	Ttft            metric.Float64Histogram
	Events          metric.Int64Counter
	DroppedEvents   metric.Int64Counter
	ActiveStreams   metric.Int64UpDownCounter
	RehydratedItems metric.Int64Counter
	RehydratedBytes metric.Int64Counter
	ReasoningItems  metric.Int64Counter
	ReasoningBytes  metric.Int64Counter
	EncryptedDrop   metric.Int64Counter
	DuplicatesDrop  metric.Int64Counter
	SealedOpened    metric.Int64Counter
	ContextDropped  metric.Int64Counter
	IdConflicts     metric.Int64Counter
	StoreLatency    metric.Float64Histogram
	Sweeps          metric.Int64Counter
	DroppedTools    metric.Int64Counter
	ReplayHits      metric.Int64Counter
	ReplayMisses    metric.Int64Counter
	ReplayConflicts metric.Int64Counter
	ReplayBytes     metric.Int64Counter
	FollowWakes     metric.Int64Counter
}

func New(ctx context.Context, tp trace.TracerProvider) (*Set, error) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	reg := promclient.NewRegistry()
	// The Go runtime's and the process's standard series (go_goroutines, go_memstats_*,
	// process_cpu_seconds_total, process_resident_memory_bytes): what an operator sizing replicas
	// reads (docs/scaling.md), and what make bench reads its allocation counters from.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// respgate_build_info says which build each replica runs (a dashboard counts replicas and
	// versions with it during a rollout).
	bi := version.Get()
	build := promclient.NewGaugeVec(promclient.GaugeOpts{Name: "respgate_build_info", Help: "the running build: always 1, with its version, revision and Go release"},
		[]string{"version", "revision", "goversion"})
	build.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	reg.MustRegister(build)
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	// target_info names the service, as the traces do (cmd/respgate), unless OTEL_SERVICE_NAME
	// or OTEL_RESOURCE_ATTRIBUTES say otherwise.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "respgate"), attribute.String("service.version", bi.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, err
	}
	m := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)).Meter("respgate")
	t := &Set{
		Tracer:  tp.Tracer("github.com/respgate/respgate/server"),
		Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Meter:   m,
	}
	secs := metric.WithUnit("s")
	lat := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
	if err := instruments(func(name, desc string) (metric.Int64Counter, error) {
		return m.Int64Counter(name, metric.WithDescription(desc))
	}, []instrument[metric.Int64Counter]{
		{&t.Requests, "respgate.http.requests", "HTTP requests by route and status"},
		{&t.Events, "respgate.stream.events", "events relayed to clients"},
		{&t.DroppedEvents, "respgate.stream.dropped_events", "unknown or vendor upstream events not relayed"},
		{&t.RehydratedItems, "respgate.rehydrate.items", "items sent upstream by rehydration"},
		{&t.RehydratedBytes, "respgate.rehydrate.bytes", "bytes of vLLM-bound request bodies"},
		{&t.ReasoningItems, "respgate.rehydrate.reasoning_replayed", "reasoning items replayed upstream as plaintext"},
		{&t.ReasoningBytes, "respgate.rehydrate.reasoning_bytes", "plaintext reasoning bytes replayed upstream"},
		{&t.EncryptedDrop, "respgate.rehydrate.encrypted_dropped", "reasoning items whose encrypted_content was not forwarded"},
		{&t.DuplicatesDrop, "respgate.rehydrate.duplicates_dropped", "exact duplicate items sent once"},
		{&t.SealedOpened, "respgate.rehydrate.sealed_opened", "reasoning items replayed from respgate's own encrypted_content"},
		{&t.ContextDropped, "respgate.rehydrate.reasoning_context_dropped", "reasoning items left out by reasoning.context current_turn"},
		{&t.IdConflicts, "respgate.rehydrate.id_conflicts", "requests rejected for one id with two contents"},
		{&t.Sweeps, "respgate.sweeper.failed_responses", "in-progress responses failed by the lease sweeper"},
		{&t.DroppedTools, "respgate.tools.dropped", "request tools vLLM cannot serve, dropped, by type"},
		{&t.ReplayHits, "respgate.chat.replay.hits", "chat assistant messages replaced by their captured items"},
		{&t.ReplayMisses, "respgate.chat.replay.misses", "chat assistant messages sent as is: no record, a mismatch, or replay stopped"},
		{&t.ReplayConflicts, "respgate.chat.replay.conflicts", "chat assistant messages sent as is because their identity is blocked"},
		{&t.ReplayBytes, "respgate.chat.replay.bytes", "bytes of captured items replayed into chat requests"},
		{&t.FollowWakes, "respgate.background.notifications", "store notifications received that a background response's event log grew or ended (Postgres LISTEN/NOTIFY)"},
	}); err != nil {
		return nil, err
	}
	if err := instruments(func(name, desc string) (metric.Float64Histogram, error) {
		return m.Float64Histogram(name, metric.WithDescription(desc), secs, lat)
	}, []instrument[metric.Float64Histogram]{
		{&t.RequestDuration, "respgate.http.duration", "request duration by route"},
		{&t.UpstreamLatency, "respgate.upstream.latency", "time from sending a request to vLLM to its response headers"},
		{&t.Ttft, "respgate.upstream.time_to_first_token", "time from sending a request to vLLM to its first delta"},
		{&t.StoreLatency, "respgate.store.latency", "store operation latency by operation"},
	}); err != nil {
		return nil, err
	}
	if t.ActiveStreams, err = m.Int64UpDownCounter("respgate.stream.active", metric.WithDescription("streams in flight")); err != nil {
		return nil, err
	}
	// Exported from the start, so an alert on its increase sees the first swept lease
	// (deploy/prometheus/alerts.yml).
	t.Sweeps.Add(ctx, 0)
	return t, nil
}

// instrument names the field an instrument is created into.
type instrument[I any] struct {
	dst  *I
	name string
	desc string
}

// instruments creates each instrument with create.
func instruments[I any](create func(name, desc string) (I, error), list []instrument[I]) error {
	for _, in := range list {
		v, err := create(in.name, in.desc)
		if err != nil {
			return err
		}
		*in.dst = v
	}
	return nil
}

func (t *Set) Request(ctx context.Context, route string, status int, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("route", route), attribute.String("status", strconv.Itoa(status)))
	t.Requests.Add(ctx, 1, attrs)
	t.RequestDuration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("route", route)))
}

func (t *Set) Store(ctx context.Context, op string, start time.Time) {
	t.StoreLatency.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("op", op)))
}

func (t *Set) Rehydrated(ctx context.Context, st rehydrate.Stats, dropped []string) {
	t.RehydratedItems.Add(ctx, int64(st.Items))
	t.RehydratedBytes.Add(ctx, int64(st.Bytes))
	t.ReasoningItems.Add(ctx, int64(st.ReasoningReplayed))
	t.ReasoningBytes.Add(ctx, int64(st.ReasoningBytes))
	t.EncryptedDrop.Add(ctx, int64(st.EncryptedDropped))
	t.DuplicatesDrop.Add(ctx, int64(st.DuplicatesDropped))
	t.SealedOpened.Add(ctx, int64(st.SealedOpened))
	t.ContextDropped.Add(ctx, int64(st.ReasoningDropped))
	for _, typ := range dropped {
		t.DroppedTools.Add(ctx, 1, metric.WithAttributes(attribute.String("type", typ)))
	}
}

// instrumented is a part with instruments of its own, registered on the meter behind /metrics:
// an upstream.Caller (upstream/fleet: per replica in-flight calls, health, failovers, cached
// tokens) or a store (store/postgres: its connection pool and statements).
type instrumented interface {
	Instrument(metric.Meter) error
}

// Instrument registers the instruments of each part that has any.
func (t *Set) Instrument(parts ...any) error {
	for _, p := range parts {
		if in, ok := p.(instrumented); ok {
			if err := in.Instrument(t.Meter); err != nil {
				return err
			}
		}
	}
	return nil
}
