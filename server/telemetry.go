package server

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

// telemetry holds respgate's OpenTelemetry instruments: metrics exported through the Prometheus
// exporter on /metrics, and spans through the configured (or global) tracer provider. Only safe
// values are recorded: routes, statuses, counts, sizes, durations, item and tool types; never
// content, ids of secrets or keys (docs/design.md §1 invariant 6).
type telemetry struct {
	tracer  trace.Tracer
	handler http.Handler
	meter   metric.Meter // the background package's instruments register here too

	requests        metric.Int64Counter
	requestDuration metric.Float64Histogram
	upstreamLatency metric.Float64Histogram
	ttft            metric.Float64Histogram
	events          metric.Int64Counter
	droppedEvents   metric.Int64Counter
	activeStreams   metric.Int64UpDownCounter
	rehydratedItems metric.Int64Counter
	rehydratedBytes metric.Int64Counter
	reasoningItems  metric.Int64Counter
	reasoningBytes  metric.Int64Counter
	encryptedDrop   metric.Int64Counter
	duplicatesDrop  metric.Int64Counter
	sealedOpened    metric.Int64Counter
	contextDropped  metric.Int64Counter
	idConflicts     metric.Int64Counter
	storeLatency    metric.Float64Histogram
	sweeps          metric.Int64Counter
	droppedTools    metric.Int64Counter
	replayHits      metric.Int64Counter
	replayMisses    metric.Int64Counter
	replayConflicts metric.Int64Counter
	replayBytes     metric.Int64Counter
	followWakes     metric.Int64Counter
}

func newTelemetry(ctx context.Context, tp trace.TracerProvider) (*telemetry, error) {
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
	t := &telemetry{
		tracer:  tp.Tracer("github.com/respgate/respgate/server"),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		meter:   m,
	}
	secs := metric.WithUnit("s")
	lat := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
	if err := instruments(func(name, desc string) (metric.Int64Counter, error) {
		return m.Int64Counter(name, metric.WithDescription(desc))
	}, []instrument[metric.Int64Counter]{
		{&t.requests, "respgate.http.requests", "HTTP requests by route and status"},
		{&t.events, "respgate.stream.events", "events relayed to clients"},
		{&t.droppedEvents, "respgate.stream.dropped_events", "unknown or vendor upstream events not relayed"},
		{&t.rehydratedItems, "respgate.rehydrate.items", "items sent upstream by rehydration"},
		{&t.rehydratedBytes, "respgate.rehydrate.bytes", "bytes of vLLM-bound request bodies"},
		{&t.reasoningItems, "respgate.rehydrate.reasoning_replayed", "reasoning items replayed upstream as plaintext"},
		{&t.reasoningBytes, "respgate.rehydrate.reasoning_bytes", "plaintext reasoning bytes replayed upstream"},
		{&t.encryptedDrop, "respgate.rehydrate.encrypted_dropped", "reasoning items whose encrypted_content was not forwarded"},
		{&t.duplicatesDrop, "respgate.rehydrate.duplicates_dropped", "exact duplicate items sent once"},
		{&t.sealedOpened, "respgate.rehydrate.sealed_opened", "reasoning items replayed from respgate's own encrypted_content"},
		{&t.contextDropped, "respgate.rehydrate.reasoning_context_dropped", "reasoning items left out by reasoning.context current_turn"},
		{&t.idConflicts, "respgate.rehydrate.id_conflicts", "requests rejected for one id with two contents"},
		{&t.sweeps, "respgate.sweeper.failed_responses", "in-progress responses failed by the lease sweeper"},
		{&t.droppedTools, "respgate.tools.dropped", "request tools vLLM cannot serve, dropped, by type"},
		{&t.replayHits, "respgate.chat.replay.hits", "chat assistant messages replaced by their captured items"},
		{&t.replayMisses, "respgate.chat.replay.misses", "chat assistant messages sent as is: no record, a mismatch, or replay stopped"},
		{&t.replayConflicts, "respgate.chat.replay.conflicts", "chat assistant messages sent as is because their identity is blocked"},
		{&t.replayBytes, "respgate.chat.replay.bytes", "bytes of captured items replayed into chat requests"},
		{&t.followWakes, "respgate.background.notifications", "store notifications received that a background response's event log grew or ended (Postgres LISTEN/NOTIFY)"},
	}); err != nil {
		return nil, err
	}
	if err := instruments(func(name, desc string) (metric.Float64Histogram, error) {
		return m.Float64Histogram(name, metric.WithDescription(desc), secs, lat)
	}, []instrument[metric.Float64Histogram]{
		{&t.requestDuration, "respgate.http.duration", "request duration by route"},
		{&t.upstreamLatency, "respgate.upstream.latency", "time from sending a request to vLLM to its response headers"},
		{&t.ttft, "respgate.upstream.time_to_first_token", "time from sending a request to vLLM to its first delta"},
		{&t.storeLatency, "respgate.store.latency", "store operation latency by operation"},
	}); err != nil {
		return nil, err
	}
	if t.activeStreams, err = m.Int64UpDownCounter("respgate.stream.active", metric.WithDescription("streams in flight")); err != nil {
		return nil, err
	}
	// Exported from the start, so an alert on its increase sees the first swept lease
	// (deploy/prometheus/alerts.yml).
	t.sweeps.Add(ctx, 0)
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

func (t *telemetry) request(ctx context.Context, route string, status int, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("route", route), attribute.String("status", strconv.Itoa(status)))
	t.requests.Add(ctx, 1, attrs)
	t.requestDuration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("route", route)))
}

func (t *telemetry) store(ctx context.Context, op string, start time.Time) {
	t.storeLatency.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("op", op)))
}

func (t *telemetry) rehydrated(ctx context.Context, st rehydrate.Stats, dropped []string) {
	t.rehydratedItems.Add(ctx, int64(st.Items))
	t.rehydratedBytes.Add(ctx, int64(st.Bytes))
	t.reasoningItems.Add(ctx, int64(st.ReasoningReplayed))
	t.reasoningBytes.Add(ctx, int64(st.ReasoningBytes))
	t.encryptedDrop.Add(ctx, int64(st.EncryptedDropped))
	t.duplicatesDrop.Add(ctx, int64(st.DuplicatesDropped))
	t.sealedOpened.Add(ctx, int64(st.SealedOpened))
	t.contextDropped.Add(ctx, int64(st.ReasoningDropped))
	for _, typ := range dropped {
		t.droppedTools.Add(ctx, 1, metric.WithAttributes(attribute.String("type", typ)))
	}
}
