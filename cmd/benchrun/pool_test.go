package main

import (
	"math"
	"strings"
	"testing"
)

const poolBefore = `# HELP respgate_store_statements_total SQL statements
respgate_store_statements_total 100
respgate_store_pool_acquire_wait_seconds_bucket{le="0.0001"} 10
respgate_store_pool_acquire_wait_seconds_bucket{le="0.001"} 10
respgate_store_pool_acquire_wait_seconds_bucket{le="0.01"} 10
respgate_store_pool_acquire_wait_seconds_bucket{le="+Inf"} 10
respgate_store_pool_acquire_wait_seconds_count 10
`

// 100 acquires in the wave: 90 within 100 µs, 8 more within 1 ms, 1 within 10 ms, 1 past it.
const poolAfter = `respgate_store_statements_total 400
respgate_store_pool_acquire_wait_seconds_bucket{le="0.0001"} 100
respgate_store_pool_acquire_wait_seconds_bucket{le="0.001"} 108
respgate_store_pool_acquire_wait_seconds_bucket{le="0.01"} 109
respgate_store_pool_acquire_wait_seconds_bucket{le="+Inf"} 110
`

// The pool's counters are read from the exposition, and a quantile of a wave is the upper bound
// of the bucket that holds it, from the buckets' differences.
func TestPoolCountersAndWaitQuantiles(t *testing.T) {
	before, err := parsePool(strings.NewReader(poolBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parsePool(strings.NewReader(poolAfter))
	if err != nil {
		t.Fatal(err)
	}
	if d := after.statements - before.statements; d != 300 {
		t.Errorf("statements in the wave %v, want 300", d)
	}
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 0.0001}, {0.9, 0.0001}, {0.95, 0.001}, {0.98, 0.001}, {0.99, 0.01}, {1, math.Inf(1)},
	} {
		if got := waitQuantile(before, after, tc.q); got != tc.want {
			t.Errorf("q %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := waitQuantile(after, after, 0.5); !math.IsNaN(got) {
		t.Errorf("no acquires: %v, want NaN", got)
	}
	if got := waitQuantile(poolCounters{}, poolCounters{}, 0.5); !math.IsNaN(got) {
		t.Errorf("no histogram: %v, want NaN", got)
	}
}
