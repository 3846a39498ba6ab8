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
)

type report struct {
	Started   time.Time          `json:"started"`
	WallSec   float64            `json:"wall_s"`
	Machine   map[string]any     `json:"machine"`
	Params    params             `json:"params"`
	Rounds    int                `json:"rounds"`
	Quick     bool               `json:"quick"`
	Arms      []*arm             `json:"arms"`
	Postgres  map[string]string  `json:"postgres"`
	Timings   map[string]float64 `json:"scenario_seconds"`
	Latency   *latencyResult     `json:"latency,omitempty"`
	C256      *c256Result        `json:"c256,omitempty"`
	Allocs    *allocResult       `json:"allocs,omitempty"`
	NonStream *nsResult          `json:"nonstream,omitempty"`
	Chain     *chainResult       `json:"chain,omitempty"`
	Agent     *agentResult       `json:"agent,omitempty"`
	Capacity  *capResult         `json:"capacity,omitempty"`
	Targets   []target           `json:"targets"`
	Problems  []string           `json:"problems,omitempty"`
	Errors    []string           `json:"errors,omitempty"`
}

type target struct {
	Name   string `json:"name"`
	Limit  string `json:"limit"`
	Figure string `json:"figure"`
	// Met is nil when the figure could not be measured in this run.
	Met  *bool  `json:"met"`
	Note string `json:"note,omitempty"`
}

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

// targets judges the targets from the figures measured.
func (r *report) targets() []target {
	var ts []target
	add := func(name, limit, figure string, met *bool, note string) {
		ts = append(ts, target{name, limit, figure, met, note})
	}
	nan := math.IsNaN
	if r.Chain != nil && len(r.Chain.Depths) > 0 && r.Chain.Depths[0].Depth == 1 {
		cb := r.Chain.Depths[0].Backends["D"]
		add("Added TTFB, Postgres, chain depth 1, p50", "≤ 0.3 ms", fmtUS(cb.AddedWarmP50), boolp(cb.AddedWarmP50 <= 300),
			"D − A with the same upstream body; warm samples")
		add("Added TTFB, Postgres, chain depth 1, p99", "≤ 1 ms", fmtUS(cb.AddedWarmP99), boolp(cb.AddedWarmP99 <= 1000), "")
	}
	if r.Latency != nil {
		g := r.Latency.Added["D"]["gap_p99"]
		noise := r.Latency.Added["A′"]["gap_p99"]
		add("Added inter-event gap p99 at c=1 (D)", "≤ 10 µs", fmtStatUS(g), boolp(!nan(g.Median) && g.Median <= 10),
			"noise floor A′ − A: "+fmtStatUS(noise)+"; C: "+fmtStatUS(r.Latency.Added["C"]["gap_p99"]))
	}
	if r.C256 != nil {
		for _, a := range []string{"C", "D"} {
			s := r.C256.CPURatio[a]
			add("CPU per relayed event vs bare proxy ("+a+", c=256)", "≤ 1.5×", fmtStat(s, "%.2f×"), boolp(!nan(s.Median) && s.Median <= 1.5),
				fmt.Sprintf("%s µs/event vs B %s µs/event", fmtStat(r.C256.PerRound.stat(a, "cpu_us_per_event"), "%.1f"),
					fmtStat(r.C256.PerRound.stat("B", "cpu_us_per_event"), "%.1f")))
		}
	}
	if r.Allocs != nil {
		for _, aa := range r.Allocs.Arms {
			if aa.Arm != "D" && aa.Arm != "C" {
				continue
			}
			add("Heap allocations per delta event ("+aa.Arm+" twin)", "≤ 0.5", fmt.Sprintf("%.2f", aa.MarginalAllocsPerDelt),
				boolp(aa.MarginalAllocsPerDelt <= 0.5),
				fmt.Sprintf("marginal, between %d- and %d-token answers; %.2f allocs per relayed event all in",
					64, r.Params.Tokens, aa.AllocsPerEvent))
		}
	}
	if r.Capacity != nil {
		if n, ok := r.Capacity.MaxPassed["D"]; ok || hasArm(r.Capacity, "D") {
			add("Concurrent streams at 25 tokens/s, zero lost events (D)", "≥ 1,024", fmt.Sprintf("%d passed", n), boolp(n >= 1024),
				fmt.Sprintf("ramp %v; direct (A) passed %d", rampOf(r.Capacity), r.Capacity.MaxPassed["A"]))
		}
		if st := capStepAt(r.Capacity, "D", 1024); st != nil {
			beyond := st.RSSPerStreamKiB - st.OutputBytes/1024
			add("RSS per open stream beyond its output (D, 1,024 streams)", "≤ 64 KiB", fmt.Sprintf("%.1f KiB", beyond), boolp(beyond <= 64),
				fmt.Sprintf("%.1f KiB per stream from idle RSS, minus %.1f KiB accumulated output", st.RSSPerStreamKiB, st.OutputBytes/1024))
		}
	}
	if r.Chain != nil {
		for _, cd := range r.Chain.Depths {
			if cd.Depth != 1000 {
				continue
			}
			cb := cd.Backends["D"]
			lim := 1.2 * cb.RawP50
			add("Rehydration depth 1,000 cold (D)", "≤ 1.2 × raw query", fmt.Sprintf("%s vs 1.2 × %s = %s", fmtUS(cb.AddedCold), fmtUS(cb.RawP50), fmtUS(lim)),
				boolp(cb.AddedCold <= lim), "added TTFB of the first request on the chain; raw query = store ResponseChainGet alone, in process")
			add("Rehydration depth 1,000 warm (D)", "≤ 1 ms", fmtUS(cb.AddedWarmP50), boolp(cb.AddedWarmP50 <= 1000),
				"respgate has no chain cache: a repeat request reloads the chain")
		}
	}
	if r.Agent != nil {
		if ab := r.Agent.Backends["D"]; ab != nil {
			add(fmt.Sprintf("TTFB turn %d over turn 1 (D)", r.Agent.Turns), "≤ 1.5×", fmt.Sprintf("%.2f× (p99 %.2f×)", ab.RatioP50, ab.RatioP99),
				boolp(ab.RatioP50 <= 1.5), fmt.Sprintf("medians %s vs %s", fmtUS(medianOf(ab.ProbeLast)), fmtUS(medianOf(ab.ProbeFirst))))
			flat := ab.StoredLast10 / ab.StoredFirst10
			add("Bytes stored per turn flat across the session (D)", "proportional to the turn", fmt.Sprintf("last 10 / first 10 turns = %.2f; %s stored bytes per byte of the turn's items",
				flat, fmtStat(ab.StoredPerNew, "%.2f")), boolp(flat <= 1.25 && flat >= 0.8), "")
		}
	}
	if r.NonStream != nil {
		s := r.NonStream.PerRound.stat("D", "rps")
		add(fmt.Sprintf("Non-streaming req/s with Postgres at c=%d (D)", r.Params.NSConc), "≥ 1,500/s", fmtStat(s, "%.0f/s"), boolp(s.Median >= 1500),
			fmt.Sprintf("direct A: %s; p99 D %s", fmtStat(r.NonStream.PerRound.stat("A", "rps"), "%.0f/s"), fmtStatUS(r.NonStream.PerRound.stat("D", "p99"))))
	}
	return ts
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
