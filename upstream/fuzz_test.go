package upstream

import (
	"bytes"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
)

// fuzzMaxEvent is small so the fuzzer reaches the size limit often.
const fuzzMaxEvent = 4 << 10

// FuzzDecode feeds arbitrary bytes to the stream decoder, whole and in chunks chosen by seed.
// Invariants: no panic; every event within the size limit and the decoder's buffer too (memory
// bounded by MaxEventBytes); and chunking never changes the events or how the stream ends.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add([]byte(tc.body), uint64(len(tc.body)))
	}
	// The hand-written traces, and the simulator's when its package has recorded some.
	for _, path := range traceFiles(f) {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(1))
		f.Add(b, uint64(7))
	}
	c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", MaxEventBytes: fuzzMaxEvent})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(c.CloseIdleConnections)

	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		whole := decodeChecked(t, memStream(c, bytes.NewReader(data)))
		rng := rand.New(rand.NewPCG(seed, seed>>32|1))
		sizes := make([]int, 1+rng.IntN(16))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(32)
		}
		chunked := decodeChecked(t, memStream(c, &chunkReader{data: data, sizes: sizes}))
		if !reflect.DeepEqual(whole, chunked) {
			t.Fatalf("chunks %v changed the decode:\nwhole   %+v\nchunked %+v", sizes, whole, chunked)
		}
	})
}

func decodeChecked(t *testing.T, s *Stream) outcome {
	t.Helper()
	defer s.Close()
	var o outcome
	for ev, err := range s.Events() {
		if err != nil {
			o.End = endName(err)
			if o.End != "eof" && o.End != "event_too_large" && o.End != "bad_body" && o.End != "stream_broken" {
				t.Fatalf("unexpected end %q (%v)", o.End, err)
			}
			break
		}
		if len(ev.Data) == 0 || len(ev.Data) > fuzzMaxEvent || cap(s.buf) > 2*fuzzMaxEvent || ev.Type == "" {
			t.Fatalf("event out of bounds: type %q, %d bytes, buffer %d", ev.Type, len(ev.Data), cap(s.buf))
		}
		o.Events = append(o.Events, event{Type: string(ev.Type), Data: string(ev.Data)})
	}
	return o
}
