package opstest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alertCase is one scenario for one alert of deploy/prometheus/alerts.yml: synthetic series in the
// notation of `promtool test rules` (and promqltest's load command), one sample a minute from 0,
// and what the alert must do under them.
type alertCase struct {
	alert  string
	name   string   // what happens, in the operator's words
	series []string // "name{labels} values", e.g. `respgate_build_info{job="respgate"} 1x60`
	// firesAt is when the alert first fires (0: it must never fire). It must have been pending
	// for exactly the rule's for: duration by then.
	firesAt time.Duration
	// labels are the firing alerts' labels, alertname and the rule's own labels included (one
	// map per alert).
	labels []map[string]string
}

// target is the job and instance labels Prometheus adds to each series it scrapes from a replica.
func target(ip string) string { return `job="respgate",instance="` + ip + `:8080"` }

// Three respgate replicas.
var (
	sA = target("10.0.0.1")
	sB = target("10.0.0.2")
	sC = target("10.0.0.3")
)

// buckets returns one cumulative _bucket series per upper bound of a histogram, with per[i]
// observations a minute in the bucket whose upper bound is les[i], for an hour.
func buckets(name, lbls string, les []string, per []int) []string {
	var out []string
	sum := 0
	for i, le := range les {
		sum += per[i]
		out = append(out, fmt.Sprintf(`%s_bucket{%s,le="%s"} 0+%dx60`, name, lbls, le, sum))
	}
	return out
}

// alertCases feeds every alert series under which it must fire and series under which it must
// stay silent. The series names, label names and exact label values are the ones a live respgate
// exports (TestAlertsFireOnlyWhenTheyShould checks each line against a scrape).
func alertCases() []alertCase {
	turns := func(route, status, values string) string {
		return fmt.Sprintf(`respgate_http_requests_total{%s,route="%s",status="%s"} %s`, sA, route, status, values)
	}
	commit := sA + `,op="response_commit"`
	begin := sA + `,op="response_begin"`
	storeLE := []string{"0.25", "0.5", "1", "2.5", "+Inf"}
	poolLE := []string{"0.001", "0.1", "0.25", "0.5", "+Inf"}
	waitLE := []string{"30", "60", "300", "1800", "+Inf"}
	build := func(s, values string) string {
		return `respgate_build_info{` + s + `,version="1.4.0",revision="abc123",goversion="go1.26.7"} ` + values
	}
	healthy := func(s, pool, replica, values string) string {
		return fmt.Sprintf(`respgate_upstream_replica_healthy{%s,pool="%s",replica="%s"} %s`, s, pool, replica, values)
	}
	page := func(kv ...string) map[string]string { return withLabels("page", kv...) }
	warn := func(kv ...string) map[string]string { return withLabels("warn", kv...) }
	return []alertCase{
		// 5xx share of turns over 5% (rate over 5m) for 10m.
		{alert: "RespgateTurnsFailing", name: "vLLM answers 504 to a quarter of the chat turns from minute 11",
			series: []string{
				turns("/v1/responses", "200", "0+100x60"),
				turns("/v1/chat/completions", "200", "0+90x60"),
				turns("/v1/chat/completions", "504", "0x10 30+30x49"),
			},
			firesAt: 22 * time.Minute, labels: []map[string]string{page("job", "respgate")}},
		{alert: "RespgateTurnsFailing", name: "2% of turns answer 502",
			series: []string{turns("/v1/responses", "200", "0+98x60"), turns("/v1/responses", "502", "0+2x60")}},
		{alert: "RespgateTurnsFailing", name: "half the turns are the clients' 400s",
			series: []string{turns("/v1/responses", "200", "0+50x60"), turns("/v1/responses", "400", "0+50x60")}},
		{alert: "RespgateTurnsFailing", name: "readiness answers 503 but turns succeed",
			series: []string{turns("/v1/responses", "200", "0+100x60"), turns("/readyz", "503", "0+6x60")}},
		{alert: "RespgateTurnsFailing", name: "a burst of 502s shorter than 10 minutes",
			series: []string{turns("/v1/responses", "200", "0+100x60"), turns("/v1/responses", "502", "0x10 0+20x5 100x44")}},

		// Any /readyz 503 in 2m, for 2m.
		{alert: "RespgateStoreUnavailable", name: "readiness answers 503 from minute 11",
			series:  []string{turns("/readyz", "200", "0+6x10 60x50"), turns("/readyz", "503", "0x10 6+6x49")},
			firesAt: 13 * time.Minute, labels: []map[string]string{page("job", "respgate", "instance", "10.0.0.1:8080")}},
		{alert: "RespgateStoreUnavailable", name: "readiness answers 200",
			series: []string{turns("/readyz", "200", "0+6x60")}},
		{alert: "RespgateStoreUnavailable", name: "one failed probe",
			series: []string{turns("/readyz", "200", "0+6x60"), turns("/readyz", "503", "0x10 1x50")}},

		// p99 of response_commit over 1s for 10m.
		{alert: "RespgateStoreSlow", name: "commits take 1 to 2.5 s from minute 11",
			series:  slowBuckets("respgate_store_latency_seconds", commit, storeLE, 30, "2.5"), // 1 to 2.5 s
			firesAt: 21 * time.Minute, labels: []map[string]string{warn("job", "respgate")}},
		{alert: "RespgateStoreSlow", name: "commits take under 0.25 s",
			series: buckets("respgate_store_latency_seconds", commit, storeLE, []int{30, 0, 0, 0, 0})},
		{alert: "RespgateStoreSlow", name: "another store operation is slow, commits are fast",
			series: slices.Concat(
				buckets("respgate_store_latency_seconds", commit, storeLE, []int{30, 0, 0, 0, 0}),
				buckets("respgate_store_latency_seconds", begin, storeLE, []int{0, 0, 0, 30, 0}))},

		// p99 wait for a pool connection over 100 ms for 10m, per replica.
		{alert: "RespgateStorePoolSaturated", name: "store calls wait 250 to 500 ms for a connection from minute 11",
			series:  slowBuckets("respgate_store_pool_acquire_wait_seconds", sA, poolLE, 30, "0.5"), // 250 to 500 ms
			firesAt: 21 * time.Minute, labels: []map[string]string{warn("job", "respgate", "instance", "10.0.0.1:8080")}},
		{alert: "RespgateStorePoolSaturated", name: "store calls get a connection within 1 ms",
			series: buckets("respgate_store_pool_acquire_wait_seconds", sA, poolLE, []int{30, 0, 0, 0, 0})},
		{alert: "RespgateStorePoolSaturated", name: "one replica waits 10 to 100 ms, under the threshold",
			series: buckets("respgate_store_pool_acquire_wait_seconds", sB, poolLE, []int{0, 30, 0, 0, 0})},

		// Queued > 0 and no job started in 10m, for 5m.
		{alert: "RespgateBackgroundQueueStalled", name: "responses queued and no replica ever started a job (no wait series at all)",
			series: []string{
				`respgate_background_queued{` + sA + `} 3x60`,
				`respgate_background_queued{` + sB + `} 3x60`,
			},
			firesAt: 5 * time.Minute, labels: []map[string]string{page("job", "respgate")}},
		{alert: "RespgateBackgroundQueueStalled", name: "workers started jobs until minute 10, then none while 3 wait",
			series: []string{
				`respgate_background_queued{` + sA + `} 0x10 3x50`,
				`respgate_background_job_wait_seconds_count{` + sA + `} 0+1x10 10x50`,
			},
			firesAt: 24 * time.Minute, labels: []map[string]string{page("job", "respgate")}},
		{alert: "RespgateBackgroundQueueStalled", name: "responses queued while workers start jobs",
			series: []string{
				`respgate_background_queued{` + sA + `} 3x60`,
				`respgate_background_job_wait_seconds_count{` + sA + `} 0+2x60`,
			}},
		{alert: "RespgateBackgroundQueueStalled", name: "nothing queued, nothing started",
			series: []string{
				`respgate_background_queued{` + sA + `} 0x60`,
				`respgate_background_job_wait_seconds_count{` + sA + `} 5x60`,
			}},

		// p95 of the queue wait over 300s for 10m.
		{alert: "RespgateBackgroundQueueOld", name: "jobs wait 5 to 30 minutes from minute 11",
			series:  slowBuckets("respgate_background_job_wait_seconds", sA, waitLE, 5, "1800"), // 5 to 30 minutes
			firesAt: 21 * time.Minute, labels: []map[string]string{warn("job", "respgate")}},
		{alert: "RespgateBackgroundQueueOld", name: "jobs wait under 30 s",
			series: buckets("respgate_background_job_wait_seconds", sA, waitLE, []int{5, 0, 0, 0, 0})},

		// Fewer build_info series than the most in the last hour, for 5m.
		{alert: "RespgateReplicaDown", name: "one of two replicas stops at minute 30",
			series:  []string{build(sA, "1x60"), build(sB, "1x30 stale")},
			firesAt: 36 * time.Minute, labels: []map[string]string{warn("job", "respgate")}},
		{alert: "RespgateReplicaDown", name: "a rollout replaces a replica within a scrape",
			series: []string{build(sA, "1x60"), build(sB, "1x30 stale"), build(sC, "_x31 1x29")}},
		{alert: "RespgateReplicaDown", name: "both replicas stay",
			series: []string{build(sA, "1x60"), build(sB, "1x60")}},

		// A vLLM replica unhealthy for 5m.
		{alert: "RespgateUpstreamReplicaDown", name: "one vLLM replica down from minute 10",
			series: []string{
				healthy(sA, "gpt-oss", "http://vllm-0:8000/v1", "1x60"),
				healthy(sA, "gpt-oss", "http://vllm-1:8000/v1", "1x10 0x50"),
				healthy(sB, "gpt-oss", "http://vllm-0:8000/v1", "1x60"),
				healthy(sB, "gpt-oss", "http://vllm-1:8000/v1", "1x10 0x50"),
			},
			firesAt: 16 * time.Minute, labels: []map[string]string{warn("job", "respgate", "pool", "gpt-oss", "replica", "http://vllm-1:8000/v1")}},
		{alert: "RespgateUpstreamReplicaDown", name: "a vLLM replica restarts in 3 minutes",
			series: []string{healthy(sA, "gpt-oss", "http://vllm-0:8000/v1", "1x10 0x3 1x46")}},

		// Every replica of a pool unhealthy for 2m.
		{alert: "RespgateUpstreamPoolDown", name: "both replicas of a pool down from minute 10",
			series: []string{
				healthy(sA, "gpt-oss", "http://vllm-0:8000/v1", "1x10 0x50"),
				healthy(sA, "gpt-oss", "http://vllm-1:8000/v1", "1x10 0x50"),
				healthy(sA, "qwen", "http://vllm-2:8000/v1", "1x60"),
			},
			firesAt: 13 * time.Minute, labels: []map[string]string{page("job", "respgate", "pool", "gpt-oss")}},
		{alert: "RespgateUpstreamPoolDown", name: "one replica of two down",
			series: []string{
				healthy(sA, "gpt-oss", "http://vllm-0:8000/v1", "1x60"),
				healthy(sA, "gpt-oss", "http://vllm-1:8000/v1", "1x10 0x50"),
			}},

		// No build_info at all for 5m.
		{alert: "RespgateNoReplica", name: "the last replica stops at minute 20",
			series:  []string{build(sA, "1x20 stale")},
			firesAt: 26 * time.Minute, labels: []map[string]string{page()}},
		{alert: "RespgateNoReplica", name: "one replica answers",
			series: []string{build(sA, "1x60")}},

		// Any swept lease in 15m, at once (no for:).
		{alert: "RespgateLeasesSwept", name: "the sweeper fails a response at minute 21",
			series:  []string{`respgate_sweeper_failed_responses_total{` + sA + `} 0x20 1x40`},
			firesAt: 21 * time.Minute, labels: []map[string]string{warn("job", "respgate")}},
		{alert: "RespgateLeasesSwept", name: "no lease swept",
			series: []string{`respgate_sweeper_failed_responses_total{` + sA + `} 0x60`}},
		{alert: "RespgateLeasesSwept", name: "a replica restarts (its counter resets)",
			series: []string{`respgate_sweeper_failed_responses_total{` + sA + `} 3x20 0x40`}},
	}
}

// slowBuckets are the cumulative buckets (les, upper bounds in order) of the histogram name with
// lbls: per observations a minute in the first bucket for 10 minutes, then, from minute 11, per a
// minute in the bucket whose upper bound is from (so that bucket and the ones above it keep
// growing, and the ones below stay flat).
func slowBuckets(name, lbls string, les []string, per int, from string) []string {
	var out []string
	slow := false
	for _, le := range les {
		slow = slow || le == from
		series := name + `_bucket{` + lbls + `,le="` + le + `"}`
		if slow {
			out = append(out, fmt.Sprintf("%s 0+%dx10 %d+%dx49", series, per, 11*per, per))
		} else {
			out = append(out, fmt.Sprintf("%s 0+%dx10 %dx50", series, per, 10*per))
		}
	}
	return out
}

func withLabels(severity string, kv ...string) map[string]string {
	m := map[string]string{"severity": severity}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// alertStep is what an alert rule's evaluation at one minute left active.
type alertStep struct {
	at     time.Duration
	alerts []*rules.Alert
}

// evalAlert loads the rule file with Prometheus's rule manager and evaluates it once a minute from
// 0 through end over series, as `promtool test rules` does (promqltest's lazy loader appends the
// samples up to each evaluation; alerts start restored, so the for: clock starts at the first
// evaluation). It returns the named alert's active alerts after each evaluation.
func evalAlert(t *testing.T, ruleFile, alert string, series []string, end time.Duration) (*rules.AlertingRule, []alertStep) {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	load := "load 1m\n  " + strings.Join(series, "\n  ") + "\n"
	suite, err := promqltest.NewLazyLoader(load, promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true, Parser: p})
	if err != nil {
		t.Fatalf("series: %v\n%s", err, load)
	}
	t.Cleanup(func() { _ = suite.Close() })
	suite.SubqueryInterval = time.Minute
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       p,
	})
	groups, errs := m.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, ruleFile)
	if len(errs) > 0 {
		t.Fatalf("load %s: %v", ruleFile, errs)
	}
	var rule *rules.AlertingRule
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true)
				if ar.Name() == alert {
					rule = ar
				}
			}
		}
	}
	if rule == nil {
		t.Fatalf("%s has no alert %s", ruleFile, alert)
	}
	var steps []alertStep
	start := time.Unix(0, 0).UTC()
	for at := time.Duration(0); at <= end; at += time.Minute {
		ts := start.Add(at)
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatalf("load samples till %v: %v", at, err)
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
			}
		})
		if err := rule.LastError(); err != nil {
			t.Fatalf("%s at %v: %v", alert, at, err)
		}
		steps = append(steps, alertStep{at: at, alerts: rule.ActiveAlerts()})
	}
	return rule, steps
}

// firing returns the labels of the step's firing alerts, and whether any was active (pending or
// firing).
func (s alertStep) firing() (out []map[string]string, active bool) {
	for _, a := range s.alerts {
		active = true
		if a.State == rules.StateFiring {
			out = append(out, a.Labels.Map())
		}
	}
	return out, active
}

// TestAlertsFireOnlyWhenTheyShould evaluates every alert of deploy/prometheus/alerts.yml with
// Prometheus's own rule evaluation over synthetic series made of what respgate exports: under
// the series of a real failure it must fire at the minute expected, not before its for: duration
// has passed since it went pending, with exactly the labels expected and templates that expand;
// under ordinary (or briefly disturbed) series it must never fire. Every alert has both kinds.
func TestAlertsFireOnlyWhenTheyShould(t *testing.T) {
	const ruleFile = "../prometheus/alerts.yml"
	have := exportedOnce(t)
	p := parser.NewParser(parser.Options{})
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, c := range alertCases() {
		t.Run(c.alert+"/"+c.name, func(t *testing.T) {
			for _, line := range c.series {
				for _, err := range checkSeries(p, line, have) {
					t.Errorf("%v\n  %s", err, line)
				}
			}
			end := time.Hour
			rule, steps := evalAlert(t, ruleFile, c.alert, c.series, end)
			if c.firesAt == 0 {
				silent[c.alert] = true
				for _, s := range steps {
					if got, _ := s.firing(); len(got) > 0 {
						t.Fatalf("fired at %v: %v", s.at, got)
					}
				}
				return
			}
			fires[c.alert] = true
			pending, fired := time.Duration(-1), time.Duration(-1)
			for _, s := range steps {
				got, active := s.firing()
				if active && pending < 0 {
					pending = s.at
				}
				if len(got) > 0 && fired < 0 {
					fired = s.at
					want := make([]map[string]string, 0, len(c.labels))
					for _, l := range c.labels {
						l = maps.Clone(l)
						l["alertname"] = c.alert
						want = append(want, l)
					}
					if !slices.EqualFunc(sortedLabels(got), sortedLabels(want), maps.Equal) {
						t.Errorf("fired at %v with labels %v, want %v", s.at, got, want)
					}
					for _, a := range s.alerts {
						a.Annotations.Range(func(an labels.Label) {
							if strings.Contains(an.Value, "error expanding") || strings.TrimSpace(an.Value) == "" {
								t.Errorf("annotation %s: %q", an.Name, an.Value)
							}
						})
					}
				}
			}
			switch {
			case fired < 0:
				t.Fatalf("never fired in %v (pending from %v)", end, pending)
			case fired != c.firesAt:
				t.Errorf("fired at %v, want %v", fired, c.firesAt)
			}
			if fired-pending != rule.HoldDuration() {
				t.Errorf("pending from %v, fired at %v: %v, not its for: %v", pending, fired, fired-pending, rule.HoldDuration())
			}
		})
	}
	for name := range ruleExprs(t, ruleFile) {
		if !fires[name] || !silent[name] {
			t.Errorf("%s: needs a case where it fires and one where it stays silent (fires %v, silent %v)", name, fires[name], silent[name])
		}
	}
}

func sortedLabels(ls []map[string]string) []map[string]string {
	return slices.SortedFunc(slices.Values(ls), func(a, b map[string]string) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
}

// checkSeries reports what in a series line (promqltest notation) respgate does not export: its
// name, a label its series lack (the scrape's job and instance aside), or a route, op or outcome
// value it never uses.
func checkSeries(p parser.Parser, line string, have series) []error {
	lbls, _, err := p.ParseSeriesDesc(line)
	if err != nil {
		return []error{fmt.Errorf("parse: %w", err)}
	}
	name := lbls.Get(labels.MetricName)
	exp, ok := have[name]
	if !ok {
		return []error{fmt.Errorf("%q is not a series respgate exports", name)}
	}
	var errs []error
	lbls.Range(func(l labels.Label) {
		if l.Name == labels.MetricName || scrapeLabels[l.Name] {
			return
		}
		values, ok := exp[l.Name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s has no label %q", name, l.Name))
		case exactLabels[l.Name] && !values[l.Value]:
			errs = append(errs, fmt.Errorf("%s{%s=%q}: respgate uses only %v", name, l.Name, l.Value, slices.Sorted(maps.Keys(values))))
		}
	})
	return errs
}
