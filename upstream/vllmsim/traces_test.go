package vllmsim

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/traces from the simulator")

// The golden traces: raw SSE (and one JSON body per dialect) exactly as the simulator sends them, for
// the accumulator's tests. Regenerate with `go test ./upstream/vllmsim -run TestTraces -update`.
// testdata/traces/README.md describes each one; keep it in step with this table.

const (
	traceTools = `"tools":[` +
		`{"type":"function","name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},` +
		`{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}]`
	traceHistory = `"input":[` +
		`{"role":"user","content":"Hi! remember: my name is Ada"},` +
		`{"type":"reasoning","id":"rs_prior","summary":[],"content":[{"type":"reasoning_text","text":"The user introduced themselves as Ada."}]},` +
		`{"role":"assistant","content":[{"type":"output_text","text":"Hello Ada."}]},` +
		`{"role":"user","content":"What is my name?"}]`
)

var traces = []struct {
	name   string
	body   string
	header string // X-Sim-Fault
	json   bool   // non-streaming: <name>.json
}{
	{name: "harmony-reasoning-text", body: body(HarmonyModel, true, traceHistory)},
	{name: "harmony-reasoning-text", body: body(HarmonyModel, false, traceHistory), json: true},
	{name: "harmony-reasoning-text-clean", body: body(HarmonyModel+"?quirks=none", true, traceHistory)},
	{name: "harmony-parallel-tool-calls", body: body(HarmonyModel, true, traceTools,
		`"input":"Weather and time in Paris? use tools"`)},
	{name: "harmony-parallel-tool-calls-clean", body: body(HarmonyModel, true, traceTools,
		`"input":"Weather and time in Paris? use tools"`), header: "quirks=none"},
	{name: "harmony-tool-output", body: body(HarmonyModel, true, traceTools, `"input":[`+
		`{"role":"user","content":"Weather in Paris? call get_weather"},`+
		`{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},`+
		`{"type":"function_call_output","call_id":"call_1","output":"18C and sunny"}]`)},
	{name: "harmony-incomplete", body: body(HarmonyModel, true, traceHistory, `"max_output_tokens":20`)},
	{name: "harmony-incomplete-clean", body: body(HarmonyModel+"?quirks=none", true, traceHistory, `"max_output_tokens":20`)},
	{name: "parser-reasoning-text", body: body(ParserModel, true, traceHistory)},
	{name: "parser-reasoning-text", body: body(ParserModel, false, traceHistory), json: true},
	{name: "parser-reasoning-text-clean", body: body(ParserModel+"?quirks=none", true, traceHistory)},
	{name: "parser-text-then-tool-call", body: body(ParserModel, true, traceTools,
		`"input":"Please call get_weather for Paris"`)},
	{name: "parser-incomplete", body: body(ParserModel, true, traceHistory, `"max_output_tokens":20`)},
	{name: "harmony-cut", body: body(HarmonyModel+"?cut_after=9", true, traceHistory)},
	{name: "harmony-cut-inside", body: body(HarmonyModel, true, traceHistory), header: "cut_inside=9"},
	{name: "parser-malformed", body: body(ParserModel+"?malformed=6", true, traceHistory)},
}

func TestTraces(t *testing.T) {
	for _, tr := range traces {
		ext := ".sse"
		if tr.json {
			ext = ".json"
		}
		t.Run(tr.name+ext, func(t *testing.T) {
			// A fresh seeded Sim per trace: the ids depend only on the seed and arrival number 1.
			srv, _ := newServer(t, Options{Seed: 1})
			var r reply
			if tr.header != "" {
				r = post(t, srv, tr.body, "X-Sim-Fault", tr.header)
			} else {
				r = post(t, srv, tr.body)
			}
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.raw)
			}
			path := filepath.Join("testdata", "traces", tr.name+ext)
			if *update {
				if err := os.WriteFile(path, r.raw, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(r.raw, want) {
				t.Errorf("%s differs from what the simulator sends now (run with -update if intended):\n%s",
					path, firstDiff(want, r.raw))
			}
		})
	}
}

func TestTracesReadmeListsEveryTrace(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("testdata", "traces", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range traces {
		name := tr.name + ".sse"
		if tr.json {
			name = tr.name + ".json"
		}
		if !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("testdata/traces/README.md does not describe %s", name)
		}
	}
}

func firstDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\nwant %.400s\ngot  %.400s", i+1, w, g)
		}
	}
	return "same lines, different bytes"
}
