package vllmsim

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Requests used by the quirk tests.
var (
	chatHistory = traceHistory
	toolsInput  = traceTools + `,"input":"Weather and time in Paris? use tools"`
)

// quirkStream streams a request with quirks=LIST appended to model.
func quirkStream(t *testing.T, model, quirks string, members ...string) []sseEvent {
	t.Helper()
	srv, _ := newServer(t, Options{})
	sep := "?"
	if strings.Contains(model, "?") {
		sep = "&"
	}
	return stream(t, srv, body(model+sep+"quirks="+quirks, true, members...))
}

func TestQuirkReasoningPart(t *testing.T) {
	for _, model := range []string{HarmonyModel, ParserModel} {
		t.Run(model+"/on", func(t *testing.T) {
			evs := quirkStream(t, model, "all", chatHistory)
			if len(ofType(evs, "response.reasoning_part.added")) != 1 || len(ofType(evs, "response.reasoning_part.done")) != 1 {
				t.Fatalf("want one reasoning_part.added and .done, got %v", types(evs))
			}
			for _, ev := range ofType(evs, "response.content_part.added") {
				if get(ev.obj, "part", "type") == "reasoning_text" {
					t.Fatalf("reasoning part announced as content_part.added")
				}
			}
		})
		t.Run(model+"/off", func(t *testing.T) {
			evs := quirkStream(t, model, "-reasoning_part", chatHistory)
			if n := len(ofType(evs, "response.reasoning_part.added")) + len(ofType(evs, "response.reasoning_part.done")); n != 0 {
				t.Fatalf("got %d reasoning_part events", n)
			}
			var reasoningParts int
			for _, ev := range append(ofType(evs, "response.content_part.added"), ofType(evs, "response.content_part.done")...) {
				if get(ev.obj, "part", "type") == "reasoning_text" {
					reasoningParts++
				}
			}
			if reasoningParts != 2 {
				t.Fatalf("want content_part.added and .done with a reasoning_text part, got %d", reasoningParts)
			}
		})
	}
}

func contentIndexes(evs []sseEvent, typ string) []int {
	var out []int
	for _, ev := range ofType(evs, typ) {
		out = append(out, num(ev.obj["content_index"]))
	}
	return out
}

func TestQuirkContentIndex(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "all", chatHistory)
		if ci := contentIndexes(evs, "response.reasoning_text.delta"); ci[0] != 0 {
			t.Errorf("reasoning content_index %v, want 0", ci)
		}
		for _, typ := range []string{"response.output_text.delta", "response.output_text.done", "response.content_part.done"} {
			for _, ci := range contentIndexes(evs, typ) {
				if ci != 1 {
					t.Errorf("%s content_index %d, want 1 (not reset after reasoning)", typ, ci)
				}
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "-content_index", chatHistory)
		for _, typ := range []string{"response.output_text.delta", "response.output_text.done", "response.content_part.done"} {
			for _, ci := range contentIndexes(evs, typ) {
				if ci != 0 {
					t.Errorf("%s content_index %d, want 0", typ, ci)
				}
			}
		}
	})
	t.Run("parser path resets it anyway", func(t *testing.T) {
		evs := quirkStream(t, ParserModel, "all", chatHistory)
		for _, ci := range contentIndexes(evs, "response.output_text.delta") {
			if ci != 0 {
				t.Errorf("parser content_index %d, want 0", ci)
			}
		}
	})
}

// doneItems returns the items of the output_item.done events, by output_index.
func doneItems(evs []sseEvent) map[int]map[string]any {
	out := map[int]map[string]any{}
	for _, ev := range ofType(evs, "response.output_item.done") {
		out[num(ev.obj["output_index"])] = ev.obj["item"].(map[string]any)
	}
	return out
}

func TestQuirkIDs(t *testing.T) {
	t.Run("harmony/on", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "all", toolsInput)
		done, resp := doneItems(evs), final(t, evs)
		if id := str(done[0]["id"]); !strings.HasPrefix(id, "msg_") {
			t.Errorf("streamed reasoning id %q, want msg_ prefix", id)
		}
		for i := range 3 {
			if streamed, fin := str(done[i]["id"]), str(get(resp, "output", i, "id")); streamed == fin {
				t.Errorf("item %d: streamed id equals final id %q", i, fin)
			}
		}
		if id := str(get(resp, "output", 0, "id")); !strings.HasPrefix(id, "rs_") {
			t.Errorf("final reasoning id %q, want rs_", id)
		}
		for i := 1; i <= 2; i++ {
			streamed, fin := str(done[i]["call_id"]), str(get(resp, "output", i, "call_id"))
			if streamed == fin || !strings.HasPrefix(streamed, "call_") || !strings.HasPrefix(fin, "call_") {
				t.Errorf("call %d: streamed call_id %q, final %q: want different call_ ids", i, streamed, fin)
			}
			// Harmony's final ids share one uuid: fc_<u> and call_<u>.
			if strings.TrimPrefix(str(get(resp, "output", i, "id")), "fc_") != strings.TrimPrefix(fin, "call_") {
				t.Errorf("final fc id and call_id do not share their uuid")
			}
		}
	})
	t.Run("parser/on", func(t *testing.T) {
		evs := quirkStream(t, ParserModel, "all", traceTools, `"input":"call get_weather"`)
		done, resp := doneItems(evs), final(t, evs)
		for i := range 3 {
			if id := str(done[i]["id"]); !uuidRE.MatchString(id) {
				t.Errorf("streamed item %d id %q, want a bare UUID", i, id)
			}
		}
		if fin := str(get(resp, "output", 2, "call_id")); !strings.HasPrefix(fin, "chatcmpl-tool-") || fin == str(done[2]["call_id"]) {
			t.Errorf("final call_id %q (streamed %q)", fin, done[2]["call_id"])
		}
		for i, prefix := range []string{"rs_", "msg_", "fc_"} {
			if id := str(get(resp, "output", i, "id")); !strings.HasPrefix(id, prefix) {
				t.Errorf("final item %d id %q, want %s", i, id, prefix)
			}
		}
	})
	for _, model := range []string{HarmonyModel, ParserModel} {
		t.Run(model+"/off", func(t *testing.T) {
			evs := quirkStream(t, model, "-ids", toolsInput)
			done, resp := doneItems(evs), final(t, evs)
			prefixes := map[string]string{"reasoning": "rs_", "message": "msg_", "function_call": "fc_"}
			for i, it := range resp["output"].([]any) {
				fin := str(get(it, "id"))
				if fin != str(done[i]["id"]) || !strings.HasPrefix(fin, prefixes[str(get(it, "type"))]) {
					t.Errorf("item %d: streamed id %q, final %q", i, done[i]["id"], fin)
				}
				if get(it, "type") == "function_call" && get(it, "call_id") != done[i]["call_id"] {
					t.Errorf("item %d: streamed call_id %q, final %q", i, done[i]["call_id"], get(it, "call_id"))
				}
			}
		})
	}
}

// addedIndexes returns the output_index of every output_item.added.
func addedIndexes(evs []sseEvent) []int {
	var out []int
	for _, ev := range ofType(evs, "response.output_item.added") {
		out = append(out, num(ev.obj["output_index"]))
	}
	return out
}

func TestQuirkAdded(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "all", chatHistory)
		if got := addedIndexes(evs); !slices.Equal(got, []int{0}) {
			t.Errorf("output_item.added for indexes %v, want only [0] (message after reasoning skipped)", got)
		}
		if n := len(ofType(evs, "response.content_part.added")); n != 0 {
			t.Errorf("%d content_part.added, want none", n)
		}
		if len(ofType(evs, "response.output_text.delta")) == 0 || doneItems(evs)[1] == nil {
			t.Errorf("the message must still stream and be done")
		}
	})
	t.Run("on/item without deltas", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel+"?noargs=1", "all", traceTools, `"input":"call get_time"`)
		if got := addedIndexes(evs); !slices.Equal(got, []int{0}) {
			t.Errorf("output_item.added for indexes %v, want [0] (a call without deltas is never announced)", got)
		}
		if doneItems(evs)[1] == nil {
			t.Errorf("the call must still be done")
		}
	})
	t.Run("off", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "-added", chatHistory)
		if got := addedIndexes(evs); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("output_item.added for indexes %v, want [0 1]", got)
		}
		if n := len(ofType(evs, "response.content_part.added")); n != 1 {
			t.Errorf("%d content_part.added, want 1 (the message's)", n)
		}
	})
	t.Run("parser path always announces", func(t *testing.T) {
		evs := quirkStream(t, ParserModel, "all", chatHistory)
		if got := addedIndexes(evs); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("output_item.added for indexes %v, want [0 1]", got)
		}
	})
}

func TestQuirkStatus(t *testing.T) {
	t.Run("harmony/on", func(t *testing.T) {
		resp := final(t, quirkStream(t, HarmonyModel, "all", toolsInput))
		for i, want := range []any{nil, nil, nil} {
			item := get(resp, "output", i).(map[string]any)
			if !has(item, "status") || item["status"] != want {
				t.Errorf("final item %d (%s) status %v, want null", i, item["type"], item["status"])
			}
		}
	})
	t.Run("parser/on", func(t *testing.T) {
		resp := final(t, quirkStream(t, ParserModel, "all", traceTools, `"input":"call get_weather"`))
		for i, want := range []any{nil, "completed", "completed"} {
			if got := get(resp, "output", i, "status"); got != want {
				t.Errorf("final item %d status %v, want %v", i, got, want)
			}
		}
	})
	t.Run("on/cut item still completed", func(t *testing.T) {
		evs := quirkStream(t, ParserModel, "all", chatHistory, `"max_output_tokens":20`)
		resp := final(t, evs)
		if resp["status"] != "incomplete" || get(resp, "output", 1, "status") != "completed" {
			t.Errorf("response %v, cut message status %v: want incomplete / completed", resp["status"], get(resp, "output", 1, "status"))
		}
		if st := doneItems(evs)[1]["status"]; st != "completed" {
			t.Errorf("streamed done status of the cut message %v, want completed", st)
		}
	})
	t.Run("off", func(t *testing.T) {
		resp := final(t, quirkStream(t, HarmonyModel, "-status", toolsInput))
		for i := range 3 {
			if got := get(resp, "output", i, "status"); got != "completed" {
				t.Errorf("final item %d status %v, want completed", i, got)
			}
		}
		evs := quirkStream(t, ParserModel, "-status", chatHistory, `"max_output_tokens":20`)
		if got := get(final(t, evs), "output", 1, "status"); got != "incomplete" {
			t.Errorf("cut message final status %v, want incomplete", got)
		}
		if st := doneItems(evs)[1]["status"]; st != "incomplete" {
			t.Errorf("cut message done status %v, want incomplete", st)
		}
	})
}

func TestQuirkStray(t *testing.T) {
	t.Run("harmony/on", func(t *testing.T) {
		done := doneItems(quirkStream(t, HarmonyModel, "all", toolsInput))
		for i := 1; i <= 2; i++ {
			it := done[i]
			if it["item_id"] != it["id"] || num(it["output_index"]) != i || num(it["sequence_number"]) != -1 {
				t.Errorf("call done item %d: item_id %v output_index %v sequence_number %v", i, it["item_id"], it["output_index"], it["sequence_number"])
			}
		}
	})
	t.Run("parser/on", func(t *testing.T) {
		done := doneItems(quirkStream(t, ParserModel, "all", chatHistory))
		if s, ok := done[1]["summary"].([]any); !ok || len(s) != 0 {
			t.Errorf("message done item summary %v, want []", done[1]["summary"])
		}
	})
	t.Run("off", func(t *testing.T) {
		for _, it := range doneItems(quirkStream(t, HarmonyModel, "-stray", toolsInput)) {
			for _, k := range []string{"item_id", "output_index", "sequence_number"} {
				if has(it, k) {
					t.Errorf("done item has stray %s", k)
				}
			}
		}
		if has(doneItems(quirkStream(t, ParserModel, "-stray", chatHistory))[1], "summary") {
			t.Errorf("message done item has summary")
		}
	})
}

func TestQuirkNulls(t *testing.T) {
	for _, model := range []string{HarmonyModel, ParserModel} {
		t.Run(model+"/on", func(t *testing.T) {
			evs := quirkStream(t, model, "all", chatHistory)
			added := ofType(evs, "response.output_item.added")[0].obj["item"].(map[string]any)
			if !has(added, "content") || added["content"] != nil || !has(added, "encrypted_content") || added["encrypted_content"] != nil {
				t.Errorf("added reasoning item %v, want content:null and encrypted_content:null", added)
			}
			if get(final(t, evs), "output", 0, "encrypted_content") != nil || !has(get(final(t, evs), "output", 0).(map[string]any), "encrypted_content") {
				t.Errorf("final reasoning item lacks encrypted_content:null")
			}
			part := ofType(evs, "response.content_part.done")[0].obj["part"].(map[string]any)
			if !has(part, "logprobs") || part["logprobs"] != nil {
				t.Errorf("done part %v, want logprobs:null", part)
			}
		})
		t.Run(model+"/off", func(t *testing.T) {
			evs := quirkStream(t, model, "-nulls", chatHistory)
			added := ofType(evs, "response.output_item.added")[0].obj["item"].(map[string]any)
			if c, ok := added["content"].([]any); !ok || len(c) != 0 || has(added, "encrypted_content") {
				t.Errorf("added reasoning item %v, want content:[] and no encrypted_content", added)
			}
			if has(get(final(t, evs), "output", 0).(map[string]any), "encrypted_content") {
				t.Errorf("final reasoning item has encrypted_content")
			}
			for _, ev := range ofType(evs, "response.content_part.done") {
				if lp, ok := get(ev.obj, "part", "logprobs").([]any); !ok || len(lp) != 0 {
					t.Errorf("done part logprobs %v, want []", get(ev.obj, "part", "logprobs"))
				}
			}
		})
	}
}

func TestQuirkTerminal(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "all", chatHistory, `"max_output_tokens":20`)
		if last := evs[len(evs)-1]; last.typ != "response.completed" || final(t, evs)["status"] != "incomplete" {
			t.Errorf("terminal %s with status %v, want response.completed with incomplete", last.typ, final(t, evs)["status"])
		}
		if get(final(t, evs), "incomplete_details", "reason") != "max_output_tokens" {
			t.Errorf("incomplete_details %v", final(t, evs)["incomplete_details"])
		}
	})
	t.Run("off", func(t *testing.T) {
		evs := quirkStream(t, HarmonyModel, "-terminal", chatHistory, `"max_output_tokens":20`)
		if last := evs[len(evs)-1]; last.typ != "response.incomplete" {
			t.Errorf("terminal %s, want response.incomplete", last.typ)
		}
		evs = quirkStream(t, HarmonyModel, "-terminal", chatHistory)
		if last := evs[len(evs)-1]; last.typ != "response.completed" || final(t, evs)["status"] != "completed" {
			t.Errorf("a complete answer ends with %s", last.typ)
		}
	})
}

func TestQuirkTruncate(t *testing.T) {
	count := func(evs []sseEvent) (n int) {
		for _, ev := range evs {
			if num(ev.obj["output_index"]) == 1 && strings.HasSuffix(ev.typ, ".done") {
				n++
			}
		}
		return n
	}
	t.Run("on", func(t *testing.T) {
		if n := count(quirkStream(t, HarmonyModel, "all", chatHistory, `"max_output_tokens":20`)); n != 0 {
			t.Errorf("%d done events for the cut message, want none", n)
		}
	})
	t.Run("off", func(t *testing.T) {
		if n := count(quirkStream(t, HarmonyModel, "-truncate", chatHistory, `"max_output_tokens":20`)); n != 3 {
			t.Errorf("%d done events for the cut message, want 3", n)
		}
	})
	t.Run("parser path closes the cut item anyway", func(t *testing.T) {
		if n := count(quirkStream(t, ParserModel, "all", chatHistory, `"max_output_tokens":20`)); n != 3 {
			t.Errorf("%d done events for the cut message, want 3", n)
		}
	})
}

func TestQuirkArgsDone(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		evs := quirkStream(t, ParserModel+"?noargs=1", "all", traceTools, `"input":"call get_weather"`)
		if n := len(ofType(evs, "response.function_call_arguments.done")); n != 0 {
			t.Errorf("%d arguments.done without a delta, want none", n)
		}
		evs = quirkStream(t, ParserModel, "all", traceTools, `"input":"call get_weather"`)
		if n := len(ofType(evs, "response.function_call_arguments.done")); n != 1 {
			t.Errorf("%d arguments.done after deltas, want 1", n)
		}
	})
	t.Run("off", func(t *testing.T) {
		evs := quirkStream(t, ParserModel+"?noargs=1", "-args_done", traceTools, `"input":"call get_weather"`)
		done := ofType(evs, "response.function_call_arguments.done")
		if len(done) != 1 || done[0].obj["arguments"] != "" {
			t.Errorf("want one arguments.done with empty arguments, got %v", types(evs))
		}
	})
}

func TestQuirkFields(t *testing.T) {
	missing := []string{"error", "completed_at", "store", "conversation", "safety_identifier", "prompt_cache_key", "presence_penalty", "frequency_penalty"}
	t.Run("on", func(t *testing.T) {
		for _, model := range []string{HarmonyModel, ParserModel} {
			resp := final(t, quirkStream(t, model, "all", chatHistory))
			for _, k := range missing {
				if has(resp, k) {
					t.Errorf("%s: vLLM's response has no %s", model, k)
				}
			}
			for _, k := range []string{"input_messages", "output_messages", "prompt", "top_logprobs"} {
				if !has(resp, k) || resp[k] != nil {
					t.Errorf("%s: want %s:null", model, k)
				}
			}
			perTurn, ok := get(resp, "usage", "input_tokens_details", "input_tokens_per_turn").([]any)
			wantTurns := map[string]int{HarmonyModel: 1, ParserModel: 0}[model]
			if !ok || len(perTurn) != wantTurns || !has(get(resp, "usage", "output_tokens_details").(map[string]any), "tool_output_tokens_per_turn") {
				t.Errorf("%s: usage %v, want vLLM's per-turn arrays (%d turns)", model, resp["usage"], wantTurns)
			}
			if num(resp["max_output_tokens"]) <= 0 {
				t.Errorf("%s: max_output_tokens %v, want the effective limit", model, resp["max_output_tokens"])
			}
		}
	})
	t.Run("off", func(t *testing.T) {
		resp := final(t, quirkStream(t, HarmonyModel, "-fields", chatHistory))
		for _, k := range []string{"error", "completed_at", "store", "safety_identifier", "prompt_cache_key", "presence_penalty", "frequency_penalty"} {
			if !has(resp, k) {
				t.Errorf("OpenAI's response has %s", k)
			}
		}
		if resp["top_logprobs"] != 0.0 || resp["max_output_tokens"] != nil || num(resp["completed_at"]) == 0 {
			t.Errorf("top_logprobs %v max_output_tokens %v completed_at %v", resp["top_logprobs"], resp["max_output_tokens"], resp["completed_at"])
		}
		if has(get(resp, "usage", "input_tokens_details").(map[string]any), "input_tokens_per_turn") {
			t.Errorf("usage has vLLM's per-turn arrays")
		}
	})
}

func TestQuirksSyntax(t *testing.T) {
	cases := []struct {
		base Quirks
		list string
		want Quirks
	}{
		{AllQuirks, "none", 0},
		{AllQuirks, "-ids,-content_index", AllQuirks &^ (QuirkIDs | QuirkContentIndex)},
		{AllQuirks, "none,ids", QuirkIDs},
		{0, "all,-fields", AllQuirks &^ QuirkFields},
		{0, "nulls, terminal", QuirkNulls | QuirkTerminal},
	}
	for _, c := range cases {
		got, err := c.base.apply(c.list)
		if err != nil || got != c.want {
			t.Errorf("%v.apply(%q) = %v, %v; want %v", c.base, c.list, got, err, c.want)
		}
	}
	if _, err := AllQuirks.apply("-idz"); err == nil {
		t.Errorf("unknown quirk accepted")
	}
	if s := (QuirkIDs | QuirkNulls).String(); s != "ids,nulls" {
		t.Errorf("String() = %q", s)
	}
}

func TestOptionsDisableQuirks(t *testing.T) {
	srv, _ := newServer(t, Options{DisableQuirks: AllQuirks})
	evs := stream(t, srv, body(HarmonyModel, true, chatHistory))
	checkClean(t, evs)
	// A request can switch a quirk back on.
	evs = stream(t, srv, body(HarmonyModel+"?quirks=reasoning_part", true, chatHistory))
	if len(ofType(evs, "response.reasoning_part.added")) != 1 {
		t.Errorf("quirks=reasoning_part did not switch it on: %v", types(evs))
	}
}

// TestCleanStreamIsStrictOpenAI checks quirks=none streams against OpenAI's streaming rules
// (docs/wire.md §5.2-5.5) for every shape of answer.
func TestCleanStreamIsStrictOpenAI(t *testing.T) {
	srv, _ := newServer(t, Options{})
	requests := map[string][]string{
		"text":       {chatHistory},
		"tools":      {toolsInput},
		"tool call":  {traceTools, `"input":"call get_weather"`},
		"incomplete": {chatHistory, `"max_output_tokens":20`},
		"cut call":   {toolsInput, `"max_output_tokens":22`},
		"no reason":  {chatHistory},
	}
	for _, model := range []string{HarmonyModel, ParserModel} {
		for name, members := range requests {
			t.Run(model+"/"+name, func(t *testing.T) {
				m := model + "?quirks=none"
				if name == "no reason" {
					m += "&reasoning=0"
				}
				checkClean(t, stream(t, srv, body(m, true, members...)))
			})
		}
	}
}

// checkClean asserts evs is a strictly valid OpenAI Responses stream.
func checkClean(t *testing.T, evs []sseEvent) {
	t.Helper()
	if err := cleanErr(evs); err != nil {
		t.Fatal(err)
	}
}

// cleanErr reports the first way evs is not a strictly valid OpenAI Responses stream.
func cleanErr(evs []sseEvent) error {
	known := map[string]bool{
		"response.created": true, "response.in_progress": true, "response.completed": true, "response.incomplete": true,
		"response.output_item.added": true, "response.output_item.done": true,
		"response.content_part.added": true, "response.content_part.done": true,
		"response.output_text.delta": true, "response.output_text.done": true,
		"response.reasoning_text.delta": true, "response.reasoning_text.done": true,
		"response.function_call_arguments.delta": true, "response.function_call_arguments.done": true,
	}
	type state struct {
		item     map[string]any
		parts    []string // text per content index
		args     string
		partOpen bool
		argsDone bool
		done     bool
	}
	var items []*state
	fail := func(i int, format string, args ...any) error {
		return fmt.Errorf("event %d (%s): %s", i, evs[i].typ, fmt.Sprintf(format, args...))
	}
	for i, ev := range evs {
		if !known[ev.typ] || ev.obj["type"] != ev.typ {
			return fail(i, "unknown type or type mismatch (%v)", ev.obj["type"])
		}
		if num(ev.obj["sequence_number"]) != i {
			return fail(i, "sequence_number %v", ev.obj["sequence_number"])
		}
		if has(ev.obj, "error") {
			return fail(i, "top-level error key")
		}
		if (i == 0) != (ev.typ == "response.created") {
			return fail(i, "response.created must be first and only first")
		}
		idx := num(ev.obj["output_index"])
		var st *state
		if has(ev.obj, "output_index") && ev.typ != "response.output_item.added" {
			if idx >= len(items) || items[idx].done {
				return fail(i, "output_index %d not open", idx)
			}
			st = items[idx]
			if has(ev.obj, "item_id") && ev.obj["item_id"] != st.item["id"] {
				return fail(i, "item_id %v, item id %v", ev.obj["item_id"], st.item["id"])
			}
		}
		switch ev.typ {
		case "response.output_item.added":
			if idx != len(items) {
				return fail(i, "output_index %d, want %d", idx, len(items))
			}
			item := ev.obj["item"].(map[string]any)
			prefix := map[string]string{"reasoning": "rs_", "message": "msg_", "function_call": "fc_"}[str(item["type"])]
			if !strings.HasPrefix(str(item["id"]), prefix) || item["status"] != "in_progress" {
				return fail(i, "added item %v", item)
			}
			if item["type"] == "function_call" && (!strings.HasPrefix(str(item["call_id"]), "call_") || item["arguments"] != "") {
				return fail(i, "added call %v", item)
			}
			if item["type"] == "reasoning" && (has(item, "encrypted_content") || item["content"] == nil) {
				return fail(i, "reasoning item with nulls: %v", item)
			}
			items = append(items, &state{item: item})
		case "response.content_part.added":
			if num(ev.obj["content_index"]) != len(st.parts) || st.partOpen {
				return fail(i, "content_index %v with %d parts", ev.obj["content_index"], len(st.parts))
			}
			st.parts, st.partOpen = append(st.parts, ""), true
		case "response.output_text.delta", "response.reasoning_text.delta":
			ci := num(ev.obj["content_index"])
			if !st.partOpen || ci != len(st.parts)-1 {
				return fail(i, "delta for content_index %d without an open part", ci)
			}
			if _, ok := ev.obj["logprobs"].([]any); ev.typ == "response.output_text.delta" && !ok {
				return fail(i, "logprobs not an array")
			}
			st.parts[ci] += str(ev.obj["delta"])
		case "response.output_text.done", "response.reasoning_text.done":
			if ci := num(ev.obj["content_index"]); !st.partOpen || ev.obj["text"] != st.parts[ci] {
				return fail(i, "done text %q, deltas %q", ev.obj["text"], st.parts)
			}
		case "response.content_part.done":
			ci := num(ev.obj["content_index"])
			part := ev.obj["part"].(map[string]any)
			if !st.partOpen || part["text"] != st.parts[ci] {
				return fail(i, "part %v, deltas %q", part, st.parts)
			}
			if _, ok := part["logprobs"].([]any); part["type"] == "output_text" && !ok {
				return fail(i, "part logprobs not an array")
			}
			st.partOpen = false
		case "response.function_call_arguments.delta":
			st.args += str(ev.obj["delta"])
		case "response.function_call_arguments.done":
			if ev.obj["arguments"] != st.args || ev.obj["name"] != st.item["name"] {
				return fail(i, "arguments.done %v, deltas %q", ev.obj, st.args)
			}
			st.argsDone = true
		case "response.output_item.done":
			item := ev.obj["item"].(map[string]any)
			if st.partOpen || item["id"] != st.item["id"] || (item["status"] != "completed" && item["status"] != "incomplete") {
				return fail(i, "done item %v", item)
			}
			for _, k := range []string{"item_id", "output_index", "sequence_number", "summary"} {
				if item["type"] != "reasoning" && has(item, k) {
					return fail(i, "done item has stray %s", k)
				}
			}
			if item["type"] == "function_call" && (item["arguments"] != st.args || !st.argsDone) {
				return fail(i, "done arguments %v, deltas %q, arguments.done seen: %v", item["arguments"], st.args, st.argsDone)
			}
			for ci, text := range st.parts {
				if get(item, "content", ci, "text") != text {
					return fail(i, "done content %d %v, deltas %q", ci, get(item, "content", ci, "text"), text)
				}
			}
			st.done = true
		case "response.completed", "response.incomplete":
			if i != len(evs)-1 {
				return fail(i, "terminal event is not last")
			}
			resp := ev.obj["response"].(map[string]any)
			if want := strings.TrimPrefix(ev.typ, "response."); resp["status"] != want {
				return fail(i, "status %v in %s", resp["status"], ev.typ)
			}
			for _, k := range []string{"error", "completed_at", "store", "presence_penalty", "frequency_penalty", "top_logprobs", "metadata"} {
				if !has(resp, k) {
					return fail(i, "response lacks %s", k)
				}
			}
			output := resp["output"].([]any)
			if len(output) != len(items) {
				return fail(i, "%d output items, %d streamed", len(output), len(items))
			}
			for j, st := range items {
				if !st.done || get(output, j, "id") != st.item["id"] || get(output, j, "call_id") != st.item["call_id"] {
					return fail(i, "output %d %v does not match the streamed item %v", j, output[j], st.item)
				}
				if s := get(output, j, "status"); s != "completed" && s != "incomplete" {
					return fail(i, "output %d status %v", j, s)
				}
			}
		}
	}
	if last := evs[len(evs)-1].typ; last != "response.completed" && last != "response.incomplete" {
		return fmt.Errorf("no terminal event, last is %s", last)
	}
	return nil
}

// TestEachQuirkBreaksTheCleanStream shows that checkClean can fail: every quirk alone, on a request
// where it shows, makes the stream invalid for OpenAI's rules.
func TestEachQuirkBreaksTheCleanStream(t *testing.T) {
	srv, _ := newServer(t, Options{})
	cut := chatHistory + `,"max_output_tokens":20`
	cases := []struct {
		quirk, model string
		members      []string
	}{
		{"reasoning_part", HarmonyModel, []string{chatHistory}},
		{"content_index", HarmonyModel, []string{chatHistory}},
		{"ids", HarmonyModel, []string{toolsInput}},
		{"ids", ParserModel, []string{toolsInput}},
		{"added", HarmonyModel, []string{chatHistory}},
		{"status", HarmonyModel, []string{toolsInput}},
		{"stray", HarmonyModel, []string{toolsInput}},
		{"stray", ParserModel, []string{chatHistory}},
		{"nulls", ParserModel, []string{chatHistory}},
		{"terminal", HarmonyModel, []string{cut}},
		{"truncate", HarmonyModel, []string{cut}},
		{"args_done", ParserModel + "?noargs=1&", []string{traceTools, `"input":"call get_time"`}},
		{"fields", ParserModel, []string{chatHistory}},
	}
	for _, c := range cases {
		t.Run(c.quirk+"/"+c.model, func(t *testing.T) {
			model := strings.TrimSuffix(c.model, "&")
			sep := "?"
			if strings.Contains(model, "?") {
				sep = "&"
			}
			evs := stream(t, srv, body(model+sep+"quirks=none,"+c.quirk, true, c.members...))
			if err := cleanErr(evs); err == nil {
				t.Errorf("quirk %s alone still gives a clean stream", c.quirk)
			} else {
				t.Logf("%s: %v", c.quirk, err)
			}
		})
	}
}
