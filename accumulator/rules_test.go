package accumulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

// ev builds an upstream event from key/value pairs (values JSON-marshalled).
func ev(typ string, kv ...any) wire.Event {
	m := map[string]any{"type": typ}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return wire.Event{Type: wire.EventType(typ), Data: b}
}

func rawEv(typ, data string) wire.Event {
	return wire.Event{Type: wire.EventType(typ), Data: []byte(data)}
}

type obj = map[string]any

func msgAdded(oi int, id string) wire.Event {
	return ev(string(wire.EventItemAdded), "output_index", oi, "item", obj{"id": id, "type": "message", "role": "assistant", "content": []any{}, "status": "in_progress"})
}

func textPart(oi, ci int, id string) wire.Event {
	return ev(string(wire.EventPartAdded), "output_index", oi, "content_index", ci, "item_id", id, "part", obj{"type": "output_text", "text": "", "annotations": []any{}})
}

func textDelta(oi, ci int, d string) wire.Event {
	return ev(string(wire.EventTextDelta), "output_index", oi, "content_index", ci, "item_id", "up", "delta", d, "logprobs", []any{})
}

func reasonDelta(oi, ci int, d string) wire.Event {
	return ev(string(wire.EventReasoningDelta), "output_index", oi, "content_index", ci, "item_id", "up", "delta", d)
}

func itemDone(oi int, item obj) wire.Event {
	return ev(string(wire.EventItemDone), "output_index", oi, "item", item)
}

func completed(status string, output ...obj) wire.Event {
	if output == nil {
		output = []obj{}
	}
	return ev(string(wire.EventCompleted), "response", obj{"id": "resp_up", "status": status, "output": output,
		"usage": obj{"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}})
}

// itemJSON returns the Result's item i as a generic map.
func itemJSON(t *testing.T, res *Result, i int) map[string]any {
	t.Helper()
	if i >= len(res.Output) {
		t.Fatalf("result has %d items, want > %d", len(res.Output), i)
	}
	var m map[string]any
	if err := json.Unmarshal(res.Output[i].JSON, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestReasoningTextAndSummaryKeepSeparateBuffers(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "r", "type": "reasoning", "summary": []any{}}),
		ev(string(wire.EventSummaryDelta), "output_index", 0, "summary_index", 0, "item_id", "r", "delta", "sum-a "),
		reasonDelta(0, 0, "raw-a "),
		ev(string(wire.EventSummaryDelta), "output_index", 0, "summary_index", 0, "item_id", "r", "delta", "sum-b"),
		reasonDelta(0, 0, "raw-b"),
		itemDone(0, obj{"id": "r", "type": "reasoning"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	got := mustJSON(itemJSON(t, res, 0))
	want := mustJSON(obj{"id": "rs_001", "type": "reasoning", "status": "completed",
		"summary": []obj{{"type": "summary_text", "text": "sum-a sum-b"}},
		"content": []obj{{"type": "reasoning_text", "text": "raw-a raw-b"}}})
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestDoneItemIsAuthoritativeByKeyPresence(t *testing.T) {
	cases := []struct {
		name  string
		done  obj
		want  string // JSON of the final item
		extra []wire.Event
	}{
		{"omitted fields are filled from deltas", obj{"id": "x", "type": "reasoning"},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"stated content wins", obj{"id": "x", "type": "reasoning", "content": []obj{{"type": "reasoning_text", "text": "final"}}},
			`{"content":[{"text":"final","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"an empty array wins", obj{"id": "x", "type": "reasoning", "content": []any{}},
			`{"content":[],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"null wins and is omitted", obj{"id": "x", "type": "reasoning", "content": nil, "encrypted_content": nil},
			`{"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"encrypted_content is kept when non-empty", obj{"id": "x", "type": "reasoning", "encrypted_content": "blob"},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"encrypted_content":"blob","id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"status null is normalised", obj{"id": "x", "type": "reasoning", "status": nil},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"a malformed done item keeps the delta state", obj{"id": "x", "type": "reasoning", "content": "oops"},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"a done item of another type keeps the delta state", obj{"id": "x", "type": "message", "content": []any{}},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
		{"a malformed part in the done item keeps the delta state", obj{"id": "x", "type": "reasoning", "content": []any{obj{"type": "reasoning_text", "text": 5}}},
			`{"content":[{"text":"streamed","type":"reasoning_text"}],"id":"rs_001","status":"completed","summary":[],"type":"reasoning"}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := []wire.Event{
				ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "x", "type": "reasoning", "summary": []any{}, "content": nil, "encrypted_content": nil}),
				reasonDelta(0, 0, "stream"), reasonDelta(0, 0, "ed"),
				itemDone(0, c.done),
				completed("completed"),
			}
			_, res, _ := runChecked(t, evs, testOptions())
			if got := mustJSON(itemJSON(t, res, 0)); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// An empty array (or null) that a done item states for a message's content or a reasoning item's
// summary wins over the deltas streamed before it, as the done item's other fields do: key presence
// decides, not emptiness (docs/design.md §4; seeds/003).
func TestDoneItemsStatedEmptyListsBeatStreamedParts(t *testing.T) {
	summaryDelta := func(d string) wire.Event {
		return ev(string(wire.EventSummaryDelta), "output_index", 0, "summary_index", 0, "item_id", "r", "delta", d)
	}
	reasoning := func(done obj) []wire.Event {
		return []wire.Event{
			ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "r", "type": "reasoning", "summary": []any{}}),
			summaryDelta("sum-a "), summaryDelta("sum-b"), itemDone(0, done), completed("completed"),
		}
	}
	message := func(done obj) []wire.Event {
		return []wire.Event{msgAdded(0, "m"), textPart(0, 0, "m"), textDelta(0, 0, "streamed"), itemDone(0, done), completed("completed")}
	}
	for _, c := range []struct {
		name string
		evs  []wire.Event
		want string
	}{
		{"message content []", message(obj{"id": "m", "type": "message", "role": "assistant", "content": []any{}}),
			`{"id":"msg_001","type":"message","status":"completed","content":[],"role":"assistant"}`},
		{"message content omitted keeps the text", message(obj{"id": "m", "type": "message", "role": "assistant"}),
			`{"id":"msg_001","type":"message","status":"completed","content":[{"type":"output_text","text":"streamed","annotations":[],"logprobs":[]}],"role":"assistant"}`},
		{"reasoning summary []", reasoning(obj{"id": "r", "type": "reasoning", "summary": []any{}}),
			`{"id":"rs_001","type":"reasoning","status":"completed","summary":[]}`},
		{"reasoning summary null", reasoning(obj{"id": "r", "type": "reasoning", "summary": nil}),
			`{"id":"rs_001","type":"reasoning","status":"completed","summary":[]}`},
		{"reasoning summary omitted keeps the deltas", reasoning(obj{"id": "r", "type": "reasoning"}),
			`{"id":"rs_001","type":"reasoning","status":"completed","summary":[{"type":"summary_text","text":"sum-a sum-b"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream, res, _ := runChecked(t, c.evs, testOptions())
			if got := string(res.Output[0].JSON); got != c.want {
				t.Errorf("final item:\ngot  %s\nwant %s", got, c.want)
			}
			// The client's output_item.done carries the same item (runChecked compares them), so
			// the stream does not promise the text the stored item lacks.
			if !bytes.Contains(stream, []byte(`"item":`+c.want)) {
				t.Errorf("no output_item.done with the final item in the client stream:\n%s", stream)
			}
		})
	}
}

func TestDoneItemFunctionCallAndMessageFields(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "f", "type": "function_call", "name": "a", "arguments": "", "call_id": "c0"}),
		ev(string(wire.EventArgsDelta), "output_index", 0, "item_id", "f", "delta", `{"x":`),
		itemDone(0, obj{"type": "function_call", "name": "b", "call_id": "c1", "id": nil, "item_id": "f", "output_index": 0, "sequence_number": -1}),
		msgAdded(1, "m"), textPart(1, 0, "m"), textDelta(1, 0, "hi"),
		itemDone(1, obj{"id": "m", "type": "message", "role": "assistant", "summary": []any{}}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if got, want := string(res.Output[0].JSON), `{"id":"fc_001","type":"function_call","status":"completed","arguments":"{\"x\":","call_id":"call_002","name":"b"}`; got != want {
		t.Errorf("function call:\ngot  %s\nwant %s", got, want)
	}
	if got, want := string(res.Output[1].JSON), `{"id":"msg_003","type":"message","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[],"logprobs":[]}],"role":"assistant"}`; got != want {
		t.Errorf("message:\ngot  %s\nwant %s", got, want)
	}
}

func TestItemsAreRebuiltInFixedFieldOrder(t *testing.T) {
	evs := []wire.Event{
		itemDone(0, obj{"status": "completed", "role": "assistant", "type": "message", "summary": []any{}, "id": "a", "phase": "x",
			"content": []obj{{"logprobs": nil, "text": "t", "type": "output_text", "annotations": []any{}}}}),
		itemDone(1, obj{"encrypted_content": "e", "content": []obj{{"text": "r", "type": "reasoning_text"}}, "summary": []obj{{"text": "s", "type": "summary_text"}}, "type": "reasoning", "id": "b", "status": nil}),
		itemDone(2, obj{"name": "n", "call_id": "c", "arguments": "{}", "type": "function_call", "status": nil, "id": "d", "item_id": "d", "output_index": 2, "sequence_number": -1}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	want := []string{
		`{"id":"msg_001","type":"message","status":"completed","content":[{"type":"output_text","text":"t","annotations":[],"logprobs":[]}],"role":"assistant"}`,
		`{"id":"rs_002","type":"reasoning","status":"completed","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"r"}],"encrypted_content":"e"}`,
		`{"id":"fc_003","type":"function_call","status":"completed","arguments":"{}","call_id":"call_004","name":"n"}`,
	}
	for i, w := range want {
		if got := string(res.Output[i].JSON); got != w {
			t.Errorf("item %d:\ngot  %s\nwant %s", i, got, w)
		}
	}
}

func TestNoDuplicateItems(t *testing.T) {
	evs := []wire.Event{
		textDelta(0, 0, "a"), // creates the item before its added
		msgAdded(0, "m"),     // late added: same item
		msgAdded(0, "m"),     // duplicate
		textDelta(0, 0, "b"),
		itemDone(0, obj{"id": "m", "type": "message"}),
		itemDone(0, obj{"id": "m", "type": "message", "content": []any{}}), // duplicate done: ignored
		textDelta(0, 0, "late"),                                            // after done: dropped
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if len(res.Output) != 1 {
		t.Fatalf("%d items, want 1", len(res.Output))
	}
	if got := mustJSON(itemJSON(t, res, 0)["content"]); got != `[{"annotations":[],"logprobs":[],"text":"ab","type":"output_text"}]` {
		t.Errorf("content %s", got)
	}
	if res.Dropped != 4 {
		t.Errorf("Dropped = %d, want 4", res.Dropped)
	}
}

func TestCompletedItemWithoutAddedIsKept(t *testing.T) {
	evs := []wire.Event{
		itemDone(0, obj{"id": "msg_x", "type": "message", "role": "assistant", "status": "completed",
			"content": []obj{{"type": "output_text", "text": "whole", "annotations": []any{}}}}),
		completed("completed"),
	}
	_, res, info := runChecked(t, evs, testOptions())
	if len(res.Output) != 1 || !strings.Contains(string(res.Output[0].JSON), `"text":"whole"`) {
		t.Fatalf("output %s", mustJSON(res.Output))
	}
	// The client saw the item announced, its text delta'd, and closed.
	var types []string
	for _, e := range info.events {
		types = append(types, e.Type)
	}
	want := []string{string(wire.EventCreated), string(wire.EventInProgress), string(wire.EventItemAdded), string(wire.EventPartAdded), string(wire.EventTextDelta), string(wire.EventTextDone), string(wire.EventPartDone), string(wire.EventItemDone), string(wire.EventCompleted)}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Errorf("events %v\nwant   %v", types, want)
	}
}

func TestItemsFollowUpstreamOutputIndexOrder(t *testing.T) {
	evs := []wire.Event{
		msgAdded(3, "c"), textDelta(3, 0, "first"),
		msgAdded(7, "d"), textDelta(7, 5, "second"),
		textDelta(3, 0, " more"),
		itemDone(7, obj{"id": "d", "type": "message"}),
		itemDone(3, obj{"id": "c", "type": "message"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if len(res.Output) != 2 {
		t.Fatalf("%d items", len(res.Output))
	}
	for i, want := range []string{"first more", "second"} {
		if !strings.Contains(string(res.Output[i].JSON), fmt.Sprintf(`"text":%q`, want)) {
			t.Errorf("item %d = %s, want text %q", i, res.Output[i].JSON, want)
		}
	}
}

func TestTerminalOutputReconciledByPosition(t *testing.T) {
	reasoning := func(enc string, text string) obj {
		return obj{"id": "rs_up", "type": "reasoning", "summary": []any{}, "content": []obj{{"type": "reasoning_text", "text": text}}, "encrypted_content": enc}
	}
	cases := []struct {
		name, streamEnc, termText, termEnc, want string
	}{
		{"terminal encrypted_content wins when all else is equal", "one", "t", "two", "two"},
		{"and fills an empty one", "", "t", "two", "two"},
		{"not when the content differs", "one", "other", "two", "one"},
		{"not when the terminal's is empty", "one", "t", "", "one"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			done := reasoning(c.streamEnc, "t")
			if c.streamEnc == "" {
				delete(done, "encrypted_content")
			}
			evs := []wire.Event{reasonDelta(0, 0, "t"), itemDone(0, done), completed("completed", reasoning(c.termEnc, c.termText))}
			_, res, _ := runChecked(t, evs, testOptions())
			got, _ := itemJSON(t, res, 0)["encrypted_content"].(string)
			if got != c.want {
				t.Errorf("encrypted_content %q, want %q", got, c.want)
			}
		})
	}
}

func TestTerminalCompletesOpenItemsAndAddsMissingOnes(t *testing.T) {
	evs := []wire.Event{
		msgAdded(0, "m"), textPart(0, 0, "m"), textDelta(0, 0, "Hel"),
		completed("completed",
			obj{"id": "msg_f", "type": "message", "role": "assistant", "status": "completed", "content": []obj{{"type": "output_text", "text": "Hello", "annotations": []any{}}}},
			obj{"id": "fc_f", "type": "function_call", "name": "f", "arguments": "{}", "call_id": "call_f", "status": nil}),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if res.Status != wire.StatusCompleted || len(res.Output) != 2 {
		t.Fatalf("status %s, output %s", res.Status, mustJSON(res.Output))
	}
	if got := string(res.Output[0].JSON); !strings.Contains(got, `"text":"Hello"`) || !strings.Contains(got, `"status":"completed"`) {
		t.Errorf("open item not completed from the terminal: %s", got)
	}
	if got, want := string(res.Output[1].JSON), `{"id":"fc_002","type":"function_call","status":"completed","arguments":"{}","call_id":"call_003","name":"f"}`; got != want {
		t.Errorf("extra item\ngot  %s\nwant %s", got, want)
	}
}

func TestTerminalItemInconsistentWithStreamIsNotAdopted(t *testing.T) {
	evs := []wire.Event{
		msgAdded(0, "m"), textDelta(0, 0, "abc"),
		completed("completed", obj{"id": "x", "type": "message", "content": []obj{{"type": "output_text", "text": "xyz"}}}),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if !strings.Contains(string(res.Output[0].JSON), `"text":"abc"`) {
		t.Errorf("item %s, want the streamed text", res.Output[0].JSON)
	}
}

// upstreamIDs are the ids vLLM used in the traces; none may reach the client.
var upstreamIDs = regexpAll(`"(?:id|item_id|call_id)":"([^"]+)"`)

func TestUpstreamIDsNeverReachTheClient(t *testing.T) {
	for _, tf := range traces(t) {
		t.Run(tf.name, func(t *testing.T) {
			raw := readTrace(t, tf)
			var ids []string
			for _, e := range raw {
				ids = append(ids, upstreamIDs(e.Data)...)
			}
			stream, res, _, _ := replay(raw, testOptions())
			out, _ := json.Marshal(res)
			for _, id := range ids {
				if id == "resp_test" {
					continue
				}
				needle := []byte(`"` + id + `"`)
				if bytes.Contains(stream, needle) || bytes.Contains(out, needle) {
					t.Errorf("upstream id %s reached the client", id)
				}
			}
			for _, it := range res.Output {
				if known(it.Type) && !strings.HasPrefix(it.ID, wire.PrefixForType(it.Type)) {
					t.Errorf("item id %s for a %s", it.ID, it.Type)
				}
			}
		})
	}
}

func TestCallIDIsMintedOnceForStreamedDoneAndFinal(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "fc_s", "type": "function_call", "name": "f", "arguments": "", "call_id": "call_streamed"}),
		ev(string(wire.EventArgsDelta), "output_index", 0, "item_id", "fc_s", "delta", "{}"),
		itemDone(0, obj{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "fc_done", "item_id": "fc_s"}),
		completed("completed", obj{"id": "fc_final", "type": "function_call", "name": "f", "arguments": "{}", "call_id": "call_final"}),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	if n := bytes.Count(stream, []byte(`"call_id":"call_002"`)); n != 3 { // added, done, terminal
		t.Errorf("minted call_id appears %d times in the stream, want 3:\n%s", n, stream)
	}
	if got := itemJSON(t, res, 0)["call_id"]; got != "call_002" {
		t.Errorf("result call_id %v", got)
	}
}

func TestVLLMReasoningPartEventsBecomeContentPartEvents(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventVLLMReasoningPartAdded), "output_index", 0, "content_index", 4, "item_id", "msg_r", "part", obj{"type": "reasoning_text", "text": ""}),
		reasonDelta(0, 4, "x"),
		ev(string(wire.EventVLLMReasoningPartDone), "output_index", 0, "content_index", 4, "item_id", "msg_r", "part", obj{"type": "reasoning_text", "text": "x"}),
		completed("completed"),
	}
	stream, _, _ := runChecked(t, evs, testOptions())
	if bytes.Contains(stream, []byte("reasoning_part")) {
		t.Errorf("vLLM-only event reached the client:\n%s", stream)
	}
	if !bytes.Contains(stream, []byte(`"type":"response.content_part.added","sequence_number":3,"item_id":"rs_001","output_index":0,"content_index":0,"part":{"type":"reasoning_text","text":""}`)) {
		t.Errorf("no rewritten content_part.added:\n%s", stream)
	}
}

func TestStatusesAndTerminalEvent(t *testing.T) {
	cases := []struct {
		name       string
		terminal   wire.Event
		wantEvent  string
		wantStatus string
		wantItem   string // status of the open item
	}{
		{"completed", completed("completed"), string(wire.EventCompleted), string(wire.StatusCompleted), string(wire.StatusCompleted)},
		{"vLLM's completed with status incomplete", ev(string(wire.EventCompleted), "response", obj{"status": "incomplete", "incomplete_details": obj{"reason": "max_output_tokens"}}), string(wire.EventIncomplete), string(wire.StatusIncomplete), string(wire.StatusIncomplete)},
		{"response.incomplete", ev(string(wire.EventIncomplete), "response", obj{"status": "incomplete"}), string(wire.EventIncomplete), string(wire.StatusIncomplete), string(wire.StatusIncomplete)},
		{"response.failed", ev(string(wire.EventFailed), "response", obj{"status": "failed", "error": obj{"code": "server_error", "message": "boom"}}), string(wire.EventFailed), string(wire.StatusFailed), string(wire.StatusIncomplete)},
		{"cancelled", ev(string(wire.EventCompleted), "response", obj{"status": "cancelled"}), string(wire.EventFailed), string(wire.StatusFailed), string(wire.StatusIncomplete)},
		{"a terminal without a status", rawEv(string(wire.EventCompleted), `{"type":"response.completed"}`), string(wire.EventCompleted), string(wire.StatusCompleted), string(wire.StatusCompleted)},
		{"an unfinished status", ev(string(wire.EventCompleted), "response", obj{"status": "in_progress"}), string(wire.EventFailed), string(wire.StatusFailed), string(wire.StatusIncomplete)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := []wire.Event{msgAdded(0, "m"), textDelta(0, 0, "x"), c.terminal}
			_, res, info := runChecked(t, evs, testOptions())
			if info.terminal != c.wantEvent || string(res.Status) != c.wantStatus {
				t.Errorf("terminal %s status %s, want %s %s", info.terminal, res.Status, c.wantEvent, c.wantStatus)
			}
			if got := itemJSON(t, res, 0)["status"]; got != c.wantItem {
				t.Errorf("open item status %v, want %s", got, c.wantItem)
			}
			if c.wantStatus == string(wire.StatusIncomplete) && string(res.IncompleteDetails) != `{"reason":"max_output_tokens"}` {
				t.Errorf("incomplete_details %s", res.IncompleteDetails)
			}
			if (c.wantStatus == string(wire.StatusFailed)) != (res.Error != nil) {
				t.Errorf("error %+v for status %s", res.Error, res.Status)
			}
		})
	}
}

func TestStreamWithoutTerminalFails(t *testing.T) {
	evs := []wire.Event{msgAdded(0, "m"), textDelta(0, 0, "part")}
	for _, cause := range []error{nil, errors.New("connection reset")} {
		a := New(testOptions())
		out := a.Start(nil)
		for _, e := range evs {
			out, _ = a.Feed(out, e)
		}
		out, res := a.Close(out, cause)
		out = a.Terminal(out, res)
		info, err := validateStream(append(out, wire.DoneFrame...))
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != wire.StatusFailed || res.Error == nil || res.Error.Code != "server_error" || info.terminal != string(wire.EventFailed) {
			t.Fatalf("cause %v: result %+v, terminal %s", cause, res, info.terminal)
		}
		if strings.Contains(res.Error.Message, "reset") {
			t.Errorf("cause text leaked into the message: %q", res.Error.Message)
		}
		if got := itemJSON(t, res, 0); got["status"] != string(wire.StatusIncomplete) || !strings.Contains(mustJSON(got), `"text":"part"`) {
			t.Errorf("partial item %v", got)
		}
	}
}

func TestCloseAfterTerminalWithCauseFails(t *testing.T) {
	a := New(testOptions())
	out, _ := a.Feed(nil, completed("completed"))
	out, res := a.Close(out, errors.New("client went away"))
	if res.Status != wire.StatusFailed {
		t.Errorf("status %s", res.Status)
	}
	_ = out
}

func TestErrorEventFailsTheStream(t *testing.T) {
	for _, c := range []struct {
		e          wire.Event
		code, want string // the Result's error code and message
	}{
		{rawEv(string(wire.EventError), `{"type":"error","code":"context_length_exceeded","message":"Too long.","param":null}`), "context_length_exceeded", "Too long."},
		{rawEv(string(wire.EventError), `{"type":"error","error":{"type":"invalid_request_error","code":"bad_thing","message":"Nested\u0000form."}}`), "bad_thing", "Nested form."},
		{rawEv(string(wire.EventError), `{"type":"error","code":429,"message":"slow down"}`), "rate_limit_exceeded", "slow down"},
	} {
		e := c.e
		evs := []wire.Event{msgAdded(0, "m"), e, textDelta(0, 0, "after")}
		stream, res, _, ferr := replay(evs, testOptions())
		if !errors.Is(ferr, ErrUpstream) {
			t.Fatalf("Feed error %v", ferr)
		}
		if _, err := validateStream(stream); err != nil {
			t.Fatal(err)
		}
		if res.Status != wire.StatusFailed || res.Error == nil || res.Error.Code != c.code || res.Error.Message != c.want {
			t.Errorf("result %+v, want code %s message %q", res.Error, c.code, c.want)
		}
		if bytes.Contains(stream, []byte(`"text":"after"`)) {
			t.Errorf("events after the error were used")
		}
	}
}

func TestUnknownAndVendorEventsAreDropped(t *testing.T) {
	evs := []wire.Event{
		ev("acme:thing", "x", 1), ev("keepalive"), ev("response.mcp_call.in_progress", "output_index", 0),
		rawEv("", `{"type":"acme:typed-only"}`),
		msgAdded(0, "m"), textDelta(0, 0, "x"), completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	if res.Dropped != 4 || bytes.Contains(stream, []byte("acme")) || bytes.Contains(stream, []byte("keepalive")) {
		t.Errorf("Dropped %d\n%s", res.Dropped, stream)
	}
}

func TestEventTypeFromJSONWhenTheSSEFieldIsMissing(t *testing.T) {
	d := textDelta(0, 0, "x")
	d.Type = ""
	_, res, _ := runChecked(t, []wire.Event{d, completed("completed")}, testOptions())
	if len(res.Output) != 1 {
		t.Fatalf("output %s", mustJSON(res.Output))
	}
}

func TestNoTopLevelErrorKeyAndLogprobs(t *testing.T) {
	for _, tf := range traces(t) {
		stream, _, _, _ := replay(readTrace(t, tf), testOptions())
		evs, err := parseClientStream(stream)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if _, has := e.obj["error"]; has {
				t.Errorf("%s: top-level error key in %s", tf.name, e.Type)
			}
			if (e.Type == string(wire.EventTextDelta) || e.Type == string(wire.EventTextDone)) && string(e.obj["logprobs"]) != "[]" {
				t.Errorf("%s: %s without logprobs", tf.name, e.Type)
			}
			if bytes.Contains(e.Data, []byte(`"encrypted_content":null`)) || bytes.Contains(e.Data, []byte(`"content":null`)) {
				t.Errorf("%s: null content/encrypted_content in %s", tf.name, e.Type)
			}
		}
	}
}

func TestUsageMapping(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"input_tokens":10,"input_tokens_details":{"cached_tokens":3,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":15}`,
			`{"input_tokens":10,"input_tokens_details":{"cached_tokens":3,"cache_write_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":15}`},
		{`{"prompt_tokens":4,"completion_tokens":6}`,
			`{"input_tokens":4,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":10}`},
		{`{"input_tokens":-4,"output_tokens":2.0,"input_tokens_details":null,"total_tokens":"x"}`,
			`{"input_tokens":0,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`},
		{`null`, ``},
	}
	for _, c := range cases {
		e := rawEv(string(wire.EventCompleted), `{"type":"response.completed","response":{"status":"completed","usage":`+c.in+`}}`)
		_, res, _ := runChecked(t, []wire.Event{e}, testOptions())
		if string(res.Usage) != c.want {
			t.Errorf("usage %s\n got %s\nwant %s", c.in, res.Usage, c.want)
		}
	}
	// No usage member at all: nil.
	_, res, _ := runChecked(t, []wire.Event{rawEv(string(wire.EventCompleted), `{"type":"response.completed","response":{"status":"completed"}}`)}, testOptions())
	if res.Usage != nil {
		t.Errorf("usage %s, want nil", res.Usage)
	}
}

func TestUntrustedIndices(t *testing.T) {
	cases := []struct {
		name string
		evs  []wire.Event
		want error // nil: the stream is fine
	}{
		{"negative output_index", []wire.Event{textDelta(-1, 0, "x")}, ErrIndex},
		{"negative content_index", []wire.Event{textDelta(0, -3, "x")}, ErrIndex},
		{"huge output_index", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":99999999999999999999999,"content_index":0,"delta":"x"}`)}, ErrIndex},
		{"output_index past int32", []wire.Event{textDelta(1<<40, 0, "x")}, ErrIndex},
		{"fractional index", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":1.5,"content_index":0,"delta":"x"}`)}, ErrMalformed},
		{"string index", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":"0","content_index":0,"delta":"x"}`)}, ErrMalformed},
		{"new item out of order", []wire.Event{textDelta(5, 0, "x"), textDelta(2, 0, "y")}, ErrIndex},
		{"new part out of order", []wire.Event{textDelta(0, 5, "x"), textDelta(0, 2, "y")}, ErrIndex},
		{"sparse indices are fine", []wire.Event{textDelta(0, 0, "x"), textDelta(1000, 1000, "y"), textDelta(maxIndex, 0, "z")}, nil},
		{"no index and an unknown id", []wire.Event{rawEv(string(wire.EventTextDelta), `{"delta":"x"}`)}, ErrMalformed},
		{"delta is not a string", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"content_index":0,"delta":5}`)}, ErrMalformed},
		{"invalid JSON", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,`)}, ErrMalformed},
		{"trailing garbage", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"delta":"x"} x`)}, ErrMalformed},
		{"raw newline in a string", []wire.Event{rawEv(string(wire.EventTextDelta), "{\"output_index\":0,\"delta\":\"a\nb\"}")}, ErrMalformed},
		{"deep nesting", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"delta":"x","junk":`+strings.Repeat("[", 100000)+strings.Repeat("]", 100000)+`}`)}, ErrMalformed},
		// jsonscan.MaxDepth counts the event object itself: 199 arrays inside it are the limit.
		{"nesting at the limit", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"content_index":0,"delta":"x","junk":`+nested(jsonscan.MaxDepth-1)+`}`)}, nil},
		{"nesting one past the limit", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"content_index":0,"delta":"x","junk":`+nested(jsonscan.MaxDepth)+`}`)}, ErrMalformed},
		{"invalid UTF-8 in a delta is kept", []wire.Event{rawEv(string(wire.EventTextDelta), "{\"output_index\":0,\"content_index\":0,\"delta\":\"a\xffb\"}")}, nil},
		{"a refusal delta for an output_text part", []wire.Event{textDelta(0, 0, "x"), ev(string(wire.EventRefusalDelta), "output_index", 0, "content_index", 0, "delta", "y")}, ErrMalformed},
		{"a text delta for a function call", []wire.Event{ev(string(wire.EventArgsDelta), "output_index", 0, "delta", "{"), textDelta(0, 0, "y")}, ErrMalformed},
		{"arguments for a message", []wire.Event{textDelta(0, 0, "y"), ev(string(wire.EventArgsDelta), "output_index", 0, "delta", "{")}, ErrMalformed},
		{"an escaped key is read as what it spells", []wire.Event{rawEv(string(wire.EventTextDelta), `{"output_index":0,"content_index":0,"d\u0065lta":"x"}`)}, nil},
		{"a text delta for a reasoning item", []wire.Event{reasonDelta(0, 0, "r"), textDelta(0, 1, "y")}, ErrMalformed},
		{"a text done whose text is not a string", []wire.Event{textDelta(0, 0, "x"), rawEv(string(wire.EventTextDone), `{"output_index":0,"content_index":0,"text":5}`)}, ErrMalformed},
		{"a text done without text keeps the deltas", []wire.Event{textDelta(0, 0, "x"), rawEv(string(wire.EventTextDone), `{"output_index":0,"content_index":0}`)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := append(append([]wire.Event{}, c.evs...), completed("completed"))
			stream, res, _, ferr := replay(evs, testOptions())
			if _, err := validateStream(stream); err != nil {
				t.Fatalf("invalid client stream: %v\n%s", err, stream)
			}
			if c.want == nil {
				if ferr != nil || res.Status != wire.StatusCompleted {
					t.Fatalf("error %v status %s", ferr, res.Status)
				}
				return
			}
			if !errors.Is(ferr, c.want) {
				t.Fatalf("error %v, want %v", ferr, c.want)
			}
			if res.Status != wire.StatusFailed || res.Error == nil || res.Error.Code != "server_error" {
				t.Errorf("result %+v", res)
			}
			if !strings.HasPrefix(ferr.Error(), "accumulator: ") {
				t.Errorf("error %q lacks the package prefix", ferr)
			}
		})
	}
}

// nested returns n arrays nested in one another.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestSparseIndexDoesNotAllocateSlots(t *testing.T) {
	a := New(testOptions())
	out, err := a.Feed(nil, textDelta(maxIndex, maxIndex, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.items) != 1 || len(a.items[0].parts) != 1 || len(out) > 4096 {
		t.Fatalf("items %d", len(a.items))
	}
}

func TestLimits(t *testing.T) {
	small := func() Options {
		o := testOptions()
		o.MaxItems, o.MaxItemBytes, o.MaxTotalBytes = 3, 64, 100
		return o
	}
	big := strings.Repeat("x", 40)
	cases := []struct {
		name string
		evs  []wire.Event
	}{
		{"too many items", []wire.Event{textDelta(0, 0, "a"), textDelta(1, 0, "b"), textDelta(2, 0, "c"), textDelta(3, 0, "d")}},
		{"too many parts", []wire.Event{textDelta(0, 0, "a"), textDelta(0, 1, "b"), textDelta(0, 2, "c"), textDelta(0, 3, "d")}},
		{"text over the item limit", []wire.Event{textDelta(0, 0, big), textDelta(0, 0, big)}},
		{"text over the response limit", []wire.Event{textDelta(0, 0, big), textDelta(1, 0, big), textDelta(2, 0, big)}},
		{"too many parts over all items", []wire.Event{textDelta(0, 0, "a"), textDelta(0, 1, "b"), textDelta(1, 0, "c"), textDelta(1, 1, "d")}},
		{"done items over the response limit", []wire.Event{
			itemDone(0, obj{"type": "message", "content": []obj{{"type": "output_text", "text": big}}}),
			itemDone(1, obj{"type": "message", "content": []obj{{"type": "output_text", "text": big}}}),
			itemDone(2, obj{"type": "message", "content": []obj{{"type": "output_text", "text": big}}})}},
		{"text split across parts", []wire.Event{textDelta(0, 0, big), textDelta(0, 1, big)}},
		{"arguments over the limit", []wire.Event{ev(string(wire.EventArgsDelta), "output_index", 0, "delta", big), ev(string(wire.EventArgsDelta), "output_index", 0, "delta", big)}},
		{"a text done over the limit", []wire.Event{textDelta(0, 0, "a"), ev(string(wire.EventTextDone), "output_index", 0, "content_index", 0, "text", big+big)}},
		{"a done item over the limit", []wire.Event{itemDone(0, obj{"type": "message", "content": []obj{{"type": "output_text", "text": big + big}}})}},
		{"a terminal with too many items", []wire.Event{completed("completed", obj{"type": "message"}, obj{"type": "message"}, obj{"type": "message"}, obj{"type": "message"})}},
		{"a terminal item over the limit", []wire.Event{completed("completed", obj{"type": "message", "content": []obj{{"type": "output_text", "text": big + big}}})}},
		{"annotations over the limit", []wire.Event{textDelta(0, 0, "a"), ev(string(wire.EventAnnotation), "output_index", 0, "content_index", 0, "annotation", obj{"type": "file_path", "file_id": big}), ev(string(wire.EventAnnotation), "output_index", 0, "content_index", 0, "annotation", obj{"type": "file_path", "file_id": big})}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs := append(append([]wire.Event{}, c.evs...), completed("completed"))
			stream, res, a, ferr := replay(evs, small())
			if !errors.Is(ferr, ErrLimit) {
				t.Fatalf("error %v, want ErrLimit", ferr)
			}
			if _, err := validateStream(stream); err != nil {
				t.Fatalf("invalid client stream: %v\n%s", err, stream)
			}
			if res.Status != wire.StatusFailed || res.Error.Message != msgLimit {
				t.Errorf("result %+v", res.Error)
			}
			for _, it := range a.items {
				if it.size > 64 {
					t.Errorf("item holds %d bytes past the limit", it.size)
				}
			}
			if a.total > 100 || a.parts > 3 {
				t.Errorf("the response holds %d bytes, %d parts past the limits", a.total, a.parts)
			}
		})
	}
}

// The limits are sizes a response may reach: an item of exactly MaxItemBytes and a response of
// exactly MaxTotalBytes are kept whole; one byte more is ErrLimit (TestLimits).
func TestLimitsAreReachable(t *testing.T) {
	o := testOptions()
	o.MaxItemBytes, o.MaxTotalBytes = 64, 100
	full, rest := strings.Repeat("x", 64), strings.Repeat("y", 36)
	evs := []wire.Event{textDelta(0, 0, full[:30]), textDelta(0, 0, full[30:]), textDelta(1, 0, rest), completed("completed")}
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted || len(res.Output) != 2 {
		t.Fatalf("status %s, %d items, error %+v", res.Status, len(res.Output), res.Error)
	}
	for i, want := range []string{full, rest} {
		if !bytes.Contains(res.Output[i].JSON, []byte(`"text":"`+want+`"`)) {
			t.Errorf("item %d: %s", i, res.Output[i].JSON)
		}
	}
}

// A part opened by an event without content_index has no upstream index, so a later content_index
// (never seen before) opens a new part rather than naming it.
func TestAContentIndexNeverNamesAnUnindexedPart(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventTextDelta), "output_index", 0, "delta", "a"),
		textDelta(0, 1, "b"),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	want := `"content":[{"type":"output_text","text":"a","annotations":[],"logprobs":[]},{"type":"output_text","text":"b","annotations":[],"logprobs":[]}]`
	if !bytes.Contains(res.Output[0].JSON, []byte(want)) {
		t.Errorf("got  %s\nwant %s", res.Output[0].JSON, want)
	}
}

// A text done with no deltas before it opens its part, in the summary for a summary text and in the
// content otherwise.
func TestTextDoneWithoutDeltasOpensItsPart(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventTextDone), "output_index", 0, "content_index", 0, "text", "hi"),
		ev(string(wire.EventSummaryTextDone), "output_index", 1, "summary_index", 0, "text", "sum"),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	for i, want := range []string{
		`"content":[{"type":"output_text","text":"hi","annotations":[],"logprobs":[]}]`,
		`"summary":[{"type":"summary_text","text":"sum"}]`,
	} {
		if !bytes.Contains(res.Output[i].JSON, []byte(want)) {
			t.Errorf("item %d\ngot  %s\nwant %s", i, res.Output[i].JSON, want)
		}
	}
	if bytes.Contains(res.Output[1].JSON, []byte(`"content":[{`)) {
		t.Errorf("the summary text is in the content: %s", res.Output[1].JSON)
	}
}

// A text done replaces its part's deltas: the item's size counts the text once, so an item whose
// deltas and done text each fill most of MaxItemBytes still has room for the rest.
func TestATextDoneReplacesItsDeltasInTheItemSize(t *testing.T) {
	o := testOptions()
	o.MaxItemBytes = 64
	text, more := strings.Repeat("x", 40), strings.Repeat("y", 24)
	evs := []wire.Event{
		textDelta(0, 0, text[:20]), textDelta(0, 0, text[20:]),
		ev(string(wire.EventTextDone), "output_index", 0, "content_index", 0, "text", text),
		textDelta(0, 1, more),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted {
		t.Fatalf("status %s, error %+v", res.Status, res.Error)
	}
	want := `"content":[{"type":"output_text","text":"` + text + `","annotations":[],"logprobs":[]},{"type":"output_text","text":"` + more + `","annotations":[],"logprobs":[]}]`
	if !bytes.Contains(res.Output[0].JSON, []byte(want)) {
		t.Errorf("got  %s\nwant %s", res.Output[0].JSON, want)
	}
}

// A content_part.done's text wins over its part's deltas, and the item's size counts it once (in
// place of the deltas).
func TestAPartDoneReplacesItsDeltasInTheItemSize(t *testing.T) {
	o := testOptions()
	o.MaxItemBytes = 64
	text, more := strings.Repeat("x", 40), strings.Repeat("y", 24)
	evs := []wire.Event{
		textDelta(0, 0, strings.Repeat("s", 20)), textDelta(0, 0, strings.Repeat("t", 20)),
		ev(string(wire.EventPartDone), "output_index", 0, "content_index", 0, "part", obj{"type": "output_text", "text": text, "annotations": []any{}}),
		textDelta(0, 1, more),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted {
		t.Fatalf("status %s, error %+v", res.Status, res.Error)
	}
	want := `"content":[{"type":"output_text","text":"` + text + `","annotations":[],"logprobs":[]},{"type":"output_text","text":"` + more + `","annotations":[],"logprobs":[]}]`
	if !bytes.Contains(res.Output[0].JSON, []byte(want)) {
		t.Errorf("got  %s\nwant %s", res.Output[0].JSON, want)
	}
}

// A content_part.done without a usable part still closes the part it names: the client sees the
// part's done there, and a delta for it after that is late and dropped.
func TestAPartDoneWithoutAUsablePartClosesItsPart(t *testing.T) {
	evs := []wire.Event{
		textDelta(0, 0, "x"),
		ev(string(wire.EventPartDone), "output_index", 0, "content_index", 0, "part", obj{"type": "mystery"}),
		textDelta(0, 0, "late"),
		textDelta(0, 1, "y"),
		completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	want := `"content":[{"type":"output_text","text":"x","annotations":[],"logprobs":[]},{"type":"output_text","text":"y","annotations":[],"logprobs":[]}]`
	if !bytes.Contains(res.Output[0].JSON, []byte(want)) {
		t.Errorf("got  %s\nwant %s", res.Output[0].JSON, want)
	}
	done := bytes.Index(stream, []byte(`"type":"response.content_part.done"`))
	next := bytes.Index(stream, []byte(`"delta":"y"`))
	if done < 0 || next < 0 || done > next {
		t.Errorf("part 0 is not closed before part 1's delta:\n%s", stream)
	}
}

// A content_part.done whose annotations are empty keeps the annotations streamed for the part; one
// that states annotations replaces them.
func TestAPartDoneKeepsStreamedAnnotationsUnlessItStatesSome(t *testing.T) {
	ann := func(oi int, file string) wire.Event {
		return ev(string(wire.EventAnnotation), "output_index", oi, "content_index", 0, "annotation_index", 0, "annotation", obj{"type": "file_path", "file_id": file, "index": 0})
	}
	evs := []wire.Event{
		textDelta(0, 0, "x"), ann(0, "streamed"),
		ev(string(wire.EventPartDone), "output_index", 0, "content_index", 0, "part", obj{"type": "output_text", "text": "x", "annotations": []any{}}),
		textDelta(1, 0, "y"), ann(1, "streamed"),
		ev(string(wire.EventPartDone), "output_index", 1, "content_index", 0, "part", obj{"type": "output_text", "text": "y", "annotations": []obj{
			{"type": "file_path", "file_id": "stated", "index": 0}, {"type": "file_path", "file_id": "stated", "index": 1}}}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if got := res.Output[0].JSON; !bytes.Contains(got, []byte(`"annotations":[{"file_id":"streamed","index":0,"type":"file_path"}]`)) {
		t.Errorf("item 0: %s, want only the streamed annotation", got)
	}
	if got := res.Output[1].JSON; !bytes.Contains(got, []byte(`"annotations":[{"file_id":"stated","index":0,"type":"file_path"},{"file_id":"stated","index":1,"type":"file_path"}]`)) {
		t.Errorf("item 1: %s, want only the two stated annotations", got)
	}
}

// function_call_arguments.done: its arguments replace the deltas (counted once in the item's and
// the response's size: both limits are set to what the output holds exactly), its name, when it has one,
// names a call that had none; without a name (or with null) the call keeps the name it has.
func TestArgumentsDoneReplacesTheDeltasAndNamesTheCall(t *testing.T) {
	args := `{"q":"` + strings.Repeat("x", 82) + `"}`
	evs := []wire.Event{
		ev(string(wire.EventArgsDelta), "output_index", 0, "delta", strings.Repeat("s", 40)),
		ev(string(wire.EventArgsDelta), "output_index", 0, "delta", strings.Repeat("t", 40)),
		ev(string(wire.EventArgsDone), "output_index", 0, "arguments", args, "name", "lookup"),
		ev(string(wire.EventItemAdded), "output_index", 1, "item", obj{"id": "g", "type": "function_call", "name": "plain", "arguments": "", "call_id": "c1"}),
		ev(string(wire.EventArgsDone), "output_index", 1, "arguments", "{}"),
		ev(string(wire.EventItemAdded), "output_index", 2, "item", obj{"id": "h", "type": "function_call", "name": "other", "arguments": "", "call_id": "c2"}),
		rawEv(string(wire.EventArgsDone), `{"output_index":2,"arguments":"{}","name":null}`),
		completed("completed"),
	}
	o := testOptions()
	o.MaxItemBytes, o.MaxTotalBytes = len(args), len(args)+2*len("{}") // the three calls' arguments
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted || len(res.Output) != 3 {
		t.Fatalf("status %s, %d items, error %+v", res.Status, len(res.Output), res.Error)
	}
	argsJSON, _ := json.Marshal(args)
	for i, want := range [][]string{{`"arguments":` + string(argsJSON), `"name":"lookup"`}, {`"name":"plain"`}, {`"name":"other"`}} {
		for _, w := range want {
			if !bytes.Contains(res.Output[i].JSON, []byte(w)) {
				t.Errorf("item %d: want %s in %s", i, w, res.Output[i].JSON)
			}
		}
	}
}

// Annotations count toward the item's size: one that would take the item one byte past
// MaxItemBytes is ErrLimit, and two that fill it exactly (with the comma between them) leave the
// response exactly at MaxTotalBytes for one more byte elsewhere.
func TestAnnotationsCountTowardTheLimits(t *testing.T) {
	ann := obj{"type": "file_path", "file_id": "f", "index": 0}
	annLen := len(mustJSON(ann))
	annEv := func(oi int) wire.Event {
		return ev(string(wire.EventAnnotation), "output_index", oi, "content_index", 0, "annotation", ann)
	}

	o := testOptions()
	o.MaxItemBytes = 64
	_, res, _, ferr := replay([]wire.Event{textDelta(0, 0, strings.Repeat("x", 64-annLen+1)), annEv(0), completed("completed")}, o)
	if !errors.Is(ferr, ErrLimit) || res.Status != wire.StatusFailed {
		t.Errorf("an annotation one byte past the item limit: error %v, status %s", ferr, res.Status)
	}

	o = testOptions()
	o.MaxItemBytes = 1 + 2*annLen + 1
	o.MaxTotalBytes = o.MaxItemBytes + 1
	_, res, _ = runChecked(t, []wire.Event{textDelta(0, 0, "x"), annEv(0), annEv(0), textDelta(1, 0, "y"), completed("completed")}, o)
	if res.Status != wire.StatusCompleted || bytes.Count(res.Output[0].JSON, []byte(`"file_id":"f"`)) != 2 {
		t.Errorf("two annotations that fit: status %s, error %+v, %s", res.Status, res.Error, res.Output[0].JSON)
	}
}

// An annotation may be the first sight of its part (the part is opened); one for a part already
// closed is late and dropped.
func TestAnnotationsOpenTheirPartAndAreDroppedOnceItIsClosed(t *testing.T) {
	ann := func(file string) wire.Event {
		return ev(string(wire.EventAnnotation), "output_index", 0, "content_index", 0, "annotation", obj{"type": "file_path", "file_id": file, "index": 0})
	}
	evs := []wire.Event{
		ann("first"),
		textDelta(0, 0, "x"),
		ev(string(wire.EventPartDone), "output_index", 0, "content_index", 0, "part", obj{"type": "output_text", "text": "x", "annotations": []any{}}),
		ann("late"),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	got := res.Output[0].JSON
	if !bytes.Contains(got, []byte(`"text":"x","annotations":[{"file_id":"first","index":0,"type":"file_path"}]`)) || bytes.Contains(got, []byte("late")) || res.Dropped != 1 {
		t.Errorf("dropped %d, %s", res.Dropped, got)
	}
}

// An output item event whose item JSON is exactly MaxItemBytes long is accepted.
func TestAnItemOfExactlyMaxItemBytesIsAccepted(t *testing.T) {
	item := obj{"id": "m", "type": "message", "role": "assistant", "content": []obj{{"type": "output_text", "text": "hello", "annotations": []any{}}}}
	o := testOptions()
	o.MaxItemBytes = len(mustJSON(item))
	_, res, _ := runChecked(t, []wire.Event{ev(string(wire.EventItemAdded), "output_index", 0, "item", item), itemDone(0, item), completed("completed")}, o)
	if res.Status != wire.StatusCompleted || !bytes.Contains(res.Output[0].JSON, []byte(`"text":"hello"`)) {
		t.Errorf("status %s, error %+v", res.Status, res.Error)
	}
}

// output_item.added with item:null (Open Responses allows it) is dropped, and counted: the item's
// later events create it.
func TestAnItemAddedWithANullItemIsDropped(t *testing.T) {
	evs := []wire.Event{rawEv(string(wire.EventItemAdded), `{"output_index":0,"item":null}`), textDelta(0, 0, "x"), completed("completed")}
	_, res, _ := runChecked(t, evs, testOptions())
	if res.Dropped != 1 || len(res.Output) != 1 || !bytes.Contains(res.Output[0].JSON, []byte(`"text":"x"`)) {
		t.Errorf("dropped %d, %d items", res.Dropped, len(res.Output))
	}
}

// A malformed output_item.done closes the item it names with the streamed state (later events for
// it are late); one for an item never seen is dropped.
func TestAMalformedItemDoneClosesWithTheStreamedState(t *testing.T) {
	evs := []wire.Event{
		textDelta(0, 0, "x"),
		rawEv(string(wire.EventItemDone), `{"output_index":0,"item":{"type":"message","content":5}}`),
		textDelta(0, 0, "late"),
		rawEv(string(wire.EventItemDone), `{"output_index":1,"item":{"type":"message","content":5}}`),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if len(res.Output) != 1 || !bytes.Contains(res.Output[0].JSON, []byte(`"text":"x",`)) || res.Dropped != 2 {
		t.Errorf("dropped %d, %d items, first %s", res.Dropped, len(res.Output), res.Output[0].JSON)
	}
}

// The done of an item of a type respgate passes through is its truth only if it has the type the
// item was announced with; a done alone creates the item.
func TestAPassThroughItemDoneMustKeepItsType(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"type": "mcp_call", "id": "a", "name": "t", "status": "in_progress"}),
		itemDone(0, obj{"type": "code_interpreter_call", "id": "a", "code": "c", "status": "completed"}),
		itemDone(1, obj{"type": "mcp_call", "id": "b", "name": "u", "status": "completed"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if len(res.Output) != 2 || !bytes.Contains(res.Output[0].JSON, []byte(`"type":"mcp_call"`)) || bytes.Contains(res.Output[0].JSON, []byte(`"code"`)) ||
		!bytes.Contains(res.Output[1].JSON, []byte(`"name":"u"`)) {
		for _, it := range res.Output {
			t.Errorf("item %s", it.JSON)
		}
	}
}

// A message's output_item.done is authoritative for its role when it states one; an empty role
// states nothing.
func TestAMessageDoneStatesItsRole(t *testing.T) {
	evs := []wire.Event{
		textDelta(0, 0, "x"), itemDone(0, obj{"type": "message", "role": "system"}),
		ev(string(wire.EventItemAdded), "output_index", 1, "item", obj{"type": "message", "role": "system", "content": []any{}}),
		itemDone(1, obj{"type": "message", "role": ""}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	for i := range 2 {
		if !bytes.Contains(res.Output[i].JSON, []byte(`"role":"system"`)) {
			t.Errorf("item %d: %s", i, res.Output[i].JSON)
		}
	}
}

// A done item that states more parts than were streamed announces each of them to the client at
// the next content_index, in order.
func TestADoneItemsFurtherPartsGetTheNextContentIndices(t *testing.T) {
	evs := []wire.Event{
		textDelta(0, 0, "a"),
		itemDone(0, obj{"type": "message", "content": []obj{
			{"type": "output_text", "text": "a", "annotations": []any{}},
			{"type": "output_text", "text": "b", "annotations": []any{}},
			{"type": "output_text", "text": "c", "annotations": []any{}}}}),
		completed("completed"),
	}
	stream, _, _ := runChecked(t, evs, testOptions())
	for _, w := range []string{`"content_index":1,"delta":"b"`, `"content_index":2,"delta":"c"`} {
		if !bytes.Contains(stream, []byte(w)) {
			t.Errorf("no %s in\n%s", w, stream)
		}
	}
}

// A done item's size for MaxTotalBytes counts its parts' text, annotations and, for parts of types
// respgate passes through, their whole JSON: the limit set to exactly that passes, one byte less
// is ErrLimit.
func TestADoneItemsPartsCountTowardTheResponseLimit(t *testing.T) {
	ann := obj{"type": "file_path", "file_id": "f", "index": 0}
	other := obj{"type": "mystery", "v": "vvvvvvvv"}
	evs := []wire.Event{
		itemDone(0, obj{"type": "message", "content": []any{obj{"type": "output_text", "text": "ab", "annotations": []obj{ann}}, other}}),
		completed("completed"),
	}
	size := len("ab") + len(mustJSON(ann)) + len(mustJSON(other))
	o := testOptions()
	o.MaxTotalBytes = size
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted {
		t.Fatalf("at the limit: status %s, error %+v", res.Status, res.Error)
	}
	o = testOptions()
	o.MaxTotalBytes = size - 1
	if _, _, _, ferr := replay(evs, o); !errors.Is(ferr, ErrLimit) {
		t.Errorf("one byte under: error %v, want ErrLimit", ferr)
	}
}

// A message done with a refusal part (never streamed) tells the client the refusal with the refusal
// events; a part type messages cannot hold stays in the item without events.
func TestADoneMessagesRefusalReachesTheClient(t *testing.T) {
	evs := []wire.Event{
		itemDone(0, obj{"type": "message", "content": []obj{{"type": "refusal", "refusal": "no"}, {"type": "reasoning_text", "text": "hidden"}}}),
		completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	if !bytes.Contains(stream, []byte(`"type":"response.refusal.done"`)) || !bytes.Contains(stream, []byte(`"refusal":"no"`)) {
		t.Errorf("no refusal events:\n%s", stream)
	}
	if bytes.Contains(stream, []byte(`"part":{"type":"reasoning_text"`)) {
		t.Errorf("a reasoning_text part of a message reached the client:\n%s", stream)
	}
	if !bytes.Contains(res.Output[0].JSON, []byte(`{"type":"refusal","refusal":"no"}`)) {
		t.Errorf("item %s", res.Output[0].JSON)
	}
}

// Every kind of done item counts what it holds toward MaxTotalBytes: reasoning its content, summary
// and encrypted_content, a call its arguments, a pass-through item its whole JSON. The limit set
// to exactly the sum passes; one byte less is ErrLimit.
func TestEveryDoneItemKindCountsTowardTheResponseLimit(t *testing.T) {
	other := obj{"type": "mcp_call", "id": "x", "name": "t", "status": "completed"}
	evs := []wire.Event{
		itemDone(0, obj{"type": "reasoning", "content": []obj{{"type": "reasoning_text", "text": "rr"}}, "summary": []obj{{"type": "summary_text", "text": "sss"}}, "encrypted_content": "eeeee"}),
		itemDone(1, obj{"type": "function_call", "name": "f", "call_id": "c", "arguments": `{"a":1}`}),
		itemDone(2, other),
		completed("completed"),
	}
	size := len("rr") + len("sss") + len("eeeee") + len(`{"a":1}`) + len(mustJSON(other))
	o := testOptions()
	o.MaxTotalBytes = size
	_, res, _ := runChecked(t, evs, o)
	if res.Status != wire.StatusCompleted {
		t.Fatalf("at the limit: status %s, error %+v", res.Status, res.Error)
	}
	o = testOptions()
	o.MaxTotalBytes = size - 1
	if _, _, _, ferr := replay(evs, o); !errors.Is(ferr, ErrLimit) {
		t.Errorf("one byte under: error %v, want ErrLimit", ferr)
	}
}

// An error in a terminal response names where it was found: the event for a stream, "response" for
// a non-streamed body.
func TestTerminalErrorsNameTheirSource(t *testing.T) {
	body := `{"id":"r","status":"completed","output":5}`
	_, _, _, ferr := replay([]wire.Event{rawEv(string(wire.EventCompleted), `{"type":"response.completed","response":`+body+`}`)}, testOptions())
	if !errors.Is(ferr, ErrMalformed) || !strings.HasPrefix(ferr.Error(), "accumulator: response.completed: ") {
		t.Errorf("streamed: %v", ferr)
	}
	if _, err := FromResponse(testOptions(), []byte(body)); !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "accumulator: response: ") {
		t.Errorf("non-streamed: %v", err)
	}
}

// A terminal response whose output array is exactly MaxTotalBytes long, with an item of exactly
// MaxItemBytes, is accepted (a message, and an item of a type respgate passes through, whose size
// is its whole JSON).
func TestATerminalOutputAtTheLimitsIsAccepted(t *testing.T) {
	for _, item := range []string{
		mustJSON(obj{"type": "message", "role": "assistant", "content": []obj{{"type": "output_text", "text": "hello", "annotations": []any{}}}}),
		mustJSON(obj{"type": "mcp_call", "id": "x", "name": "t", "status": "completed"}),
	} {
		o := testOptions()
		o.MaxItemBytes, o.MaxTotalBytes = len(item), len(item)+2
		r, err := FromResponse(o, []byte(`{"id":"r","status":"completed","output":[`+item+`]}`))
		if err != nil || r.Status != wire.StatusCompleted || len(r.Output) != 1 {
			t.Errorf("%s: error %v, result %v", item, err, r)
		}
	}
}

// A response.incomplete event makes the response incomplete whatever status its body states,
// except failed, which stays failed.
func TestAResponseIncompleteEventIsIncompleteUnlessItSaysFailed(t *testing.T) {
	for status, want := range map[string]wire.Status{"completed": wire.StatusIncomplete, "incomplete": wire.StatusIncomplete, "failed": wire.StatusFailed} {
		e := rawEv(string(wire.EventIncomplete), `{"type":"response.incomplete","response":{"id":"r","status":"`+status+`","output":[]}}`)
		_, res, _, _ := replay([]wire.Event{textDelta(0, 0, "x"), e}, testOptions())
		if res.Status != want {
			t.Errorf("response.incomplete with status %s: %s, want %s", status, res.Status, want)
		}
	}
}

// Upstream error codes pass through only when they look like codes: [a-z0-9_.], 1 to 64 bytes.
func TestUpstreamErrorCodesMustLookLikeCodes(t *testing.T) {
	for code, want := range map[string]bool{
		"a": true, "z": true, "0": true, "9": true, "_": true, ".": true, "bad_thing.v2": true,
		strings.Repeat("x", 64): true, strings.Repeat("x", 65): false, "": false,
		"A": false, "`": false, "{": false, "/": false, ":": false, "-": false, "a b": false,
	} {
		if got := isCode(code); got != want {
			t.Errorf("isCode(%q) = %v, want %v", code, got, want)
		}
	}
}

// Upstream error messages are cut to 512 bytes, never inside a rune.
func TestUpstreamErrorMessagesAreCutAt512Bytes(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	for in, want := range map[string]string{
		a(512): a(512), a(513): a(512), a(511) + "é": a(511), a(510) + "é": a(510) + "é",
	} {
		if got := sanitizeMessage(in); got != want {
			t.Errorf("sanitizeMessage of %d bytes: %d bytes, want %d", len(in), len(got), len(want))
		}
	}
}

// Token counts are non-negative integers below 2^53 (an integral float is accepted); anything else
// counts 0.
func TestTokenCounts(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "7": 7, "-1": 0, "7.0": 7, "9007199254740991.0": 1<<53 - 1, "9007199254740992.0": 0, "-0.5": 0, `"7"`: 0,
	} {
		if got := count([]byte(in)); got != want {
			t.Errorf("count(%s) = %d, want %d", in, got, want)
		}
	}
}

// A string value is unescaped wherever its escapes are, the first byte included.
func TestStringValuesAreUnescaped(t *testing.T) {
	for in, want := range map[string]string{`"\u0041b"`: "Ab", `"a\"b"`: `a"b`, `"ab"`: "ab"} {
		if got, ok := strValue([]byte(in)); !ok || got != want {
			t.Errorf("strValue(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

// A part event can be the first sight of its item: a content_part opens a message, vLLM's
// reasoning_part and a reasoning_summary_part open reasoning.
func TestAPartEventOpensItsItemOfTheRightType(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventPartAdded), "output_index", 0, "content_index", 0, "part", obj{"type": "output_text", "text": "", "annotations": []any{}}),
		ev(string(wire.EventPartDone), "output_index", 1, "content_index", 0, "part", obj{"type": "output_text", "text": "b", "annotations": []any{}}),
		ev(string(wire.EventVLLMReasoningPartDone), "output_index", 2, "content_index", 0, "part", obj{"type": "reasoning_text", "text": "r"}),
		ev(string(wire.EventSummaryDone), "output_index", 3, "summary_index", 0, "part", obj{"type": "summary_text", "text": "s"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	for i, want := range []string{`"type":"message"`, `"type":"message"`, `"type":"reasoning"`, `"type":"reasoning"`} {
		if !bytes.Contains(res.Output[i].JSON, []byte(want)) {
			t.Errorf("item %d: %s, want %s", i, res.Output[i].JSON, want)
		}
	}
}

// A part event whose part is of a type the SDK unions do not know is dropped, on a message and on
// reasoning alike: the part never reaches the client and the item keeps its other parts.
func TestPartEventsOfUnknownPartTypesAreDropped(t *testing.T) {
	mystery := obj{"type": "mystery", "text": "m"}
	evs := []wire.Event{
		textDelta(0, 0, "x"),
		ev(string(wire.EventPartAdded), "output_index", 0, "content_index", 1, "part", mystery),
		ev(string(wire.EventPartDone), "output_index", 0, "content_index", 1, "part", mystery),
		reasonDelta(1, 0, "r"),
		ev(string(wire.EventPartAdded), "output_index", 1, "content_index", 1, "part", mystery),
		completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	if bytes.Contains(stream, []byte("mystery")) {
		t.Errorf("an unknown part reached the client:\n%s", stream)
	}
	if !bytes.Contains(res.Output[0].JSON, []byte(`"content":[{"type":"output_text","text":"x","annotations":[],"logprobs":[]}]`)) ||
		!bytes.Contains(res.Output[1].JSON, []byte(`"content":[{"type":"reasoning_text","text":"r"}]`)) {
		t.Errorf("output\n%s\n%s", res.Output[0].JSON, res.Output[1].JSON)
	}
}

func TestUnknownItemTypePassesThroughWithItsIDReplaced(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"type": "mcp_call", "id": "mcp_1", "name": "t", "arguments": "", "server_label": "s", "status": "in_progress"}),
		ev("response.mcp_call_arguments.delta", "output_index", 0, "item_id", "mcp_1", "delta", "{}"),
		rawEv(string(wire.EventItemDone), `{"type":"response.output_item.done","output_index":0,"item":{"type":"mcp_call","id":"mcp_1","name":"t",
			"arguments":"{}","server_label":"s","status":"completed","output":null}}`),
		ev(string(wire.EventItemAdded), "output_index", 1, "item", obj{"type": "code_interpreter_call", "id": "ci_1", "status": "in_progress", "code": ""}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if got, want := string(res.Output[0].JSON), `{"id":"item_001","type":"mcp_call","name":"t","arguments":"{}","server_label":"s","status":"completed","output":null}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, want := string(res.Output[1].JSON), `{"id":"item_002","code":"","status":"completed","type":"code_interpreter_call"}`; got != want {
		t.Errorf("cut unknown item\ngot  %s\nwant %s", got, want)
	}
}

func TestFeedAfterTerminalIsIgnored(t *testing.T) {
	a := New(testOptions())
	out, _ := a.Feed(nil, msgAdded(0, "m"))
	out, _ = a.Feed(out, completed("completed"))
	if !a.Done() {
		t.Fatal("not done after response.completed")
	}
	n := len(out)
	out, err := a.Feed(out, textDelta(0, 0, "late"))
	if err != nil || len(out) != n {
		t.Fatalf("event after the terminal produced %q, %v", out[n:], err)
	}
}

func TestCloseAndTerminalAreIdempotent(t *testing.T) {
	a := New(testOptions())
	out := a.Start(nil)
	out = a.Start(out)
	out, _ = a.Feed(out, textDelta(0, 0, "x"))
	out, _ = a.Feed(out, completed("completed"))
	out, r1 := a.Close(out, nil)
	n := len(out)
	out, r2 := a.Close(out, errors.New("again"))
	out = a.Terminal(out, r1)
	m := len(out)
	out = a.Terminal(out, r1)
	if r1 != r2 || len(out) != m || n == m {
		t.Fatalf("Close/Terminal not idempotent")
	}
	if _, err := validateStream(append(out, wire.DoneFrame...)); err != nil {
		t.Fatal(err)
	}
}

func TestTerminalFollowsTheCallersStatus(t *testing.T) {
	a := New(testOptions())
	out, _ := a.Feed(nil, textDelta(0, 0, "x"))
	out, _ = a.Feed(out, completed("completed"))
	out, res := a.Close(out, nil)
	res.Status, res.Error = wire.StatusFailed, &wire.ErrorObject{Code: "server_error", Message: "Storing the response failed."}
	out = a.Terminal(out, res)
	info, err := validateStream(append(out, wire.DoneFrame...))
	if err != nil {
		t.Fatal(err)
	}
	if info.terminal != string(wire.EventFailed) || !bytes.Contains(out, []byte("Storing the response failed.")) {
		t.Errorf("terminal %s", info.terminal)
	}
}

func TestZeroValueAndTerminalWithoutClose(t *testing.T) {
	var a Accumulator
	out, err := a.Feed(nil, textDelta(0, 0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	out = a.Terminal(out, nil) // closes first: no terminal upstream → failed
	info, err := validateStream(append(out, wire.DoneFrame...))
	if err != nil {
		t.Fatal(err)
	}
	if info.terminal != string(wire.EventFailed) {
		t.Errorf("terminal %s", info.terminal)
	}
	if !strings.HasPrefix(str(fields(info.events[0].obj["response"])["id"]), "resp_") {
		t.Errorf("no minted response id")
	}
}

func TestCustomRender(t *testing.T) {
	o := testOptions()
	var statuses []string
	o.Render = func(s *Snapshot) []byte {
		statuses = append(statuses, string(s.Status))
		return []byte("{\n  \"id\": \"" + s.ResponseID + "\",\n  \"status\": \"" + string(s.Status) + "\",\n  \"output\": " + string(AppendOutput(nil, s.Output)) + ",\n  \"echo\": true}")
	}
	stream, _, _ := runChecked(t, []wire.Event{textDelta(0, 0, "x"), completed("completed")}, o)
	if strings.Join(statuses, ",") != "in_progress,in_progress,completed" || !bytes.Contains(stream, []byte(`"echo":true`)) {
		t.Errorf("statuses %v\n%s", statuses, stream)
	}
	o.Render = func(*Snapshot) []byte { return []byte("not json") }
	runChecked(t, []wire.Event{completed("completed")}, o) // falls back to the default rendering
}

func TestAnnotationsAreRenumbered(t *testing.T) {
	evs := []wire.Event{
		msgAdded(0, "m"), textPart(0, 3, "m"), textDelta(0, 3, "see"),
		ev(string(wire.EventAnnotation), "output_index", 0, "content_index", 3, "annotation_index", 9, "annotation", obj{"type": "url_citation", "url": "u", "title": "t", "start_index": 0, "end_index": 3}),
		ev(string(wire.EventAnnotation), "output_index", 0, "content_index", 3, "annotation_index", 12, "annotation", obj{"type": "file_path", "file_id": "f", "index": 1}),
		itemDone(0, obj{"type": "message", "id": "m"}),
		completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, testOptions())
	for _, w := range []string{`"content_index":0,"annotation_index":0`, `"content_index":0,"annotation_index":1`} {
		if !bytes.Contains(stream, []byte(w)) {
			t.Errorf("missing %s", w)
		}
	}
	if got := mustJSON(itemJSON(t, res, 0)["content"]); !strings.Contains(got, `"annotations":[{"end_index":3,"start_index":0,"title":"t","type":"url_citation","url":"u"},{"file_id":"f","index":1,"type":"file_path"}]`) {
		t.Errorf("content %s", got)
	}
}

func TestMultilineUpstreamJSONStaysOnOneLine(t *testing.T) {
	evs := []wire.Event{
		rawEv(string(wire.EventItemAdded), "{\"type\":\"response.output_item.added\",\n\"output_index\":0,\"item\":{\"type\":\"web_search_call\",\n \"id\":\"w\", \"action\":{\n\"q\": \"a b\"}}}"),
		rawEv(string(wire.EventItemDone), "{\"output_index\":0,\"item\":{\"type\":\"web_search_call\",\r\n \"id\":\"w\",\"status\":\"completed\"}}"),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if got := string(res.Output[0].JSON); got != `{"id":"item_001","type":"web_search_call","status":"completed"}` {
		t.Errorf("item %s", got)
	}
}

// An item of a type respgate passes through, still open when the stream ends, takes the terminal
// response's version of it only when that is of the same type (docs/design.md §4: reconciled by
// position, never turning one item into another).
func TestTerminalOutputClosesAnOpenPassThroughItemOnlyWithItsOwnType(t *testing.T) {
	added := ev(string(wire.EventItemAdded), "output_index", 0, "item",
		obj{"type": "web_search_call", "id": "w", "status": "in_progress", "action": obj{"query": "streamed"}})
	for _, c := range []struct {
		name     string
		terminal obj
		want     string
	}{
		{"same type: the terminal's version", obj{"type": "web_search_call", "id": "w", "status": "completed", "action": obj{"query": "final"}},
			`{"id":"item_001","action":{"query":"final"},"status":"completed","type":"web_search_call"}`},
		{"another type: the streamed version", obj{"type": "file_search_call", "id": "f", "status": "completed", "queries": []string{"x"}},
			`{"id":"item_001","action":{"query":"streamed"},"status":"completed","type":"web_search_call"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, res, _ := runChecked(t, []wire.Event{added, completed("completed", c.terminal)}, testOptions())
			if len(res.Output) != 1 || string(res.Output[0].JSON) != c.want {
				var got []string
				for _, it := range res.Output {
					got = append(got, string(it.JSON))
				}
				t.Errorf("output\n%s\nwant\n%s", strings.Join(got, "\n"), c.want)
			}
		})
	}
}

// Items only an incomplete terminal response has (nothing was streamed for them): the last is the
// one max_output_tokens cut, so it alone is incomplete, even though vLLM marks every item
// completed (docs/wire.md §6.2).
func TestTerminalOnlyItemsOfAnIncompleteResponseEndWithTheCutOne(t *testing.T) {
	msg := func(text string) obj {
		return obj{"type": "message", "id": "m" + text, "role": "assistant", "status": "completed",
			"content": []obj{{"type": "output_text", "text": text, "annotations": []any{}}}}
	}
	_, res, _ := runChecked(t, []wire.Event{completed("incomplete", msg("a"), msg("b"), msg("c"))}, testOptions())
	var got []string
	for i := range res.Output {
		got = append(got, itemJSON(t, res, i)["status"].(string))
	}
	if want := []string{"completed", "completed", "incomplete"}; !slices.Equal(got, want) || res.Status != wire.StatusIncomplete {
		t.Errorf("response %s, item statuses %q, want %q", res.Status, got, want)
	}
}

// Terminal reports the Result it is given, as the server does after a failed commit (it sets r to
// failed), whether or not Close ran before; given nil, it reports Close's own Result.
func TestTerminalReportsTheResultItIsGiven(t *testing.T) {
	evs := []wire.Event{msgAdded(0, "m"), textPart(0, 0, "m"), textDelta(0, 0, "hi"), completed("completed")}
	feed := func(t *testing.T) *Accumulator {
		a := New(testOptions())
		var err error
		for _, e := range evs {
			if _, err = a.Feed(nil, e); err != nil {
				t.Fatal(err)
			}
		}
		return a
	}
	failed := func(r *Result) *Result {
		r.Status, r.Error = wire.StatusFailed, &wire.ErrorObject{Code: "server_error", Message: "not stored"}
		return r
	}
	terminalType := func(b []byte) string {
		evs := parseSSE(b)
		if len(evs) == 0 {
			return "none"
		}
		return string(evs[len(evs)-1].Type)
	}
	t.Run("after Close, its Result changed", func(t *testing.T) {
		a := feed(t)
		_, r := a.Close(nil, nil)
		if got := terminalType(a.Terminal(nil, failed(r))); got != string(wire.EventFailed) {
			t.Errorf("terminal %s, want response.failed", got)
		}
	})
	t.Run("without Close, a Result of the caller's", func(t *testing.T) {
		a := feed(t)
		if got := terminalType(a.Terminal(nil, failed(&Result{}))); got != string(wire.EventFailed) {
			t.Errorf("terminal %s, want response.failed", got)
		}
	})
	t.Run("after Close, nil", func(t *testing.T) {
		a := feed(t)
		a.Close(nil, nil)
		if got := terminalType(a.Terminal(nil, nil)); got != string(wire.EventCompleted) {
			t.Errorf("terminal %s, want response.completed", got)
		}
	})
}

// An item first seen without an output_index (a done event that names it only by id) holds no
// output_index, so a later item at any index is a new item, not that one.
func TestAnItemSeenOnlyByIDHoldsNoOutputIndex(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemDone), "item", obj{"id": "x", "type": "message", "role": "assistant", "status": "completed",
			"content": []obj{{"type": "output_text", "text": "first", "annotations": []any{}}}}),
		msgAdded(1, "y"), textPart(1, 0, "y"), textDelta(1, 0, "second"),
		itemDone(1, obj{"id": "y", "type": "message", "role": "assistant"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	var texts []string
	for i := range res.Output {
		texts = append(texts, mustJSON(itemJSON(t, res, i)["content"]))
	}
	if len(texts) != 2 || !strings.Contains(texts[0], `"first"`) || !strings.Contains(texts[1], `"second"`) {
		t.Errorf("output contents %q, want the item seen by id, then the one at output_index 1", texts)
	}
}

// Events without an output_index find their item by its upstream id.
func TestEventsWithoutAnOutputIndexFindTheirItemByID(t *testing.T) {
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "item", obj{"id": "x", "type": "message", "role": "assistant", "content": []any{}, "status": "in_progress"}),
		ev(string(wire.EventPartAdded), "content_index", 0, "item_id", "x", "part", obj{"type": "output_text", "text": "", "annotations": []any{}}),
		ev(string(wire.EventTextDelta), "content_index", 0, "item_id", "x", "delta", "by id", "logprobs", []any{}),
		ev(string(wire.EventItemDone), "item_id", "x", "item", obj{"id": "x", "type": "message", "role": "assistant"}),
		completed("completed"),
	}
	_, res, _ := runChecked(t, evs, testOptions())
	if len(res.Output) != 1 || !strings.Contains(string(res.Output[0].JSON), `"text":"by id"`) {
		t.Errorf("output has %d items, want one with the text streamed by id", len(res.Output))
	}
}

func TestHugeLimitsDoNotOverflow(t *testing.T) {
	a := New(Options{MaxItemBytes: 1 << 62})
	if a.opts.MaxTotalBytes < a.opts.MaxItemBytes {
		t.Fatalf("MaxTotalBytes %d", a.opts.MaxTotalBytes)
	}
	if _, err := a.Feed(nil, textDelta(0, 0, "x")); err != nil {
		t.Fatal(err)
	}
}

// A call of a namespaced tool (sent to vLLM as "<ns>__<name>") reaches the client in its own terms,
// {"name","namespace"}, in every event and in the Result, streamed or not (Options.ToolNames).
func TestNamespacedCallsAreNamedAsTheClientDeclaredThem(t *testing.T) {
	opts := testOptions()
	opts.ToolNames = map[string]wire.ToolName{"agents__spawn": {Namespace: "agents", Name: "spawn"}}
	evs := []wire.Event{
		ev(string(wire.EventItemAdded), "output_index", 0, "item", obj{"id": "f", "type": "function_call", "name": "agents__spawn", "arguments": "", "call_id": "c0"}),
		ev(string(wire.EventArgsDelta), "output_index", 0, "item_id", "f", "delta", `{}`),
		ev(string(wire.EventArgsDone), "output_index", 0, "item_id", "f", "arguments", `{}`, "name", "agents__spawn"),
		itemDone(0, obj{"id": "f", "type": "function_call", "name": "agents__spawn", "call_id": "c0", "arguments": "{}"}),
		ev(string(wire.EventItemAdded), "output_index", 1, "item", obj{"id": "g", "type": "function_call", "name": "plain", "arguments": "", "call_id": "c1"}),
		itemDone(1, obj{"id": "g", "type": "function_call", "name": "plain", "call_id": "c1", "arguments": "{}"}),
		completed("completed"),
	}
	stream, res, _ := runChecked(t, evs, opts)
	if got, want := string(res.Output[0].JSON), `{"id":"fc_001","type":"function_call","status":"completed","arguments":"{}","call_id":"call_002","name":"spawn","namespace":"agents"}`; got != want {
		t.Errorf("namespaced call:\ngot  %s\nwant %s", got, want)
	}
	if got := string(res.Output[1].JSON); !strings.Contains(got, `"name":"plain"}`) {
		t.Errorf("plain call: %s", got)
	}
	if bytes.Contains(stream, []byte("agents__")) {
		t.Errorf("the flat name reached the client:\n%s", stream)
	}

	raw := `{"id":"r","status":"completed","output":[{"id":"f","type":"function_call","name":"agents__spawn","call_id":"c","arguments":"{}","status":"completed"}]}`
	opts = testOptions()
	opts.ToolNames = map[string]wire.ToolName{"agents__spawn": {Namespace: "agents", Name: "spawn"}}
	r, err := FromResponse(opts, []byte(raw))
	if err != nil || !strings.Contains(string(r.Output[0].JSON), `"name":"spawn","namespace":"agents"}`) {
		t.Fatalf("FromResponse: %v %s", err, r.Output[0].JSON)
	}
}
