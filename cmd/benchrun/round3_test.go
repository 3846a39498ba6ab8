package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/respgate/respgate/bench/stats"
)

// rounds adds v to metric of arm, one value per round.
func rounds(t table, arm, metric string, v ...float64) {
	for _, x := range v {
		t.add(arm, metric, x)
	}
}

// Each figure is judged on each backend against the floor of its own rounds: added figures are
// X − B paired per round, ratios X ÷ B, the chain figures against A with the same bodies.
func TestPerfTableJudgesEachFigureAgainstTheFloorOfTheSameRounds(t *testing.T) {
	c := table{}
	rounds(c, "A", "ttfd_p50", 1000, 1000)
	rounds(c, "B", "ttfd_p50", 1200, 1400)
	rounds(c, "D", "ttfd_p50", 4100, 4300) // +2.9 ms over B: met
	rounds(c, "E", "ttfd_p50", 4300, 4500) // +3.1 ms: not met
	rounds(c, "A", "ttfd_p99", 0, 0)
	rounds(c, "B", "ttfd_p99", 0, 0)
	rounds(c, "D", "ttfd_p99", 10000, 10000)
	rounds(c, "E", "ttfd_p99", 10001, 10001)
	rounds(c, "A", "e2e_p50", 0, 0)
	rounds(c, "B", "e2e_p50", 5000, 5000)
	rounds(c, "D", "e2e_p50", 15000, 15000)
	rounds(c, "E", "e2e_p50", 15001, 15001)
	rounds(c, "B", "cpu_us_per_event", 10, 10)
	ns := table{}
	rounds(ns, "B", "rps", 1000, 2000)
	rounds(ns, "D", "rps", 400, 800) // 0.4×: met
	rounds(ns, "E", "rps", 399, 799)
	rounds(ns, "B", "cpu_us_per_request", 100, 100)
	rounds(ns, "D", "cpu_us_per_request", 200, 200) // 2×: met on Postgres
	rounds(ns, "E", "cpu_us_per_request", 301, 301) // 3.01×: not met on SQLite
	lat := table{}
	for _, m := range []string{"ttfb_p50", "ttfd_p50"} {
		rounds(lat, "A", m, 100, 100)
		rounds(lat, "B", m, 300, 300)
		rounds(lat, "D", m, 550, 550)
		rounds(lat, "E", m, 551, 551)
	}
	r := &report{Params: params{Conc: 256, PaceMS: 20, NSConc: 16},
		C256:      &c256Result{PerRound: c, CPURatio: map[string]stats.Spread{"D": stats.NewSpread([]float64{1.5}), "E": stats.NewSpread([]float64{1.6})}},
		NonStream: &nsResult{PerRound: ns},
		Latency:   &latencyResult{PerRound: lat},
		Chain: &chainResult{Depths: []*chainDepth{
			{Depth: 1, AP50: 1000, Backends: map[string]*chainBackend{"D": {Warm: []float64{2000}}, "E": {Warm: []float64{2000}}}},
			{Depth: perfChainDepth, AP50: 1200, Backends: map[string]*chainBackend{
				"D": {Warm: []float64{2600}, AddedWarmP50: 1500}, "E": {Warm: []float64{2601}, AddedWarmP50: 1501}}},
		}},
	}
	rows := r.perfTable()
	want := []string{"first delta p50", "first delta p99", "end to end p50", "CPU per relayed event", "depth 50 ÷ depth 1",
		"depth 50 added", "req/s", "gateway CPU per request", "c=1: first byte", "c=1: first delta"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, row := range rows {
		if !strings.Contains(row.Figure, want[i]) {
			t.Errorf("row %d is %q, want %q", i, row.Figure, want[i])
		}
		if row.MetD == nil || !*row.MetD {
			t.Errorf("%s: Postgres %s judged not met, want met", row.Figure, row.D)
		}
		if row.MetE == nil || *row.MetE {
			t.Errorf("%s: SQLite %s judged met, want not met", row.Figure, row.E)
		}
	}
	if !strings.HasPrefix(rows[0].D, "+2.90 ms") {
		t.Errorf("first delta p50 on Postgres reads %q, want +2.9 ms over the floor", rows[0].D)
	}
	if !strings.Contains(rows[0].Floor, "B − A +300") {
		t.Errorf("the floor cell %q does not give B − A", rows[0].Floor)
	}
	if !strings.Contains(rows[4].Floor, "1.20×") {
		t.Errorf("the chain ratio's floor %q does not give A's own 1.20×", rows[4].Floor)
	}
}

// A scenario that did not run leaves its rows out; a backend missing from a ran scenario is
// "n/a", judged neither way.
func TestPerfTableLeavesOutWhatDidNotRun(t *testing.T) {
	r := &report{Params: params{Conc: 256, PaceMS: 20, NSConc: 16}}
	if rows := r.perfTable(); len(rows) != 0 {
		t.Fatalf("rows %+v from an empty report", rows)
	}
	r.Chain = &chainResult{Depths: []*chainDepth{
		{Depth: 1, AP50: 1000, Backends: map[string]*chainBackend{"D": {Warm: []float64{2000}}}},
		{Depth: perfChainDepth, AP50: 1000, Backends: map[string]*chainBackend{"D": {Warm: []float64{2000}}}},
	}}
	rows := r.perfTable()
	if len(rows) != 2 {
		t.Fatalf("%d rows, want the two chain rows", len(rows))
	}
	for _, row := range rows {
		if row.E != "n/a" || row.MetE != nil {
			t.Errorf("%s: SQLite %q met %v, want n/a and no verdict", row.Figure, row.E, row.MetE)
		}
		if row.MetD == nil || !*row.MetD {
			t.Errorf("%s: Postgres %q not met", row.Figure, row.D)
		}
	}
}

// The table prints each backend's figure with its verdict, and nothing when no row was measured.
func TestPerfMarkdownPrintsEachVerdict(t *testing.T) {
	var sb strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&sb, format, args...) }
	(&report{}).perfMarkdown(w)
	if sb.Len() != 0 {
		t.Fatalf("a report without rows printed %q", sb.String())
	}
	r := &report{Perf: []perfRow{{Figure: "f", Limit: "≤ 1", D: "0.5", E: "2", Floor: "B 1", MetD: boolp(true), MetE: boolp(false)},
		{Figure: "g", Limit: "≤ 1", D: "n/a", E: "n/a", Floor: "—"}}}
	r.perfMarkdown(w)
	for _, want := range []string{"| f | ≤ 1 | 0.5 (met) | 2 (**not met**) | B 1 |", "| g | ≤ 1 | n/a (not measured) | n/a (not measured) | — |"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, sb.String())
		}
	}
}
