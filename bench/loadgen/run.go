package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config says what a Run sends and how.
type Config struct {
	// URL is the POST target, e.g. http://127.0.0.1:8080/v1/responses.
	URL string
	// Body returns the body of the i-th request of the run (0-based, in issue order). It is
	// called from many goroutines.
	Body func(i int) []byte
	// Stream: the answer is an event stream, checked event by event; otherwise one JSON object.
	Stream bool
	// Concurrency is the number of workers, each with at most one request in flight (closed
	// loop). Default 1.
	Concurrency int
	// Requests ends the run after this many requests (0: no limit).
	Requests int
	// Duration stops issuing requests after this long (0: no limit). Requests in flight finish.
	Duration time.Duration
	// Spread staggers the workers' first requests evenly over this interval, so a large
	// concurrency does not arrive as one burst of connects.
	Spread time.Duration
	// Header is added to every request.
	Header http.Header
	// Client defaults to NewClient(Concurrency).
	Client *http.Client
	// ExpectStatus, when set, is the status every answer's response must have.
	ExpectStatus string
	// RequireDone demands "data: [DONE]" after the terminal event.
	RequireDone bool
	// KeepGaps keeps every inter-event gap in the samples (otherwise only the largest).
	KeepGaps bool
	// KeepDeltaTimes keeps the wall-clock arrival time of every delta event
	// (Sample.DeltaTimes), to match them with the times a server stamped on them.
	KeepDeltaTimes bool
	// KeepTerminal keeps each stream's terminal response (Sample.Check.Terminal), or the whole
	// answer of a non-streamed request.
	KeepTerminal bool
	// Timeout bounds each request (default 5 minutes).
	Timeout time.Duration
}

// Sample is what one request measured. Durations are from the moment the request was sent.
type Sample struct {
	Index int `json:"index"`
	// Start is when the request was sent, from the start of the run.
	Start  time.Duration `json:"start_ns"`
	Status int           `json:"status"`
	// TTFB is the time to the first byte of the response (its status line).
	TTFB time.Duration `json:"ttfb_ns"`
	// TTFD is the time to the first event whose type ends in ".delta" (0: none).
	TTFD time.Duration `json:"ttfd_ns"`
	// TTFE is the time to the first event of a stream (0: none): what a client waiting for a
	// background response's stream waits for.
	TTFE time.Duration `json:"ttfe_ns"`
	// E2E is the time until the body was read to its end.
	E2E   time.Duration `json:"e2e_ns"`
	Bytes int64         `json:"bytes"`
	// MaxGap is the longest interval between two consecutive events; MaxGapBefore the type of
	// the event that ended it.
	MaxGap       time.Duration `json:"max_gap_ns"`
	MaxGapBefore string        `json:"max_gap_before,omitempty"`
	// Gaps are all the intervals between consecutive events (Config.KeepGaps).
	Gaps []time.Duration `json:"-"`
	// DeltaTimes are the wall-clock arrival times (Unix ns) of the delta events
	// (Config.KeepDeltaTimes).
	DeltaTimes []int64     `json:"-"`
	Check      CheckResult `json:"check"`
	Err        string      `json:"error,omitempty"`
}

// OK reports a 200 answer that arrived whole and valid.
func (s *Sample) OK() bool { return s.Err == "" && s.Status == http.StatusOK && s.Check.OK() }

// Result is a run's samples in issue order.
type Result struct {
	Samples []Sample
	Started time.Time
	// Wall is the time from the start of the run until the last request finished.
	Wall time.Duration
}

// NewClient returns an HTTP/1.1 client for loopback benchmarking that keeps up to conns
// connections open per host and never compresses.
func NewClient(conns int) *http.Client {
	conns = max(conns, 16)
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}}
}

// Run issues the requests and returns every sample. It returns an error only for a bad Config or
// a cancelled ctx; failed requests are samples with Err set or a failed Check.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.URL == "" || cfg.Body == nil {
		return nil, errors.New("loadgen: URL and Body are required")
	}
	if cfg.Requests <= 0 && cfg.Duration <= 0 {
		return nil, errors.New("loadgen: set Requests or Duration")
	}
	cfg.Concurrency = max(cfg.Concurrency, 1)
	if cfg.Client == nil {
		cfg.Client = NewClient(cfg.Concurrency)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	start := time.Now()
	var next atomic.Int64
	per := make([][]Sample, cfg.Concurrency)
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.Spread > 0 && cfg.Concurrency > 1 {
				wait := time.Duration(int64(cfg.Spread) * int64(w) / int64(cfg.Concurrency))
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
			br := bufio.NewReaderSize(nil, 64<<10)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if cfg.Requests > 0 && i >= cfg.Requests {
					return
				}
				if cfg.Duration > 0 && time.Since(start) >= cfg.Duration {
					return
				}
				s := do(ctx, &cfg, br, cfg.Body(i))
				s.Index = i
				per[w] = append(per[w], s)
			}
		}()
	}
	wg.Wait()
	res := &Result{Started: start, Wall: time.Since(start)}
	for _, ss := range per {
		res.Samples = append(res.Samples, ss...)
	}
	for i := range res.Samples {
		res.Samples[i].Start -= time.Duration(start.UnixNano())
	}
	sortSamples(res.Samples)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

func sortSamples(s []Sample) {
	slices.SortFunc(s, func(a, b Sample) int { return a.Index - b.Index })
}

// do sends one request and reads its answer to the end. Sample.Start holds the absolute send time
// in Unix nanoseconds until Run rebases it.
func do(ctx context.Context, cfg *Config, br *bufio.Reader, body []byte) Sample {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var s Sample
	t0 := time.Now()
	var firstByte atomic.Int64
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { firstByte.Store(int64(time.Since(t0))) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		s.Err = err.Error()
		return s
	}
	for k, v := range cfg.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	s.Start = time.Duration(t0.UnixNano())
	resp, err := cfg.Client.Do(req)
	if err != nil {
		s.E2E = time.Since(t0)
		s.Err = err.Error()
		return s
	}
	defer resp.Body.Close()
	s.TTFB = time.Duration(firstByte.Load())
	if s.TTFB == 0 {
		s.TTFB = time.Since(t0)
	}
	s.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s.Bytes = int64(len(b))
		s.E2E = time.Since(t0)
		s.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return s
	}
	if !cfg.Stream {
		b, err := io.ReadAll(resp.Body)
		s.E2E = time.Since(t0)
		s.Bytes = int64(len(b))
		if err != nil {
			s.Err = err.Error()
			s.Check.Truncated = true
			return s
		}
		checkJSON(&s, b, cfg.ExpectStatus)
		if cfg.KeepTerminal {
			s.Check.Terminal = b
		}
		return s
	}
	br.Reset(resp.Body)
	readStream(&s, br, cfg, t0)
	br.Reset(nil)
	return s
}

// checkJSON validates a non-streamed answer: a JSON response object with the expected status.
func checkJSON(s *Sample, b []byte, expect string) {
	var r struct {
		ID     string            `json:"id"`
		Status string            `json:"status"`
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		s.Check.Invalid++
		s.Check.problem("answer is not a JSON response: %v", err)
		return
	}
	s.Check.ResponseID, s.Check.Status = r.ID, r.Status
	if expect != "" && r.Status != expect {
		s.Check.WrongStatus = true
		s.Check.problem("status %q, want %q", r.Status, expect)
	}
	if r.Output == nil {
		s.Check.Truncated = true
		s.Check.problem("answer has no output")
	}
}

// readStream reads SSE frames (LF or CRLF line ends, comments, multi-line data) and feeds each
// event to a Checker, timing it when its frame completes.
func readStream(s *Sample, br *bufio.Reader, cfg *Config, t0 time.Time) {
	c := NewChecker(cfg.ExpectStatus, cfg.RequireDone)
	c.KeepTerminal = cfg.KeepTerminal
	sr := streamReader{s: s, cfg: cfg, t0: t0, c: c}
	var readErr error
	if cfg.KeepGaps {
		s.Gaps = make([]time.Duration, 0, 300)
	}
	for {
		line, err := sr.readLine(br)
		s.Bytes += int64(len(line))
		if err != nil {
			if len(line) > 0 {
				sr.inFrame = true
			}
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		if len(line) == 0 {
			if sr.hasData {
				sr.feed()
			}
			sr.name, sr.data, sr.hasData, sr.inFrame = "", sr.data[:0], false, false
			continue
		}
		sr.inFrame = true
		sr.field(line)
	}
	s.E2E = time.Since(t0)
	s.Check = c.Finish(readErr, sr.inFrame)
	if readErr != nil {
		s.Err = readErr.Error()
	}
}

// streamReader is readStream's state: the frame being read and the timing of the events fed so far.
type streamReader struct {
	s   *Sample
	cfg *Config
	t0  time.Time
	c   *Checker

	name       string // the frame's event field
	data, long []byte // the frame's data; a line longer than br's buffer
	hasData    bool   // the frame has a data field
	inFrame    bool   // a frame has started and not ended
	prev       time.Time
}

// readLine returns the next line, its '\n' included, even when it is longer than br's buffer (it is
// then copied, and valid until the next call).
func (sr *streamReader) readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	sr.long = append(sr.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = br.ReadSlice('\n')
		sr.long = append(sr.long, line...)
	}
	return sr.long, err
}

// field reads one non-empty line of a frame: a comment, or a field of which only event and data
// count.
func (sr *streamReader) field(line []byte) {
	if line[0] == ':' {
		return
	}
	field, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(field) {
	case "event":
		sr.name = string(value)
	case "data":
		if sr.hasData {
			sr.data = append(sr.data, '\n')
		}
		sr.data = append(sr.data, value...)
		sr.hasData = true
	}
}

// feed hands the completed frame's event to the Checker and records its gap to the previous event
// and, for a delta, the time to first delta.
func (sr *streamReader) feed() {
	s, cfg := sr.s, sr.cfg
	now := time.Now()
	typ := sr.c.Feed(sr.name, sr.data)
	if !sr.prev.IsZero() {
		g := now.Sub(sr.prev)
		if cfg.KeepGaps {
			s.Gaps = append(s.Gaps, g)
		}
		if g > s.MaxGap {
			s.MaxGap, s.MaxGapBefore = g, typ
		}
	}
	sr.prev = now
	if s.TTFE == 0 {
		s.TTFE = now.Sub(sr.t0)
	}
	if strings.HasSuffix(typ, ".delta") {
		if s.TTFD == 0 {
			s.TTFD = now.Sub(sr.t0)
		}
		if cfg.KeepDeltaTimes {
			s.DeltaTimes = append(s.DeltaTimes, now.UnixNano())
		}
	}
}
