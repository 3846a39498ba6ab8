package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/respgate/respgate/bench/stats"
)

type report struct {
	Started    time.Time          `json:"started"`
	WallSec    float64            `json:"wall_s"`
	Machine    map[string]any     `json:"machine"`
	Params     params             `json:"params"`
	Rounds     int                `json:"rounds"`
	Quick      bool               `json:"quick"`
	Arms       []*arm             `json:"arms"`
	Postgres   map[string]string  `json:"postgres"`
	Timings    map[string]float64 `json:"scenario_seconds"`
	Latency    *latencyResult     `json:"latency,omitempty"`
	Background *bgResult          `json:"background,omitempty"`
	C256       *c256Result        `json:"c256,omitempty"`
	Allocs     *allocResult       `json:"allocs,omitempty"`
	NonStream  *nsResult          `json:"nonstream,omitempty"`
	Chain      *chainResult       `json:"chain,omitempty"`
	Agent      *agentResult       `json:"agent,omitempty"`
	Capacity   *capResult         `json:"capacity,omitempty"`
	Fleet      *fleetResult       `json:"fleet,omitempty"`
	Targets    []target           `json:"targets"`
	Perf       []perfRow          `json:"performance_round3,omitempty"`
	Problems   []string           `json:"problems,omitempty"`
	// Profiles are the CPU profiles -profile took (profileTwin).
	Profiles []profileRef `json:"profiles,omitempty"`
	Errors   []string     `json:"errors,omitempty"`
}

// profileRef is a saved CPU profile and the load it was taken under.
type profileRef struct {
	Path  string `json:"path"`
	Trace string `json:"trace,omitempty"` // an execution trace of the first 2 s
	What  string `json:"what"`
}

type target struct {
	Name   string `json:"name"`
	Limit  string `json:"limit"`
	Figure string `json:"figure"`
	// Met is nil when the figure could not be measured or resolved in this run.
	Met  *bool  `json:"met"`
	Note string `json:"note,omitempty"`
}

// unresolved marks a figure over its limit that is within the run's noise floor: neither met
// nor shown to be missed.
const unresolved = "within the noise floor: not resolvable on this machine in this run"

func newReport(b *bench) *report {
	m := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version(), "goos": runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	m["loadavg_start"] = loadavg()
	return &report{Started: b.started, Machine: m, Params: b.p, Rounds: b.opt.rounds, Quick: b.opt.quick,
		Timings: map[string]float64{}}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func boolp(v bool) *bool { return &v }

// targets judges the targets from the figures measured, scenario by scenario.
func (r *report) targets() []target {
	var ts []target
	for _, judge := range []func() []target{
		r.chainShallowTargets, r.latencyTargets, r.backgroundTargets, r.c256Targets, r.allocsTargets,
		r.capacityTargets, r.chainDeepTargets, r.agentTargets, r.nonStreamTargets, r.fleetTargets,
	} {
		ts = append(ts, judge()...)
	}
	return ts
}

// chainShallowTargets judges the added TTFB at chain depth 1 (D).
func (r *report) chainShallowTargets() []target {
	if r.Chain == nil || len(r.Chain.Depths) == 0 || r.Chain.Depths[0].Depth != 1 {
		return nil
	}
	cb := r.Chain.Depths[0].Backends["D"]
	note := "D − A with the same upstream body; warm samples"
	if r.Latency != nil {
		ad := r.Latency.Added
		note += fmt.Sprintf(". Without history at c=1 (scenario 1) TTFB p50 adds: D %s, D* (synchronous_commit=off) %s, E %s, C (store:false) %s, B %s",
			fmtUS(ad["D"]["ttfb_p50"].Median), fmtUS(ad["D*"]["ttfb_p50"].Median), fmtUS(ad["E"]["ttfb_p50"].Median),
			fmtUS(ad["C"]["ttfb_p50"].Median), fmtUS(ad["B"]["ttfb_p50"].Median))
	}
	return []target{
		{Name: "Added TTFB, Postgres, chain depth 1, p50", Limit: "≤ 0.3 ms", Figure: fmtUS(cb.AddedWarmP50), Met: boolp(cb.AddedWarmP50 <= 300), Note: note},
		{Name: "Added TTFB, Postgres, chain depth 1, p99", Limit: "≤ 1 ms", Figure: fmtUS(cb.AddedWarmP99), Met: boolp(cb.AddedWarmP99 <= 1000)},
	}
}

// latencyTargets judges the added inter-event gap at c=1 (D) against the run's noise floor.
func (r *report) latencyTargets() []target {
	if r.Latency == nil {
		return nil
	}
	ad := r.Latency.Added
	j := ad["D"]["jitter_p99"]
	met := boolp(!math.IsNaN(j.Median) && j.Median <= 10)
	prefix := ""
	// The limit is resolvable only if the null comparison (A′ − A) is within it.
	if floor := ad["A′"]["jitter_p99"].Median; !math.IsNaN(floor) && math.Abs(floor) > 10 {
		met, prefix = nil, unresolved+fmt.Sprintf(" (|A′ − A| = %s > 10 µs). ", fmtUS(math.Abs(floor)))
	}
	return []target{{Name: "Added inter-event gap p99 at c=1 (D)", Limit: "≤ 10 µs", Figure: fmtStatUS(j), Met: met, Note: prefix +
		fmt.Sprintf("gap jitter from simulator-stamped deltas; noise floor A′ − A %s; C %s, B %s. Client-side gap p99 D − A: %s (noise floor %s)",
			fmtStatUS(ad["A′"]["jitter_p99"]), fmtStatUS(ad["C"]["jitter_p99"]), fmtStatUS(ad["B"]["jitter_p99"]),
			fmtStatUS(ad["D"]["gap_p99"]), fmtStatUS(ad["A′"]["gap_p99"]))}}
}

// c256Targets judges the CPU per relayed event against the bare proxy at c=256 (C, D, E).
func (r *report) c256Targets() []target {
	if r.C256 == nil {
		return nil
	}
	var ts []target
	for _, a := range []string{"C", "D", "E"} {
		s := r.C256.CPURatio[a]
		ts = append(ts, target{Name: "CPU per relayed event vs bare proxy (" + a + ", c=256)", Limit: "≤ 1.5×", Figure: fmtStat(s, "%.2f×"),
			Met: boolp(!math.IsNaN(s.Median) && s.Median <= 1.5),
			Note: fmt.Sprintf("%s µs/event vs B %s µs/event", fmtStat(r.C256.PerRound.stat(a, "cpu_us_per_event"), "%.1f"),
				fmtStat(r.C256.PerRound.stat("B", "cpu_us_per_event"), "%.1f"))})
	}
	return ts
}

// allocsTargets judges the heap allocations per delta event of the D and C twins.
func (r *report) allocsTargets() []target {
	if r.Allocs == nil {
		return nil
	}
	var ts []target
	for _, aa := range r.Allocs.Arms {
		if aa.Arm != "D" && aa.Arm != "C" {
			continue
		}
		ts = append(ts, target{Name: "Heap allocations per delta event (" + aa.Arm + " twin)", Limit: "≤ 0.5",
			Figure: fmt.Sprintf("%.2f", aa.MarginalAllocsPerDelt), Met: boolp(aa.MarginalAllocsPerDelt <= 0.5),
			Note: fmt.Sprintf("marginal, between %d- and %d-token answers; %.2f allocs per relayed event all in",
				r.Allocs.Short, r.Allocs.Long, aa.AllocsPerEvent)})
	}
	if h := r.Allocs.Hold; h != nil {
		note := fmt.Sprintf("%d streams open at once, warm upstream pool", r.Allocs.HoldStreams)
		if p := r.Allocs.HoldProxy; p != nil {
			note += fmt.Sprintf("; bare proxy (B) %.1f", p.GoroutinesPerStream)
		}
		ts = append(ts, target{Name: "Goroutines per open stream (D twin)", Limit: "≤ 3",
			Figure: fmt.Sprintf("%.1f", h.GoroutinesPerStream), Met: boolp(h.GoroutinesPerStream <= 3), Note: note})
	}
	return ts
}

// capacityTargets judges the concurrent streams D held and its RSS per open stream.
func (r *report) capacityTargets() []target {
	if r.Capacity == nil {
		return nil
	}
	var ts []target
	if n, ok := r.Capacity.MaxPassed["D"]; ok || hasArm(r.Capacity, "D") {
		ts = append(ts, target{Name: "Concurrent streams at 25 tokens/s, zero lost events (D)", Limit: "≥ 1,024",
			Figure: fmt.Sprintf("%d passed", n), Met: boolp(n >= 1024),
			Note: fmt.Sprintf("ramp %v; direct (A) passed %d, bare proxy (B) %d, D* (synchronous_commit=off) %d", rampOf(r.Capacity), r.Capacity.MaxPassed["A"], r.Capacity.MaxPassed["B"], r.Capacity.MaxPassed["D*"])})
	}
	st := capStepAt(r.Capacity, "D", 1024)
	if st == nil {
		st = largestStep(r.Capacity, "D")
	}
	if st == nil {
		return ts
	}
	beyond := st.RSSPerStreamKiB - st.OutputBytes/1024
	note := fmt.Sprintf("at %d streams: %.1f KiB per stream from the fresh process's idle RSS, minus %.1f KiB accumulated output", st.Streams, st.RSSPerStreamKiB, st.OutputBytes/1024)
	if r.C256 != nil {
		note += fmt.Sprintf("; at c=%d (peak − RSS at start): %s KiB", r.Params.Conc, fmtStat(r.C256.PerRound.stat("D", "rss_kib_per_stream_from_idle"), "%.1f"))
	}
	if r.Allocs != nil && r.Allocs.Hold != nil {
		h := r.Allocs.Hold
		note += fmt.Sprintf("; runtime counters of the twin at %d streams: %.1f goroutines, %.1f KiB stacks, %.1f KiB live heap per stream (RSS %.1f KiB)",
			r.Allocs.HoldStreams, h.GoroutinesPerStream, h.StackKiBPerStream, h.LiveKiBPerStream, h.RSSKiBPerStream)
	}
	return append(ts, target{Name: "RSS per open stream beyond its output (D)", Limit: "≤ 64 KiB", Figure: fmt.Sprintf("%.1f KiB", beyond),
		Met: boolp(beyond <= 64), Note: note})
}

// chainDeepTargets judges rehydration at depth 1,000 (D), cold and warm.
func (r *report) chainDeepTargets() []target {
	if r.Chain == nil {
		return nil
	}
	var ts []target
	for _, cd := range r.Chain.Depths {
		if cd.Depth != 1000 {
			continue
		}
		cb := cd.Backends["D"]
		lim := 1.2 * cb.RawP50
		ts = append(ts, target{Name: "Rehydration depth 1,000 cold (D)", Limit: "≤ 1.2 × raw query",
			Figure: fmt.Sprintf("%s vs 1.2 × %s = %s", fmtUS(cb.AddedUpCold), fmtUS(cb.RawP50), fmtUS(lim)), Met: boolp(cb.AddedUpCold <= lim),
			Note: fmt.Sprintf("added time to upstream of the first request on a chain (X − A, simulator-stamped; median of %d chains: %s); raw query = ResponseChainGet alone, in process. Added TTFB cold: %s",
				len(cb.UpColdAll), fmtList(cb.UpColdAll, cd.AUpP50), fmtUS(cb.AddedCold))},
			target{Name: "Rehydration depth 1,000 warm (D)", Limit: "≤ 1 ms", Figure: fmtUS(cb.AddedUpP50), Met: boolp(cb.AddedUpP50 <= 1000),
				Note: fmt.Sprintf("added time to upstream, p50 of repeats; a repeat continues the same head, which respgate's chain cache holds, so it skips the chain load (raw query p50 %s). Added TTFB warm p50: %s", fmtUS(cb.RawP50), fmtUS(cb.AddedWarmP50))})
	}
	return ts
}

// agentTargets judges the agent session on D: TTFB at turn n over turn 1, and bytes stored per turn.
func (r *report) agentTargets() []target {
	if r.Agent == nil || r.Agent.Backends["D"] == nil {
		return nil
	}
	ab := r.Agent.Backends["D"]
	flat := ab.StoredLast10 / ab.StoredFirst10
	return []target{
		{Name: fmt.Sprintf("TTFB turn %d over turn 1 (D)", r.Agent.Turns), Limit: "≤ 1.5×", Figure: fmt.Sprintf("%.2f× (p99 %.2f×)", ab.RatioP50, ab.RatioP99),
			Met: boolp(ab.RatioP50 <= 1.5), Note: fmt.Sprintf("medians %s vs %s; direct A with the same upstream bodies: %.2f× (%s vs %s); respgate's added time to upstream: %s at turn 1, %s at turn %d",
				fmtUS(stats.MedianOf(ab.ProbeLast)), fmtUS(stats.MedianOf(ab.ProbeFirst)), ab.ARatioP50, fmtUS(stats.MedianOf(ab.ALast)), fmtUS(stats.MedianOf(ab.AFirst)),
				fmtUS(stats.MedianOf(ab.UpFirst)-stats.MedianOf(ab.AUpFirst)), fmtUS(stats.MedianOf(ab.UpLast)-stats.MedianOf(ab.AUpLast)), r.Agent.Turns)},
		{Name: "Bytes stored per turn flat across the session (D)", Limit: "proportional to the turn", Figure: fmt.Sprintf("last 10 / first 10 turns = %.2f; %s stored bytes per byte of the turn's items",
			flat, fmtStat(ab.StoredPerNew, "%.2f")), Met: boolp(flat <= 1.25 && flat >= 0.8)},
	}
}

// nonStreamTargets judges non-streaming requests per second with Postgres (D).
func (r *report) nonStreamTargets() []target {
	if r.NonStream == nil {
		return nil
	}
	s := r.NonStream.PerRound.stat("D", "rps")
	return []target{{Name: fmt.Sprintf("Non-streaming req/s with Postgres at c=%d (D)", r.Params.NSConc), Limit: "≥ 1,500/s", Figure: fmtStat(s, "%.0f/s"), Met: boolp(s.Median >= 1500),
		Note: fmt.Sprintf("direct A: %s; p99 D %s; D* (synchronous_commit=off): %s; C (store:false): %s", fmtStat(r.NonStream.PerRound.stat("A", "rps"), "%.0f/s"),
			fmtStatUS(r.NonStream.PerRound.stat("D", "p99")), fmtStat(r.NonStream.PerRound.stat("D*", "rps"), "%.0f/s"),
			fmtStat(r.NonStream.PerRound.stat("C", "rps"), "%.0f/s"))}}
}

func hasArm(c *capResult, a string) bool {
	for _, s := range c.Steps {
		if s.Arm == a {
			return true
		}
	}
	return false
}

func rampOf(c *capResult) []int {
	var out []int
	seen := map[int]bool{}
	for _, s := range c.Steps {
		if !seen[s.Streams] {
			seen[s.Streams] = true
			out = append(out, s.Streams)
		}
	}
	return out
}

func largestStep(c *capResult, a string) *capStep {
	var best *capStep
	for i := range c.Steps {
		if c.Steps[i].Arm == a && (best == nil || c.Steps[i].Streams > best.Streams) {
			best = &c.Steps[i]
		}
	}
	return best
}

func capStepAt(c *capResult, a string, n int) *capStep {
	for i := range c.Steps {
		if c.Steps[i].Arm == a && c.Steps[i].Streams == n {
			return &c.Steps[i]
		}
	}
	return nil
}

func (b *bench) writeReport(runErr error) error {
	r := b.rep
	r.WallSec = time.Since(b.started).Seconds()
	r.Machine["loadavg_end"] = loadavg()
	r.Targets = r.targets()
	r.Perf = r.perfTable()
	if runErr != nil && len(r.Errors) == 0 {
		r.Errors = append(r.Errors, runErr.Error())
	}
	if err := os.MkdirAll(b.opt.outDir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(sanitize(r), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.opt.outDir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	md := r.markdown()
	if err := os.WriteFile(filepath.Join(b.opt.outDir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print(r.summaryMarkdown())
	return nil
}

// sanitize converts r to generic JSON values with NaN and ±Inf written as null (JSON has
// neither, and a scenario that failed half-way leaves some figures undefined).
func sanitize(v any) any { return finite(reflect.ValueOf(v)) }

func finite(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Invalid:
		return nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		if m, ok := v.Interface().(json.Marshaler); ok && v.Kind() == reflect.Pointer {
			return m
		}
		return finite(v.Elem())
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Struct:
		if m, ok := v.Interface().(json.Marshaler); ok {
			return m
		}
		out := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omitempty") && fv.IsZero() {
				continue
			}
			out[name] = finite(fv)
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		iter := v.MapRange()
		for iter.Next() {
			out[fmt.Sprint(iter.Key().Interface())] = finite(iter.Value())
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = finite(v.Index(i))
		}
		return out
	default:
		return v.Interface()
	}
}

// unexpectedFailures counts failed requests in the scenarios where none may fail.
func (r *report) unexpectedFailures() int {
	n := 0
	for _, m := range []map[string]int{failedOf(r.Latency), failedOf(r.Background), failedOf(r.C256), failedOf(r.NonStream)} {
		for _, v := range m {
			n += v
		}
	}
	if r.Allocs != nil {
		for _, a := range r.Allocs.Arms {
			n += a.Failed
		}
	}
	return n
}

func failedOf(v any) map[string]int {
	switch x := v.(type) {
	case *latencyResult:
		if x != nil {
			return x.Failed
		}
	case *c256Result:
		if x != nil {
			return x.Failed
		}
	case *bgResult:
		if x != nil {
			return x.Failed
		}
	case *nsResult:
		if x != nil {
			return x.Failed
		}
	}
	return nil
}

// fmtList prints values minus base, in microseconds.
func fmtList(v []float64, base float64) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmtUS(x-base))
	}
	return strings.Join(parts, ", ")
}
