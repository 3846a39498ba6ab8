package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// facts are the remembered facts of the early turns; the compaction tests prove they survive.
var compactFacts = []string{"the vault code is 4417", "the cat is called Miso", "deploy on Friday"}

// session runs one stored turn per fact, chained, plus a last question, and returns the last
// response and the first turn's.
func session(t *testing.T, g *gw, model string) (first, last *responses.Response) {
	t.Helper()
	prev := ""
	for i, f := range append(append([]string(nil), compactFacts...), "what is next?") {
		body := map[string]any{"model": model, "input": "remember: " + f}
		if i == len(compactFacts) {
			body["input"] = f
		}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		b, _ := json.Marshal(body)
		r := g.create(t, string(b))
		if first == nil {
			first = r
		}
		prev, last = r.ID, r
	}
	return first, last
}

// outputJSON is the raw "output" array of a compact answer.
func compactOutput(t *testing.T, raw string) []json.RawMessage {
	t.Helper()
	var v struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	return v.Output
}

func itemType(raw json.RawMessage) (typ, id string) {
	var v struct{ Type, ID string }
	_ = json.Unmarshal(raw, &v)
	return v.Type, v.ID
}

// chainItems returns, in order, the user messages of the stored chain ending at lastID (its
// input_items, which list the whole chain's history, then its output) and the ids of every other
// item: what OpenAI's compaction window keeps and what its compaction item stands for.
func chainItems(t *testing.T, g *gw, lastID string) (users []json.RawMessage, others []string) {
	t.Helper()
	r, err := g.client.Responses.Get(t.Context(), lastID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	page, err := g.client.Responses.InputItems.List(t.Context(), lastID, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc, Limit: openai.Int(100)})
	if err != nil || page.HasMore {
		t.Fatalf("input items: %v (more: %v)", err, page != nil && page.HasMore)
	}
	var all []json.RawMessage
	for _, it := range page.Data {
		all = append(all, json.RawMessage(it.RawJSON()))
	}
	for _, it := range r.Output {
		all = append(all, json.RawMessage(it.RawJSON()))
	}
	for _, it := range all {
		var v struct{ Type, Role, ID string }
		_ = json.Unmarshal(it, &v)
		if v.Type == "message" && v.Role == "user" {
			users = append(users, it)
		} else {
			others = append(others, v.ID)
		}
	}
	return users, others
}

// checkWindow checks a compact output against OpenAI's window of the chain ending at lastID: its
// user messages, verbatim and in order, then exactly one compaction item (whose id it returns).
func checkWindow(t *testing.T, g *gw, out []json.RawMessage, lastID string) string {
	t.Helper()
	users, _ := chainItems(t, g, lastID)
	if len(out) != len(users)+1 {
		t.Fatalf("compact output has %d items, want the %d user messages and one compaction item", len(out), len(users))
	}
	for i, u := range users {
		var got, want any
		_ = json.Unmarshal(out[i], &got)
		_ = json.Unmarshal(u, &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("output[%d] = %s, want the user message %s verbatim", i, out[i], u)
		}
	}
	typ, id := itemType(out[len(out)-1])
	if typ != compact.TypeCompaction || !strings.HasPrefix(id, compact.PrefixCompaction) {
		t.Fatalf("the last output item is %s, want a cmp_ compaction item", out[len(out)-1])
	}
	return id
}

// The OpenAI pattern: compact a stored chain, send the compact output (plus a new message) as the
// next request's input without previous_response_id, and the model still knows the early facts,
// through one marked summary message; the chain then continues through the compaction item.
func TestCompactOutputAsNextInputKeepsEarlyFacts(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		first, last := session(t, g, harmony)

		cr, err := g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
			Model: responses.ResponseCompactParamsModel(harmony), PreviousResponseID: openai.String(last.ID)})
		if err != nil {
			t.Fatalf("compact: %v", err)
		}
		if cr.Object != "response.compaction" || cr.Usage.OutputTokens == 0 {
			t.Fatalf("compact answer: object %q usage %+v", cr.Object, cr.Usage)
		}
		// OpenAI's window: every user message of the chain, verbatim and in order, then one
		// compaction item standing for the rest.
		out := compactOutput(t, cr.RawJSON())
		cmpID := checkWindow(t, g, out, last.ID)

		// The archive names what the summary replaced, with the digest of each stored item.
		tn := g.Server.TenantOf("test-key")
		rec, err := g.Store.CompactionGet(t.Context(), &store.CompactionGetParams{Tenant: tn, ID: cmpID})
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		if rec.ResponseID != cr.ID || rec.Model != harmony {
			t.Fatalf("archive names answer %q model %q; want the compact answer's id %s", rec.ResponseID, rec.Model, cr.ID)
		}
		// The first replaced item is the first turn's first output item (its user message is kept).
		stored, err := g.Store.ItemGet(t.Context(), &store.ItemGetParams{Tenant: tn, ID: first.Output[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(stored.JSON)
		if _, others := chainItems(t, g, last.ID); len(rec.Replaced) != len(others) || rec.Replaced[0].ItemID != stored.ID || rec.Replaced[0].SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("archive %+v does not start with the first output item %s (sha256 %x)", rec.Replaced, stored.ID, sum)
		}

		// The compact output becomes the next input.
		input := append(append([]json.RawMessage(nil), out...), json.RawMessage(`{"role":"user","content":"what do you remember?"}`))
		inJSON, _ := json.Marshal(input)
		g.Sim.Reset()
		next := g.create(t, `{"model":"`+harmony+`","input":`+string(inJSON)+`}`)
		for _, f := range compactFacts {
			if !strings.Contains(outputText(next), f) {
				t.Fatalf("fact %q forgotten after compaction: %q", f, outputText(next))
			}
		}
		reqs := g.Sim.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d upstream requests", len(reqs))
		}
		marked := 0
		for _, it := range upstreamInput(t, reqs[0].Body) {
			b, _ := json.Marshal(it)
			if strings.Contains(string(b), "compaction summary") {
				marked++
			}
			if it["type"] == compact.TypeCompaction || strings.Contains(string(b), "encrypted_content") {
				t.Fatalf("a compaction item reached vLLM: %s", b)
			}
		}
		if marked != 1 {
			t.Fatalf("want one marked summary message upstream, got %d", marked)
		}
		// Stored and listed like any item.
		items, err := g.client.Responses.InputItems.List(t.Context(), next.ID, inputItemsParams())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, it := range items.Data {
			found = found || (it.ID == cmpID && it.Type == compact.TypeCompaction)
		}
		if !found {
			t.Fatalf("input_items does not list the compaction item %s", cmpID)
		}
		// previous_response_id chains through it.
		after := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+next.ID+`","input":"and now?"}`)
		if !strings.Contains(outputText(after), compactFacts[0]) {
			t.Fatalf("the chain through the compaction item forgot %q: %q", compactFacts[0], outputText(after))
		}
	})
}

// A short window (one user message, nothing else) still answers OpenAI's shape: the message,
// verbatim, then a compaction item; the summary is asked for, and the output works as the next
// input.
func TestCompactOfAShortWindowAnswersTheMessageAndACompactionItem(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		cr, err := g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
			Model: responses.ResponseCompactParamsModel(harmony),
			Input: responses.ResponseCompactParamsInputUnion{OfString: openai.String("remember: short")}})
		if err != nil {
			t.Fatal(err)
		}
		out := compactOutput(t, cr.RawJSON())
		if len(out) != 2 || !strings.Contains(string(out[0]), "remember: short") || !strings.Contains(string(out[0]), `"role":"user"`) {
			t.Fatalf("want the user message then a compaction item, got %s", cr.RawJSON())
		}
		if typ, _ := itemType(out[1]); typ != compact.TypeCompaction || len(g.Sim.Requests()) != 1 || cr.Usage.OutputTokens == 0 {
			t.Fatalf("want a compaction item written by one summary call, got %s (%d calls)", cr.RawJSON(), len(g.Sim.Requests()))
		}
		input, _ := json.Marshal(append(out, json.RawMessage(`{"role":"user","content":"what do you remember?"}`)))
		next := g.create(t, `{"model":"`+harmony+`","input":`+string(input)+`}`)
		if !strings.Contains(outputText(next), "short") {
			t.Fatalf("the next turn forgot the fact: %q", outputText(next))
		}
	})
}

// Compacting a window that already holds a compaction item, tool calls and their outputs: every
// user message of both windows stays verbatim, and the one new compaction item stands for all the
// rest, the earlier compaction item included; the model still knows the facts of both windows.
func TestCompactAgainReplacesTheEarlierCompactionItem(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		_, last := session(t, g, harmony)
		cr, err := g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
			Model: responses.ResponseCompactParamsModel(harmony), PreviousResponseID: openai.String(last.ID)})
		if err != nil {
			t.Fatal(err)
		}
		first := compactOutput(t, cr.RawJSON())
		firstID := checkWindow(t, g, first, last.ID)

		// A new chain from the compact output: a tool call, its output, then a fact.
		const tools = `[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}]`
		input, _ := json.Marshal(append(first, json.RawMessage(`{"role":"user","content":"remember: the tide turns at noon. call lookup"}`)))
		r := g.create(t, `{"model":"`+harmony+`","input":`+string(input)+`,"tools":`+tools+`}`)
		var callID string
		for _, it := range r.Output {
			if it.Type == "function_call" {
				callID = it.CallID
			}
		}
		if callID == "" {
			t.Fatalf("no function call in %s", r.RawJSON())
		}
		r = g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+r.ID+`","tools":`+tools+`,"input":[{"type":"function_call_output","call_id":"`+callID+`","output":"found it"}]}`)
		r = g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+r.ID+`","input":"remember: the boat is red"}`)

		cr, err = g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
			Model: responses.ResponseCompactParamsModel(harmony), PreviousResponseID: openai.String(r.ID)})
		if err != nil {
			t.Fatal(err)
		}
		second := compactOutput(t, cr.RawJSON())
		secondID := checkWindow(t, g, second, r.ID)
		if secondID == firstID || strings.Contains(cr.RawJSON(), firstID) {
			t.Fatalf("the earlier compaction item %s is still in the output: %s", firstID, cr.RawJSON())
		}
		users := 0
		for _, it := range second {
			if strings.Contains(string(it), `"role":"user"`) {
				users++
			}
		}
		if users != len(compactFacts)+1+2 { // the first window's 4, then 2 more (the call's output is not a message)
			t.Fatalf("%d user messages in %s", users, cr.RawJSON())
		}
		// The archive of the new item lists the earlier compaction item and the tool call and output.
		rec, err := g.Store.CompactionGet(t.Context(), &store.CompactionGetParams{Tenant: g.Server.TenantOf("test-key"), ID: secondID})
		if err != nil {
			t.Fatal(err)
		}
		var replaced []string
		for _, it := range rec.Replaced {
			replaced = append(replaced, it.ItemID)
		}
		if !slices.Contains(replaced, firstID) || !slices.ContainsFunc(replaced, func(id string) bool { return strings.HasPrefix(id, "fc_") }) {
			t.Fatalf("the archive %v does not list the earlier compaction item and the call", replaced)
		}
		input, _ = json.Marshal(append(second, json.RawMessage(`{"role":"user","content":"what do you remember?"}`)))
		g.Sim.Reset()
		next := g.create(t, `{"model":"`+harmony+`","input":`+string(input)+`}`)
		for _, f := range append(append([]string(nil), compactFacts...), "the tide turns at noon", "the boat is red") {
			if !strings.Contains(outputText(next), f) {
				t.Fatalf("fact %q forgotten after the second compaction: %q", f, outputText(next))
			}
		}
		marked := 0
		for _, it := range upstreamInput(t, g.Sim.Requests()[0].Body) {
			b, _ := json.Marshal(it)
			marked += strings.Count(string(b), "compaction summary")
		}
		if marked != 1 {
			t.Fatalf("want one marked summary message upstream, got %d", marked)
		}
	})
}

// The compact route's client errors.
func TestCompactRejectsBadRequests(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	long := `[{"role":"user","content":"remember: a"},{"role":"assistant","content":"ok"},{"role":"user","content":"b"},{"role":"assistant","content":"ok"},{"role":"user","content":"c"}]`
	code, body, _ := rawDo(t, http.MethodPost, g.URL+"/responses/compact", `{"model":"`+harmony+`","input":`+long+`}`, "Authorization", "Bearer test-key")
	if code != http.StatusOK {
		t.Fatalf("compact: %d %s", code, body)
	}
	out := compactOutput(t, string(body))
	var cmp map[string]any
	for _, it := range out {
		if typ, _ := itemType(it); typ == compact.TypeCompaction {
			_ = json.Unmarshal(it, &cmp)
		}
	}
	if cmp == nil {
		t.Fatalf("no compaction item in %s", body)
	}
	tampered := map[string]any{"type": "compaction", "id": cmp["id"], "encrypted_content": cmp["encrypted_content"].(string) + "A"}
	foreign := map[string]any{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABforeign"}
	asInput := func(it any) string {
		b, _ := json.Marshal([]any{it, map[string]any{"role": "user", "content": "go on"}})
		return string(b)
	}
	for _, tc := range []struct {
		name, path, body, key, code, param string
	}{
		{"missing model", "/responses/compact", `{"input":"hi"}`, "test-key", "missing_required_parameter", "model"},
		{"unknown previous response", "/responses/compact", `{"model":"` + harmony + `","previous_response_id":"resp_nope"}`, "test-key", "previous_response_not_found", "previous_response_id"},
		{"encrypted-only reasoning", "/responses/compact", `{"model":"` + harmony + `","input":[{"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"gAAAAAB"}]}`, "test-key", "", "input[0]"},
		{"a tampered compaction item", "/responses", `{"model":"` + harmony + `","input":` + asInput(tampered) + `}`, "test-key", "invalid_encrypted_content", "input[0]"},
		{"a foreign compaction item", "/responses", `{"model":"` + harmony + `","input":` + asInput(foreign) + `}`, "test-key", "invalid_encrypted_content", "input[0]"},
		{"another tenant's compaction item", "/responses", `{"model":"` + harmony + `","input":` + asInput(cmp) + `}`, "other-key", "invalid_encrypted_content", "input[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := rawDo(t, http.MethodPost, g.URL+tc.path, tc.body, "Authorization", "Bearer "+tc.key)
			_, c, p, _ := envelope(t, body)
			if code != http.StatusBadRequest || (tc.code != "" && c != tc.code) || p != tc.param {
				t.Fatalf("got %d %s, want 400 %s param %s", code, body, tc.code, tc.param)
			}
		})
	}
	// The item opens for its own tenant.
	code, body, _ = rawDo(t, http.MethodPost, g.URL+"/responses", `{"model":"`+harmony+`","input":`+asInput(cmp)+`}`, "Authorization", "Bearer test-key")
	if code != http.StatusOK || !strings.Contains(string(body), "Facts: a") {
		t.Fatalf("own compaction item: %d %s", code, body)
	}
}

// A long agent session on a small simulated window: with automatic compaction it never hits
// vLLM's context-length error, and the model still knows the first turns' facts at the end,
// through the summaries. Without it the same session fails (the window really is too small).
func TestAutomaticCompactionKeepsALongSessionInTheWindow(t *testing.T) {
	t.Parallel()
	const turns, window = 60, 900
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Sim: vllmsim.Options{MaxModelLen: window},
			Server: server.Config{CompactionThreshold: 0.5}})
		prev := ""
		var last *responses.Response
		for i := range turns {
			text := fmt.Sprintf("turn %d: keep going with the task", i)
			if i < len(compactFacts) {
				text = "remember: " + compactFacts[i]
			}
			body := map[string]any{"model": harmony, "input": text}
			if prev != "" {
				body["previous_response_id"] = prev
			}
			b, _ := json.Marshal(body)
			last = g.create(t, string(b))
			prev = last.ID
		}
		for _, f := range compactFacts {
			if !strings.Contains(outputText(last), f) {
				t.Fatalf("after %d turns the model forgot %q: %q", turns, f, outputText(last))
			}
		}
		summaries := 0
		for _, r := range g.Sim.Requests() {
			if strings.Contains(string(r.Body), vllmsim.HandoffPhrase) {
				summaries++
			}
		}
		if summaries == 0 {
			t.Fatal("no compaction happened")
		}
		// What the byte estimate says of the last turn's vLLM-bound input, against vLLM's count.
		reqs := g.Sim.Requests()
		sent := upstreamInput(t, reqs[len(reqs)-1].Body)
		estimate := 0
		for _, it := range sent {
			b, _ := json.Marshal(it)
			estimate += len(b)/3 + 4
		}
		t.Logf("%d turns, %d summaries; last turn: %d items sent, byte estimate %d tokens, vLLM counted %d",
			turns, summaries, len(sent), estimate, last.Usage.InputTokens)

		// The same session without compaction outgrows the window.
		bare := newGateway(t, newStore(t), respgatetest.Options{Sim: vllmsim.Options{MaxModelLen: window}})
		prev = ""
		for i := range turns {
			body := fmt.Sprintf(`{"model":%q,"input":"turn %d: keep going with the task"`, harmony, i)
			if prev != "" {
				body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
			}
			code, b, _ := rawDo(t, http.MethodPost, bare.URL+"/responses", body+"}", "Authorization", "Bearer test-key")
			if code != http.StatusOK {
				if _, c, _, _ := envelope(t, b); c != "context_length_exceeded" {
					t.Fatalf("turn %d without compaction: %d %s", i, code, b)
				}
				return
			}
			var r struct{ ID string }
			_ = json.Unmarshal(b, &r)
			prev = r.ID
		}
		t.Fatalf("%d turns fit a %d-token window without compaction: the test proves nothing", turns, window)
	})
}

// truncation:"auto" drops whole turns from the middle instead of failing, and says how many items
// it left out; "disabled" gets vLLM's error as context_length_exceeded.
func TestTruncationAutoDropsOldTurns(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil, respgatetest.Options{Sim: vllmsim.Options{MaxModelLen: 600}})
	for _, mode := range []string{"auto", "disabled"} {
		prev, truncated, failed := "", false, ""
		for i := range 40 {
			body := fmt.Sprintf(`{"model":%q,"truncation":%q,"input":"turn %d: keep going with the task"`, harmony, mode, i)
			if prev != "" {
				body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
			}
			code, b, h := rawDo(t, http.MethodPost, g.URL+"/responses", body+"}", "Authorization", "Bearer test-key")
			if code != http.StatusOK {
				_, failed, _, _ = envelope(t, b)
				break
			}
			truncated = truncated || h.Get("X-Respgate-Truncated-Items") != ""
			var r struct{ ID string }
			_ = json.Unmarshal(b, &r)
			prev = r.ID
		}
		switch {
		case mode == "auto" && (failed != "" || !truncated):
			t.Fatalf("auto: failed %q, truncated %v", failed, truncated)
		case mode == "disabled" && failed != "context_length_exceeded":
			t.Fatalf("disabled: want context_length_exceeded, got %q", failed)
		}
	}
}

// A request's own context_management compaction entry compacts once its threshold (tokens) is
// passed, without a deployment threshold; the compaction item leads the compacting turn's output,
// and later turns' input_items (the context they were generated from) list it.
func TestRequestContextManagementCompacts(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	prev, cmpTurn := "", ""
	for i := range 8 {
		text := fmt.Sprintf("turn %d: keep going", i)
		if i < len(compactFacts) {
			text = "remember: " + compactFacts[i]
		}
		body := map[string]any{"model": harmony, "input": text,
			"context_management": []any{map[string]any{"type": "compaction", "compact_threshold": 150}}}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		b, _ := json.Marshal(body)
		r := g.create(t, string(b))
		prev = r.ID
		if r.Output[0].Type == compact.TypeCompaction && cmpTurn == "" {
			cmpTurn = r.Output[0].ID
		}
		if i == 7 {
			for _, f := range compactFacts {
				if !strings.Contains(outputText(r), f) {
					t.Fatalf("forgot %q: %q", f, outputText(r))
				}
			}
		}
	}
	items, err := g.client.Responses.InputItems.List(t.Context(), prev, inputItemsParams())
	if err != nil {
		t.Fatal(err)
	}
	stored := false
	for _, it := range items.Data {
		stored = stored || (it.Type == compact.TypeCompaction && it.ID == cmpTurn)
	}
	handoffs := 0
	for _, r := range g.Sim.Requests() {
		if strings.Contains(string(r.Body), vllmsim.HandoffPhrase) {
			handoffs++
		}
	}
	if handoffs == 0 || !stored {
		t.Fatalf("%d summaries; first compaction item %q listed in the last turn's context: %v", handoffs, cmpTurn, stored)
	}
	code, body, _ := rawDo(t, http.MethodPost, g.URL+"/responses", `{"model":"`+harmony+`","input":"x","context_management":[{"type":"trim"}]}`)
	if _, c, p, _ := envelope(t, body); code != http.StatusBadRequest || c != "invalid_value" || p != "context_management[0].type" {
		t.Fatalf("bad context_management: %d %s", code, body)
	}
}

// Automatic compaction starts the turn's OUTPUT with the compaction item, as OpenAI does: streamed
// first (output_item.added/.done at output_index 0, the model's items after it, sequence numbers
// dense; every event checked against the Open Responses schema), output[0] of the stored
// response, never part of the turn's input. The next turn chains through it: vLLM gets the
// summary in place of the compacted originals, which are not replayed.
func TestAutomaticCompactionLeadsTheTurnOutput(t *testing.T) {
	t.Parallel()
	cm := `,"context_management":[{"type":"compaction","compact_threshold":1}]`
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		_, last := session(t, g, harmony)
		g.Sim.Reset()

		s := g.stream(t, `{"model":"`+harmony+`","stream":true,"previous_response_id":"`+last.ID+`","input":"what do you remember?"`+cm+`}`)
		ev := s.events
		if ev[2].Type != "response.output_item.added" || ev[2].OutputIndex != 0 || ev[2].Item.Type != compact.TypeCompaction ||
			ev[3].Type != "response.output_item.done" || ev[3].OutputIndex != 0 || ev[3].Item.ID != ev[2].Item.ID {
			t.Fatalf("events 2, 3: %s / %s", ev[2].RawJSON(), ev[3].RawJSON())
		}
		cmpID := ev[2].Item.ID
		if !strings.HasPrefix(cmpID, compact.PrefixCompaction) || ev[3].Item.EncryptedContent == "" {
			t.Fatalf("compaction item %s", ev[3].Item.RawJSON())
		}
		for _, e := range ev[4:] {
			if e.Type == "response.output_item.added" && e.OutputIndex == 0 {
				t.Fatalf("a model item at output_index 0: %s", e.RawJSON())
			}
		}
		out := s.final.Output
		if len(out) < 2 || out[0].ID != cmpID || out[len(out)-1].Type != "message" {
			t.Fatalf("terminal output %s", s.final.RawJSON())
		}
		for _, f := range compactFacts {
			if !strings.Contains(s.final.OutputText(), f) {
				t.Fatalf("fact %q forgotten in the compacting turn: %q", f, s.final.OutputText())
			}
		}

		// Stored as the response's first output item, not with its input.
		got, err := g.client.Responses.Get(t.Context(), s.final.ID, responsesGetParams())
		if err != nil || len(got.Output) == 0 || got.Output[0].ID != cmpID || got.Output[0].Type != compact.TypeCompaction {
			t.Fatalf("stored response: %v %s", err, got.RawJSON())
		}
		tn := g.Server.TenantOf("test-key")
		own, err := g.Store.ItemListByResponse(t.Context(), &store.ItemListByResponseParams{Tenant: tn, ResponseID: s.final.ID,
			Role: store.RoleInput, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range own.Items {
			if it.ID == cmpID {
				t.Fatal("the compaction item was stored with the turn's input")
			}
		}
		// The archive names the turn that compacted.
		rec, err := g.Store.CompactionGet(t.Context(), &store.CompactionGetParams{Tenant: tn, ID: cmpID})
		if err != nil || rec.ResponseID != s.final.ID || len(rec.Replaced) == 0 {
			t.Fatalf("archive %+v, %v; want the response %s", rec, err, s.final.ID)
		}

		// The next turn (non-streamed, no threshold) chains through the item.
		g.Sim.Reset()
		next := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+s.final.ID+`","input":"and now?"}`)
		for _, f := range compactFacts {
			if !strings.Contains(outputText(next), f) {
				t.Fatalf("fact %q forgotten through the chain: %q", f, outputText(next))
			}
		}
		if next.Output[0].Type == compact.TypeCompaction {
			t.Fatal("the next turn compacted again without a threshold")
		}
		reqs := g.Sim.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d upstream requests", len(reqs))
		}
		marked, originals := 0, 0
		for _, it := range upstreamInput(t, reqs[0].Body) {
			b, _ := json.Marshal(it)
			if strings.Contains(string(b), compact.SummaryMarker[:30]) {
				marked++
			}
			if strings.Contains(string(b), `"remember: `+compactFacts[0]+`"`) {
				originals++
			}
			if it["type"] == compact.TypeCompaction {
				t.Fatalf("a compaction item reached vLLM: %s", b)
			}
		}
		if marked != 1 || originals != 0 {
			t.Fatalf("upstream input has %d summaries and %d compacted originals; want 1 and 0: %s", marked, originals, reqs[0].Body)
		}
	})
}

// A non-streamed turn that compacts answers with output[0] the compaction item.
func TestAutomaticCompactionLeadsANonStreamedOutput(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	_, last := session(t, g, harmony)
	r := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+last.ID+`","input":"go on",`+
		`"context_management":[{"type":"compaction","compact_threshold":1}]}`)
	if len(r.Output) < 2 || r.Output[0].Type != compact.TypeCompaction || r.Output[0].EncryptedContent == "" {
		t.Fatalf("output %s", r.RawJSON())
	}
}

// The automatic-compaction trigger follows what vLLM reports, not a guess: the previous turn's
// usage sizes the history and /tokenize counts the new input. A short history whose last turn
// reported a huge usage (the simulator's input_tokens= fault) compacts; the same history with its
// real usage does not.
func TestCompactionTriggerFollowsReportedUsage(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{CompactionThreshold: 0.5}})
		const window = 131072 // the simulator's default max_model_len
		for _, tc := range []struct {
			name      string
			reported  string // the last session turn's model suffix
			compacted bool
		}{
			{"a reported usage past the threshold compacts", fmt.Sprintf("?input_tokens=%d", window*6/10), true},
			{"the real usage of the same history does not", "", false},
		} {
			_, last := session(t, g, harmony)
			again := g.create(t, `{"model":"`+harmony+tc.reported+`","previous_response_id":"`+last.ID+`","input":"remember: one more"}`)
			if again.Output[0].Type == compact.TypeCompaction {
				t.Fatalf("%s: the reporting turn compacted", tc.name)
			}
			g.Sim.Reset()
			next := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+again.ID+`","input":"go on"}`)
			if got := next.Output[0].Type == compact.TypeCompaction; got != tc.compacted {
				t.Fatalf("%s: compacted %v, want %v (usage of the previous turn: %s)", tc.name, got, tc.compacted, again.Usage.RawJSON())
			}
			tokenized := 0
			for _, r := range g.Sim.Requests() {
				if r.Path == "/tokenize" {
					tokenized++
				}
			}
			if tokenized == 0 {
				t.Fatalf("%s: the new input was not counted with /tokenize", tc.name)
			}
		}
	})
}

// And the other way: a history whose bytes the estimate (compact.EstimateTokens, a token per 3
// bytes) puts past a request's compact_threshold, but whose reported usage is far below it (long
// unbroken words are one token each to the simulator), is not compacted.
func TestCompactionTriggerIgnoresTheByteEstimateWhenUsageIsKnown(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	long := strings.Repeat("x", 600)
	prev := ""
	for i := range 4 {
		body := map[string]any{"model": harmony, "input": fmt.Sprintf("remember: %d%s", i, long)}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		b, _ := json.Marshal(body)
		prev = g.create(t, string(b)).ID
	}
	const threshold = 600
	ctxItems, err := g.client.Responses.InputItems.List(t.Context(), prev, inputItemsParams())
	if err != nil {
		t.Fatal(err)
	}
	estimate := 0
	for _, it := range ctxItems.Data {
		estimate += len(it.RawJSON())/3 + 4
	}
	if estimate < threshold {
		t.Fatalf("the history's estimate %d is under %d: the test proves nothing", estimate, threshold)
	}
	r := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+prev+`","input":"go on",`+
		fmt.Sprintf(`"context_management":[{"type":"compaction","compact_threshold":%d}]}`, threshold))
	if r.Output[0].Type == compact.TypeCompaction {
		t.Fatalf("compacted on the estimate (%d) although the reported usage is %s", estimate, r.Usage.RawJSON())
	}
	t.Logf("history estimate %d tokens; vLLM counted %d input tokens for the turn", estimate, r.Usage.InputTokens)
	if r.Usage.InputTokens >= threshold {
		t.Fatalf("the turn's real input_tokens %d reach the threshold: the test proves nothing", r.Usage.InputTokens)
	}
}

// An operator holding only a compaction item's id finds its archive record with the query
// docs/compaction.md §7 gives (run here as written, on Postgres): the tenant, the compact answer
// it came from, and every replaced item, each still matching its digest.
func TestOperatorFindsTheArchiveOfACompactionItem(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	st, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	g := newGateway(t, st)
	_, last := session(t, g, harmony)
	cr, err := g.client.Responses.Compact(t.Context(), responses.ResponseCompactParams{
		Model: responses.ResponseCompactParamsModel(harmony), PreviousResponseID: openai.String(last.ID)})
	if err != nil {
		t.Fatal(err)
	}
	cmpID := ""
	for _, it := range compactOutput(t, cr.RawJSON()) {
		if typ, id := itemType(it); typ == compact.TypeCompaction {
			cmpID = id
		}
	}
	doc, err := os.ReadFile("../docs/compaction.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc[strings.Index(string(doc), "## 7. The archive"):])
	q := sec[strings.Index(sec, "```sql\n")+len("```sql\n"):]
	q = strings.TrimSuffix(strings.TrimSpace(q[:strings.Index(q, "```")]), ";")
	q = strings.Replace(q, "'cmp_…'", "$1", 1)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	rows, err := conn.Query(t.Context(), q, cmpID)
	if err != nil {
		t.Fatalf("the documented query: %v\n%s", err, q)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var tenant, respID, model, itemID string
		var created time.Time
		var unchanged *bool
		if err := rows.Scan(&tenant, &respID, &model, &created, &itemID, &unchanged); err != nil {
			t.Fatal(err)
		}
		if tenant != g.Server.TenantOf("test-key") || respID != cr.ID || model != harmony || unchanged == nil || !*unchanged {
			t.Fatalf("row %d: tenant %q response %q model %q item %s unchanged %v", n, tenant, respID, model, itemID, unchanged)
		}
		n++
	}
	if err := rows.Err(); err != nil || n == 0 {
		t.Fatalf("%d rows, %v", n, err)
	}
}

// A background turn that compacts keeps the compaction item at the head of its output: the worker
// that runs it later streams it first into the event log, and the stored response has it as
// output[0], as a foreground turn does.
func TestBackgroundTurnThatCompactsLeadsItsOutputWithTheItem(t *testing.T) {
	t.Parallel()
	g := newGateway(t, nil)
	_, last := session(t, g, harmony)
	r := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+last.ID+`","input":"go on","background":true,`+
		`"context_management":[{"type":"compaction","compact_threshold":1}]}`)
	done := pollResponse(t, g, r.ID, terminal)
	if done.Status != "completed" || len(done.Output) < 2 || done.Output[0].Type != compact.TypeCompaction {
		t.Fatalf("background response %s", done.RawJSON())
	}
	evs := getStream(t, g, r.ID, -1)
	if len(evs) < 4 || evs[2].Type != "response.output_item.added" || evs[2].Item.ID != done.Output[0].ID || evs[3].OutputIndex != 0 {
		t.Fatalf("the replayed stream does not start with the compaction item: %d events", len(evs))
	}
}

// An upstream without /tokenize (an older vLLM, a proxy that does not pass it) still compacts:
// the previous response's usage sizes the history and the input is estimated; the 404 is
// remembered, so /tokenize is asked once, not every turn.
func TestCompactionWithoutTokenizeAsksOnceAndStillCompacts(t *testing.T) {
	t.Parallel()
	sim := vllmsim.New(vllmsim.Options{})
	var tokenizeCalls atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			tokenizeCalls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"Not Found","type":"Not Found","param":null,"code":404}}`))
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	g := newGateway(t, nil, respgatetest.Options{UpstreamURL: front.URL + "/v1"})
	cm := `,"context_management":[{"type":"compaction","compact_threshold":100000}]`
	prev := ""
	for i := range 4 {
		body := fmt.Sprintf(`{"model":%q,"input":"remember: fact %d"%s`, harmony, i, cm)
		if prev != "" {
			body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
		}
		prev = g.create(t, body+"}").ID
	}
	r := g.create(t, `{"model":"`+harmony+`","previous_response_id":"`+prev+`","input":"go on",`+
		`"context_management":[{"type":"compaction","compact_threshold":1}]}`)
	if r.Output[0].Type != compact.TypeCompaction {
		t.Fatalf("no compaction without /tokenize: %s", r.RawJSON())
	}
	if n := tokenizeCalls.Load(); n != 1 {
		t.Fatalf("/tokenize asked %d times, want once (then remembered as missing)", n)
	}
}
