package main

import (
	"math"
	"reflect"
	"testing"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
)

func TestRelayFiguresPairDeltasWithTheirStamps(t *testing.T) {
	// Times in ns. Stream 0: latencies 10, 10, 5 µs (jitter 0, −5); stream 1: 2, 6 µs (jitter 4);
	// stream 2 has no stamps and stream 3 one delta too many: neither can be paired.
	m := map[string]*stamps{
		"p-0": {Deltas: []int64{1_000_000, 1_020_000, 1_040_000}},
		"p-1": {Deltas: []int64{2_000_000, 2_004_000}},
		"p-3": {Deltas: []int64{3_000_000}},
	}
	samples := []loadgen.Sample{
		{Index: 0, DeltaTimes: []int64{1_010_000, 1_030_000, 1_045_000}},
		{Index: 1, DeltaTimes: []int64{2_002_000, 2_010_000}},
		{Index: 2, DeltaTimes: []int64{4_000_000}},
		{Index: 3, DeltaTimes: []int64{3_001_000, 3_002_000}},
	}
	// Latencies sorted 2, 5, 6, 10, 10: nearest-rank p50 is the 3rd, p99 the 5th.
	// Jitter sorted −5, 0, 4: p50 is the 2nd, p99 the 3rd.
	want := relayStats{LatP50: 6, LatP99: 10, JitP50: 0, JitP99: 4, Matched: 5, Unmatched: 2}
	if got := relayFigures(m, "p-", samples); got != want {
		t.Errorf("relayFigures = %+v, want %+v", got, want)
	}
	if got := relayFigures(nil, "p-", samples[2:3]); got.Unmatched != 1 || got.Matched != 0 || !math.IsNaN(got.LatP50) {
		t.Errorf("nothing matched: %+v, want NaN figures", got)
	}
}

func TestChainDepthAddedFiguresAreXMinusA(t *testing.T) {
	cd := &chainDepth{
		A:   []float64{100, 120, 110, 300}, // median (110+120)/2 = 115, p99 (4th of 4) 300
		AUp: []float64{50, 70, 60},         // median 60, p99 70
		Backends: map[string]*chainBackend{"D": {
			ColdAll:   []float64{400, 200, 300}, // median 300
			UpColdAll: []float64{90, 110},       // median 100
			Warm:      []float64{150, 130, 170, 400},
			Up:        []float64{80, 100, 90},
			Raw:       []float64{20, 40, 30, 10},
		}},
	}
	cd.summarize()
	if cd.AP50 != 115 || cd.AP99 != 300 || cd.AUpP50 != 60 {
		t.Errorf("A: p50 %v, p99 %v, to upstream p50 %v; want 115, 300, 60", cd.AP50, cd.AP99, cd.AUpP50)
	}
	got := *cd.Backends["D"]
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"cold TTFB (median of the copies)", got.ColdUS, 300},
		{"cold to upstream", got.UpCold, 100},
		{"raw query p50", got.RawP50, 25},
		{"raw query p99", got.RawP99, 40},
		{"added cold: 300 − A's median 115", got.AddedCold, 185},
		{"added warm p50: median 160 − 115", got.AddedWarmP50, 45},
		{"added warm p99: 400 − A's p99 300", got.AddedWarmP99, 100},
		{"added to upstream cold: 100 − 60", got.AddedUpCold, 40},
		{"added to upstream p50: 90 − 60", got.AddedUpP50, 30},
		{"added to upstream p99: 100 − A's p99 70", got.AddedUpP99, 30},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestTablePairsArmsPerRound(t *testing.T) {
	tb := table{}
	for i, v := range []float64{100, 200, 300} {
		tb.add("A", "rps", v)
		tb.add("D", "rps", []float64{90, 180, 330}[i])
	}
	tb.add("D", "rps", 1000) // a fourth round A does not have
	for _, c := range []struct {
		name string
		got  stats.Spread
		want stats.Spread
	}{
		{"one arm", tb.stat("A", "rps"), stats.Spread{Median: 200, Min: 100, Max: 300}},
		// −10, −20, 30; the fourth round is unpaired.
		{"difference", tb.diff("D", "A", "rps"), stats.Spread{Median: -10, Min: -20, Max: 30}},
		// 0.9, 0.9, 1.1.
		{"ratio", tb.ratio("D", "A", "rps"), stats.Spread{Median: 0.9, Min: 0.9, Max: 1.1}},
	} {
		if math.Abs(c.got.Median-c.want.Median) > 1e-12 || math.Abs(c.got.Min-c.want.Min) > 1e-12 || math.Abs(c.got.Max-c.want.Max) > 1e-12 || len(c.got.Rounds) != 3 {
			t.Errorf("%s: %+v, want %+v over 3 rounds", c.name, c.got, c.want)
		}
	}
	if s := tb.stat("B", "rps"); !math.IsNaN(s.Median) {
		t.Errorf("an arm without figures: %+v, want NaN", s)
	}
}

func TestFormatting(t *testing.T) {
	three := stats.Spread{Median: 1000, Min: 500, Max: 2000, Rounds: []float64{500, 1000, 2000}}
	for _, c := range []struct{ got, want string }{
		{fmtUS(12.34), "12.3 µs"},
		{fmtUS(123.4), "123 µs"},
		{fmtUS(1234), "1.23 ms"},
		{fmtUS(12345), "12.3 ms"},
		{fmtUS(-1500), "-1.50 ms"},
		{fmtUS(math.NaN()), "n/a"},
		{fmtStatUS(three), "1.00 ms (500 µs … 2.00 ms)"},
		{fmtStatUS(stats.Spread{Median: 80, Min: 80, Max: 80, Rounds: []float64{80}}), "80.0 µs"},
		{fmtStat(three, "%.0f"), "1000 (500 … 2000)"},
		{fmtStat(stats.NewSpread(nil), "%.1f"), "n/a"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

func TestPositionWindowsAndTheirMedians(t *testing.T) {
	if got := positionWindows(20); !reflect.DeepEqual(got, [][2]int{{1, 5}, {11, 15}}) {
		t.Fatalf("windows of 20 turns: %v", got)
	}
	got := positionWindows(150)
	want := [][2]int{{1, 5}, {11, 15}, {21, 25}, {46, 50}, {96, 100}, {146, 150}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("windows of 150 turns: %v, want %v", got, want)
	}
	turns := make([]agentTurn, 50)
	for i := range turns {
		turns[i].TTFBUS = float64(i + 1) // turn n took n µs
	}
	if m := windowMedian(turns, 1, 5); m != 3 {
		t.Fatalf("median of turns 1–5 = %v, want 3", m)
	}
	if m := windowMedian(turns, 46, 50); m != 48 {
		t.Fatalf("median of turns 46–50 = %v, want 48", m)
	}
}
