package loadgen

import (
	"testing"
	"time"
)

func TestNewDist(t *testing.T) {
	// 10 requests of 1 ms … 10 ms, in any order: mean 5.5 ms; nearest rank p50 = 5th, p90 = 9th,
	// p99 = 10th.
	var ds []time.Duration
	for _, ms := range []int{7, 1, 10, 3, 5, 2, 9, 4, 8, 6} {
		ds = append(ds, time.Duration(ms)*time.Millisecond)
	}
	want := Dist{N: 10, Mean: 5500, P50: 5000, P90: 9000, P99: 10000, Max: 10000}
	if got := NewDist(ds); got != want {
		t.Errorf("NewDist = %+v, want %+v", got, want)
	}
	if got := NewDist(nil); got != (Dist{}) {
		t.Errorf("NewDist(nil) = %+v, want the zero Dist", got)
	}
}
