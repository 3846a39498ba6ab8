package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
)

const benchInput = "Hello! remember: the sky is green"

func constBody(b []byte) func(int) []byte { return func(int) []byte { return b } }

// latencyResult: c=1. Probe requests (ProbeTokens tokens, no reasoning) give time to first byte
// and first delta; one long stream per arm and round gives the inter-event gaps. A′ is the
// direct arm measured a second time: A′ − A is the noise floor of every "added" figure.
type latencyResult struct {
	PerRound table                              `json:"per_round"`
	Added    map[string]map[string]stats.Spread `json:"added"`
	Failed   map[string]int                     `json:"failed"`
}

var latencyMetrics = []string{"ttfb_p50", "ttfb_p99", "ttfd_p50", "ttfd_p99", "gap_p50", "gap_p99", "relay_p50", "relay_p99", "jitter_p99"}

// addLatency records one round of arm's latencyMetrics (and its unmatched streams): time to first
// byte and to first delta from probe, the inter-event gaps from gaps (the same summary where one
// run measures both), relay latency and jitter from rl.
func (t table) addLatency(arm string, probe, gaps *loadgen.Summary, rl relayStats) {
	t.add(arm, "ttfb_p50", probe.TTFB.P50)
	t.add(arm, "ttfb_p99", probe.TTFB.P99)
	t.add(arm, "ttfd_p50", probe.TTFD.P50)
	t.add(arm, "ttfd_p99", probe.TTFD.P99)
	t.add(arm, "gap_p50", gaps.Gap.P50)
	t.add(arm, "gap_p99", gaps.Gap.P99)
	t.add(arm, "relay_p50", rl.LatP50)
	t.add(arm, "relay_p99", rl.LatP99)
	t.add(arm, "jitter_p99", rl.JitP99)
	t.add(arm, "unmatched", float64(rl.Unmatched))
}

// addedLatency is arm's per-round difference from the direct arm A of each of latencyMetrics.
func (t table) addedLatency(arm string) map[string]stats.Spread {
	added := make(map[string]stats.Spread, len(latencyMetrics))
	for _, m := range latencyMetrics {
		added[m] = t.diff(arm, "A", m)
	}
	return added
}

func (b *bench) scenarioLatency(ctx context.Context) error {
	p := b.p
	aPrime := *b.arms[0]
	aPrime.Name, aPrime.Label = "A′", "direct again (noise floor)"
	arms := append([]*arm{b.arms[0], &aPrime}, b.arms[1:]...)
	res := &latencyResult{PerRound: table{}, Added: map[string]map[string]stats.Spread{}, Failed: map[string]int{}}
	b.rep.Latency = res
	// Warm every arm's connections (client→arm and arm→simulator) before measuring.
	for _, a := range arms {
		if _, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 2, Requests: 4,
			Body: constBody(a.body(model(0, 4, ""), benchInput, true, nil))}); err != nil {
			return err
		}
	}
	for r := range b.opt.rounds {
		for _, a := range rotate(arms, r) {
			probe, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Duration: p.ProbeDur,
				Body: constBody(a.body(model(p.PaceMS, p.ProbeTokens, "reasoning=0"), benchInput, true, nil))})
			if err != nil {
				return err
			}
			gaps, rl, err := b.measureStamped(ctx, a, model(p.PaceMS, p.GapTokens, ""),
				loadgen.Config{Stream: true, Concurrency: 1, Requests: p.GapStreams})
			if err != nil {
				return err
			}
			t := res.PerRound
			t.addLatency(a.Name, &probe.Summary, &gaps.Summary, rl)
			t.add(a.Name, "probes", float64(probe.Summary.OK))
			res.Failed[a.Name] += probe.Summary.Failed + gaps.Summary.Failed
			b.noteProblems("latency "+a.Name, probe.Summary, gaps.Summary)
		}
		b.log.Info("latency round done", "round", r+1)
	}
	for _, a := range arms[1:] {
		res.Added[a.Name] = res.PerRound.addedLatency(a.Name)
	}
	if b.opt.profile {
		b.profileTwin(ctx, "twin-pg-c1", "one streamed turn at a time, no history, unpaced (what a turn costs on its way to the first byte)",
			profileSeconds, true, loadgen.Config{Stream: true, Concurrency: 1, Requests: 50,
				Body: constBody((&arm{}).body(model(0, p.ProbeTokens, "reasoning=0"), benchInput, true, nil))})
	}
	return nil
}

// postgresArms are the arms whose respgate stores in Postgres: the c=256 scenario reads their
// pool's counters around each wave (pool.go).
var postgresArms = map[string]bool{"D": true, "D*": true}

// poolBefore reads a Postgres arm's pool counters before a wave (ok false for the other arms, or
// when /metrics could not be read: the figures are then missing, a problem of the report).
func (b *bench) poolBefore(ctx context.Context, a *arm) (poolCounters, bool) {
	if !postgresArms[a.Name] || a.proc == nil {
		return poolCounters{}, false
	}
	pc, err := scrapePool(ctx, a.proc.addr)
	if err != nil {
		b.log.Warn("pool counters", "arm", a.Name, "err", err)
		return poolCounters{}, false
	}
	return pc, true
}

// poolAfter adds the wave's statements per turn and its pool acquire wait p50 and p99 (µs, the
// upper bound of the histogram bucket) to t.
func (b *bench) poolAfter(ctx context.Context, a *arm, before poolCounters, t table, turns int) {
	after, err := scrapePool(ctx, a.proc.addr)
	if err != nil {
		b.log.Warn("pool counters", "arm", a.Name, "err", err)
		return
	}
	t.add(a.Name, "statements_per_turn", (after.statements-before.statements)/float64(max(turns, 1)))
	for _, q := range []struct {
		metric string
		q      float64
	}{{"pool_wait_p50_us", 0.5}, {"pool_wait_p99_us", 0.99}} {
		// No acquire (NaN) or one past the last finite bound (+Inf) has no figure: JSON has neither.
		if v := waitQuantile(before, after, q.q); !math.IsNaN(v) && !math.IsInf(v, 0) {
			t.add(a.Name, q.metric, v*1e6)
		} else {
			b.log.Warn("pool wait quantile out of the histogram", "arm", a.Name, "q", q.q, "value", v)
		}
	}
}

// profileSeconds is how long -profile samples each load but c=256's.
const profileSeconds = 10

// twinVariants are the loads -profile takes the c=256 and non-streamed profiles under: each twin
// storing, and the Postgres twin with store:false, arm C's load, so that
// `go tool pprof -diff_base twin-pg-nostore-… twin-pg-…` is what storing costs the gateway.
var twinVariants = []struct{ twin, name, store, what string }{
	{"pg", "pg", "", ""},
	{"pg", "pg-nostore", "false", ", store:false"},
	{"sqlite", "sqlite", "", ""},
}

// c256Result: Conc concurrent streams of Tokens tokens at the pace, one wave per arm and round.
type c256Result struct {
	PerRound table                              `json:"per_round"`
	Added    map[string]map[string]stats.Spread `json:"added"`
	CPURatio map[string]stats.Spread            `json:"cpu_ratio_to_b"`
	Failed   map[string]int                     `json:"failed"`
}

func (b *bench) scenarioC256(ctx context.Context) error {
	p := b.p
	res := &c256Result{PerRound: table{}, Added: map[string]map[string]stats.Spread{}, CPURatio: map[string]stats.Spread{}, Failed: map[string]int{}}
	b.rep.C256 = res
	for r := range b.opt.rounds {
		for _, a := range rotate(b.arms, r) {
			pool, poolOK := b.poolBefore(ctx, a)
			rs, rl, err := b.measureStamped(ctx, a, model(p.PaceMS, p.Tokens, ""),
				loadgen.Config{Stream: true, Concurrency: p.Conc, Requests: p.Conc, Spread: p.Spread})
			if err != nil {
				return err
			}
			s := rs.Summary
			t := res.PerRound
			if poolOK {
				b.poolAfter(ctx, a, pool, t, p.Conc)
			}
			t.addLatency(a.Name, &s, &s, rl)
			t.add(a.Name, "max_gap", s.MaxGap.Max)
			t.add(a.Name, "e2e_p50", s.E2E.P50)
			if s.Events > 0 {
				t.add(a.Name, "cpu_us_per_event", rs.GatewayCPU/float64(s.Events))
				t.add(a.Name, "sim_cpu_us_per_event", rs.SimCPU/float64(s.Events))
				t.add(a.Name, "client_cpu_us_per_event", rs.ClientCPU/float64(s.Events))
			}
			if a.proc != nil {
				t.add(a.Name, "rss_kib_per_stream", float64(rs.RSSPeak-rs.RSSBefore)/float64(p.Conc)/1024)
				t.add(a.Name, "rss_kib_per_stream_from_idle", float64(rs.RSSPeak-a.idleRSS)/float64(p.Conc)/1024)
				t.add(a.Name, "rss_peak_mib", float64(rs.RSSPeak)/(1<<20))
			}
			t.add(a.Name, "output_bytes", rs.OutputBytes)
			t.add(a.Name, "events", float64(s.Events))
			res.Failed[a.Name] += s.Failed
			b.noteProblems("c256 "+a.Name, s)
		}
		b.log.Info("c256 round done", "round", r+1)
	}
	for _, a := range b.arms[1:] {
		res.Added[a.Name] = res.PerRound.addedLatency(a.Name)
		res.CPURatio[a.Name] = res.PerRound.ratio(a.Name, "B", "cpu_us_per_event")
	}
	if b.opt.profile {
		for _, v := range twinVariants {
			b.profileTwinOf(ctx, v.twin, "twin-"+v.name+"-c256", fmt.Sprintf("%d concurrent streams of %d tokens%s (CPU per relayed event)", p.Conc, p.Tokens, v.what),
				int(p.Spread.Seconds())+p.Tokens*p.PaceMS/1000, false,
				loadgen.Config{Stream: true, Concurrency: p.Conc, Requests: p.Conc, Spread: p.Spread,
					Body: constBody((&arm{store: v.store}).body(model(p.PaceMS, p.Tokens, ""), benchInput, true, nil))})
		}
	}
	return nil
}

// profileTwin saves a CPU profile of the Postgres twin, taken over secs seconds while cfg's load
// runs against it (again and again until the profile is taken), as name.cpu.pprof in the log
// folder, and lists it in the report with what it shows. The twin shares arm D's database and
// tenant, so a body that continues one of D's chains continues it on the twin too. A failure is
// a problem of the report, not of the run.
//
// With traced, it also saves a 2-second execution trace taken at the start (name.trace), whose
// blocking profiles (`go tool trace -pprof=net|sync|syscall|sched`) show where a turn waits.
func (b *bench) profileTwin(ctx context.Context, name, what string, secs int, traced bool, cfg loadgen.Config) {
	b.profileTwinOf(ctx, "pg", name, what, secs, traced, cfg)
}

// profileTwinOf is profileTwin of the twin named twin ("pg" or "sqlite", the SQLite twin: its
// profile holds the database's own work too, which runs in the gateway's process).
func (b *bench) profileTwinOf(ctx context.Context, twin, name, what string, secs int, traced bool, cfg loadgen.Config) {
	tw := b.twins[twin]
	a := &arm{Name: twin + "-twin", URL: tw.baseURL(), proc: tw, done: true}
	path := filepath.Join(b.logDir, name+".cpu.pprof")
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 2)
	go func() {
		defer stop() // the profile is taken: the load stops
		done <- fetchTo(pctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", tw.debugAddr, max(secs, 1)), path)
	}()
	tracePath := ""
	if traced {
		tracePath = filepath.Join(b.logDir, name+".trace")
		go func() {
			done <- fetchTo(pctx, fmt.Sprintf("http://%s/debug/pprof/trace?seconds=2", tw.debugAddr), tracePath)
		}()
	} else {
		done <- nil
	}
	var err error
	for pctx.Err() == nil {
		if _, err = b.measure(pctx, a, cfg); err != nil && pctx.Err() != nil {
			err = nil // cut by the end of the profile
		}
		if err != nil {
			break
		}
	}
	stop()
	if perr := errors.Join(<-done, <-done); perr != nil || err != nil {
		b.rep.Problems = append(b.rep.Problems, fmt.Sprintf("profile %s: %v", name, errors.Join(perr, err)))
		return
	}
	b.rep.Profiles = append(b.rep.Profiles, profileRef{Path: path, Trace: tracePath, What: what})
}

// fetchTo saves the body of a GET of url to path (nothing when the GET fails).
func fetchTo(ctx context.Context, url, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = get(context.WithoutCancel(ctx), url, f)
	if cerr := f.Close(); err == nil {
		return cerr
	}
	_ = os.Remove(path)
	return err
}

// allocResult: heap allocations per relayed event in the instrumented twins (B is the proxy
// process itself). Two answer lengths separate the per-request cost from the per-delta one.
type allocResult struct {
	Short int        `json:"short_tokens"`
	Long  int        `json:"long_tokens"`
	Arms  []allocArm `json:"arms"`
	// Hold: memory per open stream in the Postgres twin while HoldStreams streams are open,
	// from the runtime's own counters (what RSS per stream is made of).
	HoldStreams int         `json:"hold_streams"`
	Hold        *holdResult `json:"hold,omitempty"`
	// HoldProxy: the same for the bare proxy (B), the floor of goroutines per stream.
	HoldProxy *holdResult `json:"hold_proxy,omitempty"`
}

type holdResult struct {
	GoroutinesPerStream float64 `json:"goroutines_per_stream"`
	HeapKiBPerStream    float64 `json:"heap_inuse_kib_per_stream"` // in-use spans after a GC
	LiveKiBPerStream    float64 `json:"heap_live_kib_per_stream"`  // live objects after a GC
	StackKiBPerStream   float64 `json:"stack_kib_per_stream"`
	RSSKiBPerStream     float64 `json:"rss_kib_per_stream"`
	OutputBytes         float64 `json:"output_bytes"`
}

type allocArm struct {
	Arm   string `json:"arm"`
	Label string `json:"label"`
	// Per request and per relayed event at the long answer; the marginal allocations per added
	// delta event between the short and the long answer.
	AllocsPerRequest      map[int]float64 `json:"allocs_per_request"`
	AllocsPerEvent        float64         `json:"allocs_per_event"`
	BytesPerEvent         float64         `json:"bytes_per_event"`
	MarginalAllocsPerDelt float64         `json:"marginal_allocs_per_delta"`
	Failed                int             `json:"failed"`
}

func (b *bench) scenarioAllocs(ctx context.Context) error {
	p := b.p
	short, long := 64, 256
	if b.opt.quick {
		long = 128
	}
	res := &allocResult{Short: short, Long: long}
	b.rep.Allocs = res
	tpg, tsq := b.twins["pg"], b.twins["sqlite"]
	targets := []*arm{
		{Name: "B", Label: "bare reverse proxy (the process of arm B)", URL: b.proxy.baseURL(), proc: b.proxy},
		{Name: "C", Label: "respgate twin, store:false", URL: tpg.baseURL(), proc: tpg, store: "false", done: true},
		{Name: "D", Label: "respgate twin, Postgres", URL: tpg.baseURL(), proc: tpg, done: true},
		{Name: "E", Label: "respgate twin, SQLite", URL: tsq.baseURL(), proc: tsq, done: true},
	}
	for _, a := range targets {
		// Warm up (connections, pools, first-use allocations).
		if _, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 8, Requests: 8,
			Body: constBody(a.body(model(1, short, ""), benchInput, true, nil))}); err != nil {
			return err
		}
		aa := allocArm{Arm: a.Name, Label: a.Label, AllocsPerRequest: map[int]float64{}}
		var deltas = map[int]float64{}
		for _, tokens := range []int{short, long} {
			m0, err := a.proc.memstats(ctx)
			if err != nil {
				return err
			}
			rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 8, Requests: p.AllocN,
				Body: constBody(a.body(model(1, tokens, ""), benchInput, true, nil))})
			if err != nil {
				return err
			}
			m1, err := a.proc.memstats(ctx)
			if err != nil {
				return err
			}
			s := rs.Summary
			aa.Failed += s.Failed
			n := float64(max(s.Requests, 1))
			allocs := float64(m1.Mallocs - m0.Mallocs)
			aa.AllocsPerRequest[tokens] = allocs / n
			deltas[tokens] = float64(s.Deltas) / n
			if tokens == long && s.Events > 0 {
				aa.AllocsPerEvent = allocs / float64(s.Events)
				aa.BytesPerEvent = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(s.Events)
			}
		}
		if d := deltas[long] - deltas[short]; d > 0 {
			aa.MarginalAllocsPerDelt = (aa.AllocsPerRequest[long] - aa.AllocsPerRequest[short]) / d
		}
		res.Arms = append(res.Arms, aa)
	}
	return b.holdStreams(ctx, res)
}

// holdStreams opens many paced streams on the Postgres twin and, once all are open, reads its
// runtime counters: the per-stream goroutines, heap and stacks behind the RSS per stream. The
// bare proxy (B) is measured the same way, for its goroutines per stream.
func (b *bench) holdStreams(ctx context.Context, res *allocResult) error {
	tw := b.twins["pg"]
	a := &arm{Name: "D-twin", URL: tw.baseURL(), proc: tw, done: true}
	h, err := b.holdOn(ctx, a)
	if err != nil {
		return err
	}
	res.HoldStreams, res.Hold = b.p.Conc, h
	hb, err := b.holdOn(ctx, &arm{Name: "B", URL: b.proxy.baseURL(), proc: b.proxy})
	if err != nil {
		return err
	}
	res.HoldProxy = hb
	return nil
}

// holdOn opens Conc paced streams on arm a at once and reads its process's counters while all are
// open, minus the same before. A first wave of as many streams, run to their end, warms the
// process's upstream connection pool, so the figures are a steady state's (a pooled upstream
// connection's two net/http goroutines belong to the pool, before and after a stream).
func (b *bench) holdOn(ctx context.Context, a *arm) (*holdResult, error) {
	n := b.p.Conc
	body := constBody(a.body(model(b.p.RampPaceMS, 8, ""), benchInput, true, nil))
	if _, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: n, Requests: n, Body: body}); err != nil {
		return nil, err
	}
	st0, err := loadgen.ReadProc(a.proc.pid())
	if err != nil {
		return nil, err
	}
	m0, err := a.proc.memstats(ctx, true)
	if err != nil {
		return nil, err
	}
	type out struct {
		rs  *runStats
		err error
	}
	done := make(chan out, 1)
	go func() {
		rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: n, Requests: n, Spread: b.p.Spread,
			Body: constBody(a.body(model(b.p.RampPaceMS, 96, ""), benchInput, true, nil))})
		done <- out{rs, err}
	}()
	// All streams are open from the end of the spread until the first ones finish (96 tokens at
	// the ramp's pace, about 4 s); sample the middle of that window.
	select {
	case <-time.After(b.p.Spread + 1500*time.Millisecond):
	case o := <-done:
		return nil, fmt.Errorf("streams ended before the sample: %w", o.err)
	}
	st1, err := loadgen.ReadProc(a.proc.pid())
	if err != nil {
		return nil, err
	}
	m1, err := a.proc.memstats(ctx, true)
	if err != nil {
		return nil, err
	}
	o := <-done
	if o.err != nil {
		return nil, o.err
	}
	f := float64(n)
	h := &holdResult{
		GoroutinesPerStream: float64(m1.Goroutines-m0.Goroutines) / f,
		HeapKiBPerStream:    (float64(m1.HeapInuse) - float64(m0.HeapInuse)) / f / 1024,
		LiveKiBPerStream:    (float64(m1.HeapLiveBytes) - float64(m0.HeapLiveBytes)) / f / 1024,
		StackKiBPerStream:   (float64(m1.StackInuse) - float64(m0.StackInuse)) / f / 1024,
		RSSKiBPerStream:     float64(st1.RSS-st0.RSS) / f / 1024,
		OutputBytes:         o.rs.OutputBytes,
	}
	if o.rs.Summary.Failed > 0 {
		b.noteProblems("hold "+a.Name, o.rs.Summary)
	}
	return h, nil
}

// nsResult: non-streaming requests per second at NSConc (closed loop), every arm, interleaved;
// then, for A and D, the best rate whose p99 stays within 10 ms.
type nsResult struct {
	PerRound table                `json:"per_round"`
	Search   map[string][]nsPoint `json:"search"`
	Best     map[string]*nsPoint  `json:"best_within_10ms"`
	Failed   map[string]int       `json:"failed"`
}

type nsPoint struct {
	Conc int     `json:"c"`
	RPS  float64 `json:"rps"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
}

func (b *bench) scenarioNonStream(ctx context.Context) error {
	p := b.p
	res := &nsResult{PerRound: table{}, Search: map[string][]nsPoint{}, Best: map[string]*nsPoint{}, Failed: map[string]int{}}
	b.rep.NonStream = res
	mdl := model(0, 16, "")
	run := func(a *arm, c int) (*runStats, error) {
		return b.measure(ctx, a, loadgen.Config{Concurrency: c, Duration: p.NSDur,
			Body: constBody(a.body(mdl, benchInput, false, nil))})
	}
	for _, a := range b.arms { // warm-up
		if _, err := b.measure(ctx, a, loadgen.Config{Concurrency: p.NSConc, Requests: 2 * p.NSConc,
			Body: constBody(a.body(mdl, benchInput, false, nil))}); err != nil {
			return err
		}
	}
	for r := range b.opt.rounds {
		for _, a := range rotate(b.arms, r) {
			rs, err := run(a, p.NSConc)
			if err != nil {
				return err
			}
			s := rs.Summary
			t := res.PerRound
			t.add(a.Name, "rps", s.RPS)
			t.add(a.Name, "p50", s.E2E.P50)
			t.add(a.Name, "p99", s.E2E.P99)
			if s.OK > 0 {
				t.add(a.Name, "cpu_us_per_request", rs.GatewayCPU/float64(s.OK))
				t.add(a.Name, "sim_cpu_us_per_request", rs.SimCPU/float64(s.OK))
				t.add(a.Name, "db_cpu_us_per_request", rs.DBCPU/float64(s.OK))
			}
			res.Failed[a.Name] += s.Failed
			b.noteProblems("nonstream "+a.Name, s)
		}
	}
	if b.opt.profile {
		for _, v := range twinVariants {
			b.profileTwinOf(ctx, v.twin, "twin-"+v.name+"-nonstream", fmt.Sprintf("non-streamed turns at c=%d%s (CPU per non-streamed turn)", p.NSConc, v.what),
				profileSeconds, false, loadgen.Config{Concurrency: p.NSConc, Requests: 20 * p.NSConc, Body: constBody((&arm{store: v.store}).body(mdl, benchInput, false, nil))})
		}
	}
	for _, name := range []string{"A", "D"} {
		a := b.armByKey[name]
		pt := nsPoint{Conc: p.NSConc, RPS: res.PerRound.stat(name, "rps").Median, P50: res.PerRound.stat(name, "p50").Median,
			P99: res.PerRound.stat(name, "p99").Median}
		res.Search[name] = append(res.Search[name], pt)
		if pt.P99 <= 10000 {
			best := pt
			res.Best[name] = &best
			continue
		}
		for c := p.NSConc / 2; c >= 1; c /= 2 {
			rs, err := run(a, c)
			if err != nil {
				return err
			}
			pt := nsPoint{Conc: c, RPS: rs.Summary.RPS, P50: rs.Summary.E2E.P50, P99: rs.Summary.E2E.P99}
			res.Search[name] = append(res.Search[name], pt)
			if pt.P99 <= 10000 && rs.Summary.Failed == 0 {
				best := pt
				res.Best[name] = &best
				break
			}
		}
	}
	return nil
}

// capResult: a ramp of concurrent streams at RampPaceMS per token; a step passes with every
// stream whole and no gap over 10× the pace. D is a fresh respgate process, so its RSS per
// stream is measured from its idle RSS.
type capResult struct {
	Steps     []capStep        `json:"steps"`
	MaxPassed map[string]int   `json:"max_passed"`
	IdleRSS   map[string]int64 `json:"idle_rss"`
}

type capStep struct {
	Arm             string  `json:"arm"`
	Streams         int     `json:"streams"`
	Passed          bool    `json:"passed"`
	Failed          int     `json:"failed"`
	Lost            int     `json:"lost"`
	MaxGapUS        float64 `json:"max_gap_us"`
	GapP99US        float64 `json:"gap_p99_us"`
	TTFBP99US       float64 `json:"ttfb_p99_us"`
	CPUPerEventUS   float64 `json:"cpu_us_per_event"`
	SimCPUPerEvent  float64 `json:"sim_cpu_us_per_event"`
	ClientCPUPerEvt float64 `json:"client_cpu_us_per_event"`
	RSSPerStreamKiB float64 `json:"rss_kib_per_stream"`
	OutputBytes     float64 `json:"output_bytes"`
	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	// MaxGapBefore is the event that ended the largest gap; OverLimit counts the streams whose
	// largest gap exceeded 10× the pace, by the event that ended it.
	MaxGapBefore string         `json:"max_gap_before"`
	OverLimit    map[string]int `json:"over_limit,omitempty"`
	Problems     []string       `json:"problems,omitempty"`
}

func (b *bench) scenarioCapacity(ctx context.Context) error {
	res := &capResult{MaxPassed: map[string]int{}, IdleRSS: map[string]int64{}}
	b.rep.Capacity = res
	var arms []*arm
	for _, name := range b.opt.rampArms {
		a := b.armByKey[name]
		if a == nil {
			return fmt.Errorf("-ramp-arms: unknown arm %q", name)
		}
		if name == "D" {
			c, fresh, err := b.freshCapacityArm(ctx, a)
			if err != nil {
				return err
			}
			defer c.stop()
			a = fresh
		}
		if a.proc != nil {
			st, err := loadgen.ReadProc(a.proc.pid())
			if err != nil {
				return err
			}
			res.IdleRSS[a.Name] = st.RSS
		}
		arms = append(arms, a)
	}
	failed := map[string]bool{}
	for _, n := range b.opt.ramp {
		for _, a := range arms {
			if failed[a.Name] {
				continue
			}
			st, err := b.capacityStep(ctx, a, n, res.IdleRSS[a.Name])
			if err != nil {
				return err
			}
			res.Steps = append(res.Steps, st)
			if st.Passed {
				res.MaxPassed[a.Name] = n
			} else {
				failed[a.Name] = true
			}
		}
	}
	return nil
}

// freshCapacityArm starts a fresh respgate process for arm a (D): its idle RSS is the baseline of
// the RSS per stream. It returns the process, which the caller stops, and a copy of a that uses it.
func (b *bench) freshCapacityArm(ctx context.Context, a *arm) (*child, *arm, error) {
	respgate, _ := filepath.Abs(filepath.Join(b.opt.binDir, "respgate"))
	c, err := startChild(ctx, b.logDir, "respgate-D-capacity", respgate,
		b.gatewayArgs(b.pgDSN), "/readyz")
	if err != nil {
		return nil, nil, err
	}
	fresh := *a
	fresh.URL, fresh.proc = c.baseURL(), c
	return c, &fresh, nil
}

// capacityStep holds n paced streams open on arm a at once and judges the step: it passes when
// every stream is whole and no gap exceeds 10× the pace. idleRSS is the arm's RSS before the ramp.
func (b *bench) capacityStep(ctx context.Context, a *arm, n int, idleRSS int64) (capStep, error) {
	p := b.p
	limit := float64(10*p.RampPaceMS) * 1000
	rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: n, Requests: n, Spread: p.RampSpread,
		KeepGaps: true, Body: constBody(a.body(model(p.RampPaceMS, p.RampTokens, ""), benchInput, true, nil))})
	if err != nil {
		return capStep{}, err
	}
	s := rs.Summary
	st := capStep{Arm: a.Name, Streams: n, Failed: s.Failed, Lost: s.Lost, MaxGapUS: s.MaxGap.Max, GapP99US: s.Gap.P99,
		TTFBP99US: s.TTFB.P99, OutputBytes: rs.OutputBytes, Problems: s.Problems}
	st.Passed = s.Failed == 0 && s.OK == n && s.MaxGap.Max <= limit
	st.noteGaps(rs.samples, limit)
	if s.Events > 0 {
		st.CPUPerEventUS = rs.GatewayCPU / float64(s.Events)
		st.SimCPUPerEvent = rs.SimCPU / float64(s.Events)
		st.ClientCPUPerEvt = rs.ClientCPU / float64(s.Events)
	}
	if a.proc != nil {
		st.RSSPerStreamKiB = float64(rs.RSSPeak-idleRSS) / float64(n) / 1024
		st.PeakRSSMiB = float64(rs.RSSPeak) / (1 << 20)
	}
	b.log.Info("capacity step", "arm", a.Name, "streams", n, "passed", st.Passed, "failed", s.Failed,
		"max_gap", time.Duration(s.MaxGap.Max*1e3).Round(time.Millisecond))
	return st, nil
}

// noteGaps records the event that ended the largest gap of all samples, and counts the streams
// whose largest gap exceeded limit (µs) by the event that ended it.
func (st *capStep) noteGaps(samples []loadgen.Sample, limit float64) {
	var top time.Duration
	for _, x := range samples {
		if x.MaxGap > top {
			top, st.MaxGapBefore = x.MaxGap, x.MaxGapBefore
		}
		if stats.Micros(x.MaxGap) > limit {
			if st.OverLimit == nil {
				st.OverLimit = map[string]int{}
			}
			st.OverLimit[x.MaxGapBefore]++
		}
	}
}

// noteProblems records the first problems of failed runs in the report.
func (b *bench) noteProblems(what string, ss ...loadgen.Summary) {
	for _, s := range ss {
		if s.Failed > 0 && len(b.rep.Problems) < 40 {
			b.rep.Problems = append(b.rep.Problems, fmt.Sprintf("%s: %d of %d failed: %v", what, s.Failed, s.Requests, s.Problems))
		}
	}
}
