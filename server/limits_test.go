package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

// The Authorization header: "Bearer <key>" (any case, surrounding spaces trimmed); anything else
// that is present is a 401. With an allowlist only its keys pass, and a missing key is a 401;
// without one every key is its own tenant and no header at all is the anonymous tenant.
func TestAuthorizationHeaderForms(t *testing.T) {
	for _, tc := range []struct {
		keys   []string
		header string // "-": no Authorization header
		want   int
	}{
		{[]string{"k1", "k2"}, "Bearer k1", http.StatusOK},
		{[]string{"k1", "k2"}, "Bearer k2", http.StatusOK},
		{[]string{"k1", "k2"}, "bEARER   k1  ", http.StatusOK},
		{[]string{"k1", "k2"}, "Bearer k3", http.StatusUnauthorized},
		{[]string{"k1", "k2"}, "-", http.StatusUnauthorized},
		{[]string{"k1", "k2"}, "Bearer ", http.StatusUnauthorized},
		{[]string{"k1", "k2"}, "Bearer  ", http.StatusUnauthorized},
		{[]string{"k1", "k2"}, "Basic k1", http.StatusUnauthorized},
		{[]string{"k1", "k2"}, "k1", http.StatusUnauthorized},
		{nil, "Bearer anything", http.StatusOK},
		{nil, "-", http.StatusOK},
		{nil, "Bearer ", http.StatusUnauthorized},
		{nil, "Bearerx", http.StatusUnauthorized},
		{nil, "Token abc", http.StatusUnauthorized},
	} {
		s, _ := newIntakeServer(t, Config{APIKeys: tc.keys})
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil)
		if tc.header != "-" {
			req.Header.Set("Authorization", tc.header)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("keys %v, Authorization %q: %d, want %d", tc.keys, tc.header, rec.Code, tc.want)
		}
		if tc.want == http.StatusUnauthorized && !strings.Contains(rec.Body.String(), `"code":"invalid_api_key"`) {
			t.Errorf("keys %v, Authorization %q: %s, want the invalid_api_key envelope", tc.keys, tc.header, rec.Body)
		}
	}
}

// Each key is its own tenant, and the tenant is the key's HMAC, not the key.
func TestTenantsAreKeyFingerprints(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	a, b := s.TenantOf("k1"), s.TenantOf("k2")
	if a == b || a == "" || strings.Contains(a, "k1") || len(a) != 64 || s.TenantOf("k1") != a {
		t.Fatalf("tenants %q %q", a, b)
	}
}

// MaxHeaderBytes counts the request line's target and each header as name, value and 4 bytes
// (": " and CRLF): a request of exactly the limit passes, one byte more is a 431 envelope.
func TestHeadersUpToTheLimitPassAndOneByteMoreIs431(t *testing.T) {
	const target = "/healthz"
	headers := func(pad int) http.Header {
		return http.Header{"Authorization": {"Bearer k"}, "X-Pad": {strings.Repeat("p", pad)}}
	}
	size := func(h http.Header) int {
		n := len(target)
		for k, vs := range h {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		return n
	}
	limit := size(headers(100))
	s, _ := newIntakeServer(t, Config{MaxHeaderBytes: limit})
	for _, tc := range []struct {
		pad, want int
	}{{99, http.StatusOK}, {100, http.StatusOK}, {101, http.StatusRequestHeaderFieldsTooLarge}} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
		req.Header = headers(tc.pad)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("headers of %d bytes (limit %d): %d, want %d", size(req.Header), limit, rec.Code, tc.want)
		}
		if tc.want != http.StatusOK && !strings.Contains(rec.Body.String(), `"code":"headers_too_large"`) {
			t.Errorf("431 body %s", rec.Body)
		}
	}
}

// A body of exactly MaxBodyBytes is read (and here refused for what it says); one byte more is
// a 413 envelope by its Content-Length, before it is read.
func TestBodiesUpToTheLimitAreReadAndOneByteMoreIs413(t *testing.T) {
	const limit = 1000
	s, calls := newIntakeServer(t, Config{MaxBodyBytes: limit})
	body := func(n int) string { return `{"input":"x"}` + strings.Repeat(" ", n-len(`{"input":"x"}`)) }
	rec, env := do(t, s, http.MethodPost, "/v1/responses", body(limit))
	if rec.Code != http.StatusBadRequest || deref(env.Param) != "model" {
		t.Fatalf("a body of the limit: %d %s, want the 400 about its missing model", rec.Code, rec.Body)
	}
	rec, env = do(t, s, http.MethodPost, "/v1/responses", body(limit+1))
	if rec.Code != http.StatusRequestEntityTooLarge || env.Type != "invalid_request_error" {
		t.Fatalf("a body one byte past the limit: %d %s, want a 413 envelope", rec.Code, rec.Body)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d upstream calls", calls.Load())
	}
}

// A body of unknown length is charged bodyChunk at a time, a chunk before the bytes that need it
// are read: exactly one chunk while the first bodyChunk bytes are read, the next with the first
// read past them, and a read that needs a chunk the budget does not have fails with the 503.
func TestChunkedBodyIsChargedAChunkAhead(t *testing.T) {
	const step = 1024 // divides bodyChunk
	body := strings.Repeat("x", 2*bodyChunk+10)
	budget := semaphore.NewWeighted(2 * bodyChunk)
	cb := &chargedBody{ReadCloser: io.NopCloser(strings.NewReader(body)), budget: budget}
	buf := make([]byte, step)
	for read := 0; read < bodyChunk; read += step {
		if n, err := cb.Read(buf); n != step || err != nil {
			t.Fatalf("read at %d: %d %v", read, n, err)
		}
		if cb.charged != bodyChunk {
			t.Fatalf("after %d bytes %d are charged, want one chunk (%d)", read+step, cb.charged, bodyChunk)
		}
	}
	if n, err := cb.Read(buf); n != step || err != nil || cb.charged != 2*bodyChunk {
		t.Fatalf("the first read past a chunk: %d %v, %d charged, want two chunks", n, err, cb.charged)
	}
	for cb.read < 2*bodyChunk {
		if _, err := cb.Read(buf); err != nil {
			t.Fatalf("read at %d: %v", cb.read, err)
		}
	}
	if n, err := cb.Read(buf); n != 0 || !errors.Is(err, errOverloaded) || cb.charged != 2*bodyChunk {
		t.Fatalf("a read past the budget: %d %v (%d charged), want the 503", n, err, cb.charged)
	}
	// A read larger than a chunk reads at most one chunk.
	big := &chargedBody{ReadCloser: io.NopCloser(strings.NewReader(body)), budget: semaphore.NewWeighted(4 * bodyChunk)}
	if n, err := big.Read(make([]byte, 3*bodyChunk)); n != bodyChunk || err != nil || big.charged != bodyChunk {
		t.Fatalf("a read of 3 chunks: %d %v, %d charged, want one chunk read and charged", n, err, big.charged)
	}
}

// Requests are counted by route pattern and status; a path no route matches is counted as
// "unmatched", never by its raw path (an unbounded label set).
func TestRequestMetricsNameTheRouteOrUnmatched(t *testing.T) {
	s, _ := newIntakeServer(t, Config{})
	for _, target := range []string{"/healthz", "/no/such/path", "/v1/nothing/here"} {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil))
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	m := rec.Body.String()
	for _, want := range []string{`route="/healthz",status="200"`, `route="unmatched",status="404"`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, raw := range []string{"/no/such/path", "/v1/nothing/here", `route="/*"`, `route="/v1/*"`} {
		if strings.Contains(m, raw) {
			t.Errorf("metrics name %s", raw)
		}
	}
}

// A body that stops arriving is cut at BodyReadTimeout, counted from its first read (not reset
// by each chunk that does arrive): the answer is the 408 envelope.
func TestABodyThatStallsIsCutWithA408(t *testing.T) {
	s := newSimServer(t, Config{BodyReadTimeout: 200 * time.Millisecond}, nil)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Headers and the first bytes of a 1,000-byte body, then nothing.
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard, not a measurement
	reply, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(reply, []byte("HTTP/1.1 408 ")) || !bytes.Contains(reply, []byte(`"code":"request_timeout"`)) {
		t.Fatalf("a stalled body got %q, want the 408 request_timeout envelope", reply)
	}
}
