package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/store"
)

// steerMsg is a response.steer message.
func steerMsg(prev, input string) string {
	return `{"type":"response.steer","previous_response_id":"` + prev + `","input":` + input + `}`
}

// until reads events until one of type typ (on any lane) and returns it with those before it.
func (w *wsConn) until(typ string) (*laneEvent, []*laneEvent) {
	w.t.Helper()
	var seen []*laneEvent
	for {
		ev := w.event()
		if ev.Type == typ {
			return ev, seen
		}
		seen = append(seen, ev)
	}
}

func TestWebSocketSteeringCutsAtTheNextItemBoundaryAndRunsTheSuccessor(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		w := openWS(t, g)
		// The simulator pauses 3 s after the first reasoning delta: the steer arrives inside the
		// reasoning item, so the cut comes at its end, before the message.
		w.create("s", `{"model":"`+harmony+`?stall=3s&stall_after=5","instructions":"be brief","input":"remember: owls hoot"}`)
		created, _ := w.until("response.created")
		id := created.Response.ID
		w.until("response.reasoning_text.delta")
		w.sendRaw(steerMsg(id, `"remember: go left"`))
		acc, _ := w.until("response.steer.accepted")
		if acc.lane() != "s" || acc.Steer.PreviousResponseID != id || !strings.HasPrefix(acc.Steer.ID, "steer_") {
			t.Fatalf("accepted: %s", acc.raw)
		}
		cut, _ := w.until("response.incomplete")
		if cut.lane() != "s" || cut.Response.IncompleteDetails == nil || cut.Response.IncompleteDetails.Reason != "steered" {
			t.Fatalf("steered response: %s", cut.raw)
		}
		if n := len(cut.Response.Output); n != 1 || cut.Response.Output[0]["type"] != "reasoning" || cut.Response.Output[0]["status"] != "completed" {
			t.Fatalf("the steered response keeps its finished reasoning item only: %s", cut.raw)
		}
		// The successor follows on the lane: it continues the steered response with the queued
		// input and the same settings.
		next, _ := w.until("response.created")
		if next.lane() != "s" || next.Response.PreviousResponseID == nil || *next.Response.PreviousResponseID != id {
			t.Fatalf("successor: %s", next.raw)
		}
		done, _ := w.until("response.completed")
		if !strings.Contains(string(done.raw), "Facts: owls hoot; go left.") {
			t.Fatalf("the successor did not see both inputs: %s", done.raw)
		}
		// Both are ordinary stored responses.
		steered, err := g.client.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
		if err != nil || steered.Status != "incomplete" || steered.IncompleteDetails.Reason != "steered" {
			t.Fatalf("stored steered response: %v %+v", err, steered)
		}
		succ, err := g.client.Responses.Get(t.Context(), done.Response.ID, responses.ResponseGetParams{})
		if err != nil || succ.PreviousResponseID != id || succ.Instructions.OfString != "be brief" {
			t.Fatalf("stored successor: %v %s", err, succ.RawJSON())
		}
		// The model saw the steered part's reasoning, in order, before the steering input.
		reqs := g.UpstreamRequests()
		body := string(reqs[len(reqs)-1])
		first, reasoning, steer := strings.Index(body, "owls hoot"), strings.Index(body, `"type":"reasoning"`), strings.Index(body, "go left")
		if first < 0 || reasoning < first || steer < reasoning {
			t.Fatalf("replayed order: input %d, reasoning %d, steering %d", first, reasoning, steer)
		}
		// The successor continues like any response, over HTTP.
		r := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+succ.ID+`","input":"and?"}`)
		if !strings.Contains(r.OutputText(), "go left") {
			t.Fatalf("continuing the successor: %q", r.OutputText())
		}
	})
}

func TestWebSocketSteeringWaitsForFunctionCallOutputs(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		w := openWS(t, g)
		// No reasoning; the simulator pauses inside the function call's arguments.
		w.create("t", `{"model":"`+harmony+`?reasoning=0&stall=3s&stall_after=4",`+wsTool+`,"input":"call lookup"}`)
		created, _ := w.until("response.created")
		id := created.Response.ID
		w.until("response.function_call_arguments.delta")
		w.sendRaw(steerMsg(id, `[{"role":"user","content":"remember: use metric"}]`))
		acc, _ := w.until("response.steer.accepted")
		done, _ := w.until("response.completed")
		var call map[string]any
		for _, it := range done.Response.Output {
			if it["type"] == "function_call" {
				call = it
			}
		}
		if call == nil {
			t.Fatalf("no function call: %s", done.raw)
		}
		pending, _ := w.until("response.steer.pending")
		if pending.lane() != "t" || pending.Steer.ID != acc.Steer.ID || len(pending.RequiredInput) != 1 ||
			pending.RequiredInput[0]["type"] != "function_call_output" || pending.RequiredInput[0]["call_id"] != call["call_id"] || pending.RequiredInput[0]["name"] != "lookup" {
			t.Fatalf("pending: %s", pending.raw)
		}
		// The client's continuation on the lane gets the queued input prepended.
		w.create("t", fmt.Sprintf(`{"model":%q,%s,"previous_response_id":%q,"input":[{"type":"function_call_output","call_id":%q,"output":"12 C"}]}`,
			harmony, wsTool, id, call["call_id"]))
		next, _ := w.until("response.completed")
		if !strings.Contains(string(next.raw), "use metric") || !strings.Contains(string(next.raw), "1 tool outputs") {
			t.Fatalf("continuation: %s", next.raw)
		}
	})
}

func TestWebSocketSteeringFailuresCarryTheSDKsCodes(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		w := openWS(t, g)
		failed := func(code string) *laneEvent {
			t.Helper()
			ev, _ := w.until("response.steer.failed")
			if !strings.Contains(string(ev.raw), `"code":"`+code+`"`) || !strings.Contains(string(ev.raw), `"type":"invalid_request_error"`) {
				t.Fatalf("want %s: %s", code, ev.raw)
			}
			return ev
		}
		w.sendRaw(steerMsg("resp_nope", `"x"`))
		failed("response_not_found")

		done := w.turn(`{"model":"` + harmony + `","input":"hi"}`).ok(t)
		w.sendRaw(steerMsg(done.ID, `"x"`))
		if ev := failed("response_already_completed"); ev.Steer.PreviousResponseID != done.ID || ev.Steer.ID != "" {
			t.Fatalf("failed before an id: %s", ev.raw)
		}
		// A response that failed after it started.
		w.create("f", `{"model":"`+harmony+`?error_after=3","input":"hi"}`)
		f, _ := w.until("response.failed")
		w.sendRaw(steerMsg(f.Response.ID, `"x"`))
		if ev := failed("response_not_active"); ev.lane() != "f" {
			t.Fatalf("stream_id of a known response: %s", ev.raw)
		}

		// A running response, paused mid-message (no boundary while the steers arrive).
		w.create("r", `{"model":"`+harmony+`?reasoning=0&stall=3s&stall_after=5","input":"hi"}`)
		created, _ := w.until("response.created")
		id := created.Response.ID
		w.until("response.output_text.delta")
		w.sendRaw(steerMsg(id, `[{"role":"assistant","content":"x"}]`))
		if ev := failed("invalid_input"); ev.lane() != "r" || !strings.Contains(string(ev.raw), `"input":[{"role":"assistant"`) {
			t.Fatalf("invalid input: %s", ev.raw)
		}
		for i := range 9 {
			w.sendRaw(steerMsg(id, fmt.Sprintf(`"remember: s%d"`, i)))
		}
		for range 8 {
			w.until("response.steer.accepted")
		}
		failed("too_many_pending_steers")
		// Completed before a boundary: the successor follows the completion with all 8 inputs.
		w.until("response.completed")
		succ, _ := w.until("response.completed")
		if !strings.Contains(string(succ.raw), "Facts: s0; s1; s2; s3; s4; s5; s6; s7.") {
			t.Fatalf("successor: %s", succ.raw)
		}

		// Automatic compaction: not steerable.
		w.create("c", `{"model":"`+harmony+`?stall=3s&stall_after=2","context_management":[{"type":"compaction","compact_threshold":100000}],"input":"hi"}`)
		cc, _ := w.until("response.created")
		w.sendRaw(steerMsg(cc.Response.ID, `"x"`))
		failed("steering_not_supported")
		w.until("response.completed")

		// Input the successor cannot take (a text part without text): accepted, the response is
		// cut, the successor fails before it starts and the input comes back with its id.
		w.create("x", `{"model":"`+harmony+`?reasoning=0&stall=3s&stall_after=2","input":"hi"}`)
		xc, _ := w.until("response.created")
		w.sendRaw(steerMsg(xc.Response.ID, `[{"role":"user","content":[{"type":"input_text"}]}]`))
		acc, _ := w.until("response.steer.accepted")
		w.until("response.incomplete")
		if ev := failed("successor_creation_failed"); ev.Steer.ID != acc.Steer.ID || ev.lane() != "x" {
			t.Fatalf("successor failure: %s", ev.raw)
		}
	})
}

// Closing the socket while steering input is queued: the running response is cancelled as a
// disconnect cancels it, and no successor runs.
func TestWebSocketClosedSocketDropsQueuedSteeringInput(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		w := openWS(t, g)
		w.create("q", `{"model":"`+harmony+`?reasoning=0&stall=60s&stall_after=5","input":"hi"}`)
		created, _ := w.until("response.created")
		w.until("response.output_text.delta")
		w.sendRaw(steerMsg(created.Response.ID, `"remember: later"`))
		w.until("response.steer.accepted")
		before := len(g.UpstreamRequests())
		_ = w.c.CloseNow()
		waitFor(t, 10*time.Second, "cancelled status", func() bool {
			r, err := g.client.Responses.Get(t.Context(), created.Response.ID, responses.ResponseGetParams{})
			return err == nil && r.Status == "cancelled"
		})
		waitFor(t, 10*time.Second, "no stream left", func() bool { return g.Server.ActiveStreams() == 0 })
		if n := len(g.UpstreamRequests()) - before; n != 0 {
			t.Fatalf("%d upstream requests after the close: a successor ran", n)
		}
	})
}
