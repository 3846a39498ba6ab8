package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// The debug handler serves profiles and exact runtime counters, and never the command line
// (which may hold a key): not pprof's cmdline, not expvar's.
func TestDebugHandlerServesProfilesAndCountersButNotTheCommandLine(t *testing.T) {
	h := DebugHandler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/debug/pprof/heap?gc=1"); code != http.StatusOK { // a collection, for heap_live_bytes
		t.Fatalf("/debug/pprof/heap?gc=1: %d", code)
	}
	code, body := get("/debug/vars")
	if code != http.StatusOK {
		t.Fatalf("/debug/vars: %d %s", code, body)
	}
	var v DebugVars
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/debug/vars: %v: %s", err, body)
	}
	if v.Mallocs == 0 || v.HeapAlloc == 0 || v.StackInuse == 0 || v.Goroutines < 1 || v.HeapLiveBytes == 0 {
		t.Fatalf("/debug/vars without the runtime's counters: goroutines %d, mallocs %d, heap %d, stacks %d, live heap %d",
			v.Goroutines, v.Mallocs, v.HeapAlloc, v.StackInuse, v.HeapLiveBytes)
	}
	var members map[string]json.RawMessage
	_ = json.Unmarshal([]byte(body), &members)
	if _, ok := members["cmdline"]; ok || strings.Contains(body, os.Args[0]) {
		t.Fatalf("/debug/vars shows the command line: %.200s", body)
	}
	for path, want := range map[string]int{
		"/debug/pprof/":                  http.StatusOK,
		"/debug/pprof/goroutine?debug=1": http.StatusOK,
		"/debug/pprof/cmdline":           http.StatusNotFound,
		"/v1/responses":                  http.StatusNotFound,
	} {
		if code, _ := get(path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
}
