package loadgen

import (
	"slices"
	"time"

	"github.com/respgate/respgate/bench/stats"
)

// Dist summarises a distribution of durations, in microseconds.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_us"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	Max  float64 `json:"max_us"`
}

// NewDist summarises ds (which it sorts in place): nearest-rank quantiles (bench/stats).
func NewDist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	slices.Sort(ds)
	return Dist{
		N:    len(ds),
		Mean: stats.Mean(ds) / 1e3,
		P50:  stats.Micros(stats.Quantile(ds, 0.50)),
		P90:  stats.Micros(stats.Quantile(ds, 0.90)),
		P99:  stats.Micros(stats.Quantile(ds, 0.99)),
		Max:  stats.Micros(ds[len(ds)-1]),
	}
}

// Summary aggregates a run's samples.
type Summary struct {
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`
	// Event integrity, summed over the streams.
	Lost        int `json:"lost"`
	Reordered   int `json:"reordered"`
	Duplicated  int `json:"duplicated"`
	Truncated   int `json:"truncated"`
	Unannounced int `json:"unannounced"`
	Mismatch    int `json:"mismatch"`
	Invalid     int `json:"invalid"`
	WrongStatus int `json:"wrong_status"`
	HTTPErrors  int `json:"http_errors"`
	// Events (including [DONE] frames: not counted), deltas and bytes received.
	Events int   `json:"events"`
	Deltas int   `json:"deltas"`
	Bytes  int64 `json:"bytes"`
	// Wall is the run's duration; RPS completed requests per second of it.
	WallSec float64 `json:"wall_s"`
	RPS     float64 `json:"rps"`
	TTFB    Dist    `json:"ttfb"`
	TTFD    Dist    `json:"ttfd"`
	TTFE    Dist    `json:"ttfe"`
	E2E     Dist    `json:"e2e"`
	// Gap is over every inter-event gap (Config.KeepGaps), MaxGap over each stream's largest.
	Gap    Dist `json:"gap"`
	MaxGap Dist `json:"max_gap"`
	// MaxGapBefore counts, over the streams, the type of the event that ended each stream's
	// largest gap.
	MaxGapBefore map[string]int `json:"max_gap_before,omitempty"`
	Problems     []string       `json:"problems,omitempty"`
}

// Summarize aggregates r.
func Summarize(r *Result) Summary {
	s := Summary{Requests: len(r.Samples), WallSec: r.Wall.Seconds()}
	var ttfb, ttfd, ttfe, e2e, gaps, maxGaps []time.Duration
	for i := range r.Samples {
		x := &r.Samples[i]
		c := &x.Check
		s.Lost += c.Lost
		s.Reordered += c.Reordered
		s.Duplicated += c.Duplicated
		s.Unannounced += c.Unannounced
		s.Mismatch += c.Mismatch
		s.Invalid += c.Invalid
		if c.Truncated {
			s.Truncated++
		}
		if c.WrongStatus {
			s.WrongStatus++
		}
		if x.Status != 0 && x.Status != 200 {
			s.HTTPErrors++
		}
		s.Events += c.Events
		s.Deltas += c.Deltas
		s.Bytes += x.Bytes
		if x.OK() {
			s.OK++
			ttfb = append(ttfb, x.TTFB)
			e2e = append(e2e, x.E2E)
			if x.TTFD > 0 {
				ttfd = append(ttfd, x.TTFD)
			}
			if x.TTFE > 0 {
				ttfe = append(ttfe, x.TTFE)
			}
			gaps = append(gaps, x.Gaps...)
			maxGaps = append(maxGaps, x.MaxGap)
			if x.MaxGapBefore != "" {
				if s.MaxGapBefore == nil {
					s.MaxGapBefore = map[string]int{}
				}
				s.MaxGapBefore[x.MaxGapBefore]++
			}
		} else {
			s.Failed++
			if len(s.Problems) < 10 {
				p := x.Err
				if p == "" && len(c.Problems) > 0 {
					p = c.Problems[0]
				}
				s.Problems = append(s.Problems, p)
			}
		}
	}
	if r.Wall > 0 {
		s.RPS = float64(s.OK) / r.Wall.Seconds()
	}
	s.TTFB, s.TTFD, s.TTFE, s.E2E = NewDist(ttfb), NewDist(ttfd), NewDist(ttfe), NewDist(e2e)
	s.Gap, s.MaxGap = NewDist(gaps), NewDist(maxGaps)
	return s
}
