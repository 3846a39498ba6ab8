package accumulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seqIDs mints deterministic ids: prefix + a counter shared by all prefixes.
func seqIDs() func(string) string {
	n := 0
	return func(p string) string { n++; return fmt.Sprintf("%s%03d", p, n) }
}

func testOptions() Options {
	return Options{NewID: seqIDs(), ResponseID: "resp_test", Model: "test-model", CreatedAt: 1700000000}
}

// parseSSE splits raw SSE text into events the way a conforming decoder does (WHATWG): CR, LF and
// CRLF line ends; "data:" with or without a space; multi-line data joined with "\n"; comments and
// [DONE] skipped. Decoding proper is upstream's job; this is the test's replay reader.
func parseSSE(b []byte) []wire.Event {
	var evs []wire.Event
	var typ string
	var data []byte
	hasData := false
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		var line []byte
		if i < 0 {
			line, b = b, nil
		} else {
			line = b[:i]
			if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			b = b[i+1:]
		}
		if len(line) == 0 {
			if hasData && string(data) != "[DONE]" {
				evs = append(evs, wire.Event{Type: wire.EventType(typ), Data: data})
			}
			typ, data, hasData = "", nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			typ = string(value)
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
	return evs // an event not ended by a blank line is discarded at EOF (WHATWG), as a cut frame is
}

// replay runs events through a fresh accumulator the way the server does: Start, Feed until an
// error, Close with that error, Terminal, [DONE].
func replay(evs []wire.Event, opts Options) (stream []byte, res *Result, a *Accumulator, ferr error) {
	a = New(opts)
	out := a.Start(nil)
	for _, ev := range evs {
		if out, ferr = a.Feed(out, ev); ferr != nil {
			break
		}
	}
	out, res = a.Close(out, ferr)
	out = a.Terminal(out, res)
	return append(out, wire.DoneFrame...), res, a, ferr
}

type traceFile struct {
	name, path string
	sim        bool
}

const simTraceDir = "../upstream/vllmsim/testdata/traces"

// traces lists our hand-made traces and, when the simulator has written any, its traces.
func traces(t testing.TB) []traceFile {
	var out []traceFile
	for _, d := range []struct {
		dir string
		sim bool
	}{{"testdata/traces", false}, {simTraceDir, true}} {
		paths, err := filepath.Glob(filepath.Join(d.dir, "*.sse"))
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			name := strings.TrimSuffix(filepath.Base(p), ".sse")
			if d.sim {
				name = "vllmsim/" + name
			}
			out = append(out, traceFile{name: name, path: p, sim: d.sim})
		}
	}
	if len(out) == 0 {
		t.Fatal("no traces in testdata/traces")
	}
	return out
}

func readTrace(t testing.TB, tf traceFile) []wire.Event {
	b, err := os.ReadFile(tf.path)
	if err != nil {
		t.Fatal(err)
	}
	return parseSSE(b)
}

// clientEvent is one frame of the normalised client stream.
type clientEvent struct {
	Type string
	Data []byte
	obj  map[string]json.RawMessage
}

// parseClientStream parses the stream the accumulator wrote. It is strict: exactly
// "event: T\ndata: D\n\n" frames, then "data: [DONE]\n\n" last.
func parseClientStream(b []byte) ([]clientEvent, error) {
	var evs []clientEvent
	sawDone := false
	for len(b) > 0 {
		frame, rest, ok := bytes.Cut(b, []byte("\n\n"))
		if !ok {
			return nil, fmt.Errorf("unterminated frame %q", truncate(b))
		}
		b = rest
		if sawDone {
			return nil, fmt.Errorf("frame after [DONE]")
		}
		if string(frame) == "data: [DONE]" {
			sawDone = true
			continue
		}
		typ, data, ok := bytes.Cut(frame, []byte("\n"))
		if !ok || !bytes.HasPrefix(typ, []byte("event: ")) || !bytes.HasPrefix(data, []byte("data: ")) {
			return nil, fmt.Errorf("bad frame %q", truncate(frame))
		}
		data = data[len("data: "):]
		if bytes.ContainsAny(data, "\r\n") {
			return nil, fmt.Errorf("data spans lines")
		}
		ev := clientEvent{Type: string(typ[len("event: "):]), Data: data}
		if err := json.Unmarshal(data, &ev.obj); err != nil {
			return nil, fmt.Errorf("event %d (%s): data is not a JSON object: %w", len(evs), ev.Type, err)
		}
		evs = append(evs, ev)
	}
	if !sawDone {
		return nil, fmt.Errorf("no [DONE] frame")
	}
	return evs, nil
}

func truncate(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

type vPart struct {
	typ              string
	textDone, closed bool
	deltas, done     []byte // joined deltas; the *.done text
}

type vItem struct {
	id, typ          string
	closed, argsDone bool
	parts, sums      []*vPart
	final            json.RawMessage
	args, argsFinal  []byte // joined argument deltas; arguments.done
}

// streamInfo is what validateStream learnt from a valid stream.
type streamInfo struct {
	events   []clientEvent
	status   string          // terminal response status
	terminal string          // terminal event type
	output   json.RawMessage // terminal response.output
	items    []*vItem
}

func str(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "\x00not-a-string"
	}
	return s
}

func num(raw json.RawMessage) int {
	var n int
	if json.Unmarshal(raw, &n) != nil {
		return -1
	}
	return n
}

func fields(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return m
}

// validateStream is the strict checker of the client stream (docs/wire.md §5, docs/design.md §4): response.created
// first (seq 0) then in_progress; sequence_number dense; event == JSON type; no top-level "error"
// key; dense 0-based output_index; every item announced before its events and closed after;
// per-item dense content_index/summary_index; part events matching part types; logprobs on
// output_text; no null content/encrypted_content; exactly one terminal event, last, with every item
// closed and output equal to the output_item.done items (encrypted_content aside).
func validateStream(stream []byte) (*streamInfo, error) {
	evs, err := parseClientStream(stream)
	if err != nil {
		return nil, err
	}
	info := &streamInfo{events: evs}
	if len(evs) < 3 {
		return nil, fmt.Errorf("only %d events", len(evs))
	}
	ids := map[string]bool{}
	for i, ev := range evs {
		errf := func(format string, args ...any) error {
			return fmt.Errorf("event %d (%s): %s", i, ev.Type, fmt.Sprintf(format, args...))
		}
		o := ev.obj
		if _, has := o["error"]; has {
			return nil, errf("top-level error key")
		}
		if str(o["type"]) != ev.Type {
			return nil, errf("JSON type %s differs from the SSE event", o["type"])
		}
		if num(o["sequence_number"]) != i {
			return nil, errf("sequence_number %s, want %d", o["sequence_number"], i)
		}
		if info.terminal != "" {
			return nil, errf("event after the terminal event")
		}
		switch {
		case i == 0 && ev.Type != string(wire.EventCreated):
			return nil, errf("first event is not response.created")
		case i == 1 && ev.Type != string(wire.EventInProgress):
			return nil, errf("second event is not response.in_progress")
		}
		var it *vItem
		if _, has := o["output_index"]; has {
			oi := num(o["output_index"])
			if ev.Type == string(wire.EventItemAdded) {
				if oi != len(info.items) {
					return nil, errf("output_index %d, want %d (dense)", oi, len(info.items))
				}
			} else {
				if oi < 0 || oi >= len(info.items) {
					return nil, errf("output_index %d of an item never announced", oi)
				}
				it = info.items[oi]
				if it.closed {
					return nil, errf("event for a closed item")
				}
				if id, has := o["item_id"]; has && str(id) != it.id {
					return nil, errf("item_id %s, want %s", id, it.id)
				}
			}
		}
		partList := func(sum bool, key string) (*vPart, error) {
			if it == nil {
				return nil, errf("no output_index")
			}
			ps := it.parts
			if sum {
				ps = it.sums
			}
			ci := num(o[key])
			if ci < 0 || ci >= len(ps) {
				return nil, errf("%s %d of a part never announced", key, ci)
			}
			if ps[ci].closed {
				return nil, errf("event for a closed part")
			}
			return ps[ci], nil
		}
		switch ev.Type {
		case string(wire.EventCreated), string(wire.EventInProgress):
			r := fields(o["response"])
			if str(r["status"]) != string(wire.StatusInProgress) || string(r["output"]) != "[]" {
				return nil, errf("response %s", o["response"])
			}
		case string(wire.EventItemAdded):
			item := fields(o["item"])
			nit := &vItem{id: str(item["id"]), typ: str(item["type"])}
			if nit.id == "" || ids[nit.id] {
				return nil, errf("item id %q empty or reused", nit.id)
			}
			ids[nit.id] = true
			// An item type without a status (a compaction item, Options.Prepend) has none to check.
			if _, has := item["status"]; (has || known(nit.typ)) && str(item["status"]) != string(wire.StatusInProgress) {
				return nil, errf("added item status %s", item["status"])
			}
			if err := checkItem(nit.typ, item, true); err != nil {
				return nil, errf("%v", err)
			}
			info.items = append(info.items, nit)
		case string(wire.EventItemDone):
			item := fields(o["item"])
			if str(item["id"]) != it.id || str(item["type"]) != it.typ {
				return nil, errf("done item %s/%s, want %s/%s", item["id"], item["type"], it.id, it.typ)
			}
			if st := str(item["status"]); st != string(wire.StatusCompleted) && st != string(wire.StatusIncomplete) && known(it.typ) {
				return nil, errf("done item status %s", item["status"])
			}
			for _, p := range append(append([]*vPart{}, it.parts...), it.sums...) {
				if !p.closed {
					return nil, errf("item done with a part open")
				}
			}
			if it.typ == wire.TypeFunctionCall && !it.argsDone {
				return nil, errf("function call done without arguments.done")
			}
			if err := checkItem(it.typ, item, false); err != nil {
				return nil, errf("%v", err)
			}
			it.closed, it.final = true, o["item"]
		case string(wire.EventPartAdded), string(wire.EventSummaryAdded):
			sum := ev.Type == string(wire.EventSummaryAdded)
			key := "content_index"
			if sum {
				key = "summary_index"
			}
			if it == nil {
				return nil, errf("no output_index")
			}
			ps := &it.parts
			if sum {
				ps = &it.sums
			}
			if num(o[key]) != len(*ps) {
				return nil, errf("%s %s, want %d (dense per item)", key, o[key], len(*ps))
			}
			part := fields(o["part"])
			pt := str(part["type"])
			switch {
			case sum && (it.typ != wire.TypeReasoning || pt != "summary_text"),
				!sum && it.typ == wire.TypeMessage && pt != "output_text" && pt != "refusal",
				!sum && it.typ == wire.TypeReasoning && pt != "reasoning_text",
				it.typ != wire.TypeMessage && it.typ != wire.TypeReasoning:
				return nil, errf("part %s in a %s item", pt, it.typ)
			}
			if pt == "output_text" && string(part["logprobs"]) != "[]" {
				return nil, errf("output_text part without logprobs:[]")
			}
			*ps = append(*ps, &vPart{typ: pt})
		case string(wire.EventPartDone), string(wire.EventSummaryDone):
			sum := ev.Type == string(wire.EventSummaryDone)
			key := "content_index"
			if sum {
				key = "summary_index"
			}
			p, err := partList(sum, key)
			if err != nil {
				return nil, err
			}
			part := fields(o["part"])
			if str(part["type"]) != p.typ || !p.textDone {
				return nil, errf("part done of type %s for a %s part (text done %v)", part["type"], p.typ, p.textDone)
			}
			if p.typ == "output_text" && string(part["logprobs"]) != "[]" {
				return nil, errf("output_text part without logprobs:[]")
			}
			p.closed = true
		case string(wire.EventTextDelta), string(wire.EventRefusalDelta), string(wire.EventReasoningDelta), string(wire.EventSummaryDelta), string(wire.EventTextDone), string(wire.EventRefusalDone), string(wire.EventReasoningDone), string(wire.EventSummaryTextDone):
			sum := ev.Type == string(wire.EventSummaryDelta) || ev.Type == string(wire.EventSummaryTextDone)
			key := "content_index"
			if sum {
				key = "summary_index"
			}
			p, err := partList(sum, key)
			if err != nil {
				return nil, err
			}
			want := map[string]string{string(wire.EventTextDelta): "output_text", string(wire.EventTextDone): "output_text", string(wire.EventRefusalDelta): "refusal",
				string(wire.EventRefusalDone): "refusal", string(wire.EventReasoningDelta): "reasoning_text", string(wire.EventReasoningDone): "reasoning_text",
				string(wire.EventSummaryDelta): "summary_text", string(wire.EventSummaryTextDone): "summary_text"}[ev.Type]
			if p.typ != want || p.textDone {
				return nil, errf("for a %s part (text done %v)", p.typ, p.textDone)
			}
			if want == "output_text" && string(o["logprobs"]) != "[]" {
				return nil, errf("without logprobs:[]")
			}
			if strings.HasSuffix(ev.Type, ".delta") {
				d, ok := o["delta"]
				if !ok || len(d) == 0 || d[0] != '"' {
					return nil, errf("delta is not a string")
				}
				p.deltas = jsonscan.AppendUnescaped(p.deltas, d[1:len(d)-1])
			} else {
				p.textDone = true
				key := "text"
				if want == "refusal" {
					key = "refusal"
				}
				p.done = []byte(str(o[key]))
			}
		case string(wire.EventArgsDelta), string(wire.EventArgsDone):
			if it == nil || it.typ != wire.TypeFunctionCall || it.argsDone {
				return nil, errf("arguments event for a non-function-call or finished item")
			}
			if ev.Type == string(wire.EventArgsDone) {
				it.argsDone = true
				it.argsFinal = []byte(str(o["arguments"]))
			} else {
				d := o["delta"]
				if len(d) == 0 || d[0] != '"' {
					return nil, errf("delta is not a string")
				}
				it.args = jsonscan.AppendUnescaped(it.args, d[1:len(d)-1])
			}
		case string(wire.EventAnnotation):
			p, err := partList(false, "content_index")
			if err != nil {
				return nil, err
			}
			if p.typ != "output_text" {
				return nil, errf("annotation for a %s part", p.typ)
			}
		case string(wire.EventCompleted), string(wire.EventIncomplete), string(wire.EventFailed):
			info.terminal = ev.Type
			r := fields(o["response"])
			info.status = str(r["status"])
			want := map[string]string{string(wire.EventCompleted): string(wire.StatusCompleted), string(wire.EventIncomplete): string(wire.StatusIncomplete), string(wire.EventFailed): string(wire.StatusFailed)}[ev.Type]
			if info.status != want {
				return nil, errf("response status %s", info.status)
			}
			if (ev.Type == string(wire.EventFailed)) != (string(r["error"]) != "null" && len(r["error"]) > 0) {
				return nil, errf("response error %s", r["error"])
			}
			if ev.Type == string(wire.EventIncomplete) && (len(r["incomplete_details"]) == 0 || string(r["incomplete_details"]) == "null") {
				return nil, errf("no incomplete_details")
			}
			info.output = r["output"]
			var out []json.RawMessage
			if err := json.Unmarshal(r["output"], &out); err != nil {
				return nil, errf("output: %v", err)
			}
			if len(out) != len(info.items) {
				return nil, errf("output has %d items, the stream %d", len(out), len(info.items))
			}
			for j, x := range info.items {
				if !x.closed {
					return nil, errf("item %d never closed", j)
				}
				if !sameItem(out[j], x.final) {
					return nil, errf("output[%d] = %s, output_item.done said %s", j, out[j], x.final)
				}
				if str(fields(out[j])["status"]) == string(wire.StatusIncomplete) && info.status == string(wire.StatusCompleted) {
					return nil, errf("an incomplete item in a completed response")
				}
			}
		default:
			return nil, errf("event type outside the OpenAI union")
		}
	}
	if info.terminal == "" {
		return nil, fmt.Errorf("no terminal event")
	}
	return info, nil
}

func known(typ string) bool { return kindOf(typ) != kOther }

// checkItem checks an item's shape: status and the required fields of each type, and no null
// content/encrypted_content (docs/wire.md §7.1).
func checkItem(typ string, item map[string]json.RawMessage, added bool) error {
	for _, k := range []string{"content", "encrypted_content", "summary"} {
		if v, has := item[k]; has && string(v) == "null" && known(typ) {
			return fmt.Errorf("%s is null", k)
		}
	}
	for _, k := range []string{"item_id", "output_index", "sequence_number"} {
		if _, has := item[k]; has && known(typ) {
			return fmt.Errorf("stray field %s", k)
		}
	}
	need := map[string][]string{
		wire.TypeMessage:      {"id", "type", "status", "content", "role"},
		wire.TypeReasoning:    {"id", "type", "status", "summary"},
		wire.TypeFunctionCall: {"id", "type", "status", "arguments", "call_id", "name"},
	}[typ]
	for _, k := range need {
		if _, has := item[k]; !has {
			return fmt.Errorf("%s item without %s", typ, k)
		}
	}
	if typ == wire.TypeFunctionCall && !strings.HasPrefix(str(item["call_id"]), wire.PrefixCallID) {
		return fmt.Errorf("call_id %s not minted", item["call_id"])
	}
	if added {
		switch typ {
		case wire.TypeMessage:
			if string(item["content"]) != "[]" {
				return fmt.Errorf("added message with content")
			}
		case wire.TypeFunctionCall:
			if string(item["arguments"]) != `""` {
				return fmt.Errorf("added function call with arguments")
			}
		}
	}
	if typ == wire.TypeMessage {
		var parts []map[string]json.RawMessage
		_ = json.Unmarshal(item["content"], &parts)
		for _, p := range parts {
			if str(p["type"]) == "output_text" && string(p["logprobs"]) != "[]" {
				return fmt.Errorf("output_text part without logprobs:[]")
			}
		}
	}
	return nil
}

// sameItem compares two item JSONs semantically; a reasoning item's encrypted_content may differ
// (the terminal response's wins after output_item.done went out, docs/design.md §4).
func sameItem(a, b json.RawMessage) bool {
	var x, y map[string]any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	if x["type"] == wire.TypeReasoning {
		delete(x, "encrypted_content")
		delete(y, "encrypted_content")
	}
	return reflect.DeepEqual(x, y)
}

// checkResult checks that the Result is what the stream said: the terminal status and output.
func checkResult(info *streamInfo, res *Result) error {
	wantStatus := res.Status
	if wantStatus != wire.StatusCompleted && wantStatus != wire.StatusIncomplete {
		wantStatus = wire.StatusFailed
	}
	if info.status != string(wantStatus) {
		return fmt.Errorf("stream status %s, result %s", info.status, res.Status)
	}
	if out := AppendOutput(nil, res.Output); !bytes.Equal(out, info.output) {
		return fmt.Errorf("result output %s\nstream output %s", out, info.output)
	}
	for i, it := range res.Output {
		f := fields(it.JSON)
		if str(f["id"]) != it.ID || str(f["type"]) != it.Type {
			return fmt.Errorf("result item %d: ID/Type %s/%s, JSON %s", i, it.ID, it.Type, it.JSON)
		}
	}
	return nil
}

// runChecked replays and validates, failing the test on any violation.
func runChecked(t testing.TB, evs []wire.Event, opts Options) ([]byte, *Result, *streamInfo) {
	t.Helper()
	stream, res, _, _ := replay(evs, opts)
	info, err := validateStream(stream)
	if err != nil {
		t.Fatalf("invalid client stream: %v\n%s", err, stream)
	}
	if err := checkResult(info, res); err != nil {
		t.Fatal(err)
	}
	return stream, res, info
}

// regexpAll returns a function listing the first submatch of every match of pat.
func regexpAll(pat string) func([]byte) []string {
	re := regexp.MustCompile(pat)
	return func(b []byte) []string {
		var out []string
		for _, m := range re.FindAllSubmatch(b, -1) {
			out = append(out, string(m[1]))
		}
		return out
	}
}
