// Package stats holds the summary statistics the benchmark tools compute: nearest-rank quantiles,
// medians, means, and the per-round spreads and paired differences cmd/benchrun reports. bench/loadgen
// (per-request distributions) and cmd/benchrun (figures over rounds) both use it, so a p99 means the
// same thing in every table. It owns no I/O and no formatting.
package stats

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Number is what the statistics are computed over.
type Number interface {
	~int | ~int64 | ~float64
}

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted, which must be in ascending
// order: the smallest value with at least q of the values at or below it. Empty: the zero value.
func Quantile[T cmp.Ordered](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// QuantileOf is Quantile of v in any order (v is not modified); NaN when v is empty.
func QuantileOf(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return Quantile(sortedCopy(v), q)
}

// Median is the middle value of sorted (ascending), or the mean of the two middle values; NaN when
// empty.
func Median(sorted []float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case n%2 == 1:
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// MedianOf is Median of v in any order (v is not modified).
func MedianOf(v []float64) float64 { return Median(sortedCopy(v)) }

// Mean is the arithmetic mean of v; NaN when v is empty.
func Mean[T Number](v []T) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	return sum / float64(len(v))
}

// Micros is d in microseconds, the unit every benchmark figure is reported in.
func Micros(d time.Duration) float64 { return float64(d) / 1e3 }

func sortedCopy(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}

// Spread is a figure measured once per round: the median of the round figures and their range.
// The JSON names are those of bench/out/report.json.
type Spread struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Rounds []float64 `json:"rounds"`
}

// NewSpread summarises the round figures v (in round order, kept as Rounds). Empty: NaN figures.
func NewSpread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := sortedCopy(v)
	return Spread{Median: Median(s), Min: s[0], Max: s[len(s)-1], Rounds: v}
}

// Diff is x[i] − y[i] for each round both have: arms measured in the same round are compared with
// each other, never across rounds.
func Diff(x, y []float64) []float64 {
	n := min(len(x), len(y))
	x, y = x[:n], y[:n]
	d := make([]float64, 0, n)
	for i := range x {
		d = append(d, x[i]-y[i])
	}
	return d
}

// Ratio is x[i] / y[i] for each round both have, leaving out rounds where y[i] is 0.
func Ratio(x, y []float64) []float64 {
	n := min(len(x), len(y))
	x, y = x[:n], y[:n]
	d := make([]float64, 0, n)
	for i := range x {
		if y[i] != 0 {
			d = append(d, x[i]/y[i])
		}
	}
	return d
}
