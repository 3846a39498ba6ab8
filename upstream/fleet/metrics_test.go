package fleet

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// sums reads every Int64 sum and gauge point of rd as name{pool,replica,outcome} → value.
func sums(t *testing.T, rd *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	label := func(name string, set attribute.Set) string {
		for _, k := range []attribute.Key{"outcome", "kind"} {
			if v, ok := set.Value(k); ok {
				name += "/" + v.AsString()
			}
		}
		return name
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[label(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[label(m.Name, p.Attributes)] += p.Value
				}
			}
		}
	}
	return out
}

func TestMetricsCountRoutingHealthAndCachedTokens(t *testing.T) {
	sims := startSim(t, "127.0.0.1:0", 2, "--prefix-cache-blocks", "1024")
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{sims.url(0), sims.url(1)}}}, Health: fastHealth}, nil)
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	if err := f.Instrument(mp.Meter("test")); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"openai/gpt-oss-sim","input":"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"}`
	rt := upstream.Route{Model: vllmsim.HarmonyModel, Key: "chain"}
	for range 3 {
		if _, _, err := f.Create(t.Context(), rt, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	got := sums(t, rd)
	for name, want := range map[string]int64{
		"respgate.upstream.replica.requests":         3,
		"respgate.upstream.pool.routed/first_choice": 3,
		"respgate.upstream.replica.healthy":          2,
		"respgate.upstream.replica.in_flight":        0,
		"respgate.upstream.cached_tokens":            32, // turns 2 and 3 hit the first 16-token block
		"respgate.upstream.input_tokens":             3 * 26,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d (all: %v)", name, got[name], want, got)
		}
	}
	f.ObserveUsage(t.Context(), ReplicaID(sims.url(0)), 100, 50)
	if g := sums(t, rd)["respgate.upstream.cached_tokens"]; g != 82 {
		t.Errorf("after ObserveUsage cached_tokens = %d, want 82", g)
	}
}
