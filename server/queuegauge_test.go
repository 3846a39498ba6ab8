package server

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/respgate/respgate/store"
)

// queuedCount answers ResponseQueuedCount with n (or err) and records the limit it was asked with.
type queuedCount struct {
	store.Store
	n     int
	err   error
	limit atomic.Int64
}

func (q *queuedCount) ResponseQueuedCount(_ context.Context, p *store.ResponseQueuedCountParams) (int, error) {
	q.limit.Store(int64(p.Limit))
	return q.n, q.err
}

// respgate_background_queued is counted on each scrape, bounded at twice the queue's bound; a
// count that fails leaves the gauge out of that scrape rather than report a wrong number.
func TestQueuedGaugeIsCountedPerScrapeAndLeftOutWhenTheCountFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // the gauge's line, "" for none
	}{
		{"counted", nil, "respgate_background_queued 3"},
		{"count failed", errors.New("connection reset (injected)"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &queuedCount{n: 3, err: tc.err}
			s := newSimServer(t, Config{BackgroundMaxQueued: 7}, func(st store.Store) store.Store { q.Store = st; return q })
			code, body := call(t, s, http.MethodGet, "/metrics", "")
			if code != http.StatusOK {
				t.Fatalf("/metrics: %d %s", code, body)
			}
			var line string
			for l := range strings.SplitSeq(body, "\n") {
				if strings.HasPrefix(l, "respgate_background_queued ") {
					line = l
				}
			}
			if line != tc.want {
				t.Fatalf("gauge line %q, want %q", line, tc.want)
			}
			if got := q.limit.Load(); got != 14 {
				t.Fatalf("counted with limit %d, want twice the queue bound of 7", got)
			}
		})
	}
}

// /metrics carries the Go runtime's and the process's standard series beside respgate's own, and
// the allocation counter moves with the work done.
func TestMetricsCarryTheRuntimeAndProcessSeries(t *testing.T) {
	s := newSimServer(t, Config{}, nil)
	series := func() map[string]float64 {
		// The counters come from runtime/metrics, which counts a cached span's objects when the
		// span is cached; a collection settles them, so two scrapes compare exactly.
		runtime.GC()
		code, body := call(t, s, http.MethodGet, "/metrics", "")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		out := map[string]float64{}
		for l := range strings.SplitSeq(body, "\n") {
			name, val, ok := strings.Cut(l, " ")
			if ok && !strings.HasPrefix(l, "#") {
				if f, err := strconv.ParseFloat(val, 64); err == nil {
					out[name] = f
				}
			}
		}
		return out
	}
	before := series()
	for _, name := range []string{"go_goroutines", "go_memstats_mallocs_total", "go_memstats_heap_alloc_bytes",
		"go_memstats_stack_inuse_bytes", "go_gc_duration_seconds_count", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if code, body := call(t, s, http.MethodPost, "/v1/responses", `{"model":"openai/gpt-oss-sim","input":"hi"}`); code != http.StatusOK {
		t.Fatalf("turn: %d %s", code, body)
	}
	if after := series(); after["go_memstats_mallocs_total"] <= before["go_memstats_mallocs_total"] {
		t.Errorf("go_memstats_mallocs_total did not grow over a turn: %v then %v", before["go_memstats_mallocs_total"], after["go_memstats_mallocs_total"])
	}
}
