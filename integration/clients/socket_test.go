//go:build compat

package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/respgate/respgate/integration/orcheck"
)

// expectErrorEvents lets the next client receive error events with these codes (a scenario that
// asserts a refusal); any other error event is a violation. reset clears the list.
func (g *gateway) expectErrorEvents(codes ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expectedErrors = append(g.expectedErrors, codes...)
}

// relaySocket relays a WebSocket-mode connection (docs/clients.md) between the client and
// respgate, message by message, and checks every turn's server messages as one event stream
// (orcheck.SocketTurn) and against the canary. Turns are told apart by their lane (stream_id,
// absent on the default lane): lanes run at once and their events interleave. Steering events
// (response.steer.*) are not part of Open Responses: they are checked against openai-node's
// types instead (checkSteerEvent). It returns when either side closes; the goroutine relaying
// the client's messages ends with the connection and is waited for.
func (g *gateway) relaySocket(w http.ResponseWriter, in *http.Request) {
	hdr := http.Header{}
	for _, k := range []string{"Authorization", "OpenAI-Beta", "Session_id", "Originator", "User-Agent"} {
		if v := in.Header.Get(k); v != "" {
			hdr.Set(k, v)
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(in.Context()))
	defer cancel()
	// coder/websocket owns the handshake's body ("You never need to close resp.Body yourself").
	up, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.base, "http")+in.URL.RequestURI(), &websocket.DialOptions{HTTPHeader: hdr}) //nolint:bodyclose // closed by websocket.Dial
	if err != nil {
		status := http.StatusBadGateway
		if res != nil {
			status = res.StatusCode
		}
		http.Error(w, err.Error(), status)
		return
	}
	defer func() { _ = up.CloseNow() }()
	client, err := websocket.Accept(w, in, nil)
	if err != nil {
		return
	}
	defer func() { _ = client.CloseNow() }()
	client.SetReadLimit(-1)
	up.SetReadLimit(-1)
	what := "WebSocket " + in.URL.Path
	g.mu.Lock()
	g.sockets++
	g.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // client → respgate
		defer wg.Done()
		defer cancel()
		for {
			typ, msg, err := client.Read(ctx)
			if err != nil {
				_ = up.Close(websocket.StatusNormalClosure, "")
				return
			}
			if err := up.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	defer cancel()
	turns := map[string]*orcheck.SocketTurn{} // by lane; "" is the default lane
	for {                                     // respgate → client, checked
		typ, msg, err := up.Read(ctx)
		if err != nil {
			for lane, turn := range turns {
				g.report(fmt.Sprintf("%s lane %q (connection ended mid-turn)", what, lane), turn.Close())
			}
			_ = client.Close(websocket.StatusNormalClosure, "")
			return
		}
		if g.canary != nil {
			g.checkCanary(what, bytes.NewBuffer(msg))
		}
		g.checkSocketMessage(what, turns, msg)
		if err := client.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// socketHead is what relaySocket reads of every server message to route it.
type socketHead struct {
	Type     string  `json:"type"`
	StreamID *string `json:"stream_id"`
	Status   int     `json:"status"`
	Error    *struct {
		Type    string          `json:"type"`
		Code    *string         `json:"code"`
		Message string          `json:"message"`
		Param   json.RawMessage `json:"param"`
	} `json:"error"`
}

// checkSocketMessage checks one server message: an error event against the envelope and the
// expected codes, a steering event against the SDK's types, any other event as the next event
// of its lane's turn.
func (g *gateway) checkSocketMessage(what string, turns map[string]*orcheck.SocketTurn, msg []byte) {
	var head socketHead
	if err := json.Unmarshal(msg, &head); err != nil {
		g.report(what, fmt.Errorf("a message that is not an event: %.200s", msg))
		return
	}
	lane := ""
	if head.StreamID != nil {
		lane = *head.StreamID
		what += fmt.Sprintf(" lane %q", lane)
	}
	switch {
	case head.Type == "error":
		g.checkErrorEvent(what, head, msg)
	case strings.HasPrefix(head.Type, "response.steer."):
		g.report(what, checkSteerEvent(head.Type, msg))
	default:
		turn := turns[lane]
		if turn == nil {
			turn = g.schema.NewSocketTurn()
			turns[lane] = turn
		}
		if turn.Message(msg) {
			g.report(what, turn.Close())
			delete(turns, lane)
			g.mu.Lock()
			g.exchanges++
			g.mu.Unlock()
		}
	}
}

// checkErrorEvent accepts an error event only when its code is expected and its envelope is
// complete (docs/clients.md: the POST's envelope and status).
func (g *gateway) checkErrorEvent(what string, head socketHead, msg []byte) {
	g.mu.Lock()
	expected := head.Error != nil && head.Error.Code != nil && slices.Contains(g.expectedErrors, *head.Error.Code)
	g.mu.Unlock()
	switch {
	case !expected:
		g.report(what, fmt.Errorf("error event: %s", msg))
	case head.Status < 400 || head.Error.Type == "" || head.Error.Message == "" || head.Error.Param == nil:
		g.report(what, fmt.Errorf("error event without a full envelope (status, error.type, code, message, param): %s", msg))
	}
}

// checkSteerEvent checks a steering event against openai-node 7.59's types
// (resources/responses/responses.d.ts: ResponseSteerAcceptedEvent, ResponseSteerPendingEvent,
// ResponseSteerFailedEvent), which Open Responses does not define.
func checkSteerEvent(typ string, msg []byte) error {
	var ev struct {
		SequenceNumber *int    `json:"sequence_number"`
		StreamID       *string `json:"stream_id"`
		Steer          *struct {
			ID                 *string         `json:"id"`
			PreviousResponseID string          `json:"previous_response_id"`
			Input              json.RawMessage `json:"input"`
		} `json:"steer"`
		Reason        string `json:"reason"`
		RequiredInput []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"required_input"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg, &ev); err != nil {
		return fmt.Errorf("%s: %w: %.200s", typ, err, msg)
	}
	var bad []string
	if ev.SequenceNumber == nil {
		bad = append(bad, "no sequence_number")
	}
	if ev.Steer == nil || ev.Steer.PreviousResponseID == "" {
		bad = append(bad, "no steer.previous_response_id")
	}
	if ev.StreamID != nil && *ev.StreamID == "" {
		bad = append(bad, "an empty stream_id")
	}
	switch typ {
	case "response.steer.accepted":
		if ev.Steer != nil && (ev.Steer.ID == nil || *ev.Steer.ID == "") {
			bad = append(bad, "no steer.id")
		}
	case "response.steer.pending":
		if ev.Steer != nil && (ev.Steer.ID == nil || *ev.Steer.ID == "") {
			bad = append(bad, "no steer.id")
		}
		if ev.Reason == "" || len(ev.RequiredInput) == 0 {
			bad = append(bad, "no reason or required_input")
		}
		for _, r := range ev.RequiredInput {
			if r.Type == "" || r.CallID == "" {
				bad = append(bad, "a required_input stub without type or call_id")
			}
		}
	case "response.steer.failed":
		if ev.Error == nil || ev.Error.Code == "" || ev.Error.Message == "" || ev.Error.Type != "invalid_request_error" {
			bad = append(bad, "error is not {code, message, type: invalid_request_error}")
		}
		if ev.Steer != nil && len(ev.Steer.Input) == 0 {
			bad = append(bad, "no steer.input")
		}
	default:
		bad = append(bad, "a steering event openai-node does not know")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s: %.300s", typ, strings.Join(bad, ", "), msg)
	}
	return nil
}
