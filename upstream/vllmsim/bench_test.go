package vllmsim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkServeStream measures the server side of one 256-token stream (no network, no delay).
func BenchmarkServeStream(b *testing.B) {
	sim := New(Options{Now: fixedNow, RecordLimit: -1})
	req := body(HarmonyModel+"?tokens=256", true, `"input":"benchmark the simulator"`)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(req))
		r.Header.Set("Content-Type", "application/json")
		sim.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
