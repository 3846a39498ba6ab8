package vllmsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// timedFrame is a frame and when the simulator flushed it, counted from the request.
type timedFrame struct {
	at  time.Duration
	typ string
}

// timedReply is an answer with the moment each part of it was written.
type timedReply struct {
	status    int
	headersAt time.Duration // when the status line was written
	bodyAt    time.Duration // when the first body byte was written; -1: no body
	frames    []timedFrame  // SSE frames, each timed when its blank line was written
}

// clockWriter is a ResponseWriter that timestamps what the handler writes on the clock of the
// synctest bubble it runs in.
type clockWriter struct {
	start   time.Time
	header  http.Header
	reply   timedReply
	written bool
	pending []byte // bytes of the frame being written
}

func (w *clockWriter) Header() http.Header { return w.header }

func (w *clockWriter) WriteHeader(status int) {
	if !w.written {
		w.written = true
		w.reply.status, w.reply.headersAt = status, time.Since(w.start)
	}
}

func (w *clockWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.reply.bodyAt < 0 && len(p) > 0 {
		w.reply.bodyAt = time.Since(w.start)
	}
	w.pending = append(w.pending, p...)
	for {
		frame, rest, ok := bytes.Cut(w.pending, []byte("\n\n"))
		if !ok {
			return len(p), nil
		}
		typ, _, _ := strings.Cut(strings.TrimPrefix(string(frame), "event: "), "\n")
		w.reply.frames = append(w.reply.frames, timedFrame{at: time.Since(w.start), typ: typ})
		w.pending = rest
	}
}

func (w *clockWriter) Flush() {}

// serveTimed calls a fresh simulator's handler directly with body and times every write. It must
// run inside synctest.Test: the simulator's delay_ms and stall then wait on the bubble's fake
// clock, which moves only when every goroutine of the bubble is blocked, so each recorded time is
// exactly the waits the simulator asked for, however loaded the machine is.
func serveTimed(t *testing.T, body string) timedReply {
	t.Helper()
	sim := New(Options{Now: fixedNow})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := &clockWriter{start: time.Now(), header: http.Header{}, reply: timedReply{headersAt: -1, bodyAt: -1}}
	sim.ServeHTTP(w, req)
	if len(w.pending) > 0 && strings.HasPrefix(w.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream ended inside a frame: %q", w.pending)
	}
	return w.reply
}

func TestFaultDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	t.Run("on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel+"?delay_ms=20&reasoning=0&tokens=8", true, `"input":"hi"`))
			if r.status != 200 || r.headersAt != 0 {
				t.Errorf("status %d at %s, want 200 at once", r.status, r.headersAt)
			}
			var deltas []time.Duration
			for _, f := range r.frames {
				if f.typ == "response.output_text.delta" {
					deltas = append(deltas, f.at)
				}
			}
			if len(deltas) != 8 {
				t.Fatalf("%d deltas, want 8", len(deltas))
			}
			// Paced by deadline: delta k is due (k+1) delays after the first, and the fake clock
			// moves only by what the simulator waits.
			for k, at := range deltas {
				if want := time.Duration(k+1) * delay; at != want {
					t.Errorf("delta %d at %s, want %s", k, at, want)
				}
			}
			if last := r.frames[len(r.frames)-1]; last.typ != "response.completed" || last.at != 8*delay {
				t.Errorf("last frame %s at %s, want response.completed at %s", last.typ, last.at, 8*delay)
			}
		})
	})
	t.Run("off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel+"?reasoning=0&tokens=8", true, `"input":"hi"`))
			if last := r.frames[len(r.frames)-1]; last.typ != "response.completed" || last.at != 0 {
				t.Errorf("stream without delay: last frame %s at %s, want response.completed without waiting", last.typ, last.at)
			}
		})
	})
	t.Run("non-streaming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// vLLM answers once all the tokens are generated: 8 tokens of 20ms each.
			r := serveTimed(t, body(HarmonyModel+"?delay_ms=20&reasoning=0&tokens=8", false, `"input":"hi"`))
			if r.status != 200 || r.headersAt != 8*delay || r.bodyAt != 8*delay {
				t.Errorf("status %d, headers at %s, body at %s, want 200 with both at %s", r.status, r.headersAt, r.bodyAt, 8*delay)
			}
		})
	})
}

func TestFaultStall(t *testing.T) {
	const stall = 300 * time.Millisecond
	t.Run("before the first event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel+"?stall=300ms", true, `"input":"hi"`))
			if r.headersAt != 0 {
				t.Errorf("headers at %s: they must come before the stall", r.headersAt)
			}
			if r.frames[0].at != stall {
				t.Errorf("first event at %s, want %s", r.frames[0].at, stall)
			}
			if last := r.frames[len(r.frames)-1]; last.typ != "response.completed" || last.at != stall {
				t.Errorf("last frame %s at %s, want response.completed right after the stall", last.typ, last.at)
			}
		})
	})
	t.Run("after K events, seconds syntax", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel+"?stall=0.3&stall_after=3", true, `"input":"hi"`))
			for i, f := range r.frames[:3] {
				if f.at != 0 {
					t.Errorf("event %d at %s: the stall came too early", i, f.at)
				}
			}
			if r.frames[3].at != stall {
				t.Errorf("event 3 at %s, want %s", r.frames[3].at, stall)
			}
		})
	})
	t.Run("off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel, true, `"input":"hi"`))
			if last := r.frames[len(r.frames)-1]; last.typ != "response.completed" || last.at != 0 {
				t.Errorf("stream without a stall: last frame %s at %s", last.typ, last.at)
			}
		})
	})
	t.Run("non-streaming", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := serveTimed(t, body(HarmonyModel+"?stall=300ms", false, `"input":"hi"`))
			if r.status != 200 || r.headersAt != stall || r.bodyAt != stall {
				t.Errorf("status %d, headers at %s, body at %s, want 200 with both at %s", r.status, r.headersAt, r.bodyAt, stall)
			}
		})
	})
}

func TestFaultCutAfter(t *testing.T) {
	srv, _ := newServer(t, Options{})
	t.Run("on", func(t *testing.T) {
		r := post(t, srv, body(ParserModel+"?cut_after=5", true, chatHistory))
		evs, partial := r.events(t)
		if r.readErr == nil {
			t.Errorf("the read ended without an error: the connection was not cut")
		}
		if len(evs) != 5 || partial != "" {
			t.Errorf("%d events and partial %q, want 5 complete events", len(evs), partial)
		}
		for _, ev := range evs {
			if strings.HasPrefix(ev.typ, "response.completed") || ev.typ == "response.failed" {
				t.Errorf("terminal event %s in a cut stream", ev.typ)
			}
		}
	})
	t.Run("zero: headers, then nothing", func(t *testing.T) {
		r := post(t, srv, body(ParserModel+"?cut_after=0", true, chatHistory))
		if r.status != 200 || len(r.raw) != 0 || r.readErr == nil {
			t.Errorf("status %d, %d bytes, read error %v", r.status, len(r.raw), r.readErr)
		}
	})
	t.Run("off", func(t *testing.T) {
		r := post(t, srv, body(ParserModel, true, chatHistory))
		if evs, _ := r.events(t); r.readErr != nil || evs[len(evs)-1].typ != "response.completed" {
			t.Errorf("read error %v", r.readErr)
		}
	})
	t.Run("beyond the end of the stream", func(t *testing.T) {
		r := post(t, srv, body(ParserModel+"?cut_after=1000", true, chatHistory))
		if evs, _ := r.events(t); r.readErr != nil || evs[len(evs)-1].typ != "response.completed" {
			t.Errorf("read error %v", r.readErr)
		}
	})
	t.Run("non-streaming closes before any byte", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/responses",
			strings.NewReader(body(ParserModel+"?cut_after=0", false, chatHistory)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got status %d, want a transport error", resp.StatusCode)
		}
	})
}

func TestFaultCutInside(t *testing.T) {
	srv, _ := newServer(t, Options{})
	full := post(t, srv, body(HarmonyModel, true, chatHistory))
	fullEvs, _ := full.events(t)
	r := post(t, srv, body(HarmonyModel+"?cut_inside=4", true, chatHistory))
	evs, partial := r.events(t)
	if r.readErr == nil {
		t.Errorf("the read ended without an error: the connection was not cut")
	}
	if len(evs) != 4 || partial == "" {
		t.Fatalf("%d events, partial %q: want 4 events and half a frame", len(evs), partial)
	}
	next := "event: " + fullEvs[4].typ + "\ndata: " + fullEvs[4].data + "\n\n"
	// Ids differ between requests; compare the shape up to the first id.
	if !strings.HasPrefix(next, partial[:min(len(partial), 40)]) || len(partial) >= len(next) {
		t.Errorf("partial %q is not the first half of %q", partial, next)
	}
	t.Run("beyond the end of the stream", func(t *testing.T) {
		stream(t, srv, body(HarmonyModel+"?cut_inside=1000", true, chatHistory)) // must complete
	})
	t.Run("non-streaming", func(t *testing.T) {
		r := post(t, srv, body(HarmonyModel+"?cut_inside=0", false, chatHistory))
		if r.status != 200 || r.readErr == nil || json.Valid(r.raw) || len(r.raw) == 0 {
			t.Errorf("status %d, read error %v, %d bytes: want half a body and a cut", r.status, r.readErr, len(r.raw))
		}
	})
}

func TestFaultStatus(t *testing.T) {
	srv, _ := newServer(t, Options{})
	cases := []struct {
		status int
		typ    string
	}{
		{400, "BadRequestError"}, {404, "NotFoundError"}, {429, "Too Many Requests"},
		{500, "InternalServerError"}, {501, "NotImplementedError"}, {503, "Service Unavailable"},
	}
	for _, c := range cases {
		for _, streaming := range []bool{true, false} {
			r := post(t, srv, body(HarmonyModel+"?status="+itoa(c.status), streaming, `"input":"hi"`))
			e := decode(t, r.raw)
			if r.status != c.status || get(e, "error", "type") != c.typ || num(get(e, "error", "code")) != c.status ||
				get(e, "error", "message") == nil || !has(e["error"].(map[string]any), "param") {
				t.Errorf("status=%d stream=%v: got %d %s", c.status, streaming, r.status, r.raw)
			}
		}
	}
	if r := post(t, srv, body(HarmonyModel, false, `"input":"hi"`)); r.status != 200 {
		t.Errorf("without the fault: status %d", r.status)
	}
}

func TestFaultRetryAfterGoesWithTheStatus(t *testing.T) {
	srv, _ := newServer(t, Options{})
	for _, streaming := range []bool{true, false} {
		r := post(t, srv, body(HarmonyModel+"?status=429&retry_after=7", streaming, `"input":"hi"`))
		if r.status != 429 || r.header.Get("Retry-After") != "7" {
			t.Errorf("stream=%v: %d with Retry-After %q, want 429 with 7", streaming, r.status, r.header.Get("Retry-After"))
		}
	}
	date := "Wed, 21 Oct 2026 07:28:00 GMT"
	r := post(t, srv, body(HarmonyModel, false, `"input":"hi"`), "X-Sim-Fault", "status=503&retry_after="+url.QueryEscape(date))
	if r.status != 503 || r.header.Get("Retry-After") != date {
		t.Errorf("HTTP-date: %d with Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	if r := post(t, srv, body(HarmonyModel+"?status=429", false, `"input":"hi"`)); r.header.Values("Retry-After") != nil {
		t.Errorf("Retry-After %q sent without retry_after", r.header.Values("Retry-After"))
	}
	if r := post(t, srv, body(HarmonyModel+"?retry_after=%0A", false, `"input":"hi"`)); r.status != 400 {
		t.Errorf("a control character in retry_after: status %d, want 400", r.status)
	}
}

func itoa(n int) string { b := appendInt(nil, n); return string(b) }

func TestFaultMaxOutputTokens(t *testing.T) {
	srv, _ := newServer(t, Options{})
	for name, req := range map[string]string{
		"fault":      body(HarmonyModel+"?max_output_tokens=5", true, `"input":"hi there"`),
		"request":    body(HarmonyModel, true, `"input":"hi there"`, `"max_output_tokens":5`),
		"both (min)": body(HarmonyModel+"?max_output_tokens=9", true, `"input":"hi there"`, `"max_output_tokens":5`),
	} {
		t.Run(name, func(t *testing.T) {
			resp := final(t, stream(t, srv, req))
			if resp["status"] != "incomplete" || num(get(resp, "usage", "output_tokens")) != 5 ||
				get(resp, "incomplete_details", "reason") != "max_output_tokens" || num(resp["max_output_tokens"]) != 5 {
				t.Errorf("status %v usage %v details %v max %v", resp["status"], resp["usage"], resp["incomplete_details"], resp["max_output_tokens"])
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		if resp := final(t, stream(t, srv, body(HarmonyModel, true, `"input":"hi there"`))); resp["status"] != "completed" {
			t.Errorf("status %v", resp["status"])
		}
	})
	t.Run("non-streaming", func(t *testing.T) {
		resp := decode(t, post(t, srv, body(ParserModel+"?max_output_tokens=5", false, `"input":"hi there"`)).raw)
		if resp["status"] != "incomplete" || num(get(resp, "usage", "output_tokens")) != 5 {
			t.Errorf("status %v usage %v", resp["status"], resp["usage"])
		}
	})
}

func TestFaultMalformed(t *testing.T) {
	srv, _ := newServer(t, Options{})
	r := post(t, srv, body(ParserModel+"?malformed=3", true, chatHistory))
	evs, partial := r.events(t)
	if r.readErr != nil || partial != "" {
		t.Fatalf("read error %v, partial %q", r.readErr, partial)
	}
	var bad []int
	seq := 0
	for i, ev := range evs {
		if ev.obj == nil {
			bad = append(bad, i)
			continue
		}
		if num(ev.obj["sequence_number"]) != seq {
			t.Errorf("event %d sequence_number %v, want %d", i, ev.obj["sequence_number"], seq)
		}
		seq++
	}
	if len(bad) != 1 || bad[0] != 3 {
		t.Errorf("malformed frames at %v, want [3]", bad)
	}
	if evs[len(evs)-1].typ != "response.completed" {
		t.Errorf("the stream did not go on to completion")
	}
	t.Run("off", func(t *testing.T) {
		stream(t, srv, body(ParserModel, true, chatHistory)) // fails on any invalid data
	})
	t.Run("non-streaming", func(t *testing.T) {
		r := post(t, srv, body(ParserModel+"?malformed=0", false, chatHistory))
		if r.status != 200 || r.readErr != nil || json.Valid(r.raw) {
			t.Errorf("status %d, read error %v, valid JSON %v", r.status, r.readErr, json.Valid(r.raw))
		}
	})
}

func TestFaultHuge(t *testing.T) {
	srv, _ := newServer(t, Options{})
	t.Run("small", func(t *testing.T) {
		const size = 1000
		evs := stream(t, srv, body(HarmonyModel+"?huge="+itoa(size), true, `"input":"hi"`))
		deltas := ofType(evs, "response.output_text.delta")
		if got := len(deltas[0].data); got != size {
			t.Errorf("first text delta has %d bytes of data, want %d", got, size)
		}
		text := str(get(final(t, evs), "output", 1, "content", 0, "text"))
		first := str(deltas[0].obj["delta"])
		if !strings.HasPrefix(text, first) || strings.Trim(first, "x ") != "" {
			t.Errorf("the huge delta %.20q… is not the start of the answer %.40q…", first, text)
		}
	})
	t.Run("16 MiB + 1", func(t *testing.T) {
		// Only line lengths here: decoding several 16 MiB JSON lines would dominate the test.
		const size = 16<<20 + 1
		r := post(t, srv, body(HarmonyModel+"?huge="+itoa(size), true, `"input":"hi"`))
		if r.readErr != nil {
			t.Fatal(r.readErr)
		}
		lines := strings.Split(string(r.raw), "\n")
		for i, line := range lines {
			if line == "event: response.output_text.delta" {
				data := strings.TrimPrefix(lines[i+1], "data: ")
				if len(data) != size {
					t.Errorf("first text delta has %d bytes of data, want %d", len(data), size)
				}
				// Cheap shape checks (json.Valid on 16 MiB is slow under -race).
				if !strings.HasPrefix(data, `{"content_index":1,"delta":"xxx`) || !strings.HasSuffix(data, `"type":"response.output_text.delta"}`) ||
					strings.Count(data, "x") < size-300 {
					t.Errorf("first text delta is not a run of x: %.80s…%.80s", data, data[len(data)-80:])
				}
				break
			}
		}
		if last := lines[len(lines)-4]; last != "event: response.completed" {
			t.Errorf("stream ends with %q", last)
		}
	})
	t.Run("off", func(t *testing.T) {
		for _, ev := range stream(t, srv, body(HarmonyModel, true, `"input":"hi"`)) {
			if len(ev.data) > 4096 {
				t.Errorf("%s has %d bytes", ev.typ, len(ev.data))
			}
		}
	})
	t.Run("non-streaming", func(t *testing.T) {
		resp := decode(t, post(t, srv, body(HarmonyModel+"?huge=5000", false, `"input":"hi"`)).raw)
		if text := str(get(resp, "output", 1, "content", 0, "text")); !strings.HasPrefix(text, strings.Repeat("x", 5000)+" Seen") {
			t.Errorf("text %.40q…", text)
		}
	})
}

func TestFaultTokens(t *testing.T) {
	srv, _ := newServer(t, Options{})
	evs := stream(t, srv, body(ParserModel+"?tokens=256", true, `"input":"benchmark"`))
	deltas := ofType(evs, "response.output_text.delta")
	resp := final(t, evs)
	text := str(get(resp, "output", 1, "content", 0, "text"))
	if len(deltas) != 256 || len(strings.Fields(text)) != 256 || !strings.HasPrefix(text, "Seen 1 messages") {
		t.Errorf("%d deltas, %d words: %.60q", len(deltas), len(strings.Fields(text)), text)
	}
	if out, reasoning := num(get(resp, "usage", "output_tokens")), num(get(resp, "usage", "output_tokens_details", "reasoning_tokens")); out != reasoning+256 {
		t.Errorf("output_tokens %d, reasoning %d", out, reasoning)
	}
	plain := stream(t, srv, body(ParserModel, true, `"input":"benchmark"`))
	if text := str(get(final(t, plain), "output", 1, "content", 0, "text")); text != "Seen 1 messages, 0 reasoning items, 0 tool outputs. Facts: none." {
		t.Errorf("without tokens= the text is %q", text)
	}
	short := stream(t, srv, body(ParserModel+"?tokens=3", true, `"input":"benchmark"`))
	if text := str(get(final(t, short), "output", 1, "content", 0, "text")); text != "Seen 1 messages," {
		t.Errorf("tokens=3 text %q", text)
	}
}

func TestFaultReasoningOff(t *testing.T) {
	srv, _ := newServer(t, Options{})
	resp := final(t, stream(t, srv, body(ParserModel+"?reasoning=0", true, chatHistory)))
	if got := outputTexts(resp); len(got) != 1 || !strings.HasPrefix(got[0], "message:") {
		t.Errorf("output %v, want only the message", got)
	}
}

func TestFaultSyntax(t *testing.T) {
	srv, _ := newServer(t, Options{Fault: "status=500"})
	t.Run("model echo is the base name", func(t *testing.T) {
		srv, _ := newServer(t, Options{})
		resp := decode(t, post(t, srv, body(HarmonyModel+"?delay_ms=1&tokens=2", false, `"input":"hi"`)).raw)
		evs := stream(t, srv, body(ParserModel+"?delay_ms=1&tokens=2", true, `"input":"hi"`))
		if resp["model"] != HarmonyModel || final(t, evs)["model"] != ParserModel || get(evs[0].obj, "response", "model") != ParserModel {
			t.Errorf("models %v, %v, want the base names", resp["model"], final(t, evs)["model"])
		}
	})
	t.Run("options fault applies to every request", func(t *testing.T) {
		if r := post(t, srv, body(HarmonyModel, false, `"input":"hi"`)); r.status != 500 {
			t.Errorf("status %d, want 500", r.status)
		}
	})
	t.Run("the model name overrides options, the header overrides both", func(t *testing.T) {
		if r := post(t, srv, body(HarmonyModel+"?status=404", false, `"input":"hi"`)); r.status != 404 {
			t.Errorf("status %d, want 404", r.status)
		}
		if r := post(t, srv, body(HarmonyModel+"?status=404", false, `"input":"hi"`), "X-Sim-Fault", "?status=429"); r.status != 429 {
			t.Errorf("status %d, want 429", r.status)
		}
	})
	t.Run("invalid faults are 400", func(t *testing.T) {
		srv, _ := newServer(t, Options{})
		for _, c := range []struct{ model, header, want string }{
			{HarmonyModel + "?bogus=1", "", "bogus"},
			{HarmonyModel + "?delay_ms=-1", "", "delay_ms"},
			{HarmonyModel, "stall=soon", "stall"},
			{HarmonyModel, "quirks=-idz", "idz"},
			{HarmonyModel, "status=0", "status"},
		} {
			r := post(t, srv, body(c.model, false, `"input":"hi"`), "X-Sim-Fault", c.header)
			if r.status != 400 || !strings.Contains(str(get(decode(t, r.raw), "error", "message")), c.want) {
				t.Errorf("%s %s: %d %s", c.model, c.header, r.status, r.raw)
			}
		}
	})
	t.Run("ValidateFault", func(t *testing.T) {
		if err := ValidateFault("?delay_ms=20&cut_after=5&quirks=none,ids"); err != nil {
			t.Error(err)
		}
		if ValidateFault("cut_after=x") == nil {
			t.Error("cut_after=x accepted")
		}
	})
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"2": 2 * time.Second, "0.25": 250 * time.Millisecond, "150ms": 150 * time.Millisecond, "1m": time.Minute} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"-1", "soon", "-2s"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) accepted", in)
		}
	}
}

// TestClientGoneStopsGeneration: a stream of ~100 s stops as soon as the client goes away.
func TestClientGoneStopsGeneration(t *testing.T) {
	sim := New(Options{Now: fixedNow})
	srv := httptest.NewServer(sim)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/responses",
		strings.NewReader(body(HarmonyModel+"?delay_ms=50&tokens=2000", true, `"input":"hi"`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 4 { // a few lines: generation is under way
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close() // the client goes away
	closed := make(chan struct{})
	go func() {
		srv.Close() // waits for every handler to return
		close(closed)
	}()
	waitOrTimeout(t, closed, 3*time.Second, "the handler returning after the client left")
}
