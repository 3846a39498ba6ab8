package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// stat is a figure measured once per round: the median of the round figures and their spread.
type stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Rounds []float64 `json:"rounds"`
}

func newStat(v []float64) stat {
	if len(v) == 0 {
		return stat{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return stat{Median: median(s), Min: s[0], Max: s[len(s)-1], Rounds: v}
}

// median of sorted s.
func median(s []float64) float64 {
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return median(s)
}

// quantile is the nearest-rank q-quantile of v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// table holds per-round figures: arm → metric → one value per round.
type table map[string]map[string][]float64

func (t table) add(arm, metric string, v float64) {
	if t[arm] == nil {
		t[arm] = map[string][]float64{}
	}
	t[arm][metric] = append(t[arm][metric], v)
}

func (t table) stat(arm, metric string) stat { return newStat(t[arm][metric]) }

// diff is the per-round difference arm − base of metric, summarised.
func (t table) diff(arm, base, metric string) stat {
	x, y := t[arm][metric], t[base][metric]
	var d []float64
	for i := range min(len(x), len(y)) {
		d = append(d, x[i]-y[i])
	}
	return newStat(d)
}

// ratio is the per-round ratio arm / base of metric, summarised.
func (t table) ratio(arm, base, metric string) stat {
	x, y := t[arm][metric], t[base][metric]
	var d []float64
	for i := range min(len(x), len(y)) {
		if y[i] != 0 {
			d = append(d, x[i]/y[i])
		}
	}
	return newStat(d)
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

// fmtStat prints a stat of microseconds as "median (min … max)".
func fmtStatUS(s stat) string {
	if len(s.Rounds) <= 1 {
		return fmtUS(s.Median)
	}
	return fmt.Sprintf("%s (%s … %s)", fmtUS(s.Median), fmtUS(s.Min), fmtUS(s.Max))
}

func fmtStat(s stat, format string) string {
	if math.IsNaN(s.Median) {
		return "n/a"
	}
	if len(s.Rounds) <= 1 {
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ("+format+" … "+format+")", s.Median, s.Min, s.Max)
}

func usOf(d time.Duration) float64 { return float64(d) / 1e3 }
