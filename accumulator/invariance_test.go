package accumulator

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"net/http" //nolint:depguard // only to hand the normalised stream to openai-go's SSE decoder, which takes an *http.Response; no I/O
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

var deltaTypes = map[string]bool{string(wire.EventTextDelta): true, string(wire.EventRefusalDelta): true, string(wire.EventReasoningDelta): true, string(wire.EventSummaryDelta): true, string(wire.EventArgsDelta): true}

const hexDigits = "0123456789abcdef"

// rawJSONString encodes b as a JSON string token escaping only what JSON requires, so that bytes
// of a rune split across pieces stay raw (encoding/json would turn them into U+FFFD).
func rawJSONString(b []byte) []byte {
	out := []byte{'"'}
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			out = append(out, c)
		}
	}
	return append(out, '"')
}

// resplit re-splits the delta of every delta event with split, keeping every other member.
func resplit(evs []wire.Event, split func([]byte) [][]byte) []wire.Event {
	var out []wire.Event
	for _, e := range evs {
		var m map[string]json.RawMessage
		d, ok := []byte(nil), false
		if deltaTypes[string(e.Type)] && json.Unmarshal(e.Data, &m) == nil {
			if raw := m["delta"]; len(raw) >= 2 && raw[0] == '"' {
				d, ok = jsonscan.AppendUnescaped(nil, raw[1:len(raw)-1]), true
			}
		}
		if !ok || len(d) == 0 {
			out = append(out, e)
			continue
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, piece := range split(d) {
			b := []byte{'{'}
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				b = wire.AppendString(b, k)
				b = append(b, ':')
				if k == "delta" {
					b = append(b, rawJSONString(piece)...)
				} else {
					b = append(b, m[k]...)
				}
			}
			out = append(out, wire.Event{Type: e.Type, Data: append(b, '}')})
		}
	}
	return out
}

func oneByte(b []byte) [][]byte {
	var out [][]byte
	for i := range b {
		out = append(out, b[i:i+1])
	}
	return out
}

func randomSplit(r *rand.Rand) func([]byte) [][]byte {
	return func(b []byte) [][]byte {
		var out [][]byte
		for len(b) > 0 {
			n := 1 + r.Intn(len(b))
			out = append(out, b[:n])
			b = b[n:]
		}
		return out
	}
}

// sameResult compares two Results, Dropped aside (a dropped late delta split in N is N drops).
func sameResult(a, b *Result) bool {
	x, y := *a, *b
	x.Dropped, y.Dropped = 0, 0
	return reflect.DeepEqual(x, y)
}

// TestResultIndependentOfDeltaSplits replays every trace with each delta re-split into 1-byte
// deltas (mid-rune included: text is byte-joined, never rune-validated per delta) and at seeded
// random points; the Result must not change and the stream must stay valid.
func TestResultIndependentOfDeltaSplits(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			evs := readTrace(t, tf)
			_, want, _, wantErr := replay(evs, testOptions())
			r := rand.New(rand.NewSource(1))
			splits := map[string]func([]byte) [][]byte{"1-byte": oneByte, "random": randomSplit(r)}
			for name, split := range splits {
				stream, got, _, gotErr := replay(resplit(evs, split), testOptions())
				if _, err := validateStream(stream); err != nil {
					t.Fatalf("%s: invalid client stream: %v", name, err)
				}
				if !sameResult(got, want) || errString(gotErr) != errString(wantErr) {
					t.Errorf("%s: result differs\n got %s %v\nwant %s %v", name, mustJSON(got), gotErr, mustJSON(want), wantErr)
				}
			}
		})
	}
}

func TestMidRuneSplitJoinsBytes(t *testing.T) {
	text := []byte("né 🙂 ☕")
	var evs []wire.Event
	for _, b := range text {
		evs = append(evs, rawEv(string(wire.EventTextDelta), `{"output_index":0,"content_index":0,"delta":`+string(rawJSONString([]byte{b}))+`}`))
	}
	evs = append(evs, completed("completed"))
	_, res, info := runChecked(t, evs, testOptions())
	if got := mustJSON(itemJSON(t, res, 0)["content"]); !strings.Contains(got, `"text":"né 🙂 ☕"`) {
		t.Errorf("content %s", got)
	}
	if d := info.items[0].parts[0].deltas; !bytes.Equal(d, text) {
		t.Errorf("client deltas join to %q", d)
	}
}

// TestOpenAIGoDecodesTheStream decodes every normalised stream with openai-go v3's ssestream and
// its event union: no stream error, every event a known variant, and the terminal response's
// output equal to the Result's items.
func TestOpenAIGoDecodesTheStream(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			stream, res, _, _ := replay(readTrace(t, tf), testOptions())
			httpRes := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: io.NopCloser(bytes.NewReader(stream))}
			s := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(httpRes), nil)
			defer s.Close()
			var final *responses.Response
			n := 0
			for s.Next() {
				e := s.Current()
				if e.AsAny() == nil {
					t.Fatalf("event %d: type %q is not in the SDK union", n, e.Type)
				}
				if e.SequenceNumber != int64(n) {
					t.Fatalf("event %d: sequence_number %d", n, e.SequenceNumber)
				}
				switch v := e.AsAny().(type) {
				case responses.ResponseCompletedEvent:
					final = &v.Response
				case responses.ResponseIncompleteEvent:
					final = &v.Response
				case responses.ResponseFailedEvent:
					final = &v.Response
				}
				n++
			}
			if err := s.Err(); err != nil {
				t.Fatalf("stream error after %d events: %v", n, err)
			}
			if final == nil {
				t.Fatal("no terminal event")
			}
			if string(final.Status) != string(res.Status) && !(res.Status != wire.StatusCompleted && res.Status != wire.StatusIncomplete) {
				t.Errorf("status %s, result %s", final.Status, res.Status)
			}
			if len(final.Output) != len(res.Output) {
				t.Fatalf("%d output items, result %d", len(final.Output), len(res.Output))
			}
			for i, o := range final.Output {
				if o.ID != res.Output[i].ID || o.Type != res.Output[i].Type || !sameItem(json.RawMessage(o.RawJSON()), res.Output[i].JSON) {
					t.Errorf("output[%d] = %s, result %s", i, o.RawJSON(), res.Output[i].JSON)
				}
			}
			if res.Usage != nil && final.Usage.TotalTokens == 0 && !bytes.Contains(res.Usage, []byte(`"total_tokens":0`)) {
				t.Errorf("usage not decoded: %s", final.Usage.RawJSON())
			}
		})
	}
}

// withoutIDs drops the minted ids (id, call_id) from an item.
func withoutIDs(t *testing.T, raw []byte) map[string]any {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "id")
	delete(m, "call_id")
	return m
}

// terminalResponse returns the response object of a trace's terminal event, if it has one.
func terminalResponse(evs []wire.Event) []byte {
	for _, e := range evs {
		if e.Type == wire.EventCompleted || e.Type == wire.EventIncomplete || e.Type == wire.EventFailed {
			var m map[string]json.RawMessage
			if json.Unmarshal(e.Data, &m) == nil {
				return m["response"]
			}
		}
	}
	return nil
}

// fromResponseCases pairs a stream with the non-streamed body of the same content: each trace
// whose terminal response carries the full output (vLLM's final output is what its non-streamed
// body has, docs/wire.md §6.5), and the simulator's <name>.json next to <name>.sse.
func fromResponseCases(t *testing.T) map[string][2][]byte {
	cases := map[string][2][]byte{}
	for _, tf := range traces(t) {
		raw, err := os.ReadFile(tf.path)
		if err != nil {
			t.Fatal(err)
		}
		if tf.sim {
			if body, err := os.ReadFile(strings.TrimSuffix(tf.path, ".sse") + ".json"); err == nil {
				cases[tf.name] = [2][]byte{raw, body}
			}
			continue
		}
		switch tf.name {
		case "done_overrides_deltas", "missing_added", "reasoning_summary", "unknown_events", "sparse_index", "framing_variants":
			continue // their terminal output is empty or deliberately disagrees with the stream
		}
		body := terminalResponse(parseSSE(raw))
		var r struct{ Output []json.RawMessage }
		if json.Unmarshal(body, &r) == nil && len(r.Output) > 0 {
			cases[tf.name] = [2][]byte{raw, body}
		}
	}
	return cases
}

// TestFromResponseEqualsStreamed: the non-streamed path stores the items the streamed path would
// have, ids aside. One documented exception: when a stream closed its last item as completed and
// the response is incomplete, the non-streamed path (which cannot know) marks that item incomplete.
func TestFromResponseEqualsStreamed(t *testing.T) {
	cases := fromResponseCases(t)
	if len(cases) < 5 {
		t.Fatalf("only %d stream/body pairs", len(cases))
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, streamed, _, _ := replay(parseSSE(c[0]), testOptions())
			got, err := FromResponse(testOptions(), c[1])
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != streamed.Status || string(got.Usage) != string(streamed.Usage) || len(got.Output) != len(streamed.Output) ||
				string(got.IncompleteDetails) != string(streamed.IncompleteDetails) {
				t.Fatalf("FromResponse %s\nstreamed     %s", mustJSON(got), mustJSON(streamed))
			}
			for i := range got.Output {
				g, s := withoutIDs(t, got.Output[i].JSON), withoutIDs(t, streamed.Output[i].JSON)
				if got.Status == wire.StatusIncomplete && i == len(got.Output)-1 {
					delete(g, "status")
					delete(s, "status")
				}
				if !reflect.DeepEqual(g, s) {
					t.Errorf("item %d\nFromResponse %s\nstreamed     %s", i, got.Output[i].JSON, streamed.Output[i].JSON)
				}
				if !strings.HasPrefix(got.Output[i].ID, wire.PrefixForType(got.Output[i].Type)) {
					t.Errorf("item %d id %s", i, got.Output[i].ID)
				}
			}
		})
	}
}

func TestFromResponseNormalises(t *testing.T) {
	body := `{"id":"resp_v","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},
	 "output":[
	  {"id":"rs_v","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"r"}],"encrypted_content":null,"status":null},
	  {"id":"fc_v","type":"function_call","name":"f","arguments":"{}","call_id":"call_v","status":null},
	  {"id":"msg_v","type":"message","role":"assistant","summary":[],"status":"completed","content":[{"type":"output_text","text":"cut","annotations":[],"logprobs":null}]}],
	 "usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":1}}}`
	res, err := FromResponse(testOptions(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"id":"rs_001","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"r"}]}`,
		`{"id":"fc_002","type":"function_call","status":"completed","arguments":"{}","call_id":"call_003","name":"f"}`,
		`{"id":"msg_004","type":"message","status":"incomplete","content":[{"type":"output_text","text":"cut","annotations":[],"logprobs":[]}],"role":"assistant"}`,
	}
	for i, w := range want {
		if got := string(res.Output[i].JSON); got != w {
			t.Errorf("item %d\ngot  %s\nwant %s", i, got, w)
		}
	}
	if res.Status != wire.StatusIncomplete || string(res.IncompleteDetails) != `{"reason":"max_output_tokens"}` ||
		string(res.Usage) != `{"input_tokens":1,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":3}` {
		t.Errorf("result %s", mustJSON(res))
	}
	for _, bad := range []string{`[]`, `{"output":[5],"status":"completed"}`, `{"output":{},"status":"completed"}`, `{`, ``} {
		if _, err := FromResponse(testOptions(), []byte(bad)); err == nil {
			t.Errorf("FromResponse(%q) succeeded", bad)
		}
	}
	o := testOptions()
	o.MaxItems = 1
	if _, err := FromResponse(o, []byte(body)); err == nil {
		t.Error("FromResponse ignored MaxItems")
	}
}

// TestQuirkyAndCleanDialectsNormaliseAlike: the simulator sends each answer in vLLM's quirky
// dialect and as a strictly valid OpenAI stream; after normalisation the client must not be able
// to tell them apart.
func TestQuirkyAndCleanDialectsNormaliseAlike(t *testing.T) {
	n := 0
	for _, tf := range traces(t) {
		if !tf.sim || !strings.HasSuffix(tf.name, "-clean") {
			continue
		}
		quirky := traceFile{name: strings.TrimSuffix(tf.name, "-clean"), path: strings.TrimSuffix(tf.path, "-clean.sse") + ".sse", sim: true}
		if _, err := os.Stat(quirky.path); err != nil {
			continue
		}
		n++
		t.Run(quirky.name, func(t *testing.T) {
			qs, qr, _, _ := replay(readTrace(t, quirky), testOptions())
			cs, cr, _, _ := replay(readTrace(t, tf), testOptions())
			if !sameResult(qr, cr) {
				t.Errorf("results differ\nquirky %s\nclean  %s", mustJSON(qr), mustJSON(cr))
			}
			if !bytes.Equal(qs, cs) {
				t.Errorf("client streams differ\nquirky:\n%s\nclean:\n%s", qs, cs)
			}
		})
	}
	t.Logf("%d quirky/clean pairs", n)
}
