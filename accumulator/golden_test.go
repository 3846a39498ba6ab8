package accumulator

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/**/*.golden.json")

// goldenPath is where a trace's golden lives: beside our own traces, and under testdata/vllmsim/
// for the simulator's (this package does not write into the simulator's directory).
func goldenPath(tf traceFile) string {
	if tf.sim {
		return filepath.Join("testdata", "vllmsim", strings.TrimPrefix(tf.name, "vllmsim/")+".golden.json")
	}
	return strings.TrimSuffix(tf.path, ".sse") + ".golden.json"
}

// renderGolden writes the Result (indented) and the client stream, one event per line, in a
// deterministic form.
func renderGolden(t *testing.T, res *Result, info *streamInfo, ferr error) []byte {
	var b bytes.Buffer
	r, err := json.MarshalIndent(res, "  ", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("{\n  \"result\": ")
	b.Write(r)
	b.WriteString(",\n  \"feed_error\": ")
	fe, _ := json.Marshal(errString(ferr))
	b.Write(fe)
	b.WriteString(",\n  \"stream\": [\n")
	for i, ev := range info.events {
		b.WriteString(`    {"event":`)
		e, _ := json.Marshal(ev.Type)
		b.Write(e)
		b.WriteString(`,"data":`)
		b.Write(ev.Data)
		b.WriteString("}")
		if i < len(info.events)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestGolden replays every trace (ours and the simulator's) and compares the Result and the
// normalised client stream with the golden file; -update rewrites them.
func TestGolden(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			evs := readTrace(t, tf)
			stream, res, _, ferr := replay(evs, testOptions())
			info, err := validateStream(stream)
			if err != nil {
				t.Fatalf("invalid client stream: %v\n%s", err, stream)
			}
			if err := checkResult(info, res); err != nil {
				t.Fatal(err)
			}
			got := renderGolden(t, res, info, ferr)
			if !json.Valid(got) {
				t.Fatalf("golden is not JSON:\n%s", got)
			}
			path := goldenPath(tf)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run: go test ./accumulator -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from its golden (run with -update and review the diff):\n%s", tf.name, got)
			}
		})
	}
}

// overriding names the traces whose done events or terminal deliberately state more than (or other
// than) their deltas.
var overriding = map[string]bool{"done_overrides_deltas": true, "harmony_incomplete": true}

// TestDoneTextEqualsJoinedDeltas: on a valid stream, every *.done text and arguments.done the
// client sees equals the deltas it saw, joined byte for byte.
func TestDoneTextEqualsJoinedDeltas(t *testing.T) {
	for _, tf := range traces(t) {
		if overriding[tf.name] {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			stream, _, _, _ := replay(readTrace(t, tf), testOptions())
			info, err := validateStream(stream)
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range info.items {
				for j, p := range append(append([]*vPart{}, it.parts...), it.sums...) {
					if !bytes.Equal(p.deltas, p.done) {
						t.Errorf("item %d part %d: deltas %q, done %q", i, j, p.deltas, p.done)
					}
				}
				if it.typ == "function_call" && !bytes.Equal(it.args, it.argsFinal) {
					t.Errorf("item %d: argument deltas %q, done %q", i, it.args, it.argsFinal)
				}
			}
		})
	}
}
