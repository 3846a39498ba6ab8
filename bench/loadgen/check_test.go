package loadgen

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// stream is a valid respgate-style stream as (type, data) pairs: created, one message item with
// three text deltas, completed, [DONE].
func stream() [][2]string {
	evs := [][2]string{
		{"response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`},
		{"response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","content":[]}}`},
		{"response.content_part.added", `{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"lo \"w"}`},
		{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"orld\"\u00e9"}`},
		{"response.output_item.done", `{"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello \"world\"é"}]}}`},
		{"response.completed", `{"type":"response.completed","sequence_number":7,"response":{"id":"resp_1","status":"completed","output":[{"id":"msg_1","type":"message","content":[{"type":"output_text","text":"Hello \"world\"é"}]}]}}`},
		{"", "[DONE]"},
	}
	return evs
}

func check(evs [][2]string, readErr error, partial bool) CheckResult {
	c := NewChecker("completed", true)
	for _, e := range evs {
		c.Feed(e[0], []byte(e[1]))
	}
	return c.Finish(readErr, partial)
}

func without(evs [][2]string, i int) [][2]string {
	out := append([][2]string{}, evs[:i]...)
	return append(out, evs[i+1:]...)
}

func TestCheckerAcceptsAValidStream(t *testing.T) {
	r := check(stream(), nil, false)
	if !r.OK() {
		t.Fatalf("valid stream rejected: %+v", r)
	}
	if r.Events != 8 || r.Deltas != 3 || !r.Done || r.ResponseID != "resp_1" || r.Status != "completed" {
		t.Fatalf("counts: %+v", r)
	}
}

func TestCheckerAcceptsAStreamWithoutDoneWhenNotRequired(t *testing.T) {
	evs := stream()
	c := NewChecker("completed", false)
	for _, e := range evs[:len(evs)-1] {
		c.Feed(e[0], []byte(e[1]))
	}
	if r := c.Finish(nil, false); !r.OK() {
		t.Fatalf("vLLM-style stream rejected: %+v", r)
	}
}

func TestCheckerDetectsALostEvent(t *testing.T) {
	r := check(without(stream(), 4), nil, false)
	if r.OK() || r.Lost != 1 {
		t.Fatalf("lost delta: %+v", r)
	}
	if r.Mismatch != 1 {
		t.Fatalf("the text should no longer add up: %+v", r)
	}
}

func TestCheckerDetectsAReorderedEvent(t *testing.T) {
	evs := stream()
	evs[3], evs[4] = evs[4], evs[3]
	r := check(evs, nil, false)
	if r.OK() || r.Reordered != 1 || r.Lost != 0 {
		t.Fatalf("swapped deltas: %+v", r)
	}
}

func TestCheckerDetectsADuplicatedEvent(t *testing.T) {
	evs := stream()
	evs = append(evs[:5], evs[4:]...)
	r := check(evs, nil, false)
	if r.OK() || r.Duplicated != 1 {
		t.Fatalf("repeated delta: %+v", r)
	}
}

func TestCheckerDetectsASecondTerminalEvent(t *testing.T) {
	evs := stream()
	second := [2]string{"response.completed", strings.Replace(evs[7][1], `"sequence_number":7`, `"sequence_number":8`, 1)}
	evs = append(evs[:8], second, evs[8])
	r := check(evs, nil, false)
	if r.OK() || r.Duplicated != 1 {
		t.Fatalf("two terminal events: %+v", r)
	}
}

func TestCheckerDetectsTruncation(t *testing.T) {
	evs := stream()
	for _, tc := range []struct {
		name    string
		evs     [][2]string
		err     error
		partial bool
	}{
		{"no terminal event", evs[:6], nil, false},
		{"no [DONE]", evs[:8], nil, false},
		{"cut inside a frame", evs[:6], nil, true},
		{"read error", evs[:6], io.ErrUnexpectedEOF, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := check(tc.evs, tc.err, tc.partial); r.OK() || !r.Truncated {
				t.Fatalf("%+v", r)
			}
		})
	}
}

func TestCheckerDetectsAnUnannouncedDelta(t *testing.T) {
	r := check(without(stream(), 1), nil, false)
	if r.OK() || r.Unannounced != 3 {
		t.Fatalf("deltas without output_item.added: %+v", r)
	}
}

func TestCheckerDetectsEventsAfterTheTerminalEvent(t *testing.T) {
	evs := stream()
	evs[6], evs[7] = evs[7], evs[6]
	r := check(evs, nil, false)
	if r.OK() || r.Reordered == 0 {
		t.Fatalf("output_item.done after completed: %+v", r)
	}
}

func TestCheckerDetectsMalformedEventsAndAWrongStatus(t *testing.T) {
	evs := stream()
	evs[2][1] = `{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1"`
	if r := check(evs, nil, false); r.OK() || r.Invalid != 1 {
		t.Fatalf("truncated JSON: %+v", r)
	}
	evs = stream()
	evs[7][1] = strings.Replace(evs[7][1], `"status":"completed"`, `"status":"incomplete"`, 1)
	if r := check(evs, nil, false); r.OK() || !r.WrongStatus {
		t.Fatalf("status incomplete: %+v", r)
	}
}

// TestRunReadsFramesAcrossWrites serves the valid stream with CRLF line ends, a comment and the
// frames split across writes, and expects one clean sample.
func TestRunReadsFramesAcrossWrites(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, ": keepalive\r\n\r\n")
		for _, e := range stream() {
			frame := "data: " + e[1] + "\r\n\r\n"
			if e[0] != "" {
				frame = "event: " + e[0] + "\r\n" + frame
			}
			half := len(frame) / 2
			_, _ = io.WriteString(w, frame[:half])
			_ = rc.Flush()
			_, _ = io.WriteString(w, frame[half:])
			_ = rc.Flush()
		}
	}))
	defer srv.Close()
	res, err := Run(t.Context(), Config{URL: srv.URL, Body: func(int) []byte { return []byte(`{}`) }, Stream: true,
		Requests: 3, Concurrency: 2, ExpectStatus: "completed", RequireDone: true, KeepGaps: true})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(res)
	if s.OK != 3 || s.Failed != 0 || s.Events != 24 || s.Deltas != 9 || s.Gap.N != 24 {
		t.Fatalf("summary: %+v", s)
	}
	for _, x := range res.Samples {
		if x.TTFD <= 0 || x.TTFB <= 0 || x.TTFD < x.TTFB || x.E2E < x.TTFD {
			t.Fatalf("timings out of order: %+v", x)
		}
	}
}

func TestScanEventSkipsNestedValues(t *testing.T) {
	var f eventFields
	data := `{"response":{"type":"x","sequence_number":9,"output":[{"a":"}]\"{"}]},"type":"t","sequence_number":3}`
	if err := scanEvent([]byte(data), &f); err != nil {
		t.Fatal(err)
	}
	if string(f.typ) != `"t"` || string(f.seq) != "3" {
		t.Fatalf("fields: type %s seq %s", f.typ, f.seq)
	}
	for _, bad := range []string{`{"type":"t"`, `{"type":}`, `[1]`, `{"a":1}x`, `{"a":"b}`} {
		if scanEvent([]byte(bad), &f) == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func ExampleChecker() {
	c := NewChecker("completed", false)
	c.Feed("response.created", []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress"}}`))
	c.Feed("response.completed", []byte(`{"type":"response.completed","sequence_number":2,"response":{"id":"r","status":"completed","output":[]}}`))
	r := c.Finish(nil, false)
	fmt.Println(r.OK(), r.Lost)
	// Output: false 1
}

// BenchmarkCheckerDelta is the client's cost of checking one delta event (it must stay well
// below a gateway's per-event cost, or the load generator would be the bottleneck).
func BenchmarkCheckerDelta(b *testing.B) {
	evs := stream()
	c := NewChecker("completed", true)
	for _, e := range evs[:4] {
		c.Feed(e[0], []byte(e[1]))
	}
	name, data := evs[3][0], []byte(evs[3][1])
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		// Replay the same delta: forget its sequence number and truncate its text.
		c.seen[3], c.top = false, 2
		c.parts[partKey{"msg_1", 0}] = c.parts[partKey{"msg_1", 0}][:0]
		c.Feed(name, data)
	}
	if r := c.Finish(nil, false); r.Duplicated+r.Reordered+r.Unannounced+r.Invalid != 0 {
		b.Fatalf("replayed delta was not accepted: %+v", r)
	}
}
