package server

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRequestBodiesPastTheInFlightBudgetGet503WithRetryAfter(t *testing.T) {
	const maxBody = 200 << 10
	s, _ := newIntakeServer(t, Config{MaxBodyBytes: maxBody, MaxBodyBytesInFlight: 300 << 10})
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	post := func(body io.Reader, length int64) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/v1/conversations", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res
	}
	bodyOf := func(n int) []byte { // a valid conversations body of n bytes
		return []byte(`{"metadata":{"k":"v"}}` + strings.Repeat(" ", n-len(`{"metadata":{"k":"v"}}`)))
	}

	// A client sends the headers and half of a 200 KiB body and then stalls: all of its bytes
	// are charged from the start.
	pr, pw := io.Pipe()
	held := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+"/v1/conversations", pr)
		req.ContentLength = maxBody
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		held <- res
	}()

	// Half of the body goes out, so the headers surely have (the transport buffers them with
	// the start of the body).
	stalled := bodyOf(maxBody)
	if _, err := pw.Write(stalled[:maxBody/2]); err != nil {
		t.Fatal(err)
	}

	// Another 200 KiB body does not fit beside it. Until the stalled request has been charged
	// these succeed; the loop ends at the first 503.
	var res *http.Response
	for range 10000 {
		if res = post(bytes.NewReader(bodyOf(maxBody)), maxBody); res.StatusCode != http.StatusOK {
			break
		}
	}
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a body past the budget got %d (Retry-After %q), want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// A chunked body is charged as it is read and stops at the budget too.
	if res := post(io.MultiReader(bytes.NewReader(bodyOf(maxBody))), -1); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a chunked body past the budget got %d, want 503", res.StatusCode)
	}
	// A body that fits beside the stalled one is served.
	if res := post(bytes.NewReader(bodyOf(50<<10)), 50<<10); res.StatusCode != http.StatusOK {
		t.Fatalf("a body under the budget got %d, want 200", res.StatusCode)
	}
	// When the stalled request ends, its bytes are released.
	go func() { _, _ = pw.Write(stalled[maxBody/2:]); _ = pw.Close() }()
	if r := <-held; r == nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the stalled request did not complete")
	}
	if res := post(bytes.NewReader(bodyOf(maxBody)), maxBody); res.StatusCode != http.StatusOK {
		t.Fatalf("after the release a 200 KiB body got %d, want 200", res.StatusCode)
	}
}
