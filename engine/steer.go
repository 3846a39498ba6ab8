package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
)

// Steer lets a front door cut a running streamed turn at its next safe boundary: between output
// items, never inside one (a function call is never cut from its arguments). Steering
// (docs/clients.md, WebSocket mode) asks for the cut when a client sends new input while a
// response runs; the turn then stops the upstream generation and ends response.incomplete with
// incomplete_details.reason "steered", stored so with the items finished so far. Asked while the
// stream stands at a boundary (the upstream is silent between two items) the cut is made at once;
// otherwise before the first upstream event read at a boundary. A turn that reaches its terminal
// event first ends as it would have; Steered then reports false. The front door owns the queued
// input and the successor turn: the engine only cuts.
//
// The zero value is ready; its methods are safe for concurrent use.
type Steer struct {
	mu       sync.Mutex
	asked    bool
	cut      bool
	boundary bool                    // the relay stands between output items
	cancel   context.CancelCauseFunc // the running relay's (nil: none)
}

// Ask asks the running turn to stop at its next boundary (a no-op once it has ended).
func (s *Steer) Ask() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = true
	if s.boundary && s.cancel != nil {
		s.cut = true
		s.cancel(ErrSteered) // ends the upstream read the relay waits on
	}
}

// Steered reports whether the turn was cut by Ask (final once Serve has returned).
func (s *Steer) Steered() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

// attach is called by the relay as it starts (cancel ends its stream) and detach as it returns.
func (s *Steer) attach(cancel context.CancelCauseFunc, boundary bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel, s.boundary = cancel, boundary
}

func (s *Steer) detach() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel, s.boundary = nil, false
}

// step feeds one upstream event (feed) unless the turn is to be cut before it (it returns true):
// a cut was made, or one was asked and the stream stands at a boundary and the event is not the
// terminal one (a response that has completed is left to complete: its successor follows it).
// boundary reports whether the stream stands at one after the event.
func (s *Steer) step(terminal bool, feed func(), boundary func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return true
	}
	if s.asked && s.boundary && !terminal {
		s.cut = true
		return true
	}
	feed()
	s.boundary = boundary()
	return false
}

// ErrSteered is the cause a steered turn's stream ends with (never a failure).
var ErrSteered = errors.New("engine: response steered")

// steeredDetails is a steered response's incomplete_details (OpenAI's reason).
var steeredDetails = json.RawMessage(`{"reason":"steered"}`)
