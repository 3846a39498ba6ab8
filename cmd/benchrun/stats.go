package main

import (
	"fmt"
	"math"

	"github.com/respgate/respgate/bench/stats"
)

// table holds per-round figures: arm → metric → one value per round.
type table map[string]map[string][]float64

func (t table) add(arm, metric string, v float64) {
	if t[arm] == nil {
		t[arm] = map[string][]float64{}
	}
	t[arm][metric] = append(t[arm][metric], v)
}

func (t table) stat(arm, metric string) stats.Spread { return stats.NewSpread(t[arm][metric]) }

// diff is the per-round difference arm − base of metric, summarised.
func (t table) diff(arm, base, metric string) stats.Spread {
	return stats.NewSpread(stats.Diff(t[arm][metric], t[base][metric]))
}

// ratio is the per-round ratio arm / base of metric, summarised.
func (t table) ratio(arm, base, metric string) stats.Spread {
	return stats.NewSpread(stats.Ratio(t[arm][metric], t[base][metric]))
}

// Formatting helpers for the report: durations are held in microseconds.

// fmtUS prints microseconds with a unit that suits the magnitude.
func fmtUS(us float64) string {
	switch a := math.Abs(us); {
	case math.IsNaN(us):
		return "n/a"
	case a >= 10000:
		return fmt.Sprintf("%.1f ms", us/1000)
	case a >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	case a >= 100:
		return fmt.Sprintf("%.0f µs", us)
	default:
		return fmt.Sprintf("%.1f µs", us)
	}
}

// fmtStatUS prints a spread of microseconds as "median (min … max)".
func fmtStatUS(s stats.Spread) string {
	if len(s.Rounds) <= 1 {
		return fmtUS(s.Median)
	}
	return fmt.Sprintf("%s (%s … %s)", fmtUS(s.Median), fmtUS(s.Min), fmtUS(s.Max))
}

func fmtStat(s stats.Spread, format string) string {
	if math.IsNaN(s.Median) {
		return "n/a"
	}
	if len(s.Rounds) <= 1 {
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ("+format+" … "+format+")", s.Median, s.Min, s.Max)
}
