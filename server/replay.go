package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/respgate/respgate/accumulator"
	"github.com/respgate/respgate/engine"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// replayEvents rebuilds the event stream of a stored response that has no event log (it was
// answered without streaming) with the emitter of every live stream, the accumulator: each stored
// item is fed to it as if upstream had sent it whole (output_item.added, then .done), so the
// replay announces, streams (one delta per part) and closes each item by the very rules a live
// stream follows, with the stored ids. The terminal event is rendered from the stored record, as
// a logged stream's is. Events with sequence_number <= after are left out, so starting_after
// resumes a stream. An item it cannot read is an error, never a gap in output_index.
func replayEvents(dst []byte, r *store.Response, output []wire.Item, after int64) ([]byte, error) {
	output = engine.ValidItems(output) // stored JSON may hold invalid UTF-8 (render.go)
	acc := accumulator.New(accumulator.Options{ResponseID: r.ID, NewID: storedIDs(output), Render: func(snap *accumulator.Snapshot) []byte {
		start := *r
		start.Status, start.CompletedAt, start.Usage, start.Error, start.IncompleteDetails = snap.Status, nil, nil, nil, nil
		return engine.RenderResponse(nil, &start, snap.Output)
	}})
	buf := acc.Start(nil)
	for i, it := range output {
		added, err := addedItem(it)
		if err != nil {
			return nil, fmt.Errorf("replay item %d of %s: %w", i, r.ID, err)
		}
		for _, ev := range []struct {
			typ  wire.EventType
			item []byte
		}{{wire.EventItemAdded, added}, {wire.EventItemDone, it.JSON}} {
			data := append([]byte(`{"type":"`+string(ev.typ)+`","output_index":`), strconv.Itoa(i)...)
			data = append(append(append(data, `,"item":`...), ev.item...), '}')
			if buf, err = acc.Feed(buf, wire.Event{Type: ev.typ, Data: data}); err != nil {
				return nil, fmt.Errorf("replay item %d of %s: %w", i, r.ID, err)
			}
		}
	}
	seq := int64(bytes.Count(buf, []byte("\n\n")))
	if r.Status.Terminal() {
		buf = appendTerminalEvent(buf, r, output, seq)
	}
	// Leave out the events up to after: each is one frame.
	for skip := after + 1; skip > 0 && len(buf) > 0; skip-- {
		_, rest, _ := bytes.Cut(buf, []byte("\n\n"))
		buf = rest
	}
	return append(dst, buf...), nil
}

// storedIDs is the accumulator's NewID for a replay of items: it hands out their stored ids in
// the order the accumulator mints them (each item's id, then a function call's call_id).
func storedIDs(items []wire.Item) func(string) string {
	var ids []string
	for _, it := range items {
		ids = append(ids, it.ID)
		if it.Type == wire.TypeFunctionCall {
			var v struct {
				CallID string `json:"call_id"`
			}
			_ = json.Unmarshal(it.JSON, &v)
			ids = append(ids, v.CallID)
		}
	}
	return func(prefix string) string {
		if len(ids) == 0 {
			return wire.NewID(prefix)
		}
		id := ids[0]
		ids = ids[1:]
		return id
	}
}

// addedItem is how a stored item is announced before its content: its identity (type, id,
// role, a function call's call_id and name), in progress.
func addedItem(it wire.Item) ([]byte, error) {
	f, err := it.Fields()
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"content", "summary"} {
		if v, ok := f[k]; ok && !wire.IsNull(v) && bytes.TrimSpace(v)[0] != '[' {
			return nil, fmt.Errorf("its %s is not an array", k)
		}
	}
	head := map[string]json.RawMessage{"status": json.RawMessage(`"in_progress"`)}
	for _, k := range []string{"type", "id", "role", "call_id", "name"} {
		if v, ok := f[k]; ok {
			head[k] = v
		}
	}
	return json.Marshal(head)
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
