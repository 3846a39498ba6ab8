package rehydrate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

// chainOf300Turns builds a stored chain of 300 turns whose total JSON size is about target bytes.
// Each turn is a user message, a reasoning item with two plaintext parts, and an assistant message;
// every third turn also holds a function_call and its output (an agent step). Items are in their
// stored form (ids, statuses, annotations), and every tenth reasoning item carries an encrypted blob:
// 1100 items.
func chainOf300Turns(tb testing.TB, target int) []wire.Item {
	tb.Helper()
	gen := func(textLen int) ([]wire.Item, int) {
		text := strings.Repeat("lorem ipsum dolor sit amet, \"quoted\" é ", textLen/40+1)[:textLen]
		q, _ := json.Marshal(text)
		var items []wire.Item
		total := 0
		add := func(s string) {
			it, err := wire.ParseItem([]byte(s))
			if err != nil {
				tb.Fatal(err)
			}
			items = append(items, it)
			total += len(s)
		}
		for k := range 300 {
			add(fmt.Sprintf(`{"id":"msg_u%03d","type":"message","role":"user","content":[{"type":"input_text","text":%s}],"status":"completed"}`, k, q))
			enc := "null"
			if k%10 == 0 {
				enc = `"gAAAA` + strings.Repeat("x", 40) + `"`
			}
			add(fmt.Sprintf(`{"id":"rs_%03d","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":%s},{"type":"reasoning_text","text":%s}],"encrypted_content":%s,"status":"completed"}`, k, q, q, enc))
			if k%3 == 0 {
				add(fmt.Sprintf(`{"id":"fc_%03d","type":"function_call","call_id":"call_%03d","name":"exec_command","arguments":"{\"cmd\":\"ls -la\"}","status":"completed"}`, k, k))
				add(fmt.Sprintf(`{"id":"fco_%03d","type":"function_call_output","call_id":"call_%03d","output":%s,"status":"completed"}`, k, k, q))
			}
			add(fmt.Sprintf(`{"id":"msg_a%03d","type":"message","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}],"status":"completed"}`, k, q))
		}
		return items, total
	}
	// Sizes grow linearly with the text length: interpolate.
	_, s0 := gen(8)
	_, s1 := gen(1008)
	n := 8 + (target-s0)*1000/(s1-s0)
	if n < 8 {
		tb.Fatalf("target %d below the chain's minimum size %d", target, s0)
	}
	items, _ := gen(n)
	return items
}

// BenchmarkBuild300Turns rehydrates a 300-turn chain (1100 stored items) plus one new message.
// ns/item is the wall time per item and cpu-ns/item the process CPU time per item (steadier on a
// shared machine). The "copy" variant is the floor (appending every item's bytes to one buffer), so
// Build's own cost per item is the difference; "json.Valid" (encoding/json only validating the
// same items) is a yardstick to compare machines.
func BenchmarkBuild300Turns(b *testing.B) {
	for _, size := range []struct {
		name   string
		target int
	}{{"0.2MB", 200 << 10}, {"2MB", 2 << 20}} {
		hist := chainOf300Turns(b, size.target)
		total := 0
		for _, it := range hist {
			total += len(it.JSON)
		}
		in := mustInput(b, `"next question"`)
		req := mustRequest(b, `{"model":"m","instructions":"be brief","stream":true,"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}}],"include":["reasoning.encrypted_content"]}`)
		p := &Params{History: hist, Input: in, Request: req}
		items := float64(len(hist) + len(in))

		b.Run(size.name, func(b *testing.B) {
			allocs := testing.AllocsPerRun(5, func() {
				if _, err := Build(p); err != nil {
					b.Fatal(err)
				}
			})
			b.SetBytes(int64(total))
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				if _, err := Build(p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N)/items, "cpu-ns/item")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/item")
			b.ReportMetric(allocs/items, "allocs/item")
		})
		// A continuation of a cached chain head: the history's projection comes from an earlier
		// Build (Params.Prepared; server/chaincache.go), so only the new input is projected.
		b.Run(size.name+"/prepared", func(b *testing.B) {
			first, err := Build(p)
			if err != nil {
				b.Fatal(err)
			}
			warm := *p
			warm.Prepared = first.History
			b.SetBytes(int64(total))
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				if _, err := Build(&warm); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N)/items, "cpu-ns/item")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/item")
		})
		b.Run(size.name+"/copy", func(b *testing.B) {
			b.SetBytes(int64(total))
			b.ReportAllocs()
			cpu := cpuNanos()
			for b.Loop() {
				buf := make([]byte, 0, total+len(hist))
				for _, it := range hist {
					buf = append(buf, it.JSON...)
					buf = append(buf, ',')
				}
				_ = buf
			}
			b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N)/items, "cpu-ns/item")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/item")
		})
		// A yardstick for shared machines: encoding/json merely validating the same items.
		b.Run(size.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(total))
			cpu := cpuNanos()
			for b.Loop() {
				for _, it := range hist {
					if !json.Valid(it.JSON) {
						b.Fatal("invalid item")
					}
				}
			}
			b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N)/items, "cpu-ns/item")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/item")
		})
	}
}
