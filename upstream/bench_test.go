package upstream

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// deltaEvent is a realistic vLLM text delta (docs/wire.md §5.2, §6.5): the bulk of every stream.
const deltaEvent = "event: response.output_text.delta\n" +
	`data: {"type":"response.output_text.delta","sequence_number":1234,"item_id":"msg_5f0c1c7e2d3b4a8e9f1a2b3c4d5e6f70",` +
	`"output_index":1,"content_index":0,"delta":" token","logprobs":[]}` + "\n\n"

// cycleReader returns unit over and over, filling each Read like a busy socket would.
type cycleReader struct {
	unit string
	off  int
}

func (r *cycleReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.unit[r.off:])
		n += c
		r.off = (r.off + c) % len(r.unit)
	}
	return n, nil
}

// BenchmarkStreamEvents measures one event of Events (one delta) per op: "memory" is the decoder
// alone over buffered input, "http" adds the transport with one write and flush per event as
// vLLM does.
func BenchmarkStreamEvents(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		c := newTestClient(b, "http://127.0.0.1:1", nil)
		s := memStream(c, &cycleReader{unit: deltaEvent})
		defer s.Close()
		readEvents(b, s)
	})
	b.Run("http", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			for {
				if _, err := io.WriteString(w, deltaEvent); err != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
			}
		}))
		defer srv.Close()
		c := newTestClient(b, srv.URL, nil)
		s, err := c.Stream(b.Context(), []byte(`{"stream":true}`))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		readEvents(b, s)
	})
}

// readEvents reads b.N delta events of s, one per op.
func readEvents(b *testing.B, s *Stream) {
	b.SetBytes(int64(len(deltaEvent)))
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for _, err := range s.Events() {
		if err != nil {
			b.Fatal(err)
		}
		if n++; n == b.N {
			break
		}
	}
}

// BenchmarkLargeEvent measures a terminal event carrying a long answer (the full response of
// response.completed) over HTTP.
func BenchmarkLargeEvent(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		ev := "event: response.completed\ndata: {\"type\":\"response.completed\",\"text\":\"" +
			strings.Repeat("x", size) + "\"}\n\n"
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			srv := sseServer(b, ev)
			c := newTestClient(b, srv.URL, nil)
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.Stream(b.Context(), []byte(`{}`))
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for _, err := range s.Events() {
					if n++; n == 1 && err != nil || n == 2 && err != io.EOF {
						b.Fatal(err)
					}
				}
				s.Close()
			}
		})
	}
}
