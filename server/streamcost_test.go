package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// The cost of an open stream (issue 25, "lean streams"): goroutines per open stream, asserted by
// counting them once the streams are known to be open (events, not time), and the CPU and
// allocations of the relay path, measured by BenchmarkStreamTurn (make bench-micro).

// rawStream is one client stream on its own TCP connection, read by the test's goroutine: the
// client side costs no goroutine, so every goroutine counted belongs to the servers.
type rawStream struct {
	conn net.Conn
	rd   *bufio.Reader
}

// postRaw sends a POST of body to addr's path on a new connection. With closeAfter the request
// asks the server to close the connection after the answer.
func postRaw(t *testing.T, addr, path, body string, closeAfter bool) *rawStream {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	connHeader := "keep-alive"
	if closeAfter {
		connHeader = "close"
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n"+
		"Accept: text/event-stream\r\nConnection: %s\r\nContent-Length: %d\r\n\r\n%s", path, addr, connHeader, len(body), body)
	return &rawStream{conn: conn, rd: bufio.NewReader(conn)}
}

// openRawStream posts body to addr's path and reads the response until its first delta event.
func openRawStream(t *testing.T, addr, path, body string) *rawStream {
	t.Helper()
	rs := postRaw(t, addr, path, body, false)
	status, err := rs.rd.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		_ = rs.conn.Close()
		t.Fatalf("stream answered %q, %v", status, err)
	}
	for {
		line, err := rs.rd.ReadString('\n')
		if err != nil {
			_ = rs.conn.Close()
			t.Fatalf("stream ended before its first delta: %v", err)
		}
		if strings.HasPrefix(line, "event: ") && strings.HasSuffix(strings.TrimSpace(line), ".delta") {
			return rs
		}
	}
}

// settledGoroutines is runtime.NumGoroutine once goroutines that are ending (a finished store
// write, a dial) have ended: the smallest count over a few scheduler yields.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for still := 0; still < 200; still++ {
		runtime.Gosched()
		if m := runtime.NumGoroutine(); m < n {
			n, still = m, 0
		}
	}
	return n
}

// goroutinesPerStream opens n streams to addr at once (after a warm-up wave of n streams run to
// their end, so the upstream connection pool holds n idle connections, as in a gateway's steady
// state) and returns the goroutines the open streams added, per stream.
func goroutinesPerStream(t *testing.T, n int, addr, path, warm, hold string) float64 {
	t.Helper()
	// The warm-up streams run at once (each lasts a while: warm is paced), so the gateway needs
	// n upstream connections; each is read to its end (the server closes the connection).
	wave := make([]*rawStream, 0, n)
	for range n {
		wave = append(wave, postRaw(t, addr, path, warm, true))
	}
	for _, rs := range wave {
		_, _ = io.Copy(io.Discard, rs.rd)
		_ = rs.conn.Close()
	}
	before := settledGoroutines()
	streams := make([]*rawStream, 0, n)
	defer func() {
		for _, rs := range streams {
			_ = rs.conn.Close()
		}
	}()
	for range n {
		streams = append(streams, openRawStream(t, addr, path, hold))
	}
	return float64(settledGoroutines()-before) / float64(n)
}

// pooledGoroutinesPerStream is goroutinesPerStream for a client with a connection pool (an
// http.Transport warmed with n connections): what a server spends per stream on a reused
// connection. The client's pooled connections cost no goroutine per request.
func pooledGoroutinesPerStream(t *testing.T, n int, url, warm, hold string) float64 {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	post := func(body string) *http.Response {
		resp, err := hc.Post(url, "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("post: %v", err)
		}
		return resp
	}
	var wave []*http.Response
	for range n {
		wave = append(wave, post(warm)) //nolint:bodyclose // closed below, once read to its end
	}
	for _, resp := range wave {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	before := settledGoroutines()
	var held []*http.Response
	defer func() {
		for _, resp := range held {
			_ = resp.Body.Close()
		}
	}()
	for range n {
		resp := post(hold)        //nolint:bodyclose // closed by the deferred loop above
		held = append(held, resp) //nolint:bodyclose // closed by the deferred loop above
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended before its first delta: %v", err)
			}
			if strings.HasPrefix(line, "event: ") && strings.HasSuffix(strings.TrimSpace(line), ".delta") {
				break
			}
		}
	}
	return float64(settledGoroutines()-before) / float64(n)
}

func TestAnOpenStreamCostsAtMostThreeGoroutines(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "respgate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	defer sim.Close()
	up, err := upstream.New(upstream.Config{BaseURL: sim.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer up.CloseIdleConnections()
	s, err := New(t.Context(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sq, upstream.Single(up))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	gw := httptest.NewServer(s)
	defer gw.Close()

	const n = 8
	// A stored stream (in-progress record, lease keeper, event log) that the simulator holds
	// open after its first delta, until the client leaves.
	body := func(model string) string {
		return `{"model":"openai/gpt-oss-sim?reasoning=0&quirks=none&` + model + `","input":"hi","stream":true,"store":true}`
	}
	warm, hold := body("tokens=8&delay_ms=20"), body("tokens=64&stall=1h&stall_after=6")
	// The simulator's own goroutines per held stream are not the gateway's: measured on the
	// simulator reached directly, as the gateway reaches it (over a warm connection pool).
	simPer := pooledGoroutinesPerStream(t, n, sim.URL+"/v1/responses", warm, hold)
	total := goroutinesPerStream(t, n, gw.Listener.Addr().String(), "/v1/responses", warm, hold)
	gateway := total - simPer
	t.Logf("goroutines per open stream: gateway %.2f (total %.2f, simulator %.2f)", gateway, total, simPer)
	// net/http's two per client connection (its handler, its background read) and at most one
	// of respgate's own.
	if gateway > 3 {
		t.Errorf("an open stream costs %.2f goroutines in the gateway, want at most 3", gateway)
	}
}

// cannedUpstream answers every request with one recorded simulator stream: the benchmark measures
// the gateway's relay path without a network or the simulator's CPU.
type cannedUpstream struct{ body []byte }

func (c cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return sseResponse(r, c.body), nil
}

// sseResponse is a 200 text/event-stream answer to r carrying stream.
func sseResponse(r *http.Request, stream []byte) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(bytes.NewReader(stream)),
		ContentLength: -1, Request: r}
}

// serverOver is a server on fakeStore whose upstream is reached through rt; the caller shuts it
// down.
func serverOver(tb testing.TB, rt http.RoundTripper) (*Server, *upstream.Client) {
	tb.Helper()
	up, err := upstream.New(upstream.Config{BaseURL: "http://upstream.invalid/v1", Transport: rt})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(tb.Context(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, &fakeStore{}, upstream.Single(up))
	if err != nil {
		tb.Fatal(err)
	}
	return s, up
}

// discardClient is a client that reads everything at once (http.ResponseWriter and Flusher).
type discardClient struct {
	header http.Header
	n      int64
	writes int
}

func (d *discardClient) Header() http.Header { return d.header }
func (d *discardClient) WriteHeader(int)     {}
func (d *discardClient) Write(b []byte) (int, error) {
	d.n += int64(len(b))
	d.writes++
	return len(b), nil
}
func (d *discardClient) Flush() {}

// SetWriteDeadline is what http.ResponseController sets before each write (as on a real connection).
func (d *discardClient) SetWriteDeadline(time.Time) error { return nil }

// recordSimStream returns the raw SSE body the simulator streams for body.
func recordSimStream(b testing.TB, body string) []byte {
	b.Helper()
	sim := httptest.NewServer(vllmsim.New(vllmsim.Options{}))
	defer sim.Close()
	resp, err := http.Post(sim.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("record: %d %v", resp.StatusCode, err)
	}
	return raw
}

// decodeAllocs is the allocations of reading the same upstream stream with upstream.Client alone
// (its decoder is go-sse's, two allocations per event: the line it scans and the data it
// builds), so BenchmarkStreamTurn's allocs/op minus it is the gateway's own (issue 25: "report
// go-sse's separately"). Between two answer lengths, the difference per delta is each one's
// marginal allocations.
func decodeAllocs(b *testing.B, up *upstream.Client) float64 {
	b.Helper()
	return testing.AllocsPerRun(20, func() {
		st, err := up.Stream(b.Context(), []byte(`{"stream":true}`))
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		for _, err := range st.Events() {
			if err != nil {
				if !errors.Is(err, io.EOF) {
					b.Fatal(err)
				}
				return
			}
		}
	})
}

// BenchmarkStreamTurn serves whole streamed turns (store:false) from a recorded upstream stream
// to a client that reads at once: CPU and allocations per turn and per relayed event of the
// gateway alone. The difference between two answer lengths is the marginal cost per delta.
func BenchmarkStreamTurn(b *testing.B) {
	for _, tokens := range []int{64, 256} {
		b.Run(fmt.Sprintf("tokens=%d", tokens), func(b *testing.B) {
			raw := recordSimStream(b, `{"model":"openai/gpt-oss-sim?quirks=none&tokens=`+fmt.Sprint(tokens)+`","input":"hi","stream":true}`)
			events := bytes.Count(raw, []byte("\nevent: ")) + 1
			s, up := serverOver(b, cannedUpstream{raw})
			defer s.Shutdown(context.Background())
			body := `{"model":"openai/gpt-oss-sim","input":"hi","stream":true,"store":false}`
			var mu sync.Mutex
			writes := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/v1/responses", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer k")
				req.Header.Set("Content-Type", "application/json")
				c := &discardClient{header: http.Header{}}
				s.ServeHTTP(c, req)
				if c.n == 0 {
					b.Fatal("no answer")
				}
				mu.Lock()
				writes += c.writes
				mu.Unlock()
			}
			b.ReportMetric(float64(events), "upstream-events/op")
			b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
			b.ReportMetric(decodeAllocs(b, up), "decode-allocs/op")
		})
	}
}
