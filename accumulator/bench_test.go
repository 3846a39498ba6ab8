package accumulator

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/respgate/respgate/wire"
)

const benchDeltas = 1000

// benchTrace builds a vLLM-dialect stream with benchDeltas deltas of one kind.
func benchTrace(kind string) []wire.Event {
	var evs []wire.Event
	seq := 0
	add := func(typ, body string) {
		evs = append(evs, wire.Event{Type: wire.EventType(typ), Data: []byte(fmt.Sprintf(`{%s,"type":%q,"sequence_number":%d}`, body, typ, seq))})
		seq++
	}
	add(string(wire.EventCreated), `"response":{"id":"resp_b","status":"in_progress","output":[]}`)
	switch kind {
	case "text":
		add(string(wire.EventItemAdded), `"item":{"id":"msg_b","content":[],"role":"assistant","status":"in_progress","type":"message"},"output_index":0`)
		add(string(wire.EventPartAdded), `"content_index":0,"item_id":"msg_b","output_index":0,"part":{"annotations":[],"text":"","type":"output_text","logprobs":[]}`)
		for i := 0; i < benchDeltas; i++ {
			add(string(wire.EventTextDelta), `"content_index":0,"delta":"word ","item_id":"msg_b","output_index":0,"logprobs":[]`)
		}
	case "reasoning":
		add(string(wire.EventItemAdded), `"item":{"id":"msg_r","summary":[],"type":"reasoning","content":null,"encrypted_content":null,"status":"in_progress"},"output_index":0`)
		add(string(wire.EventVLLMReasoningPartAdded), `"content_index":0,"item_id":"msg_r","output_index":0,"part":{"text":"","type":"reasoning_text"}`)
		for i := 0; i < benchDeltas; i++ {
			add(string(wire.EventReasoningDelta), `"content_index":0,"delta":"think\n","item_id":"msg_r","output_index":0`)
		}
	case "tool":
		add(string(wire.EventItemAdded), `"item":{"arguments":"","call_id":"call_s","name":"get_weather","type":"function_call","id":"fc_s","status":"in_progress"},"output_index":0`)
		for i := 0; i < benchDeltas; i++ {
			add(string(wire.EventArgsDelta), `"item_id":"fc_s","delta":"{\"k\":1}","output_index":0`)
		}
	}
	add(string(wire.EventCompleted), `"response":{"id":"resp_b","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1000,"total_tokens":1001}}`)
	return evs
}

// reportPerDelta reports ns and allocations per delta event for a loop that ran b.N traces.
func reportPerDelta(b *testing.B, before runtime.MemStats, cpu0 int64) {
	cpu := cpuNanos() - cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	n := float64(b.N * benchDeltas)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/delta")
	b.ReportMetric(float64(cpu)/n, "cpu-ns/delta")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/delta")
}

// BenchmarkAccumulate runs whole traces (Start, every Feed, Close, Terminal) with the dst buffer
// reused, and reports the cost per delta event.
func BenchmarkAccumulate(b *testing.B) {
	for _, kind := range []string{"text", "reasoning", "tool"} {
		evs := benchTrace(kind)
		b.Run(kind, func(b *testing.B) {
			b.ReportAllocs()
			var dst []byte
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := cpuNanos()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := New(Options{ResponseID: "resp_b", NewID: func(p string) string { return p + "x" }})
				dst = a.Start(dst[:0])
				for _, e := range evs {
					dst = dst[:0]
					var err error
					if dst, err = a.Feed(dst, e); err != nil {
						b.Fatal(err)
					}
				}
				// Assign the outer dst (not a shadow) so that the next iteration reuses the buffer.
				closed, r := a.Close(dst[:0], nil)
				dst = a.Terminal(closed, r)
			}
			b.StopTimer()
			reportPerDelta(b, before, cpu0)
		})
	}
}

// BenchmarkFeedDelta is the steady state: one op is one delta event fed to an open part.
func BenchmarkFeedDelta(b *testing.B) {
	for _, kind := range []string{"text", "reasoning", "tool"} {
		evs := benchTrace(kind)
		b.Run(kind, func(b *testing.B) {
			a := New(Options{ResponseID: "resp_b", MaxItemBytes: 1 << 62})
			var dst []byte
			i := 0
			for ; !deltaTypes[string(evs[i].Type)]; i++ {
				dst, _ = a.Feed(dst, evs[i])
			}
			delta := evs[i]
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				var err error
				if dst, err = a.Feed(dst[:0], delta); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNaiveBaseline json.Unmarshal's each event of the same traces into a map: what a
// straightforward implementation pays before doing any work.
func BenchmarkNaiveBaseline(b *testing.B) {
	for _, kind := range []string{"text", "reasoning", "tool"} {
		evs := benchTrace(kind)
		b.Run(kind, func(b *testing.B) {
			b.ReportAllocs()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := cpuNanos()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, e := range evs {
					var m map[string]any
					if err := json.Unmarshal(e.Data, &m); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			reportPerDelta(b, before, cpu0)
		})
	}
}
