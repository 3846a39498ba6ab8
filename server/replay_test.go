package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// sseFrame is one frame of an event stream: its event name and data ("" and "[DONE]" for the
// last frame). Comment frames (keepalives) are left out.
type sseFrame struct {
	typ, data string
}

func parseSSE(t *testing.T, body string) []sseFrame {
	t.Helper()
	var out []sseFrame
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	for frame := range strings.SplitSeq(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		switch {
		case strings.HasPrefix(frame, ":"):
		case frame == "data: [DONE]":
			out = append(out, sseFrame{data: "[DONE]"})
		default:
			name, data, ok := strings.Cut(frame, "\ndata: ")
			if !ok || !strings.HasPrefix(name, "event: ") {
				t.Fatalf("malformed frame %q", frame)
			}
			out = append(out, sseFrame{strings.TrimPrefix(name, "event: "), data})
		}
	}
	return out
}

// seqOf is the sequence_number of an event frame.
func seqOf(t *testing.T, f sseFrame) int64 {
	t.Helper()
	var v struct {
		Type string `json:"type"`
		Seq  *int64 `json:"sequence_number"`
	}
	if err := json.Unmarshal([]byte(f.data), &v); err != nil || v.Seq == nil || v.Type != f.typ {
		t.Fatalf("frame %s %s: type %q sequence %v (%v)", f.typ, f.data, v.Type, v.Seq, err)
	}
	return *v.Seq
}

// describe renders an event as its type and the given members' JSON (absent members as "-"),
// with every other member left out.
func describe(t *testing.T, f sseFrame, keys ...string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(f.data), &m); err != nil {
		t.Fatalf("%s: %v", f.data, err)
	}
	parts := []string{f.typ}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			parts = append(parts, k+"="+string(v))
		} else {
			parts = append(parts, k+"=-")
		}
	}
	return strings.Join(parts, " ")
}

func storedItem(id, typ, fields string) wire.Item {
	return wire.Item{ID: id, Type: typ, JSON: []byte(`{"id":"` + id + `","type":"` + typ + `",` + fields + `}`)}
}

// replayOutput is a response with every kind of part a replay regenerates.
var replayOutput = []wire.Item{
	storedItem("rs_1", "reasoning", `"status":"completed","summary":[{"type":"summary_text","text":"S"}],"content":[{"type":"reasoning_text","text":"R"}],"encrypted_content":"E"`),
	storedItem("msg_1", "message", `"status":"completed","content":[{"type":"output_text","text":"T","annotations":[],"logprobs":[]},{"type":"refusal","refusal":"N"}],"role":"assistant"`),
	storedItem("fc_1", "function_call", `"status":"completed","arguments":"{\"a\":1}","call_id":"call_1","name":"f"`),
}

func replayResponse(status wire.Status) *store.Response {
	return &store.Response{ID: "resp_1", Tenant: "t1", Status: status, Model: "m", CreatedAt: time.Unix(100, 0), Echo: []byte(`{}`)}
}

// A response answered without streaming is replayed as a stream by the accumulator, the emitter
// of live streams, fed each stored item whole: each item announced in progress (without its
// parts), each part announced empty, streamed as one delta, done, and closed (a reasoning item's
// content before its summary, as live), the item done as stored, then the terminal event;
// sequence numbers dense from 0.
func TestReplayEventsRegeneratesEachPartAsOneDelta(t *testing.T) {
	b, err := replayEvents(nil, replayResponse(wire.StatusCompleted), replayOutput, -1)
	if err != nil {
		t.Fatal(err)
	}
	frames := parseSSE(t, string(b))
	var got []string
	for i, f := range frames {
		if seq := seqOf(t, f); seq != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %d", i, f.typ, seq)
		}
		switch {
		case strings.HasPrefix(f.typ, "response.output_item."):
			got = append(got, describe(t, f, "output_index", "item"))
		case strings.HasPrefix(f.typ, "response.function_call"):
			got = append(got, describe(t, f, "output_index", "item_id", "delta", "arguments", "name"))
		case strings.HasPrefix(f.typ, "response.reasoning_summary"):
			got = append(got, describe(t, f, "output_index", "item_id", "summary_index", "part", "delta", "text", "logprobs"))
		case f.typ == "response.created" || f.typ == "response.in_progress" || f.typ == "response.completed":
			var v struct{ Response struct{ Status, ID string } }
			_ = json.Unmarshal([]byte(f.data), &v)
			got = append(got, f.typ+" "+v.Response.ID+" "+v.Response.Status)
		default:
			got = append(got, describe(t, f, "output_index", "item_id", "content_index", "part", "delta", "text", "refusal", "logprobs"))
		}
	}
	want := []string{
		"response.created resp_1 in_progress",
		"response.in_progress resp_1 in_progress",
		`response.output_item.added output_index=0 item={"id":"rs_1","type":"reasoning","status":"in_progress","summary":[]}`,
		`response.content_part.added output_index=0 item_id="rs_1" content_index=0 part={"type":"reasoning_text","text":""} delta=- text=- refusal=- logprobs=-`,
		`response.reasoning_text.delta output_index=0 item_id="rs_1" content_index=0 part=- delta="R" text=- refusal=- logprobs=-`,
		`response.reasoning_text.done output_index=0 item_id="rs_1" content_index=0 part=- delta=- text="R" refusal=- logprobs=-`,
		`response.content_part.done output_index=0 item_id="rs_1" content_index=0 part={"type":"reasoning_text","text":"R"} delta=- text=- refusal=- logprobs=-`,
		`response.reasoning_summary_part.added output_index=0 item_id="rs_1" summary_index=0 part={"type":"summary_text","text":""} delta=- text=- logprobs=-`,
		`response.reasoning_summary_text.delta output_index=0 item_id="rs_1" summary_index=0 part=- delta="S" text=- logprobs=-`,
		`response.reasoning_summary_text.done output_index=0 item_id="rs_1" summary_index=0 part=- delta=- text="S" logprobs=-`,
		`response.reasoning_summary_part.done output_index=0 item_id="rs_1" summary_index=0 part={"type":"summary_text","text":"S"} delta=- text=- logprobs=-`,
		`response.output_item.done output_index=0 item=` + string(replayOutput[0].JSON),
		`response.output_item.added output_index=1 item={"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}`,
		`response.content_part.added output_index=1 item_id="msg_1" content_index=0 part={"type":"output_text","text":"","annotations":[],"logprobs":[]} delta=- text=- refusal=- logprobs=-`,
		`response.output_text.delta output_index=1 item_id="msg_1" content_index=0 part=- delta="T" text=- refusal=- logprobs=[]`,
		`response.output_text.done output_index=1 item_id="msg_1" content_index=0 part=- delta=- text="T" refusal=- logprobs=[]`,
		`response.content_part.done output_index=1 item_id="msg_1" content_index=0 part={"type":"output_text","text":"T","annotations":[],"logprobs":[]} delta=- text=- refusal=- logprobs=-`,
		`response.content_part.added output_index=1 item_id="msg_1" content_index=1 part={"type":"refusal","refusal":""} delta=- text=- refusal=- logprobs=-`,
		`response.refusal.delta output_index=1 item_id="msg_1" content_index=1 part=- delta="N" text=- refusal=- logprobs=-`,
		`response.refusal.done output_index=1 item_id="msg_1" content_index=1 part=- delta=- text=- refusal="N" logprobs=-`,
		`response.content_part.done output_index=1 item_id="msg_1" content_index=1 part={"type":"refusal","refusal":"N"} delta=- text=- refusal=- logprobs=-`,
		`response.output_item.done output_index=1 item=` + string(replayOutput[1].JSON),
		`response.output_item.added output_index=2 item={"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"f"}`,
		`response.function_call_arguments.delta output_index=2 item_id="fc_1" delta="{\"a\":1}" arguments=- name=-`,
		`response.function_call_arguments.done output_index=2 item_id="fc_1" delta=- arguments="{\"a\":1}" name="f"`,
		`response.output_item.done output_index=2 item=` + string(replayOutput[2].JSON),
		"response.completed resp_1 completed",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("replay:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// starting_after=k leaves out exactly the events numbered k or less: the terminal event too when
// k is its number. A response still in progress has no terminal event.
func TestReplayEventsResumesAfterStartingAfter(t *testing.T) {
	full, err := replayEvents(nil, replayResponse(wire.StatusIncomplete), replayOutput, -1)
	if err != nil {
		t.Fatal(err)
	}
	all := parseSSE(t, string(full))
	last := int64(len(all) - 1)
	if all[last].typ != string(wire.EventIncomplete) {
		t.Fatalf("the last event is %s, want response.incomplete", all[last].typ)
	}
	for after := int64(-1); after <= last+1; after++ {
		b, err := replayEvents(nil, replayResponse(wire.StatusIncomplete), replayOutput, after)
		if err != nil {
			t.Fatal(err)
		}
		var want []sseFrame
		if after < last {
			want = all[after+1:]
		}
		if got := parseSSEOrEmpty(t, b); !slices.Equal(got, want) {
			t.Fatalf("starting_after=%d: %d events, want the %d after it", after, len(got), len(want))
		}
	}
	b, err := replayEvents(nil, replayResponse(wire.StatusInProgress), replayOutput, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got := parseSSE(t, string(b)); len(got) != len(all)-1 || got[len(got)-1].typ != string(wire.EventItemDone) {
		t.Fatalf("in-progress replay: %d events ending %s, want %d ending with the last item", len(got), got[len(got)-1].typ, len(all)-1)
	}
}

func parseSSEOrEmpty(t *testing.T, b []byte) []sseFrame {
	t.Helper()
	if len(b) == 0 {
		return nil
	}
	return parseSSE(t, string(b))
}

// getStream serves GET /v1/responses/{id}?stream=true (and starting_after when after >= 0).
func (h *turnHarness) getStream(t *testing.T, id string, after int) []sseFrame {
	t.Helper()
	target := "/v1/responses/" + id + "?stream=true"
	if after >= 0 {
		target += fmt.Sprintf("&starting_after=%d", after)
	}
	c := h.newClient()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	req.Header.Set("Authorization", "Bearer k")
	h.s.ServeHTTP(c, req)
	if c.code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, c.code, c.body.String())
	}
	return parseSSE(t, c.body.String())
}

// responseID is the id in a stream's response.created event.
func responseID(t *testing.T, frames []sseFrame) string {
	t.Helper()
	var v struct{ Response struct{ ID string } }
	if len(frames) == 0 || json.Unmarshal([]byte(frames[0].data), &v) != nil || v.Response.ID == "" {
		t.Fatalf("no response.created first: %v", frames)
	}
	return v.Response.ID
}

// A streamed response is replayed from its event log as the client got it live, the terminal
// event rendered from the record with the next number; starting_after=k resumes at k+1, and the
// stream always ends with [DONE].
func TestStoredStreamReplaysItsLogAndResumesAfterStartingAfter(t *testing.T) {
	h := newTurnHarness(t, nil)
	c := h.newClient()
	h.serve(t.Context(), c, `{"model":"openai/gpt-oss-sim","input":"tell me a story","stream":true}`)
	live := parseSSE(t, c.body.String())
	id := responseID(t, live)
	if got := h.getStream(t, id, -1); !slices.Equal(got, live) {
		t.Fatalf("replay differs from the live stream:\n%v\nlive:\n%v", got, live)
	}
	for i, f := range live[:len(live)-1] {
		if seq := seqOf(t, f); seq != int64(i) {
			t.Fatalf("live event %d has sequence_number %d", i, seq)
		}
	}
	n := len(live) - 1 // events before [DONE]; the terminal one is number n-1
	for _, after := range []int{0, 1, n - 2, n - 1, n, n + 5} {
		got := h.getStream(t, id, after)
		want := []sseFrame{{data: "[DONE]"}}
		if after < n-1 {
			want = live[after+1:]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("starting_after=%d: got %d frames, want %d (the events after it and [DONE])", after, len(got), len(want))
		}
	}
}

// A response answered without streaming has no event log: GET ?stream=true regenerates it, and
// its terminal event carries the response as GET renders it.
func TestStoredNonStreamedResponseReplaysFromItsItems(t *testing.T) {
	h := newTurnHarness(t, nil)
	c := h.newClient()
	h.serve(t.Context(), c, syncBody)
	var resp struct{ ID string }
	if err := json.Unmarshal(c.body.Bytes(), &resp); err != nil || resp.ID == "" {
		t.Fatalf("answer %s", c.body.String())
	}
	got := h.getStream(t, resp.ID, -1)
	if len(got) < 4 || got[0].typ != string(wire.EventCreated) || got[len(got)-2].typ != string(wire.EventCompleted) ||
		got[len(got)-1].data != "[DONE]" {
		t.Fatalf("replay %v", got)
	}
	var term struct{ Response json.RawMessage }
	_ = json.Unmarshal([]byte(got[len(got)-2].data), &term)
	if !jsonEqual(term.Response, c.body.Bytes()) {
		t.Fatalf("terminal event's response %s\nwant the answer %s", term.Response, c.body.Bytes())
	}
	if after := h.getStream(t, resp.ID, len(got)-2); !slices.Equal(after, []sseFrame{{data: "[DONE]"}}) {
		t.Fatalf("starting_after the terminal event: %v", after)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// follow (on a harness whose turnStore has listed set) begins an in-progress record, starts GET ?stream=true of it, and once the follower has
// read the (still empty) log, appends runs and commits the record completed with output. It
// returns the follower's frames.
func (h *turnHarness) follow(t *testing.T, runs []store.Event, output []wire.Item) (id string, frames []sseFrame) {
	t.Helper()
	c := h.newClient()
	h.serve(t.Context(), c, syncBody) // a real record to take the request echo from
	var answer struct{ ID string }
	if err := json.Unmarshal(c.body.Bytes(), &answer); err != nil {
		t.Fatalf("answer %s", c.body.String())
	}
	tn := h.s.TenantOf("k")
	real, _, err := h.st.Store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: tn, ID: answer.ID})
	if err != nil {
		t.Fatal(err)
	}
	rec := store.Response{ID: wire.NewID(wire.PrefixResponse), Tenant: tn, Status: wire.StatusInProgress, Model: real.Model,
		CreatedAt: time.Now(), Echo: real.Echo}
	if err := h.st.Store.ResponseBegin(t.Context(), &store.ResponseBeginParams{Response: rec,
		LeaseOwner: "gw_elsewhere", LeaseExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	select { // a count from before the follower
	case <-h.st.listed:
	default:
	}
	follower := h.newClient()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/responses/"+rec.ID+"?stream=true", nil)
		req.Header.Set("Authorization", "Bearer k")
		h.s.ServeHTTP(follower, req)
	}()
	if n := <-h.st.listed; n != 0 {
		t.Fatalf("the first read of a new log found %d runs", n)
	}
	if len(runs) > 0 {
		if err := store.AppendEvents(t.Context(), h.st.Store, &store.ResponseEventAppendParams{Tenant: tn, ResponseID: rec.ID, Events: runs}); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	rec.Status, rec.CompletedAt, rec.Usage = wire.StatusCompleted, &end, real.Usage
	if err := h.st.Store.ResponseCommit(t.Context(), &store.ResponseCommitParams{Response: rec, Output: output, Begun: true}); err != nil {
		t.Fatal(err)
	}
	h.s.engine.Forget(rec.ID) // wakes its readers, as the turn that ends it does
	<-done
	return rec.ID, parseSSE(t, follower.body.String())
}

// logFrame is a logged event frame, marked as logged (a regenerated event has no such member).
func logFrame(seq int, typ wire.EventType) string {
	return fmt.Sprintf("event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,\"logged\":true}\n\n", typ, typ, seq)
}

// GET ?stream=true of a response in progress follows its log from the first event, even when
// the log was still empty at the first read (the logged events, not ones regenerated from its
// items), and ends with the terminal event numbered after the last logged one.
func TestStreamFollowOfAnEmptyLogRelaysItsFirstRun(t *testing.T) {
	h := newTurnHarness(t, func(s *turnStore, _ *upstreamGate) { s.listed = make(chan int, 1) })
	run := store.Event{Seq: 0, Type: wire.EventInProgress,
		Data: []byte(logFrame(0, wire.EventCreated) + logFrame(1, wire.EventInProgress))}
	_, got := h.follow(t, []store.Event{run}, nil)
	var seen []string
	for _, f := range got {
		seen = append(seen, f.typ)
	}
	want := []string{string(wire.EventCreated), string(wire.EventInProgress), string(wire.EventCompleted), ""}
	if !slices.Equal(seen, want) || seqOf(t, got[2]) != 2 || !strings.Contains(got[0].data, `"logged":true`) || !strings.Contains(got[1].data, `"logged":true`) {
		t.Fatalf("follower got %v (terminal %v), want %v with the terminal event numbered 2", seen, got[len(got)-2], want)
	}
}

// A response in progress that logs nothing (a turn answered without streaming) is regenerated
// from its items once it ends, exactly as a replay after it ended.
func TestStreamFollowOfAResponseWithoutALogReplaysItsItems(t *testing.T) {
	h := newTurnHarness(t, func(s *turnStore, _ *upstreamGate) { s.listed = make(chan int, 1) })
	msg := storedItem(wire.NewID(wire.PrefixMessage), "message",
		`"status":"completed","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]`)
	id, got := h.follow(t, nil, []wire.Item{msg})
	if after := h.getStream(t, id, -1); !slices.Equal(got, after) {
		t.Fatalf("the follower got\n%v\nwant what a replay after the end gives\n%v", got, after)
	}
	if len(got) < 5 || got[0].typ != string(wire.EventCreated) {
		t.Fatalf("follower got %v, want the response regenerated from its item", got)
	}
}

// A follow with nothing new sends a keepalive comment once the stream has been silent for
// KeepAlive, not a moment before, and then waits another KeepAlive; new events go out at once.
func TestLogReplaySendsAKeepaliveAfterKeepAliveOfSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keepAlive = 15 * time.Second
		rec := httptest.NewRecorder()
		res := echo.NewResponse(rec, echo.New())
		lr := &logReplay{w: newSSEWriter(res, 0),
			after: -1, last: -1, lastRun: -1, keepAlive: keepAlive}
		sent := func() string {
			s := rec.Body.String()
			rec.Body.Reset()
			return s
		}
		step := func(d time.Duration, runs []store.Event, want string) {
			t.Helper()
			time.Sleep(d)
			if err := lr.send(runs); err != nil {
				t.Fatal(err)
			}
			if got := sent(); got != want {
				t.Fatalf("at %s: sent %q, want %q", d, got, want)
			}
		}
		step(0, nil, "")
		step(keepAlive-time.Nanosecond, nil, "")
		step(time.Nanosecond, nil, ": keepalive\n\n")
		step(keepAlive/2, []store.Event{{Seq: 0, Data: []byte(logFrame(0, wire.EventCreated))}}, logFrame(0, wire.EventCreated))
		step(keepAlive-time.Nanosecond, nil, "")
		step(time.Nanosecond, nil, ": keepalive\n\n")
	})
}
