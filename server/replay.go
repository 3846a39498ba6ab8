package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// replayEvents rebuilds the event stream of a stored response that has no event log (it was
// answered without streaming): created, in_progress, each item announced, its parts streamed as
// one delta each and closed, then the terminal event with the full output. Events with
// sequence_number <= after are left out, so starting_after resumes a stream. Not a hot path: it
// favours plainness over allocations. An item it cannot read is an error, never a gap in
// output_index.
func replayEvents(dst []byte, r *store.Response, output []wire.Item, after int64) ([]byte, error) {
	output = engine.ValidItems(output) // stored JSON may hold invalid UTF-8 (render.go)
	rp := &replayer{dst: dst, after: after}
	start := *r
	start.Status, start.CompletedAt, start.Usage, start.Error, start.IncompleteDetails = wire.StatusInProgress, nil, nil, nil, nil
	startJSON := json.RawMessage(engine.RenderResponse(nil, &start, nil))
	rp.emit(wire.EventCreated, map[string]any{"response": startJSON})
	rp.emit(wire.EventInProgress, map[string]any{"response": startJSON})
	for i, it := range output {
		if err := rp.item(i, it); err != nil {
			return nil, fmt.Errorf("replay item %d of %s: %w", i, r.ID, err)
		}
	}
	if r.Status.Terminal() && rp.seq > after {
		rp.dst = appendTerminalEvent(rp.dst, r, output, rp.seq)
	}
	return rp.dst, nil
}

// replayer writes regenerated events with dense sequence numbers, leaving out those <= after.
type replayer struct {
	dst        []byte
	seq, after int64
}

func (rp *replayer) emit(typ wire.EventType, fields map[string]any) {
	if rp.seq > rp.after {
		fields["type"] = typ
		fields["sequence_number"] = rp.seq
		data, _ := wire.Marshal(fields)
		rp.dst = wire.Event{Type: typ, Data: data}.AppendSSE(rp.dst)
	}
	rp.seq++
}

// item replays one output item: announced in progress, its parts or arguments, and done.
func (rp *replayer) item(i int, it wire.Item) error {
	f, err := it.Fields()
	if err != nil {
		return err
	}
	added := maps.Clone(f)
	added["status"] = json.RawMessage(`"in_progress"`)
	switch it.Type {
	case wire.TypeMessage:
		added["content"] = wire.EmptyArray
	case wire.TypeReasoning:
		added["summary"] = wire.EmptyArray
		delete(added, "content")
		delete(added, "encrypted_content")
	case wire.TypeFunctionCall:
		added["arguments"] = json.RawMessage(`""`)
	}
	rp.emit(wire.EventItemAdded, map[string]any{"output_index": i, "item": added})
	switch it.Type {
	case wire.TypeMessage:
		err = rp.messageParts(i, it.ID, f["content"])
	case wire.TypeReasoning:
		err = rp.reasoningParts(i, it.ID, f)
	case wire.TypeFunctionCall:
		var args, name string
		if err = wire.UnmarshalOpt(f["arguments"], &args); err == nil {
			err = wire.UnmarshalOpt(f["name"], &name)
		}
		rp.emit(wire.EventArgsDelta, map[string]any{"output_index": i, "item_id": it.ID, "delta": args})
		rp.emit(wire.EventArgsDone, map[string]any{"output_index": i, "item_id": it.ID, "arguments": args, "name": name})
	}
	if err != nil {
		return err
	}
	rp.emit(wire.EventItemDone, map[string]any{"output_index": i, "item": it.JSON})
	return nil
}

// storedPart is a content or summary part as stored.
type storedPart = map[string]json.RawMessage

func (rp *replayer) messageParts(i int, id string, content json.RawMessage) error {
	var parts []storedPart
	if err := wire.UnmarshalOpt(content, &parts); err != nil {
		return err
	}
	for ci, p := range parts {
		var typ, text string
		if err := wire.UnmarshalOpt(p["type"], &typ); err != nil {
			return err
		}
		pe, key := outputTextPart, "text"
		if typ == wire.PartRefusal {
			pe, key = refusalPart, "refusal"
		}
		if err := wire.UnmarshalOpt(p[key], &text); err != nil {
			return err
		}
		empty := map[string]any{"type": typ, key: ""}
		if typ == wire.PartOutputText {
			empty["annotations"], empty["logprobs"] = wire.EmptyArray, wire.EmptyArray
		}
		rp.part(pe, i, id, ci, empty, p, text)
	}
	return nil
}

func (rp *replayer) reasoningParts(i int, id string, f map[string]json.RawMessage) error {
	for _, kind := range []struct {
		key, typ string
		pe       partEvents
	}{{"summary", wire.PartSummaryText, summaryPart}, {"content", wire.PartReasoningText, reasoningPart}} {
		var parts []storedPart
		if err := wire.UnmarshalOpt(f[kind.key], &parts); err != nil {
			return err
		}
		for pi, p := range parts {
			var text string
			if err := wire.UnmarshalOpt(p["text"], &text); err != nil {
				return err
			}
			rp.part(kind.pe, i, id, pi, map[string]any{"type": kind.typ, "text": ""}, p, text)
		}
	}
	return nil
}

// part streams one part: announced empty, its whole text as one delta, its done event, and the
// part closed.
func (rp *replayer) part(pe partEvents, i int, id string, idx int, empty any, full storedPart, text string) {
	for _, step := range []struct {
		typ wire.EventType
		key string
		val any
	}{{pe.added, "part", empty}, {pe.delta, "delta", text}, {pe.done, pe.doneKey, text}, {pe.partDone, "part", full}} {
		ev := map[string]any{"output_index": i, "item_id": id, pe.indexKey: idx, step.key: step.val}
		if pe.logprobs && (step.typ == pe.delta || step.typ == pe.done) {
			ev["logprobs"] = wire.EmptyArray
		}
		rp.emit(step.typ, ev)
	}
}

// appendTerminalEvent appends the terminal event of a stored (terminal) response with sequence
// number seq: response.completed, response.incomplete, or response.failed for any other status,
// carrying the response as GET renders it.
func appendTerminalEvent(dst []byte, r *store.Response, output []wire.Item, seq int64) []byte {
	typ := r.Status.TerminalEvent()
	data := make([]byte, 0, 256)
	data = append(data, `{"type":"`...)
	data = append(data, string(typ)...)
	data = append(data, `","sequence_number":`...)
	data = strconv.AppendInt(data, seq, 10)
	data = append(data, `,"response":`...)
	data = engine.RenderResponse(data, r, output)
	data = append(data, '}')
	return wire.Event{Type: typ, Data: data}.AppendSSE(dst)
}

// streamStored serves GET ?stream=true. A response that was streamed replays its event log: the
// events the live stream sent, with their sequence numbers, so a client that dropped after N
// resumes at N+1 with nothing lost or repeated. While the response is in progress the replay
// follows the log (which the live turn appends to, on any replica) until the response is
// terminal; the terminal event, rendered from the stored record, ends it. A response with no log
// (answered non-streamed) is replayed from its stored items.
func (s *Server) streamStored(c echo.Context, r *store.Response, out []wire.Item, after int64) error {
	ctx := c.Request().Context()
	list := &store.ResponseEventListParams{Tenant: r.Tenant, ResponseID: r.ID, After: -1}
	// A turn in this process, or (through the store's notifications, wakeFromStore) on another
	// replica, wakes the follow when it logs events or ends (background turns,
	// server/background.go). The channel is taken before each read so no wake is missed; the
	// first one before the status is read again, as r was read before it.
	wake := s.engine.WakeOn(list.ResponseID)
	defer s.engine.Forget(list.ResponseID)
	if !r.Status.Terminal() {
		nr, nout, err := s.store.ResponseGet(ctx, &store.ResponseGetParams{Tenant: list.Tenant, ID: list.ResponseID})
		if errors.Is(err, store.ErrNotFound) {
			return responseNotFound(list.ResponseID) // deleted meanwhile
		}
		if err != nil {
			return err
		}
		r, out = nr, readView(s.engine, c).Items(nout)
	}
	evs, err := s.store.ResponseEventList(ctx, list)
	if err != nil {
		return err
	}
	if len(evs) == 0 && r.Status.Terminal() {
		buf, err := replayEvents(nil, r, out, after)
		if err != nil {
			return err
		}
		_ = s.openStream(c).Write(append(buf, wire.DoneFrame...))
		return nil
	}
	lr := &logReplay{w: s.openStream(c), after: after, last: -1, lastRun: -1, keepAlive: s.cfg.KeepAlive}
	// Where notifications wake the follow, the ticker is a fallback for a missed one.
	ticker := time.NewTicker(s.engine.FollowInterval(r))
	defer ticker.Stop()
	for err = lr.send(evs); err == nil && !r.Status.Terminal(); err = lr.send(evs) {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-wake:
		}
		wake = s.engine.WakeOn(list.ResponseID)
		// The status first: the events committed with a terminal status are all listed next.
		if r, out, err = s.store.ResponseGet(ctx, &store.ResponseGetParams{Tenant: list.Tenant, ID: list.ResponseID}); err != nil {
			break
		}
		out = readView(s.engine, c).Items(out)
		list.After = lr.lastRun // runs are contiguous: every later run starts after it
		if evs, err = s.store.ResponseEventList(ctx, list); err != nil {
			break
		}
	}
	if err != nil {
		// The client left, or the response was deleted or the store failed mid-follow: the stream
		// ends without a terminal event, as a cut live stream would.
		s.log.Info("stream replay ended early", "response_id", list.ResponseID, "error", err)
		return nil
	}
	var buf []byte
	switch {
	case lr.last < 0:
		// Nothing was ever logged (a turn answered without streaming): the response is
		// regenerated from its items, as a replay after it ended would be.
		if buf, err = replayEvents(nil, r, out, after); err != nil {
			s.log.Info("stream replay ended early", "response_id", list.ResponseID, "error", err)
			return nil
		}
	case lr.last+1 > after:
		buf = appendTerminalEvent(buf, r, out, lr.last+1)
	}
	_ = lr.w.Write(append(buf, wire.DoneFrame...))
	return nil
}

// logReplay writes the runs of an event log to a client, leaving out the events up to after.
type logReplay struct {
	w             *sseWriter
	after         int64
	last, lastRun int64 // sequence number of the last event seen, first one of the last run
	keepAlive     time.Duration
	buf           []byte
}

// send writes the frames of runs (a keepalive comment instead when there are none and the stream
// has been silent for keepAlive).
func (lr *logReplay) send(runs []store.Event) error {
	lr.buf = lr.buf[:0]
	for _, run := range runs {
		lr.lastRun = run.Seq
		seq, frames := run.Seq, run.Data
		for len(frames) > 0 {
			frame, rest, ok := bytes.Cut(frames, []byte("\n\n"))
			if !ok {
				return fmt.Errorf("event log: unterminated frame at sequence %d", seq)
			}
			if seq > lr.after {
				lr.buf = append(append(lr.buf, frame...), "\n\n"...)
			}
			lr.last, seq, frames = seq, seq+1, rest
		}
	}
	if len(lr.buf) == 0 {
		if time.Since(lr.w.IdleSince()) < lr.keepAlive {
			return nil
		}
		lr.buf = append(lr.buf, ": keepalive\n\n"...)
	}
	return lr.w.Write(lr.buf)
}

// partEvents names the events that stream one kind of part.
type partEvents struct {
	indexKey                     string
	added, delta, done, partDone wire.EventType
	doneKey                      string
	logprobs                     bool // output_text deltas and done carry logprobs:[]
}

var (
	outputTextPart = partEvents{"content_index", wire.EventPartAdded, wire.EventTextDelta,
		wire.EventTextDone, wire.EventPartDone, "text", true}
	refusalPart = partEvents{"content_index", wire.EventPartAdded, wire.EventRefusalDelta,
		wire.EventRefusalDone, wire.EventPartDone, "refusal", false}
	reasoningPart = partEvents{"content_index", wire.EventPartAdded, wire.EventReasoningDelta,
		wire.EventReasoningDone, wire.EventPartDone, "text", false}
	summaryPart = partEvents{"summary_index", wire.EventSummaryAdded, wire.EventSummaryDelta,
		wire.EventSummaryTextDone, wire.EventSummaryDone, "text", false}
)
