package fleet

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/respgate/respgate/upstream"
)

// The names of policies and outcomes, the last of each and one past them.
func TestPolicyAndOutcomeNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{PolicyRoundRobin.String(), "round-robin"},
		{Policy(3).String(), "policy(3)"},
		{Balanced.String(), "balanced"},
		{Outcome(6).String(), "outcome(6)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}

// The policies without affinity, and a pool with no replica, name no home: their calls never
// leave a chain away (Away).
func TestPicksWithoutAHomeSayMinusOne(t *testing.T) {
	healthy := cands("a", true, 0, "b", true, 1)
	down := cands("a", false, 0)
	for name, p := range map[string]Pick{
		"least-loaded":           LeastLoaded("k", healthy),
		"least-loaded, all down": LeastLoaded("k", down),
		"round-robin":            RoundRobin(1, healthy),
		"round-robin, all down":  RoundRobin(1, down),
		"chain-affine, no pool":  ChainAffine(Affinity{Key: "k"}, nil),
	} {
		if p.Home != -1 {
			t.Errorf("%s: home %d, want -1", name, p.Home)
		}
	}
}

// vLLM's /health is beside /v1, whatever trailing slashes the base URL has.
func TestHealthURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:8000/v1":    "http://h:8000/health",
		"http://h:8000/v1//":  "http://h:8000/health",
		"http://h:8000/api/":  "http://h:8000/api/health",
		"http://h:8000/x/v1":  "http://h:8000/x/health",
		"/v1":                 "/health",
		"":                    "/health",
		"http://h:8000/v10/":  "http://h:8000/v10/health",
		"http://h:8000/proxy": "http://h:8000/proxy/health",
	} {
		if got := healthURL(in); got != want {
			t.Errorf("healthURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Retry-After is the probe interval rounded up to whole seconds, at least 1.
func TestRetryAfterIsTheProbeIntervalInSeconds(t *testing.T) {
	for iv, want := range map[time.Duration]string{
		5 * time.Second:         "5",
		1500 * time.Millisecond: "2",
		time.Second:             "1",
		100 * time.Millisecond:  "1",
		0:                       "1",
	} {
		f := &Fleet{health: Health{Interval: iv}}
		if got := f.retryAfter(); got != want {
			t.Errorf("interval %s: Retry-After %q, want %q", iv, got, want)
		}
	}
}

// The 503 of an unavailable model names the model when there is one.
func TestUnavailableNamesTheModel(t *testing.T) {
	f := &Fleet{health: Health{Interval: 2 * time.Second}}
	for model, want := range map[string]string{
		"":  "No upstream replica is available; retry later.",
		"m": "No upstream replica serving model `m` is available; retry later.",
	} {
		e, ok := f.unavailable(model).(*upstream.Error)
		if !ok || e.Status != http.StatusServiceUnavailable || e.Message != want || e.RetryAfter != "2" {
			t.Errorf("unavailable(%q) = %+v, want 503 %q with Retry-After 2", model, e, want)
		}
	}
}

// A pool configured without ε gets the default; a reload keeps a replica (its state, its
// connections) only when its URL, pool and key are unchanged.
func TestPoolDefaultsAndReloadKeepsOnlyUnchangedReplicas(t *testing.T) {
	const u = "http://127.0.0.1:1/v1" // nothing listens: the replica is down, which is fine here
	top := func(name, key string) Topology {
		return Topology{Pools: []Pool{{Name: name, URLs: []string{u}, Models: []string{"*"}, APIKey: key}}, Health: fastHealth}
	}
	f := newFleet(t, top("p", "k1"), nil)
	g := f.gen.Load()
	if eps := g.pools[0].cfg.Epsilon; eps != DefaultEpsilon {
		t.Errorf("epsilon %g, want the default %g", eps, DefaultEpsilon)
	}
	first := g.pools[0].replicas[0]
	for _, tc := range []struct {
		name, pool, key string
		kept            bool
	}{
		{"same pool and key", "p", "k1", true},
		{"another key", "p", "k2", false},
		{"another pool", "q", "k2", false},
	} {
		if err := f.Reload(t.Context(), top(tc.pool, tc.key)); err != nil {
			t.Fatal(err)
		}
		r := f.gen.Load().pools[0].replicas[0]
		if (r == first) != tc.kept {
			t.Errorf("%s: replica kept %v, want %v", tc.name, r == first, tc.kept)
		}
		first = r
	}
}

// Only a change of a replica's health is reported (OnHealth, the logs, the gauge), not every
// probe; and a probe of a pool with a key sends it.
func TestHealthReportsChangesOnlyAndProbesWithTheKey(t *testing.T) {
	auth := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			select {
			case auth <- r.Header.Get("Authorization"):
			default:
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	slow := Health{Interval: time.Hour, Timeout: time.Second, MinBackoff: time.Hour, MaxBackoff: time.Hour, Fall: 1}
	ev := newHealthEvents()
	f := newFleet(t, Topology{Pools: []Pool{{Name: "p", URLs: []string{srv.URL + "/v1"}, Models: []string{"*"}, APIKey: "sk-probe"}}, Health: slow},
		func(c *Config) { c.OnHealth = ev.on })
	if got := <-auth; got != "Bearer sk-probe" {
		t.Errorf("probe Authorization %q, want the pool's key", got)
	}
	r := f.gen.Load().pools[0].replicas[0]
	// The first probe failed: down, one event (or none if it started down). Then failures
	// change nothing, and one success is one "up".
	drainEvents(ev)
	for range 3 {
		f.observe(t.Context(), r, false)
	}
	if got := drainEvents(ev); len(got) != 0 {
		t.Errorf("events while it stayed down: %v", got)
	}
	f.observe(t.Context(), r, true)
	f.observe(t.Context(), r, true)
	if got := drainEvents(ev); len(got) != 1 || got[0] != "up "+r.id {
		t.Errorf("events after two good probes: %v, want one up", got)
	}
}

func drainEvents(h *healthEvents) []string {
	var out []string
	for {
		select {
		case s := <-h.ch:
			out = append(out, s)
		default:
			return out
		}
	}
}
