package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// warmUp runs a turn with "generate":false (OpenAI's warm-up, docs/clients.md): the turn was
// validated, its history loaded and rehydrated like any other (every 400 applies), and nothing
// is sent upstream. It completes with no output and zero usage; the response (its input, no
// output) can be continued with previous_response_id like any other, from the connection's
// cache when store:false, from the store when store:true. A streamed turn's client gets
// response.created then response.completed on the door's Sink (open).
func (e *Engine) warmUp(ctx context.Context, t *Turn, stream bool, open func() Sink) (*Outcome, error) {
	created := frame(nil, wire.EventCreated, 0, &t.rec)
	t.rec.Status = wire.StatusCompleted
	t.rec.CompletedAt = unixPtr(time.Now())
	t.rec.Usage = zeroUsage
	if t.store {
		p := &store.ResponseCommitParams{Response: t.rec, Input: t.input}
		if stream {
			p.Events = []store.Event{{Seq: 0, Type: wire.EventCreated, Data: created}}
		}
		if t.convTurn.Load() {
			p.ConversationID = t.rec.ConversationID
		}
		if err := e.commit(ctx, p); err != nil {
			return nil, err
		}
		if p.ConversationID != "" {
			t.handOff() // the commit's append ended the conversation's lease
		}
		e.logStored(ctx, t.rec.ID, t.rec.Status, len(t.input), 0, len(p.Events))
	}
	if stream {
		frames := frame(created, wire.EventCompleted, 1, &t.rec)
		_ = open().Write(append(frames, wire.DoneFrame...))
	}
	return t.outcome(&accumulator.Result{Status: t.rec.Status, Usage: t.rec.Usage}), nil
}

// frame appends the SSE frame of a response lifecycle event carrying r with no output.
func frame(dst []byte, typ wire.EventType, seq int, r *store.Response) []byte {
	data := append(make([]byte, 0, 1024), `{"type":"`...)
	data = append(data, typ...)
	data = append(data, `","sequence_number":`...)
	data = strconv.AppendInt(data, int64(seq), 10)
	data = append(data, `,"response":`...)
	data = append(RenderResponse(data, r, nil), '}')
	return wire.Event{Type: typ, Data: data}.AppendSSE(dst)
}
