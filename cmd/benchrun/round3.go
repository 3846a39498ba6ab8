package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/respgate/respgate/bench/stats"
)

// The performance table of round 3 (docs/benchmarks.md, "Performance targets"): each figure on
// Postgres (D) and SQLite (E) beside the floor it is measured against, from the same run. The
// floor is the bare reverse proxy (B): "added over the floor" is X − B paired per round, and a
// ratio to the floor is X ÷ B per round. The chain figures have no proxy arm; their floor is the
// simulator reached directly with the same upstream body (A), a stricter one.

// perfRow is one figure of the table.
type perfRow struct {
	Figure string `json:"figure"`
	Limit  string `json:"limit"`
	D      string `json:"postgres"`
	E      string `json:"sqlite"`
	Floor  string `json:"floor"`
	// MetD and MetE are nil when the figure was not measured in this run.
	MetD *bool `json:"met_postgres"`
	MetE *bool `json:"met_sqlite"`
}

// perfJudge is one figure judged on one backend: its text and whether it is within its limit.
type perfJudge struct {
	text string
	met  *bool
}

// judgeAtMost judges the median of s against limit, printing it with show.
func judgeAtMost(s stats.Spread, limit float64, show func(stats.Spread) string) perfJudge {
	if math.IsNaN(s.Median) {
		return perfJudge{text: "n/a"}
	}
	return perfJudge{text: show(s), met: boolp(s.Median <= limit)}
}

// judgeAtLeast judges the median of s against a lower limit.
func judgeAtLeast(s stats.Spread, limit float64, show func(stats.Spread) string) perfJudge {
	j := judgeAtMost(s, math.Inf(1), show)
	if j.met != nil {
		j.met = boolp(s.Median >= limit)
	}
	return j
}

func showUS(s stats.Spread) string    { return signed(fmtStatUS(s), s.Median) }
func showRatio(s stats.Spread) string { return fmtStat(s, "%.2f×") }

// signed puts a "+" before a non-negative added figure.
func signed(text string, v float64) string {
	if v >= 0 && !strings.HasPrefix(text, "+") {
		return "+" + text
	}
	return text
}

// perfTable is the round-3 table of r; rows whose scenario did not run are left out.
func (r *report) perfTable() []perfRow {
	var rows []perfRow
	add := func(figure, limit, floor string, d, e perfJudge) {
		rows = append(rows, perfRow{Figure: figure, Limit: limit, D: d.text, E: e.text, Floor: floor, MetD: d.met, MetE: e.met})
	}
	both := func(f func(arm string) perfJudge) (perfJudge, perfJudge) { return f("D"), f("E") }
	if g := r.Background; g != nil {
		d, e := both(func(a string) perfJudge { return judgeAtMost(g.Added[a], 10000, showUS) })
		add("background turn, create → first event p50, over the same backend's foreground (stream:true, c=1)", "≤ +10 ms",
			fmt.Sprintf("foreground first event p50: D %s, E %s; B %s", fmtStatUS(g.PerRound.stat("D", "ttfe_p50")),
				fmtStatUS(g.PerRound.stat("E", "ttfe_p50")), fmtStatUS(g.PerRound.stat("B", "ttfe_p50"))), d, e)
	}
	if c := r.C256; c != nil {
		t := c.PerRound
		conc := fmt.Sprintf("%d streams at %.0f tokens/s", r.Params.Conc, 1000/float64(r.Params.PaceMS))
		for _, q := range []struct {
			metric, limit string
			max           float64
		}{{"ttfd_p50", "≤ +3 ms", 3000}, {"ttfd_p99", "≤ +10 ms", 10000}} {
			d, e := both(func(a string) perfJudge { return judgeAtMost(t.diff(a, "B", q.metric), q.max, showUS) })
			add(conc+": first delta "+strings.TrimPrefix(q.metric, "ttfd_")+" added over the floor", q.limit,
				"B − A "+showUS(t.diff("B", "A", q.metric)), d, e)
		}
		d, e := both(func(a string) perfJudge { return judgeAtMost(t.diff(a, "B", "e2e_p50"), 10000, showUS) })
		add(conc+": end to end p50 added over the floor", "≤ +10 ms", "B − A "+showUS(t.diff("B", "A", "e2e_p50")), d, e)
		d, e = both(func(a string) perfJudge { return judgeAtMost(c.CPURatio[a], 1.5, showRatio) })
		add(conc+": CPU per relayed event ÷ floor", "≤ 1.5×", "B "+fmtStat(t.stat("B", "cpu_us_per_event"), "%.1f")+" µs/event", d, e)
	}
	r.chainPerfRows(add)
	if ns := r.NonStream; ns != nil {
		t := ns.PerRound
		d, e := both(func(a string) perfJudge { return judgeAtLeast(t.ratio(a, "B", "rps"), 0.4, showRatio) })
		add(fmt.Sprintf("non-streamed, c=%d: req/s ÷ floor", r.Params.NSConc), "≥ 0.4×", "B "+fmtStat(t.stat("B", "rps"), "%.0f/s"), d, e)
		d = judgeAtMost(t.ratio("D", "B", "cpu_us_per_request"), 2, showRatio)
		e = judgeAtMost(t.ratio("E", "B", "cpu_us_per_request"), 3, showRatio)
		add(fmt.Sprintf("non-streamed, c=%d: gateway CPU per request ÷ floor (D's Postgres CPU beside it: %s µs/request)", r.Params.NSConc,
			fmtStat(t.stat("D", "db_cpu_us_per_request"), "%.0f")), "≤ 2× Postgres, ≤ 3× SQLite", "B "+fmtStat(t.stat("B", "cpu_us_per_request"), "%.0f")+" µs/request", d, e)
	}
	if l := r.Latency; l != nil {
		t := l.PerRound
		for _, m := range []struct{ metric, name string }{{"ttfb_p50", "first byte"}, {"ttfd_p50", "first delta"}} {
			d, e := both(func(a string) perfJudge { return judgeAtMost(t.diff(a, "B", m.metric), 250, showUS) })
			add("c=1: "+m.name+" p50 added over the floor", "≤ +0.25 ms", "B − A "+showUS(t.diff("B", "A", m.metric)), d, e)
		}
	}
	return rows
}

// chainPerfRows adds the chain figures: TTFB at depth 50 ÷ depth 1 (warm p50), and the added TTFB
// p50 at depth 50 over A with the same upstream body.
func (r *report) chainPerfRows(add func(figure, limit, floor string, d, e perfJudge)) {
	if r.Chain == nil {
		return
	}
	var first, deep *chainDepth
	for _, cd := range r.Chain.Depths {
		switch cd.Depth {
		case 1:
			first = cd
		case perfChainDepth:
			deep = cd
		}
	}
	if first == nil || deep == nil {
		return
	}
	judge := func(limit float64, f func(lo, hi *chainBackend) float64) func(string) perfJudge {
		return func(a string) perfJudge {
			lo, hi := first.Backends[a], deep.Backends[a]
			if lo == nil || hi == nil {
				return perfJudge{text: "n/a"}
			}
			v := f(lo, hi)
			return perfJudge{text: fmt.Sprintf("%.2f", v), met: boolp(v <= limit)}
		}
	}
	ratio := judge(1.3, func(lo, hi *chainBackend) float64 { return stats.MedianOf(hi.Warm) / stats.MedianOf(lo.Warm) })
	rd, re := ratio("D"), ratio("E")
	for _, j := range []*perfJudge{&rd, &re} {
		if j.met != nil {
			j.text += "×"
		}
	}
	add(fmt.Sprintf("chains: TTFB p50 at depth %d ÷ depth 1 (warm)", perfChainDepth), "≤ 1.3×",
		fmt.Sprintf("A with the same bodies %.2f× (%s ÷ %s)", deep.AP50/first.AP50, fmtUS(deep.AP50), fmtUS(first.AP50)), rd, re)
	added := func(a string) perfJudge {
		cb := deep.Backends[a]
		if cb == nil {
			return perfJudge{text: "n/a"}
		}
		return perfJudge{text: signed(fmtUS(cb.AddedWarmP50), cb.AddedWarmP50), met: boolp(cb.AddedWarmP50 <= 1500)}
	}
	add(fmt.Sprintf("chains: TTFB p50 at depth %d added over A with the same upstream body (warm)", perfChainDepth), "≤ +1.5 ms",
		"A "+fmtUS(deep.AP50), added("D"), added("E"))
}

// perfChainDepth is the chain depth of the chain figures: a 50-turn chain.
const perfChainDepth = 50

// perfMarkdown is the round-3 table as the report prints it.
func (r *report) perfMarkdown(w writer) {
	rows := r.Perf
	if len(rows) == 0 {
		return
	}
	verdict := func(m *bool) string {
		if m == nil {
			return "not measured"
		}
		return map[bool]string{true: "met", false: "**not met**"}[*m]
	}
	w("Performance targets (round 3): Postgres (D) and SQLite (E) beside the floor from the same rounds; medians of the round figures, (min … max) over the rounds where there are several.\n\n")
	w("| figure | target | Postgres (D) | SQLite (E) | floor, same run |\n|---|---|---|---|---|\n")
	for _, row := range rows {
		w("| %s | %s | %s (%s) | %s (%s) | %s |\n", row.Figure, row.Limit, row.D, verdict(row.MetD), row.E, verdict(row.MetE), row.Floor)
	}
	w("\n")
}
