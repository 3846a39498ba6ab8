package server

import (
	"encoding/json"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// replayEvents rebuilds the event stream of a stored response (GET ?stream=true): created,
// in_progress, each item announced, its parts streamed as one delta each and closed, then the
// terminal event with the full output. Events with sequence_number <= after are left out, so
// starting_after resumes a stream. Not a hot path: it favours plainness over allocations.
func replayEvents(dst []byte, r *store.Response, output []wire.Item, after int) []byte {
	output = validItems(output) // stored JSON may hold invalid UTF-8 (render.go)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		if seq > after {
			fields["type"] = typ
			fields["sequence_number"] = seq
			data, _ := jsonMarshal(fields)
			dst = wire.Event{Type: typ, Data: data}.AppendSSE(dst)
		}
		seq++
	}
	start := *r
	start.Status, start.CompletedAt, start.Usage, start.Error, start.IncompleteDetails = store.StatusInProgress, nil, nil, nil, nil
	startJSON := json.RawMessage(renderResponse(nil, &start, nil))
	emit("response.created", map[string]any{"response": startJSON})
	emit("response.in_progress", map[string]any{"response": startJSON})

	for i, it := range output {
		f, err := it.Fields()
		if err != nil {
			continue
		}
		base := func() map[string]any { return map[string]any{"output_index": i, "item_id": it.ID} }
		// replayPart streams one part: announced empty, its whole text as one delta, its done
		// event, and the part closed.
		replayPart := func(pe partEvents, idx int, empty any, full map[string]json.RawMessage, text string) {
			for _, step := range []struct {
				typ, key string
				val      any
			}{{pe.added, "part", empty}, {pe.delta, "delta", text}, {pe.done, pe.doneKey, text}, {pe.partDone, "part", full}} {
				ev := base()
				ev[pe.indexKey], ev[step.key] = idx, step.val
				if pe.logprobs && (step.typ == pe.delta || step.typ == pe.done) {
					ev["logprobs"] = emptyArray
				}
				emit(step.typ, ev)
			}
		}
		added := map[string]json.RawMessage{}
		for k, v := range f {
			added[k] = v
		}
		added["status"] = json.RawMessage(`"in_progress"`)
		switch it.Type {
		case wire.TypeMessage:
			added["content"] = emptyArray
		case wire.TypeReasoning:
			added["summary"] = emptyArray
			delete(added, "content")
			delete(added, "encrypted_content")
		case wire.TypeFunctionCall:
			added["arguments"] = json.RawMessage(`""`)
		}
		emit("response.output_item.added", map[string]any{"output_index": i, "item": added})

		var parts []map[string]json.RawMessage
		switch it.Type {
		case wire.TypeMessage:
			_ = json.Unmarshal(f["content"], &parts)
			for ci, p := range parts {
				var typ, text string
				_ = json.Unmarshal(p["type"], &typ)
				key := "text"
				if typ == "refusal" {
					key = "refusal"
				}
				_ = json.Unmarshal(p[key], &text)
				empty := map[string]any{"type": typ, key: ""}
				if typ == "output_text" {
					empty["annotations"], empty["logprobs"] = emptyArray, emptyArray
				}
				pe := outputTextPart
				if typ == "refusal" {
					pe = refusalPart
				}
				replayPart(pe, ci, empty, p, text)
			}
		case wire.TypeReasoning:
			var summary []map[string]json.RawMessage
			_ = json.Unmarshal(f["summary"], &summary)
			for si, p := range summary {
				var text string
				_ = json.Unmarshal(p["text"], &text)
				replayPart(summaryPart, si, map[string]any{"type": "summary_text", "text": ""}, p, text)
			}
			_ = json.Unmarshal(f["content"], &parts)
			for ci, p := range parts {
				var text string
				_ = json.Unmarshal(p["text"], &text)
				replayPart(reasoningPart, ci, map[string]any{"type": "reasoning_text", "text": ""}, p, text)
			}
		case wire.TypeFunctionCall:
			var args, name string
			_ = json.Unmarshal(f["arguments"], &args)
			_ = json.Unmarshal(f["name"], &name)
			ev := base()
			ev["delta"] = args
			emit("response.function_call_arguments.delta", ev)
			ev = base()
			ev["arguments"], ev["name"] = args, name
			emit("response.function_call_arguments.done", ev)
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": it.JSON})
	}
	terminal := "response.completed"
	switch r.Status {
	case store.StatusIncomplete:
		terminal = "response.incomplete"
	case store.StatusFailed, store.StatusCancelled, store.StatusInProgress, store.StatusQueued:
		terminal = "response.failed"
	}
	if store.Terminal(r.Status) {
		emit(terminal, map[string]any{"response": json.RawMessage(renderResponse(nil, r, output))})
	}
	return dst
}

// partEvents names the events that stream one kind of part.
type partEvents struct {
	indexKey, added, delta, done, partDone, doneKey string
	logprobs                                        bool // output_text deltas and done carry logprobs:[]
}

var (
	outputTextPart = partEvents{"content_index", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "text", true}
	refusalPart = partEvents{"content_index", "response.content_part.added", "response.refusal.delta",
		"response.refusal.done", "response.content_part.done", "refusal", false}
	reasoningPart = partEvents{"content_index", "response.content_part.added", "response.reasoning_text.delta",
		"response.reasoning_text.done", "response.content_part.done", "text", false}
	summaryPart = partEvents{"summary_index", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "text", false}
)
