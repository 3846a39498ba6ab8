package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// poolCounters are a Postgres respgate's store counters at one moment, read from its /metrics
// (store/postgres/metrics.go): the statements sent and the cumulative buckets of the pool's
// acquire wait histogram (upper bound in seconds → acquires that waited at most that long).
type poolCounters struct {
	statements float64
	wait       map[float64]float64
}

// parsePool reads poolCounters from a Prometheus text exposition.
func parsePool(r io.Reader) (poolCounters, error) {
	pc := poolCounters{wait: map[float64]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name := line[:sp]
		switch {
		case name == "respgate_store_statements_total":
			pc.statements = v
		case strings.HasPrefix(name, `respgate_store_pool_acquire_wait_seconds_bucket{le="`):
			le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(name, `respgate_store_pool_acquire_wait_seconds_bucket{le="`), `"}`), 64)
			if err == nil {
				pc.wait[le] = v
			}
		}
	}
	return pc, sc.Err()
}

// scrapePool reads a respgate's poolCounters (with the bench's key, in case keys are set).
func scrapePool(ctx context.Context, addr string) (poolCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return poolCounters{}, err
	}
	req.Header.Set("Authorization", "Bearer bench")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return poolCounters{}, err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := io.Copy(&body, resp.Body); err != nil {
		return poolCounters{}, err
	}
	return parsePool(&body)
}

// waitQuantile is the q-quantile (0 < q ≤ 1) of the acquires between before and after, as the
// upper bound of the bucket it falls in (Prometheus' histogram_quantile without interpolation:
// an upper bound, never an underestimate), in seconds; NaN when no acquire happened, +Inf when it
// is past the last finite bound.
func waitQuantile(before, after poolCounters, q float64) float64 {
	bounds := make([]float64, 0, len(after.wait))
	for le := range after.wait {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return math.NaN()
	}
	total := after.wait[bounds[len(bounds)-1]] - before.wait[bounds[len(bounds)-1]]
	if total <= 0 {
		return math.NaN()
	}
	for _, le := range bounds {
		if after.wait[le]-before.wait[le] >= q*total {
			return le
		}
	}
	return math.Inf(1)
}
