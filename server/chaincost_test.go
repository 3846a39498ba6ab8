package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/store/storetest"
	"github.com/respgate/respgate/upstream"
)

// stampedUpstream is cannedUpstream that also records when it has read the whole request body:
// the moment upstream could start the model.
type stampedUpstream struct {
	cannedUpstream
	read atomic.Int64 // UnixNano
	size atomic.Int64 // bytes of the last body
}

func (u *stampedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	n, _ := io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	u.read.Store(time.Now().UnixNano())
	u.size.Store(n)
	return u.cannedUpstream.RoundTrip(r)
}

// chainServer is a Server on an in-memory SQLite store holding a chain of the given depth
// (storetest.BenchChain), with upstream as configured, and the body of a streamed store:false
// continuation of the chain's head. Cleanup shuts it down.
func chainServer(b *testing.B, up upstream.Config, depth int) (*Server, string) {
	b.Helper()
	st, err := sqlite.Open(b.Context(), sqlite.Memory)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	client, err := upstream.New(up)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(b.Context(), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, upstream.Single(client))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Shutdown(context.Background()) })
	head := storetest.BenchChain(b, st, s.TenantOf("k"), depth)
	return s, fmt.Sprintf(`{"model":"openai/gpt-oss-sim","input":"next","stream":true,"store":false,"previous_response_id":%q}`, head)
}

// BenchmarkWarmContinuation serves streamed continuations (store:false, so the head stays the
// same) of the head of a stored chain whose history is in the chain cache (issue 25: "depth
// 1,000 warm"): what the gateway does before upstream holds the request (read and decode it,
// the generation check, rehydration, the upstream write). to-upstream-µs/op is from the start of
// the request to the upstream transport holding the whole body; each chain turn holds two items
// of about 400 bytes (storetest.BenchChain). Run with -cpuprofile to see where it goes.
func BenchmarkWarmContinuation(b *testing.B) {
	raw := recordSimStream(b, `{"model":"openai/gpt-oss-sim?quirks=none&tokens=4&reasoning=0","input":"hi","stream":true}`)
	for _, depth := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			tr := &stampedUpstream{cannedUpstream: cannedUpstream{raw}}
			s, body := chainServer(b, upstream.Config{BaseURL: "http://upstream.invalid/v1", Transport: tr}, depth)
			serve := func() time.Duration {
				req := httptest.NewRequestWithContext(b.Context(), http.MethodPost, "/v1/responses", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer k")
				req.Header.Set("Content-Type", "application/json")
				c := &discardClient{header: http.Header{}}
				start := time.Now()
				s.ServeHTTP(c, req)
				if c.n == 0 || !strings.Contains(c.header.Get("Content-Type"), "text/event-stream") {
					b.Fatalf("no stream: %d bytes, %v", c.n, c.header)
				}
				return time.Duration(tr.read.Load() - start.UnixNano())
			}
			serve() // cold: loads the chain and fills the cache
			var toUpstream time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				toUpstream += serve()
			}
			b.ReportMetric(float64(toUpstream.Microseconds())/float64(b.N), "to-upstream-µs/op")
			b.ReportMetric(float64(tr.size.Load()), "upstream-bytes")
		})
	}
}

// BenchmarkWarmContinuationOverTCP is BenchmarkWarmContinuation at depth 1,000 with upstream a
// real HTTP server on loopback, side by side with a client sending that server the same body
// directly (make bench's arm A): added-µs/op is the gateway's time to upstream minus the
// direct client's, what make bench reports as "added to upstream, warm".
func BenchmarkWarmContinuationOverTCP(b *testing.B) {
	raw := recordSimStream(b, `{"model":"openai/gpt-oss-sim?quirks=none&tokens=4&reasoning=0","input":"hi","stream":true}`)
	var read atomic.Int64
	var body []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf, _ := io.ReadAll(r.Body)
		read.Store(time.Now().UnixNano())
		body = buf
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(raw)
	}))
	defer up.Close()
	s, req := chainServer(b, upstream.Config{BaseURL: up.URL + "/v1"}, 1000)
	gw := httptest.NewServer(s)
	defer gw.Close()
	post := func(url, body string) time.Duration {
		r, err := http.NewRequestWithContext(b.Context(), http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer k")
		r.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return time.Duration(read.Load() - start.UnixNano())
	}
	post(gw.URL+"/v1/responses", req) // cold: fills the cache
	direct := string(body)
	var added time.Duration
	b.ResetTimer()
	for b.Loop() {
		added += post(gw.URL+"/v1/responses", req) - post(up.URL+"/v1/responses", direct)
	}
	b.ReportMetric(float64(added.Microseconds())/float64(b.N), "added-µs/op")
	b.ReportMetric(float64(len(direct)), "upstream-bytes")
}
