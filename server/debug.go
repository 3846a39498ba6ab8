package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/metrics"
)

// DebugHandler serves what an operator profiles a replica with, on a listener of its own
// (cmd/respgate's --debug-listen, docs/operations.md), never on the API's:
//
//   - /debug/pprof/: Go's pprof profiles (CPU, heap, allocs, goroutines, execution trace);
//   - /debug/vars: expvar's JSON, limited to "memstats" (runtime.MemStats, read exactly, unlike
//     the approximations /metrics carries between collections), "goroutines", and
//     "heap_live_bytes" (the heap the last collection found live, which garbage made since then
//     does not blur).
//
// Neither serves the command line (pprof's cmdline, expvar's cmdline): it may hold a key or a
// password.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // the named profiles: heap, goroutine, allocs, …
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/vars", func(w http.ResponseWriter, _ *http.Request) {
		var v DebugVars
		runtime.ReadMemStats(&v.MemStats)
		v.Goroutines = runtime.NumGoroutine()
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(live)
		if live[0].Value.Kind() == metrics.KindUint64 {
			v.HeapLiveBytes = live[0].Value.Uint64()
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(&v)
	})
	return mux
}

// DebugVars is the body of DebugHandler's /debug/vars.
type DebugVars struct {
	runtime.MemStats `json:"memstats"`
	Goroutines       int    `json:"goroutines"`
	HeapLiveBytes    uint64 `json:"heap_live_bytes"`
}
