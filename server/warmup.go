package server

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// socketGenerate reads a response.create message's "generate" member (OpenAI's WebSocket warm-up,
// docs/clients.md) and removes it: true or absent runs the model, false only prepares the turn.
func socketGenerate(members map[string]json.RawMessage) (bool, error) {
	raw, sent := members["generate"]
	delete(members, "generate")
	if !sent || string(raw) == "null" {
		return true, nil
	}
	var generate bool
	if json.Unmarshal(raw, &generate) != nil {
		return false, wire.Invalid("generate", "invalid_type", "'generate' must be a boolean.")
	}
	return generate, nil
}

// warmup answers a response.create with "generate":false: the turn was validated, its history
// loaded and rehydrated like any other (every 400 applies), and nothing is sent upstream. The
// client gets response.created then response.completed with no output and zero usage; the
// response (its input, no output) can be continued with previous_response_id like any other,
// from the connection's cache when store:false, from the store when store:true.
func (k *socket) warmup(t *turn) error {
	s := k.s
	created := frame(nil, wire.EventCreated, 0, &t.rec)
	t.rec.Status = wire.StatusCompleted
	t.rec.CompletedAt = unixPtr(time.Now())
	t.rec.Usage = json.RawMessage(`{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0}`)
	if t.req.Store {
		p := &store.ResponseCommitParams{Response: t.rec, Input: t.input,
			Events: []store.Event{{Seq: 0, Type: wire.EventCreated, Data: created}}}
		if t.convTurn.Load() {
			p.ConversationID = t.req.ConversationID
		}
		err := s.commit(k.ctx, p)
		if err == nil && p.ConversationID != "" {
			t.convTurn.Store(false) // the commit's append released the conversation's lease
		}
		s.releaseConversation(t)
		if err != nil {
			return err
		}
		s.logStored(k.ctx, t.rec.ID, t.rec.Status, len(t.input), 0, len(p.Events))
	}
	frames := frame(created, wire.EventCompleted, 1, &t.rec)
	return k.sink.write(append(frames, wire.DoneFrame...))
}

// frame appends the SSE frame of a response lifecycle event carrying r with no output.
func frame(dst []byte, typ wire.EventType, seq int, r *store.Response) []byte {
	data := append(make([]byte, 0, 1024), `{"type":"`...)
	data = append(data, typ...)
	data = append(data, `","sequence_number":`...)
	data = strconv.AppendInt(data, int64(seq), 10)
	data = append(data, `,"response":`...)
	data = append(renderResponse(data, r, nil), '}')
	return wire.Event{Type: typ, Data: data}.AppendSSE(dst)
}
