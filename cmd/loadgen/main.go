// Command loadgen drives POST /v1/responses, streamed or not, at a chosen concurrency against any
// OpenAI Responses base URL (respgate, vLLM, a proxy) and prints a JSON report: per-request time
// to first byte, time to first delta, every inter-event gap, end-to-end time, event count and
// bytes, summarised, plus the CPU time and RSS that the processes named by -pid used during the
// run (read from /proc). Every streamed answer is checked event by event; the run fails (exit
// status 1) if any event was lost, reordered, duplicated or truncated, or any request failed.
//
//	loadgen -url http://127.0.0.1:8080/v1 -c 64 -n 256 -stream \
//	    -model 'openai/gpt-oss-sim?delay_ms=20&tokens=256&quirks=none' -pid $(pidof respgate)
//
// The package bench/loadgen holds the logic; cmd/benchrun (`make bench`) uses it to compare
// respgate with the simulator reached directly and through a bare reverse proxy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/respgate/respgate/bench/loadgen"
)

type procReport struct {
	Before loadgen.ProcStat `json:"before"`
	After  loadgen.ProcStat `json:"after"`
	// CPUMicros is the CPU time used during the run; per event relayed to this client.
	CPUMicros         float64 `json:"cpu_us"`
	CPUMicrosPerEvent float64 `json:"cpu_us_per_event,omitempty"`
	PeakRSS           int64   `json:"peak_rss_bytes"`
}

type report struct {
	URL         string                 `json:"url"`
	Stream      bool                   `json:"stream"`
	Concurrency int                    `json:"concurrency"`
	Summary     loadgen.Summary        `json:"summary"`
	Procs       map[string]*procReport `json:"procs,omitempty"`
	Samples     []loadgen.Sample       `json:"samples,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	url, body, model, input, store, key, expect, pids, out string

	conc, n                      int
	dur, spread, timeout         time.Duration
	stream, requireDone, samples bool
}

func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8080/v1", "base URL (…/v1) or the full …/responses URL")
	flag.IntVar(&o.conc, "c", 1, "concurrency: requests in flight")
	flag.IntVar(&o.n, "n", 0, "total requests (0: until -duration)")
	flag.DurationVar(&o.dur, "duration", 0, "stop issuing requests after this long (0: until -n)")
	flag.DurationVar(&o.spread, "spread", 0, "spread the workers' first requests over this interval")
	flag.BoolVar(&o.stream, "stream", true, "stream the answers (SSE) and check every event")
	flag.StringVar(&o.body, "body", "", "request body: JSON, or @file; default built from -model, -input and -store")
	flag.StringVar(&o.model, "model", "openai/gpt-oss-sim?delay_ms=20&tokens=256&quirks=none", "model (with the simulator's fault query, if any)")
	flag.StringVar(&o.input, "input", "Hello! remember: the sky is green", "input text")
	flag.StringVar(&o.store, "store", "", `"true" or "false" to send "store"; empty: omit it`)
	flag.StringVar(&o.key, "key", "bench", "bearer key")
	flag.StringVar(&o.expect, "expect-status", "completed", "status every response must have (empty: any)")
	flag.BoolVar(&o.requireDone, "require-done", false, "demand data: [DONE] after the terminal event (respgate sends it, vLLM does not)")
	flag.StringVar(&o.pids, "pid", "", "comma-separated pids whose CPU time and RSS to report (from /proc)")
	flag.BoolVar(&o.samples, "samples", false, "include every request's sample in the output")
	flag.StringVar(&o.out, "o", "-", "write the JSON report here (- is stdout)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "per-request timeout")
	flag.Parse()
	if o.n <= 0 && o.dur <= 0 {
		o.n = o.conc
	}
	return o
}

func run() error {
	o := parseFlags()
	target := strings.TrimSuffix(o.url, "/")
	if !strings.HasSuffix(target, "/responses") {
		target += "/responses"
	}
	payload, err := buildBody(o.body, o.model, o.input, o.store, o.stream)
	if err != nil {
		return err
	}
	procs, err := parsePIDs(o.pids)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := &report{URL: target, Stream: o.stream, Concurrency: o.conc, Procs: map[string]*procReport{}}
	for _, p := range procs {
		st, err := loadgen.ReadProc(p)
		if err != nil {
			return err
		}
		rep.Procs[strconv.Itoa(p)] = &procReport{Before: st}
	}
	sampler := loadgen.StartSampler(procs, 100*time.Millisecond)
	res, err := loadgen.Run(ctx, loadgen.Config{
		URL: target, Body: func(int) []byte { return payload }, Stream: o.stream, Concurrency: o.conc,
		Requests: o.n, Duration: o.dur, Spread: o.spread, ExpectStatus: o.expect, RequireDone: o.requireDone,
		KeepGaps: true, Timeout: o.timeout,
		Header: map[string][]string{"Authorization": {"Bearer " + o.key}},
	})
	peaks := sampler.Stop()
	if err != nil && res == nil {
		return err
	}
	rep.Summary = loadgen.Summarize(res)
	rep.finishProcs(procs, peaks)
	if o.samples {
		rep.Samples = res.Samples
	}
	if err := writeReport(o.out, rep); err != nil {
		return err
	}
	s := rep.Summary
	fmt.Fprintf(os.Stderr, "loadgen: %d requests, %d ok, %d failed; ttfb p50 %.0fµs p99 %.0fµs; gap p50 %.0fµs p99 %.0fµs; %.1f req/s\n",
		s.Requests, s.OK, s.Failed, s.TTFB.P50, s.TTFB.P99, s.Gap.P50, s.Gap.P99, s.RPS)
	if s.Failed > 0 {
		return errors.New("some requests failed or streams were not whole (see summary.problems)")
	}
	return nil
}

// parsePIDs parses -pid: comma-separated pids, blanks ignored.
func parsePIDs(list string) ([]int, error) {
	var procs []int
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			id, err := strconv.Atoi(p)
			if err != nil {
				return nil, fmt.Errorf("-pid: %w", err)
			}
			procs = append(procs, id)
		}
	}
	return procs, nil
}

// finishProcs reads each process's counters again after the run and fills in what it used; peaks are
// the sampled peak RSS by pid. The summary must already be set (for CPU per event).
func (rep *report) finishProcs(procs []int, peaks map[int]int64) {
	for _, p := range procs {
		pr := rep.Procs[strconv.Itoa(p)]
		if st, err := loadgen.ReadProc(p); err == nil {
			pr.After = st
		}
		pr.CPUMicros = float64(pr.After.CPU-pr.Before.CPU) / 1e3
		if rep.Summary.Events > 0 {
			pr.CPUMicrosPerEvent = pr.CPUMicros / float64(rep.Summary.Events)
		}
		pr.PeakRSS = peaks[p]
	}
}

// writeReport writes rep as indented JSON to the file out, or to stdout for "-".
func writeReport(out string, rep *report) error {
	w := os.Stdout
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// buildBody returns the request body: -body verbatim (or from @file), else one built from the flags.
func buildBody(body, model, input, store string, stream bool) ([]byte, error) {
	if body != "" {
		if name, ok := strings.CutPrefix(body, "@"); ok {
			return os.ReadFile(name)
		}
		if !json.Valid([]byte(body)) {
			return nil, errors.New("-body is not valid JSON")
		}
		return []byte(body), nil
	}
	m := map[string]any{"model": model, "input": input, "stream": stream}
	switch store {
	case "":
	case "true", "false":
		m["store"] = store == "true"
	default:
		return nil, errors.New(`-store must be "true", "false" or empty`)
	}
	return json.Marshal(m)
}
