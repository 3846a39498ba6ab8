package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
)

// WebSocket lanes and steering (server/ws.go, server/steer.go, docs/clients.md).

// laneEvent is one message as a lane client sees it.
type laneEvent struct {
	Type     string `json:"type"`
	StreamID *string
	Status   int `json:"status"`
	Error    struct {
		Code string `json:"code"`
	} `json:"error"`
	Response struct {
		ID                string           `json:"id"`
		Status            string           `json:"status"`
		Output            []map[string]any `json:"output"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		PreviousResponseID *string `json:"previous_response_id"`
	} `json:"response"`
	Steer struct {
		ID                 string `json:"id"`
		PreviousResponseID string `json:"previous_response_id"`
	} `json:"steer"`
	RequiredInput []map[string]any `json:"required_input"`
	Delta         string           `json:"delta"`
	OutputIndex   int              `json:"output_index"`
	Item          map[string]any   `json:"item"`
	raw           []byte
}

func (e *laneEvent) lane() string {
	if e.StreamID == nil {
		return "<default>"
	}
	return *e.StreamID
}

func (e *laneEvent) terminal() bool {
	switch e.Type {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}

// event reads one message.
func (w *wsConn) event() *laneEvent {
	w.t.Helper()
	msg := w.next()
	var ev laneEvent
	var sid struct {
		StreamID *string `json:"stream_id"`
	}
	if err := json.Unmarshal(msg, &ev); err != nil || json.Unmarshal(msg, &sid) != nil {
		w.t.Fatalf("message not an event: %s", msg)
	}
	ev.StreamID, ev.raw = sid.StreamID, msg
	return &ev
}

// sendRaw sends one text message.
func (w *wsConn) sendRaw(msg string) {
	w.t.Helper()
	if err := w.c.Write(w.t.Context(), websocket.MessageText, []byte(msg)); err != nil {
		w.t.Fatalf("send: %v", err)
	}
}

// create sends a response.create on lane id ("" the default lane).
func (w *wsConn) create(id, body string) {
	w.t.Helper()
	msg := `{"type":"response.create",`
	if id != "" {
		msg += `"stream_id":"` + id + `",`
	}
	w.sendRaw(msg + strings.TrimPrefix(strings.TrimSpace(body), "{"))
}

// untilTerminals reads until n terminal events (or error events) have come and returns every
// event read, by lane, in order.
func (w *wsConn) untilTerminals(n int) map[string][]*laneEvent {
	w.t.Helper()
	out := map[string][]*laneEvent{}
	for n > 0 {
		ev := w.event()
		out[ev.lane()] = append(out[ev.lane()], ev)
		if ev.terminal() {
			n--
		}
	}
	return out
}

// responsesOf splits a lane's events into its responses: each from response.created to its
// terminal event, none overlapping another (FIFO).
func responsesOf(t *testing.T, evs []*laneEvent) [][]*laneEvent {
	t.Helper()
	var out [][]*laneEvent
	var cur []*laneEvent
	for _, ev := range evs {
		switch {
		case ev.Type == "response.created":
			if cur != nil {
				t.Fatalf("a response started before the one before it ended: %s", ev.raw)
			}
			cur = []*laneEvent{ev}
		case ev.Type == "error":
			out = append(out, []*laneEvent{ev})
		case cur != nil:
			cur = append(cur, ev)
			if ev.terminal() {
				out, cur = append(out, cur), nil
			}
		}
	}
	return out
}

func TestWebSocketLanesRunFIFOConcurrentlyAndEchoTheirStreamID(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		w := openWS(t, g)
		for _, store := range []bool{false, true} {
			w.create("a", fmt.Sprintf(`{"model":%q,"store":%t,"input":"remember: a1"}`, harmony+"?delay_ms=2", store))
			w.create("b", fmt.Sprintf(`{"model":%q,"store":%t,"input":"remember: b1"}`, harmony, store))
			w.create("a", fmt.Sprintf(`{"model":%q,"store":%t,"input":"remember: a2"}`, harmony, store))
			w.create("", fmt.Sprintf(`{"model":%q,"store":%t,"input":"remember: d1"}`, harmony, store))
			w.create("", fmt.Sprintf(`{"model":%q,"store":%t,"input":"remember: d2"}`, harmony, store))
			lanes := w.untilTerminals(5)
			want := map[string][]string{"a": {"a1", "a2"}, "b": {"b1"}, "<default>": {"d1", "d2"}}
			var a1 string
			for lane, facts := range want {
				for _, ev := range lanes[lane] {
					if lane != "<default>" && !strings.Contains(string(ev.raw), `"stream_id":"`+lane+`"`) {
						t.Fatalf("lane %s: an event without its stream_id: %s", lane, ev.raw)
					}
				}
				rs := responsesOf(t, lanes[lane])
				if len(rs) != len(facts) {
					t.Fatalf("lane %s: %d responses, want %d", lane, len(rs), len(facts))
				}
				for i, r := range rs {
					last := r[len(r)-1]
					if last.Type != "response.completed" || !strings.Contains(string(last.raw), "Facts: "+facts[i]+".") {
						t.Fatalf("lane %s response %d (FIFO order): %s", lane, i, last.raw)
					}
				}
				if lane == "a" {
					a1 = rs[0][len(rs[0])-1].Response.ID
				}
			}
			// A lane may fork from a response made on another lane (store:false from the
			// connection's memory, which the lanes share).
			w.create("c", fmt.Sprintf(`{"model":%q,"store":%t,"previous_response_id":%q,"input":"what do you know?"}`, harmony, store, a1))
			fork := w.untilTerminals(1)["c"]
			if last := fork[len(fork)-1]; last.Type != "response.completed" || !strings.Contains(string(last.raw), "Facts: a1.") {
				t.Fatalf("store=%t: the fork did not continue lane a's response: %s", store, last.raw)
			}
		}
	})
}

// An invalid message followed at once by valid creates: each is answered in order, and the
// invalid one holds up nothing (issue 38 item 12).
func TestWebSocketInvalidMessageIsAnsweredInOrderAndHoldsNoSlot(t *testing.T) {
	g := newGateway(t, nil)
	w := openWS(t, g)
	w.create("", `{"model":"`+harmony+`?delay_ms=2","input":"remember: one"}`)
	w.sendRaw(`{"type":"response.create","input":"no model"}`)
	w.sendRaw(`not json`)
	w.create("", `{"model":"`+harmony+`","input":"remember: two"}`)
	want := []string{"response.completed:one", "error:missing_required_parameter", "error:invalid_json", "response.completed:two"}
	for i := 0; i < len(want); {
		ev := w.event()
		if !ev.terminal() {
			continue
		}
		got := ev.Type + ":" + ev.Error.Code
		if ev.Type == "response.completed" {
			got = ev.Type + ":" + strings.TrimSuffix(strings.SplitN(string(ev.raw), "Facts: ", 2)[1][:3], ".")
		}
		if got != want[i] {
			t.Fatalf("answer %d: %s, want %s (%s)", i, got, want[i], ev.raw)
		}
		i++
	}
}

func TestWebSocketLaneLimitAndQueueBoundAreErrorEventsOfTheirLane(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{WSMaxLanes: 2}})
	w := openWS(t, g)
	stalled := `{"model":"` + harmony + `?stall=60s&stall_after=1","input":"hold"}`
	w.create("a", stalled)
	w.create("b", stalled)
	created := 0
	for created < 2 {
		if w.event().Type == "response.created" {
			created++
		}
	}
	// Both lanes run: a third is refused, on its own lane.
	w.create("c", `{"model":"`+harmony+`","input":"x"}`)
	// Lane a runs one response; its queue holds 16 more, the 17th is refused.
	for range 17 {
		w.create("a", `{"model":"`+harmony+`","input":"x"}`)
	}
	got := map[string]string{}
	for len(got) < 2 {
		ev := w.event()
		if ev.Type == "error" {
			got[ev.lane()] = fmt.Sprintf("%d %s", ev.Status, ev.Error.Code)
		}
	}
	if got["c"] != "429 too_many_lanes" || got["a"] != "429 lane_queue_full" {
		t.Fatalf("errors by lane: %v", got)
	}
}
