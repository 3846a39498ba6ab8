package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

const (
	created   = `{"type":"response.created","sequence_number":0}`
	delta     = `{"type":"response.output_text.delta","sequence_number":1,"delta":"hi"}`
	completed = `{"type":"response.completed","sequence_number":2}`
)

type decodeCase struct {
	name     string
	body     string
	maxEvent int // 0: default
	want     []event
	end      string
}

var decodeCases = []decodeCase{
	{
		name: "LF framing with event names",
		body: "event: response.created\ndata: " + created + "\n\nevent: response.output_text.delta\ndata: " + delta + "\n\n",
		want: []event{{"response.created", created}, {"response.output_text.delta", delta}},
		end:  "eof",
	},
	{
		name: "CRLF framing",
		body: "event: response.created\r\ndata: " + created + "\r\n\r\nevent: response.completed\r\ndata: " + completed + "\r\n\r\n",
		want: []event{{"response.created", created}, {"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "lone CR framing",
		body: "event: response.created\rdata: " + created + "\r\revent: response.completed\rdata: " + completed + "\r\r",
		want: []event{{"response.created", created}, {"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "mixed line endings in one stream",
		body: "event: response.created\r\ndata: " + created + "\n\revent: response.completed\rdata: " + completed + "\r\n\n",
		want: []event{{"response.created", created}, {"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "multi-line data is joined with LF",
		body: "event: response.created\ndata: {\"type\":\"response.created\",\ndata: \"sequence_number\":0}\n\n",
		want: []event{{"response.created", "{\"type\":\"response.created\",\n\"sequence_number\":0}"}},
		end:  "eof",
	},
	{
		name: "data without a space after the colon",
		body: "event:response.created\ndata:" + created + "\n\n",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "only the first space after the colon is dropped",
		body: "event: response.created\ndata:  " + created + "\n\n",
		want: []event{{"response.created", " " + created}},
		end:  "eof",
	},
	{
		name: "a bare data line adds an empty line",
		body: "event: response.created\ndata: {\ndata\ndata: \"type\":\"response.created\"}\n\n",
		want: []event{{"response.created", "{\n\n\"type\":\"response.created\"}"}},
		end:  "eof",
	},
	{
		name: "comments, id, retry and unknown fields are ignored",
		body: ": keepalive\n\n:\nevent: response.created\nid: 7\nretry: 100\nfoo: bar\n: inside\ndata: " + created + "\n\n: ping\n\n",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "a missing event name is taken from the JSON type",
		body: "data: " + delta + "\n\n",
		want: []event{{"response.output_text.delta", delta}},
		end:  "eof",
	},
	{
		name: "the event name wins over the JSON type",
		body: "event: response.reasoning_part.added\ndata: {\"type\":\"something.else\"}\n\n",
		want: []event{{"response.reasoning_part.added", `{"type":"something.else"}`}},
		end:  "eof",
	},
	{
		name: "an unknown event name is kept",
		body: "event: acme:custom\ndata: {\"type\":\"acme:custom\"}\n\n",
		want: []event{{"acme:custom", `{"type":"acme:custom"}`}},
		end:  "eof",
	},
	{
		name: "an event with neither name nor JSON type is a bad body",
		body: "event: response.created\ndata: " + created + "\n\ndata: {\"no\":\"type\"}\n\n",
		want: []event{{"response.created", created}},
		end:  "bad_body",
	},
	{
		name: "a typeless error object is an error event",
		body: "data: {\"error\":{\"message\":\"engine dead\",\"type\":\"InternalServerError\",\"code\":500}}\n\n",
		want: []event{{"error", `{"error":{"message":"engine dead","type":"InternalServerError","code":500}}`}},
		end:  "eof",
	},
	{
		name: "a typeless object with a null error is a bad body",
		body: "data: {\"error\":null}\n\n",
		end:  "bad_body",
	},
	{
		name: "an event with neither name nor JSON is a bad body",
		body: "data: hello\n\n",
		end:  "bad_body",
	},
	{
		name: "events without data are skipped",
		body: "event: response.created\n\nid: 3\n\nevent: response.completed\ndata: " + completed + "\n\n",
		want: []event{{"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "a final event without its blank line is dispatched",
		body: "event: response.created\ndata: " + created + "\n\nevent: response.completed\ndata: " + completed + "\n",
		want: []event{{"response.created", created}, {"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "a final event without any line ending is dispatched",
		body: "event: response.completed\ndata: " + completed,
		want: []event{{"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "a final event ending in a lone CR is dispatched",
		body: "event: response.completed\rdata: " + completed + "\r",
		want: []event{{"response.completed", completed}},
		end:  "eof",
	},
	{
		name: "a final event cut mid-JSON is a broken stream",
		body: "event: response.created\ndata: " + created + "\n\nevent: response.completed\ndata: {\"type\":\"response.comp",
		want: []event{{"response.created", created}},
		end:  "stream_broken",
	},
	{
		name: "a trailing comment without line ending ends cleanly",
		body: "event: response.created\ndata: " + created + "\n\n: bye",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "[DONE] ends the stream and nothing after it is read",
		body: "data: " + created + "\n\ndata: [DONE]\n\nevent: response.completed\ndata: " + completed + "\n\n",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "[DONE] without its blank line ends the stream",
		body: "data: " + created + "\n\ndata: [DONE]",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "a UTF-8 BOM is dropped",
		body: "\xEF\xBB\xBFevent: response.created\ndata: " + created + "\n\n",
		want: []event{{"response.created", created}},
		end:  "eof",
	},
	{
		name: "multi-byte UTF-8 passes through",
		body: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"héllo 🌍 日本\"}\n\n",
		want: []event{{"response.output_text.delta", `{"type":"response.output_text.delta","delta":"héllo 🌍 日本"}`}},
		end:  "eof",
	},
	{
		name: "an empty body ends cleanly",
		body: "",
		end:  "eof",
	},
	{
		name: "only blank lines and comments end cleanly",
		body: "\n\r\n\r: hi\n\n",
		end:  "eof",
	},
	{
		name:     "an event at the size limit is decoded",
		body:     "data: " + fmt.Sprintf(`{"type":"x","pad":"%s"}`, strings.Repeat("a", 200)) + "\n\n",
		maxEvent: len("data: "+fmt.Sprintf(`{"type":"x","pad":"%s"}`, strings.Repeat("a", 200))) + 2,
		want:     []event{{"x", fmt.Sprintf(`{"type":"x","pad":"%s"}`, strings.Repeat("a", 200))}},
		end:      "eof",
	},
	{
		name:     "an event over the size limit is an error",
		body:     "event: response.created\ndata: " + created + "\n\ndata: " + fmt.Sprintf(`{"type":"x","pad":"%s"}`, strings.Repeat("a", 5000)) + "\n\n",
		maxEvent: 1024,
		want:     []event{{"response.created", created}},
		end:      "event_too_large",
	},
}

func TestDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestClient(t, "http://127.0.0.1:1", func(cfg *Config) { cfg.MaxEventBytes = tc.maxEvent })
			want := outcome{Events: tc.want, End: tc.end}

			if got := drain(t, memStream(c, strings.NewReader(tc.body))); !reflect.DeepEqual(got, want) {
				t.Errorf("in memory:\n got %+v\nwant %+v", got, want)
			}

			srv := sseServer(t, tc.body)
			hc := newTestClient(t, srv.URL, func(cfg *Config) { cfg.MaxEventBytes = tc.maxEvent })
			s, err := hc.Stream(t.Context(), []byte(`{"stream":true}`))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if got := drain(t, s); !reflect.DeepEqual(got, want) {
				t.Errorf("over HTTP:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestEventsAfterEndRepeatsTheEnd: io.EOF and errors are sticky (Events again yields only the
// error that ended the stream), and Close after them is harmless.
func TestEventsAfterEndRepeatsTheEnd(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	for _, body := range []string{"data: " + created + "\n\n", "data: nope\n\n"} {
		s := memStream(c, strings.NewReader(body))
		var first error
		for _, err := range s.Events() {
			first = err
		}
		if first == nil {
			t.Fatal("Events ended without an error")
		}
		again := func(what string) {
			t.Helper()
			n := 0
			for ev, err := range s.Events() {
				if n++; ev.Type != "" || err != first {
					t.Fatalf("Events %s: %q %v, want only %v", what, ev.Type, err, first)
				}
			}
			if n != 1 {
				t.Fatalf("Events %s yielded %d times, want once", what, n)
			}
		}
		for range 3 {
			again("after the end")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		again("after Close at the end")
	}
}

// TestEventDataIsReusedButTypeIsNot documents the ownership contract of Event.
func TestEventDataIsReusedButTypeIsNot(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	body := strings.Repeat("event: response.output_text.delta\ndata: "+delta+"\n\n", 2) + "event: acme:x\ndata: {}\n\n"
	s := memStream(c, strings.NewReader(body))
	defer s.Close()
	next := pull(t, s)
	ev1, _ := next()
	ev2, _ := next()
	if &ev1.Data[0] != &ev2.Data[0] {
		t.Error("Data is not reused between events; the doc promises reuse (one allocation fewer per event)")
	}
	if ev1.Type != "response.output_text.delta" {
		t.Errorf("Type changed under the caller: %q", ev1.Type)
	}
	ev3, _ := next()
	if ev3.Type != "acme:x" {
		t.Errorf("Type = %q", ev3.Type)
	}
}

// TestEventTooLargeBoundsMemory feeds one event that never ends: the decoder must fail once the
// limit is reached, having allocated a small multiple of the limit, instead of growing forever.
func TestEventTooLargeBoundsMemory(t *testing.T) {
	const limit = 1 << 20
	c := newTestClient(t, "http://127.0.0.1:1", func(cfg *Config) { cfg.MaxEventBytes = limit })
	endless := &repeatReader{prefix: []byte("event: response.output_text.delta\ndata: {\"delta\":\""), unit: []byte("aaaaaaaaaaaaaaaa")}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memStream(c, endless)
	_, err := pull(t, s)()
	runtime.ReadMemStats(&after)
	s.Close()
	mustKind(t, err, KindEventTooLarge)
	t.Logf("allocated %d bytes, read %d, for a %d-byte limit", after.TotalAlloc-before.TotalAlloc, endless.n, limit)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4*limit {
		t.Errorf("allocated %d bytes for a %d-byte limit", got, limit)
	}
	if endless.n < limit || endless.n > 2*limit {
		t.Errorf("read %d bytes before failing at a %d-byte limit", endless.n, limit)
	}
}

// repeatReader yields prefix then unit forever.
type repeatReader struct {
	prefix, unit []byte
	n            int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	if r.n < len(r.prefix) {
		n = copy(p, r.prefix[r.n:])
	}
	for n < len(p) {
		n += copy(p[n:], r.unit)
	}
	r.n += n
	return n, nil
}

// traceFiles returns the hand-written traces and, when present, the simulator's.
func traceFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"testdata/traces", "vllmsim/testdata/traces"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.sse"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

func readTrace(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenTraces decodes testdata/traces/*.sse and compares with the .events.golden next to
// each (one JSON object per event, then the end). -update rewrites the goldens.
func TestGoldenTraces(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("testdata/traces/*.sse")
	if len(files) == 0 {
		t.Fatal("no traces in testdata/traces")
	}
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			got := drain(t, memStream(c, bytes.NewReader(readTrace(t, f))))
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			for _, ev := range got.Events {
				_ = enc.Encode(ev)
			}
			_ = enc.Encode(map[string]string{"end": got.End})
			golden := strings.TrimSuffix(f, ".sse") + ".events.golden"
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("decoded events differ from %s (run with -update and review the diff):\n%s", golden, b.Bytes())
			}
		})
	}
}

// TestChunkingInvariance replays every trace split at every byte offset, one byte at a time and
// at seeded random splits: the events must not change, even when a split falls inside a CRLF
// or a multi-byte rune.
func TestChunkingInvariance(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	files := traceFiles(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			data := readTrace(t, f)
			want := drain(t, memStream(c, bytes.NewReader(data)))
			check := func(how string, sizes []int) {
				t.Helper()
				got := drain(t, memStream(c, &chunkReader{data: data, sizes: sizes}))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: got %+v\nwant %+v", how, got, want)
				}
			}
			// Every offset for small traces; seeded offsets for the simulator's larger ones, which
			// would cost O(n²) (docs/style.md, chunking invariance).
			rng := rand.New(rand.NewPCG(1, uint64(len(data))))
			if len(data) <= 4<<10 {
				for i := 1; i < len(data); i++ {
					check(fmt.Sprintf("split at %d", i), []int{i, len(data)})
				}
			} else {
				for range 128 {
					i := 1 + rng.IntN(len(data)-1)
					check(fmt.Sprintf("split at %d", i), []int{i, len(data)})
				}
			}
			check("one byte per read", []int{1})
			patterns := 200
			if len(data) > 4<<10 {
				patterns = 32
			}
			for range patterns {
				sizes := make([]int, 1+rng.IntN(8))
				for i := range sizes {
					sizes[i] = 1 + rng.IntN(64)
				}
				check(fmt.Sprintf("sizes %v", sizes), sizes)
			}
		})
	}
}

// TestChunkingInvarianceOverHTTP serves a small trace as two flushed writes split at every byte
// offset, through the real transport (chunked encoding, a read per flush).
func TestChunkingInvarianceOverHTTP(t *testing.T) {
	t.Parallel()
	data := "event: response.created\r\ndata: " + created + "\r\n\r\n: ping\n\nevent: response.output_text.delta\rdata:" +
		`{"type":"response.output_text.delta","delta":"é🌍"}` + "\r\rdata: " + completed + "\n"
	c := newTestClient(t, "http://127.0.0.1:1", nil)
	want := drain(t, memStream(c, strings.NewReader(data)))
	if len(want.Events) != 3 || want.End != "eof" {
		t.Fatalf("reference decode: %+v", want)
	}
	for i := 1; i < len(data); i++ {
		srv := sseServer(t, data[:i], data[i:])
		hc := newTestClient(t, srv.URL, nil)
		s, err := hc.Stream(t.Context(), []byte(`{}`))
		if err != nil {
			t.Fatalf("split %d: %v", i, err)
		}
		if got := drain(t, s); !reflect.DeepEqual(got, want) {
			t.Fatalf("split at %d: got %+v\nwant %+v", i, got, want)
		}
		hc.CloseIdleConnections()
		srv.Close()
	}
}
