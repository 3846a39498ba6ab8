package fleet

import (
	"testing"
	"time"
)

func TestHealthNext(t *testing.T) {
	h := Health{Interval: 5 * time.Second, MinBackoff: 500 * time.Millisecond, MaxBackoff: 4 * time.Second, Fall: 2}
	type step struct {
		ok      bool
		healthy bool
		wait    time.Duration
	}
	for _, tc := range []struct {
		name  string
		start healthState
		steps []step
	}{
		{"a healthy replica stays healthy", healthState{Healthy: true}, []step{{true, true, 5 * time.Second}}},
		{"one failed probe is confirmed soon, two mark it down", healthState{Healthy: true}, []step{
			{false, true, 500 * time.Millisecond}, {false, false, 500 * time.Millisecond}}},
		{"a success between failures resets the count", healthState{Healthy: true}, []step{
			{false, true, 500 * time.Millisecond}, {true, true, 5 * time.Second}, {false, true, 500 * time.Millisecond}}},
		{"a down replica backs off doubling up to the maximum", h.marked(), []step{
			{false, false, time.Second}, {false, false, 2 * time.Second}, {false, false, 4 * time.Second}, {false, false, 4 * time.Second}}},
		{"one good probe brings it back", h.marked(), []step{{false, false, time.Second}, {true, true, 5 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start
			for i, st := range tc.steps {
				var d time.Duration
				s, d = h.next(s, st.ok)
				if s.Healthy != st.healthy || d != st.wait {
					t.Fatalf("step %d (ok=%v): healthy=%v wait=%s, want healthy=%v wait=%s", i, st.ok, s.Healthy, d, st.healthy, st.wait)
				}
			}
		})
	}
}

func TestHealthBackoffNeverOverflows(t *testing.T) {
	h := Health{MinBackoff: time.Second, MaxBackoff: time.Minute}
	if d := h.backoff(1000); d != time.Minute {
		t.Errorf("backoff(1000) = %s", d)
	}
}
