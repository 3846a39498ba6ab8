package stats

import (
	"math"
	"slices"
	"testing"
	"time"
)

// same compares to within rounding (the expected values are written as decimal fractions) and
// treats two NaNs as equal, so "empty gives NaN" can be a table row.
func same(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) || (math.IsNaN(a) && math.IsNaN(b))
}

func TestQuantileIsNearestRank(t *testing.T) {
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		name string
		v    []float64
		q    float64
		want float64
	}{
		// rank = ceil(q·n), 1-based.
		{"p50 of 10 is the 5th", ten, 0.50, 5},
		{"p90 of 10 is the 9th", ten, 0.90, 9},
		{"p99 of 10 is the 10th", ten, 0.99, 10},
		{"p100 is the maximum", ten, 1, 10},
		{"p1 of 10 is the 1st", ten, 0.01, 1},
		{"q=0 clamps to the minimum", ten, 0, 1},
		{"p50 of 4 is the 2nd, not the mean of the middle two", []float64{10, 20, 30, 40}, 0.5, 20},
		{"p75 of 4 is the 3rd", []float64{10, 20, 30, 40}, 0.75, 30},
		{"p76 of 4 is the 4th", []float64{10, 20, 30, 40}, 0.76, 40},
		{"one value", []float64{7}, 0.99, 7},
		{"p99 of 200 is the 198th", seq(200), 0.99, 198},
	} {
		if got := Quantile(c.v, c.q); got != c.want {
			t.Errorf("%s: Quantile = %v, want %v", c.name, got, c.want)
		}
	}
	if got := Quantile([]time.Duration{}, 0.5); got != 0 {
		t.Errorf("Quantile of no durations = %v, want 0", got)
	}
	if got := Quantile([]time.Duration{3 * time.Millisecond, 5 * time.Millisecond}, 0.9); got != 5*time.Millisecond {
		t.Errorf("Quantile of durations = %v, want 5ms", got)
	}
}

func TestQuantileOfSortsACopy(t *testing.T) {
	v := []float64{40, 10, 30, 20}
	if got := QuantileOf(v, 0.5); got != 20 {
		t.Errorf("QuantileOf = %v, want 20", got)
	}
	if !slices.Equal(v, []float64{40, 10, 30, 20}) {
		t.Errorf("QuantileOf reordered its input: %v", v)
	}
	if got := QuantileOf(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("QuantileOf(nil) = %v, want NaN", got)
	}
}

func TestMedianAndMean(t *testing.T) {
	for _, c := range []struct {
		name         string
		v            []float64
		median, mean float64
	}{
		{"odd count: the middle value", []float64{9, 1, 5}, 5, 5},
		{"even count: the mean of the middle two", []float64{4, 1, 3, 10}, 3.5, 4.5},
		{"skewed", []float64{1, 1, 1, 97}, 1, 25},
		{"negative differences", []float64{-3, -1, 2}, -1, -2.0 / 3},
		{"one value", []float64{2.5}, 2.5, 2.5},
		{"empty", nil, math.NaN(), math.NaN()},
	} {
		in := slices.Clone(c.v)
		if got := MedianOf(c.v); !same(got, c.median) {
			t.Errorf("%s: MedianOf = %v, want %v", c.name, got, c.median)
		}
		if got := Mean(c.v); !same(got, c.mean) {
			t.Errorf("%s: Mean = %v, want %v", c.name, got, c.mean)
		}
		if !slices.Equal(in, c.v) {
			t.Errorf("%s: the input was modified", c.name)
		}
	}
	if got := Mean([]time.Duration{time.Microsecond, 3 * time.Microsecond}); got != 2000 {
		t.Errorf("Mean of 1µs and 3µs = %v ns, want 2000", got)
	}
}

func TestSpreadDiffAndRatio(t *testing.T) {
	a := []float64{110, 95, 130, 100} // an arm's figure in rounds 1-4
	base := []float64{100, 100, 120, 50}
	for _, c := range []struct {
		name string
		got  Spread
		want Spread
	}{
		{"spread of the rounds", NewSpread(a), Spread{Median: 105, Min: 95, Max: 130, Rounds: a}},
		// 10, −5, 10, 50 → sorted −5, 10, 10, 50.
		{"paired differences", NewSpread(Diff(a, base)), Spread{Median: 10, Min: -5, Max: 50, Rounds: []float64{10, -5, 10, 50}}},
		// 1.1, 0.95, 1.0833…, 2 → median (1.0833… + 1.1) / 2.
		{"paired ratios", NewSpread(Ratio(a, base)), Spread{Median: (130.0/120 + 1.1) / 2, Min: 0.95, Max: 2, Rounds: []float64{1.1, 0.95, 130.0 / 120, 2}}},
		{"rounds only one arm has are left out", NewSpread(Diff([]float64{5, 6, 7}, []float64{1, 1})), Spread{Median: 4.5, Min: 4, Max: 5, Rounds: []float64{4, 5}}},
		{"a zero base round is left out of ratios", NewSpread(Ratio([]float64{5, 6}, []float64{0, 3})), Spread{Median: 2, Min: 2, Max: 2, Rounds: []float64{2}}},
	} {
		if !same(c.got.Median, c.want.Median) || !same(c.got.Min, c.want.Min) || !same(c.got.Max, c.want.Max) ||
			!slices.EqualFunc(c.got.Rounds, c.want.Rounds, same) {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if e := NewSpread(nil); !math.IsNaN(e.Median) || !math.IsNaN(e.Min) || !math.IsNaN(e.Max) || e.Rounds != nil {
		t.Errorf("NewSpread(nil) = %+v, want NaN figures", e)
	}
}

func seq(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i + 1)
	}
	return v
}
