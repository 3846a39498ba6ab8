package accumulator

import (
	"os"
	"testing"

	"github.com/respgate/respgate/wire"
)

const (
	fuzzMaxItems     = 16
	fuzzMaxItemBytes = 4096
)

// FuzzAccumulate feeds arbitrary SSE text (seeded from every trace) through the accumulator. The
// invariants: no panic; every client stream validates and matches the Result; no "completed"
// without an upstream terminal event; memory bounded by the configured limits.
func FuzzAccumulate(f *testing.F) {
	for _, tf := range traces(f) {
		b, err := os.ReadFile(tf.path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("event: response.output_text.delta\ndata: {\"output_index\":0,\"content_index\":0,\"delta\":\"\\ud83d\"}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.output_item.done\",\"output_index\":3,\"item\":{\"type\":\"reasoning\",\"content\":null}}\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs := parseSSE(data)
		if len(evs) > 4096 {
			evs = evs[:4096]
		}
		opts := testOptions()
		opts.MaxItems, opts.MaxItemBytes = fuzzMaxItems, fuzzMaxItemBytes
		stream, res, a, _ := replay(evs, opts)
		info, err := validateStream(stream)
		if err != nil {
			t.Fatalf("invalid client stream: %v\n%s", err, stream)
		}
		if err := checkResult(info, res); err != nil {
			t.Fatal(err)
		}
		if res.Status == wire.StatusCompleted {
			sawCompleted := false
			for _, e := range evs {
				typ := e.Type
				if typ == "" || typ == "message" {
					typ, _ = jsonType(e.Data)
				}
				sawCompleted = sawCompleted || typ == wire.EventCompleted
			}
			if !sawCompleted {
				t.Fatal("completed without an upstream response.completed")
			}
		}
		if a.total > 4*fuzzMaxItemBytes || a.parts > fuzzMaxItems {
			t.Fatalf("the response holds %d bytes, %d parts past the limits", a.total, a.parts)
		}
		if len(a.items) > fuzzMaxItems || len(res.Output) > fuzzMaxItems {
			t.Fatalf("%d items past the limit", len(a.items))
		}
		for _, it := range a.items {
			if it.size > fuzzMaxItemBytes {
				t.Fatalf("item holds %d bytes past the limit", it.size)
			}
			// Escaping can grow text 6x; parts add a bounded overhead.
			if len(it.final) > 6*fuzzMaxItemBytes+2*fuzzMaxItems*128+1024 {
				t.Fatalf("item JSON of %d bytes", len(it.final))
			}
		}
	})
}
