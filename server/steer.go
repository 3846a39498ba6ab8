package server

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/wire"
)

// Steering a running response on a WebSocket (OpenAI's response.steer, docs/clients.md): the
// client sends {"type":"response.steer","previous_response_id","input"} while a response of the
// connection runs; respgate answers response.steer.accepted (it now owns the input), asks the
// engine to cut the response at its next output-item boundary (engine.Steer: it ends
// response.incomplete, reason "steered"), and its lane then runs the successor: an ordinary
// response continuing the steered one with the queued inputs, in submission order, and the
// steered response's settings. The successor's response.created commits the input; input that
// cannot be committed comes back in response.steer.failed. A response that ends waiting for
// function call outputs keeps the input queued (response.steer.pending) for the client's next
// response.create on that lane that continues it.
//
// The book is the connection's: it is read and changed under socket.mu, and the events that
// answer a steer are written under it too, so response.steer.accepted always precedes the
// successor's response.created.

const (
	// maxPendingSteers bounds the steering inputs queued for one response.
	maxPendingSteers = 8
	// steerMemory bounds the ended responses a connection remembers (to answer a late steer
	// response_already_completed rather than response_not_found) and the parked queues it keeps.
	steerMemory = 64
)

// The steering failure codes of OpenAI's ResponseSteerErrorCode.
const (
	steerNotFound        = "response_not_found"
	steerInvalidInput    = "invalid_input"
	steerNotSupported    = "steering_not_supported"
	steerTooMany         = "too_many_pending_steers"
	steerCompleted       = "response_already_completed"
	steerNotActive       = "response_not_active"
	steerSuccessorFailed = "successor_creation_failed"
)

var steerMessages = map[string]string{
	steerNotFound:        "No response with this id is running on this connection.",
	steerNotSupported:    "Responses bound to a conversation or using automatic compaction (context_management) cannot be steered.",
	steerTooMany:         "This response already has its maximum of pending steering inputs.",
	steerCompleted:       "The response has completed and no longer accepts steering input.",
	steerNotActive:       "The response is no longer accepting steering input.",
	steerSuccessorFailed: "The successor response could not be created; the input was not committed.",
}

// steerInput is one accepted (or refused) steering submission.
type steerInput struct {
	id    string // "" before one is allocated (a refused submission)
	prev  string
	input json.RawMessage // as sent
}

// steerTarget is a response running on a lane, and the steering input queued for it.
type steerTarget struct {
	id        string // the response id (set once prepared)
	lane      string
	steer     *engine.Steer
	supported bool
	queued    []*steerInput
}

// endedResponse is what the book remembers of a response that ended on the connection.
type endedResponse struct {
	lane      string
	completed bool
}

// parkedSteers is steering input waiting for the continuation of a response that ended with
// function calls (response.steer.pending).
type parkedSteers struct {
	lane   string
	steers []*steerInput
}

// steerBook is a connection's steering state (guarded by socket.mu).
type steerBook struct {
	running     map[string]*steerTarget
	ended       map[string]endedResponse
	endedOrder  []string
	parked      map[string]*parkedSteers
	parkedOrder []string
}

func newSteerBook() *steerBook {
	return &steerBook{running: map[string]*steerTarget{}, ended: map[string]endedResponse{}, parked: map[string]*parkedSteers{}}
}

// runTarget makes prepared response id a steering target.
func (k *socket) runTarget(id string, tg *steerTarget) {
	k.mu.Lock()
	defer k.mu.Unlock()
	tg.id = id
	k.steers.running[id] = tg
}

// endTarget ends tg's response with out (nil: it failed before the client saw it) and returns the
// steering input queued for it; a steer from now on is answered as for an ended response.
func (k *socket) endTarget(tg *steerTarget, out *engine.Outcome) []*steerInput {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.steers
	q := tg.queued
	tg.queued = nil
	if tg.id == "" {
		return q
	}
	delete(b.running, tg.id)
	b.ended[tg.id] = endedResponse{lane: tg.lane, completed: out != nil && out.Response.Status == wire.StatusCompleted}
	b.endedOrder = append(b.endedOrder, tg.id)
	if len(b.endedOrder) > steerMemory {
		delete(b.ended, b.endedOrder[0])
		b.endedOrder = b.endedOrder[1:]
	}
	return q
}

// takeParked returns (and forgets) the steering input parked for the continuation of response
// prev on lane laneID.
func (k *socket) takeParked(laneID, prev string) []*steerInput {
	if prev == "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.steers.parked[prev]
	if p == nil || p.lane != laneID {
		return nil
	}
	delete(k.steers.parked, prev)
	return p.steers
}

// park keeps steers for the client's continuation of response id, which ended waiting for the
// outputs stubs names, and tells the client so: response.steer.pending per submission.
func (k *socket) park(laneID, id string, steers []*steerInput, stubs []json.RawMessage) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.steers
	b.parked[id] = &parkedSteers{lane: laneID, steers: steers}
	b.parkedOrder = append(b.parkedOrder, id)
	for len(b.parkedOrder) > steerMemory {
		old := b.parkedOrder[0]
		b.parkedOrder = b.parkedOrder[1:]
		if p := b.parked[old]; p != nil {
			delete(b.parked, old)
			k.sendSteerFailed(p.lane, p.steers, steerNotActive)
		}
	}
	for _, st := range steers {
		_ = k.sendSteerEvent(laneID, struct {
			Type          string            `json:"type"`
			Seq           int64             `json:"sequence_number"`
			Reason        string            `json:"reason"`
			RequiredInput []json.RawMessage `json:"required_input"`
			Steer         steerRef          `json:"steer"`
		}{"response.steer.pending", k.seq.Add(1) - 1, "waiting_for_required_input", stubs, steerRef{st.id, st.prev}})
	}
}

// steerError is ResponseSteerFailedEvent.Error.
type steerError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

type steerRef struct {
	ID                 string `json:"id"`
	PreviousResponseID string `json:"previous_response_id"`
}

// failSteers answers steers with response.steer.failed code, returning their input.
func (k *socket) failSteers(laneID string, steers []*steerInput, code string) {
	if len(steers) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sendSteerFailed(laneID, steers, code)
}

// sendSteerFailed sends response.steer.failed for each of steers (under mu).
func (k *socket) sendSteerFailed(laneID string, steers []*steerInput, code string) {
	for _, st := range steers {
		k.sendSteerFailedMessage(laneID, st, code, steerMessages[code])
	}
}

func (k *socket) sendSteerFailedMessage(laneID string, st *steerInput, code, message string) {
	type failedSteer struct {
		Input              json.RawMessage `json:"input"`
		PreviousResponseID string          `json:"previous_response_id"`
		ID                 string          `json:"id,omitempty"`
	}
	input := st.input
	if input == nil {
		input = jsonNull
	}
	_ = k.sendSteerEvent(laneID, struct {
		Type  string      `json:"type"`
		Seq   int64       `json:"sequence_number"`
		Error steerError  `json:"error"`
		Steer failedSteer `json:"steer"`
	}{"response.steer.failed", k.seq.Add(1) - 1, steerError{code, message, wire.ErrInvalidRequest},
		failedSteer{input, st.prev, st.id}})
}

// sendSteerEvent sends one steering event of lane laneID.
func (k *socket) sendSteerEvent(laneID string, ev any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return k.send(withStreamID(b, laneID))
}

// steer answers one response.steer message: accepted (and the running response asked to stop at
// its next boundary) or failed with the SDK's code.
func (k *socket) steer(data []byte) {
	members, err := scanObject(data, k.s.cfg.MaxJSONDepth)
	st := &steerInput{}
	if err == nil {
		st.input = members["input"]
		_ = json.Unmarshal(members["previous_response_id"], &st.prev)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.steers
	tg := b.running[st.prev]
	laneID := ""
	switch e, ended := b.ended[st.prev]; {
	case tg != nil:
		laneID = tg.lane
	case ended:
		laneID = e.lane
	}
	if err != nil {
		k.sendSteerFailedMessage(laneID, st, steerInvalidInput, "The response.steer message must be one JSON object.")
		return
	}
	if msg := steerFault(members); msg != "" {
		k.sendSteerFailedMessage(laneID, st, steerInvalidInput, msg)
		return
	}
	code := ""
	switch e, ended := b.ended[st.prev]; {
	case tg == nil && ended && e.completed:
		code = steerCompleted
	case tg == nil && ended:
		code = steerNotActive
	case tg == nil:
		code = steerNotFound
	case !tg.supported:
		code = steerNotSupported
	case len(tg.queued) >= maxPendingSteers:
		code = steerTooMany
	}
	if code != "" {
		k.sendSteerFailed(laneID, []*steerInput{st}, code)
		return
	}
	st.id = wire.NewID("steer_")
	tg.queued = append(tg.queued, st)
	_ = k.sendSteerEvent(laneID, struct {
		Type  string   `json:"type"`
		Seq   int64    `json:"sequence_number"`
		Steer steerRef `json:"steer"`
	}{"response.steer.accepted", k.seq.Add(1) - 1, steerRef{st.id, st.prev}})
	tg.steer.Ask()
}

// steerFault validates a response.steer message (OpenAI's ResponseSteerEvent): only type,
// previous_response_id and input; input a non-empty string or a non-empty array of user messages
// ({type?: "message", role: "user", content}) whose content is a string or input_text,
// input_image and input_file parts. It returns the fault ("" when there is none).
func steerFault(members map[string]json.RawMessage) string {
	for name := range members {
		if name != "type" && name != "previous_response_id" && name != "input" {
			return "response.steer accepts only 'type', 'previous_response_id' and 'input'; '" + name + "' is not allowed (the target response picks the lane)."
		}
	}
	var prev string
	if json.Unmarshal(members["previous_response_id"], &prev) != nil || prev == "" {
		return "'previous_response_id' must name the response to steer."
	}
	raw := members["input"]
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return "'input' must not be empty."
		}
		return ""
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return "'input' must be a string or a non-empty array of user messages."
	}
	for _, m := range msgs {
		if msg := steerMessageFault(m); msg != "" {
			return msg
		}
	}
	return ""
}

// steerMessageFault validates one message of a steering input.
func steerMessageFault(m map[string]json.RawMessage) string {
	const only = "Steering input may hold only user messages ({type?: \"message\", role: \"user\", content})."
	for name := range m {
		if name != "type" && name != "role" && name != "content" {
			return only
		}
	}
	var typ, role string
	if t, ok := m["type"]; ok && (json.Unmarshal(t, &typ) != nil || typ != "message") {
		return only
	}
	if json.Unmarshal(m["role"], &role) != nil || role != "user" {
		return only
	}
	var text string
	if json.Unmarshal(m["content"], &text) == nil {
		return ""
	}
	var parts []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(m["content"], &parts) != nil || len(parts) == 0 {
		return "A steering message's content must be a string or a non-empty array of input_text, input_image and input_file parts."
	}
	for _, p := range parts {
		switch p.Type {
		case "input_text", "input_image", "input_file":
		default:
			return "A steering message's content must be a string or a non-empty array of input_text, input_image and input_file parts."
		}
	}
	return ""
}

// runTurns runs the create req (decoded from members) on lane l, then the successors steering
// asks for: each continues the response before it with the input queued for it, with the same
// settings. carried is steering input req's input carries (committed by its response.created).
// An error it returns was not streamed.
func (k *socket) runTurns(l *lane, members map[string]json.RawMessage, req *createRequest, carried []*steerInput) error {
	for {
		spec, err := req.spec(k.tenant)
		if err != nil {
			k.failSteers(l.id, carried, steerSuccessorFailed)
			return err
		}
		tg := &steerTarget{lane: l.id, steer: &engine.Steer{},
			supported: spec.ConversationID == "" && wire.IsNull(members["context_management"])}
		spec.Local, spec.Steer = k.cache, tg.steer
		door := &socketDoor{k: k, sink: &socketSink{k: k, streamID: l.id, last: time.Now()}, tg: tg}
		out, err := k.s.engine.Serve(k.ctx, spec, door)
		if err != nil {
			out = nil
		}
		k.cache.Remember(spec, out)
		queued := k.endTarget(tg, out)
		if err != nil {
			// Nothing reached the client: the input this turn carried was not committed.
			k.failSteers(l.id, carried, steerSuccessorFailed)
			k.failSteers(l.id, queued, steerNotActive)
			return err
		}
		if len(queued) == 0 {
			return nil
		}
		if s := out.Response.Status; s != wire.StatusCompleted && s != wire.StatusIncomplete {
			k.failSteers(l.id, queued, steerNotActive) // failed or cancelled: nothing to continue
			return nil
		}
		if stubs := requiredInput(out.Output); len(stubs) > 0 {
			k.park(l.id, out.Response.ID, queued, stubs)
			return nil
		}
		members = successorMembers(members, out.Response.ID, queued)
		if req, err = createFromMembers(maps.Clone(members)); err != nil {
			k.failSteers(l.id, queued, steerSuccessorFailed)
			return nil
		}
		carried = queued
	}
}

// successorMembers are the members of the automatic successor of response prev: the same settings
// (members, as the client sent them), continuing prev, with the queued inputs as its input.
func successorMembers(members map[string]json.RawMessage, prev string, steers []*steerInput) map[string]json.RawMessage {
	m := maps.Clone(members)
	m["previous_response_id"] = wire.AppendString(nil, prev)
	m["input"] = prependSteers(steers, nil)
	delete(m, "generate")
	return m
}

// prependSteers is input (a create's input: absent, a string, or items) led by the steering
// inputs, in submission order, as one array of items.
func prependSteers(steers []*steerInput, input json.RawMessage) json.RawMessage {
	out := []byte{'['}
	add := func(raw json.RawMessage) {
		if wire.IsNull(raw) {
			return
		}
		var text string
		var items []json.RawMessage
		switch {
		case json.Unmarshal(raw, &text) == nil:
			items = []json.RawMessage{userMessage(text)}
		case json.Unmarshal(raw, &items) != nil:
			items = []json.RawMessage{raw} // not an array: the create's validation names it
		}
		for _, it := range items {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, it...)
		}
	}
	for _, st := range steers {
		add(st.input)
	}
	add(input)
	return append(out, ']')
}

func userMessage(text string) json.RawMessage {
	b := append([]byte(nil), `{"type":"message","role":"user","content":`...)
	b = wire.AppendString(b, text)
	return append(b, '}')
}

// requiredInput is the stubs of the outputs a response's function calls wait for
// (ResponseSteerRequiredInput.FunctionCallOutput), none when it waits for nothing.
func requiredInput(output []wire.Item) []json.RawMessage {
	var stubs []json.RawMessage
	for _, it := range output {
		if it.Type != "function_call" {
			continue
		}
		var call struct {
			CallID string `json:"call_id"`
			Name   string `json:"name"`
		}
		if json.Unmarshal(it.JSON, &call) != nil {
			continue
		}
		b, err := json.Marshal(struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
		}{"function_call_output", call.CallID, call.Name})
		if err == nil {
			stubs = append(stubs, b)
		}
	}
	return stubs
}
