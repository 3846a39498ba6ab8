package rehydrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/respgate/respgate/internal/jsonscan"
	"github.com/respgate/respgate/wire"
)

const callA = `{"id":"fc_a","type":"function_call","call_id":"call_a","name":"get","arguments":"{}"}`

// Each item type crosses as exactly its allowlisted members, whatever else it carries.
func TestProjectionIsTheExactAllowlistPerType(t *testing.T) {
	cases := []struct {
		name string
		item string
		want string
	}{
		{
			name: "user message parts",
			item: `{"type":"message","id":"msg_1","role":"user","status":"in_progress","phase":"x","vendor_x":{"a":[1,2]},
				"content":[{"type":"input_text","text":"hi","prompt_cache_breakpoint":{"mode":"explicit"}},
				{"type":"input_image","image_url":"https://img/x.png","detail":"high","file_id":null},
				{"type":"output_text","text":"as input","annotations":[]}]}`,
			want: `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://img/x.png","detail":"high"},{"type":"input_text","text":"as input"}]}`,
		},
		{
			name: "input_image without detail gets auto",
			item: `{"type":"message","id":"msg_1","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}`,
			want: `{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"auto"}]}`,
		},
		{
			name: "system message string content",
			item: `{"type":"message","id":"msg_1","role":"system","content":"be brief","status":"completed"}`,
			want: `{"type":"message","role":"system","content":[{"type":"input_text","text":"be brief"}]}`,
		},
		{
			name: "developer message",
			item: `{"type":"message","id":"msg_1","role":"developer","content":[{"type":"input_text","text":"rules"}],"status":"completed"}`,
			want: `{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]}`,
		},
		{
			name: "assistant parts joined into one string",
			item: `{"id":"msg_2","type":"message","role":"assistant","status":"incomplete","phase":"final_answer",
				"content":[{"type":"output_text","text":"Hello, ","annotations":[{"type":"url_citation","url":"u","title":"t","start_index":0,"end_index":1}],
				"logprobs":[{"token":"H","bytes":[72],"logprob":-0.1,"top_logprobs":[]}]},
				{"type":"output_text","text":"world."},{"type":"refusal","refusal":" No."}]}`,
			want: `{"type":"message","role":"assistant","content":"Hello, world. No."}`,
		},
		{
			name: "reasoning: all plaintext parts, empty summary, no encrypted_content or status",
			item: `{"id":"rs_1","type":"reasoning","status":"completed","summary":[{"type":"summary_text","text":"SUMMARY"}],
				"content":[{"type":"reasoning_text","text":"step 1"},{"type":"reasoning_text","text":"step \"2\""}],
				"encrypted_content":"ENC","x_vendor":true}`,
			want: `{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"step 1\nstep \"2\""}]}`,
		},
		{
			name: "function_call",
			item: `{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"get",
				"arguments":"{\"a\":1}","x":1}`,
			want: `{"type":"function_call","call_id":"call_1","name":"get","arguments":"{\"a\":1}"}`,
		},
		{
			name: "function_call of a namespaced tool: the flat name its tool was sent under",
			item: `{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"get","namespace":"ns",
				"arguments":"{\"a\":1}","x":1}`,
			want: `{"type":"function_call","call_id":"call_1","name":"ns__get","arguments":"{\"a\":1}"}`,
		},
		{
			name: "function_call_output string",
			item: `{"id":"fco_1","type":"function_call_output","call_id":"call_a","output":"ok","status":"completed","created_by":"u"}`,
			want: `{"type":"function_call_output","call_id":"call_a","output":"ok"}`,
		},
		{
			name: "function_call_output text parts become one string",
			item: `{"id":"fco_1","type":"function_call_output","call_id":"call_a","output":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b","x":1}]}`,
			want: `{"type":"function_call_output","call_id":"call_a","output":"ab"}`,
		},
		{
			name: "function_call_output with an image keeps parts",
			item: `{"id":"fco_1","type":"function_call_output","call_id":"call_a","output":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://i","detail":"low","file_id":null}]}`,
			want: `{"type":"function_call_output","call_id":"call_a","output":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://i","detail":"low"}]}`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// As history (stored form) and as new input (normalised first): same projection.
			res := mustBuild(t, &Params{History: mustItems(t, callA, c.item)})
			got := upstreamInput(t, res.Body)
			if got[len(got)-1] != c.want {
				t.Errorf("history:\n got %s\nwant %s", got[len(got)-1], c.want)
			}
			res = mustBuild(t, &Params{History: mustItems(t, callA), Input: []wire.Item{mustItem(t, c.item)}})
			got = upstreamInput(t, res.Body)
			if got[len(got)-1] != c.want {
				t.Errorf("input:\n got %s\nwant %s", got[len(got)-1], c.want)
			}
		})
	}
}

// allowed lists, per item type, every key that may appear in an upstream item at any depth.
var allowed = map[string][]string{
	"message":              {"type", "role", "content", "text", "image_url", "detail"},
	"reasoning":            {"type", "id", "summary", "content", "text"},
	"function_call":        {"type", "call_id", "name", "arguments"},
	"function_call_output": {"type", "call_id", "output", "text", "image_url", "detail"},
}

// Nothing outside the allowlists reaches vLLM: no status, no unknown SDK fields, anywhere.
func TestUnknownFieldsAndStatusNeverGoUpstream(t *testing.T) {
	extra := `"status":"in_progress","x_sdk":{"status":"in_progress","secret":"S"},"created_by":"u","phase":"commentary"`
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"q","x_part":1}],`+extra+`}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t","x_part":1}],"encrypted_content":null,`+extra+`}`,
		`{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}","namespace":"n",`+extra+`}`,
		`{"id":"fco_1","type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"u","x_part":1}],`+extra+`}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[],"logprobs":[]}],`+extra+`}`,
	)
	in := mustInput(t, `[{"role":"user","content":"next","status":"in_progress","x_sdk":1}]`)
	res := mustBuild(t, &Params{History: hist, Input: in})
	for _, raw := range upstreamInput(t, res.Body) {
		var v map[string]any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatal(err)
		}
		typ, _ := v["type"].(string)
		ok := allowed[typ]
		if ok == nil {
			t.Fatalf("unexpected item type %q in %s", typ, raw)
		}
		walkKeys(v, func(k string) {
			if !slices.Contains(ok, k) {
				t.Errorf("%s item carries %q upstream: %s", typ, k, raw)
			}
		})
	}
	for _, s := range []string{`"status"`, "x_sdk", "in_progress", `"S"`, "phase", "created_by", "namespace", "annotations", "logprobs"} {
		if bytes.Contains(res.Body, []byte(s)) {
			t.Errorf("body contains %s: %s", s, res.Body)
		}
	}
}

// Items with nothing to say are omitted (and counted), and null members never cross.
func TestNullAndEmptyContentAreOmitted(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":""}`,
		`{"id":"msg_2","type":"message","role":"user","content":[]}`,
		`{"id":"msg_3","type":"message","role":"assistant","content":[]}`,
		`{"id":"msg_4","type":"message","role":"assistant","content":[{"type":"output_text","text":""}]}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":null,"encrypted_content":null}`,
		`{"id":"rs_2","type":"reasoning","summary":[{"type":"summary_text","text":"ONLY A SUMMARY"}]}`,
		`{"id":"rs_3","type":"reasoning","summary":[],"content":[],"encrypted_content":""}`,
		`{"id":"rs_4","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":""}]}`,
		`{"id":"msg_5","type":"message","role":"user","content":"kept"}`,
	)
	res := mustBuild(t, &Params{History: hist})
	got := upstreamInput(t, res.Body)
	want := []string{`{"type":"message","role":"user","content":[{"type":"input_text","text":"kept"}]}`}
	if !slices.Equal(got, want) {
		t.Errorf("input %v, want %v", got, want)
	}
	if bytes.Contains(res.Body, []byte("null")) || bytes.Contains(res.Body, []byte("ONLY A SUMMARY")) {
		t.Errorf("body has a null or a summary: %s", res.Body)
	}
	if res.Stats.EmptySkipped != 4 || res.Stats.ReasoningSkipped != 4 || res.Stats.Items != 1 {
		t.Errorf("stats %+v", res.Stats)
	}
}

// Two reasoning items keep their own text; nothing is merged or reused between them.
func TestTwoReasoningItemsKeepDistinctContents(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":"q"}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"first thought"}]}`,
		`{"id":"rs_2","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"second"},{"type":"reasoning_text","text":"thought"}]}`,
	)
	got := upstreamInput(t, mustBuild(t, &Params{History: hist}).Body)
	want := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]}`,
		`{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"first thought"}]}`,
		`{"type":"reasoning","id":"rs_2","summary":[],"content":[{"type":"reasoning_text","text":"second\nthought"}]}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// History is replayed in its stored order, then the new input, whatever the item types.
func TestOrderIsHistoryThenInputExactly(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":"H1"}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"H2"}]}`,
		`{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"H3"}`,
		`{"id":"fc_2","type":"function_call","call_id":"c2","name":"f","arguments":"H4"}`,
		`{"id":"fco_2","type":"function_call_output","call_id":"c2","output":"H5"}`,
		`{"id":"fco_1","type":"function_call_output","call_id":"c1","output":"H6"}`,
		`{"id":"rs_2","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"H7"}]}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"H8"}]}`,
	)
	in := mustInput(t, `[{"role":"user","content":"I1"},{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"I2"}]},
		{"type":"function_call","call_id":"c3","name":"f","arguments":"I3"},{"type":"function_call_output","call_id":"c3","output":"I4"}]`)
	res := mustBuild(t, &Params{History: hist, Input: in})
	got := upstreamInput(t, res.Body)
	for i, marker := range []string{"H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "I1", "I2", "I3", "I4"} {
		if i >= len(got) || !strings.Contains(got[i], `"`+marker) {
			t.Fatalf("item %d is not %s: %s", i, marker, strings.Join(got, "\n"))
		}
	}
	if len(got) != 12 {
		t.Errorf("%d items, want 12", len(got))
	}
	if len(res.Input) != 4 {
		t.Errorf("stored input %d items, want 4", len(res.Input))
	}
}

// Only the current request's instructions apply; nothing from history becomes instructions.
func TestOnlyTheCurrentInstructionsApply(t *testing.T) {
	hist := mustItems(t, `{"id":"msg_1","type":"message","role":"user","content":"q"}`)
	for _, c := range []struct{ req, want string }{
		{`{"model":"m"}`, ""},
		{`{"model":"m","instructions":null}`, ""},
		{`{"model":"m","instructions":"NOW \u00e9"}`, `"NOW \u00e9"`},
	} {
		res := mustBuild(t, &Params{History: hist, Request: mustRequest(t, c.req)})
		got := string(members(t, res.Body)["instructions"])
		if got != c.want {
			t.Errorf("%s: instructions %s, want %s", c.req, got, c.want)
		}
	}
}

const encMessage = "Reasoning item 'rs_enc' carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item."

// A reasoning item whose only state is encrypted_content is a 400 with a stable code, naming it.
func TestEncryptedOnlyReasoningIsRejected(t *testing.T) {
	user := `{"role":"user","content":"q"}`
	for _, enc := range []string{
		`{"type":"reasoning","id":"rs_enc","summary":[],"encrypted_content":"gAAAA-secret"}`,
		`{"type":"reasoning","id":"rs_enc","summary":[],"content":null,"encrypted_content":"gAAAA-secret"}`,
		`{"type":"reasoning","id":"rs_enc","summary":[],"content":[],"encrypted_content":"gAAAA-secret"}`,
		`{"type":"reasoning","id":"rs_enc","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":""}],"encrypted_content":"gAAAA-secret"}`,
	} {
		ae := buildErr(t, &Params{Input: mustInput(t, "["+user+","+enc+"]")})
		checkErr(t, ae, "encrypted_reasoning_unsupported", "input[1]", encMessage)
		if strings.Contains(ae.Message, "gAAAA") {
			t.Errorf("message leaks the blob: %s", ae.Message)
		}
	}

	// Without a client id, the item is named by position.
	ae := buildErr(t, &Params{Input: mustInput(t, `[`+user+`,{"type":"reasoning","summary":[],"encrypted_content":"x"}]`)})
	checkErr(t, ae, "encrypted_reasoning_unsupported", "input[1]",
		"Reasoning item 'input[1]' carries only encrypted_content, which respgate cannot read and vLLM cannot accept; send its plaintext content or omit the item.")

	// In history (cannot happen through respgate itself, but a store is not a proof).
	hist := mustItems(t, `{"type":"reasoning","id":"rs_enc","summary":[],"encrypted_content":"x"}`)
	ae = buildErr(t, &Params{History: hist, HistoryParam: "conversation", Input: mustInput(t, `"q"`)})
	checkErr(t, ae, "encrypted_reasoning_unsupported", "conversation",
		"Stored reasoning item 'rs_enc' (from 'conversation') carries only encrypted_content, which respgate cannot read and vLLM cannot accept; this history cannot be replayed.")
	ae = buildErr(t, &Params{History: hist, Input: mustInput(t, `"q"`)})
	checkErr(t, ae, "encrypted_reasoning_unsupported", "previous_response_id", "")

	// Through an item_reference to such a stored item.
	ae = buildErr(t, &Params{
		Input:  mustInput(t, `[`+user+`,{"type":"item_reference","id":"rs_enc"}]`),
		Lookup: MapLookup{"rs_enc": hist[0]},
	})
	checkErr(t, ae, "encrypted_reasoning_unsupported", "input[1]", encMessage)
}

// encrypted_content never reaches vLLM: not as a key, not as a value, not in include.
func TestEncryptedContentNeverGoesUpstream(t *testing.T) {
	const planted = "gAAAA-PLANTED-0123456789"
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":"q"}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"plain 1"}],"encrypted_content":"`+planted+`"}`,
	)
	in := mustInput(t, `[{"type":"reasoning","id":"rs_2","summary":[],"content":[{"type":"reasoning_text","text":"plain 2"}],"encrypted_content":"`+planted+`"},
		{"role":"user","content":"next"}]`)
	req := mustRequest(t, `{"model":"m","include":["reasoning.encrypted_content"]}`)
	res := mustBuild(t, &Params{History: hist, Input: in, Request: req})
	for _, s := range []string{"encrypted_content", planted, "gAAAA"} {
		if bytes.Contains(res.Body, []byte(s)) {
			t.Errorf("body contains %q: %s", s, res.Body)
		}
	}
	if !bytes.Contains(res.Body, []byte("plain 1")) || !bytes.Contains(res.Body, []byte("plain 2")) {
		t.Errorf("plaintext not replayed: %s", res.Body)
	}
	if st := res.Stats; st.EncryptedDropped != 2 || st.ReasoningReplayed != 2 || st.ReasoningBytes != len("plain 1")+len("plain 2") {
		t.Errorf("stats %+v", st)
	}
	// Stored input keeps the blob (lossless); only the upstream copy drops it.
	if !bytes.Contains(res.Input[0].JSON, []byte(planted)) {
		t.Errorf("stored input lost encrypted_content: %s", res.Input[0].JSON)
	}
}

// Codex sends "encrypted_content": null next to plaintext content: that is ordinary plaintext.
func TestCodexNullEncryptedContentIsAccepted(t *testing.T) {
	in := mustInput(t, `[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},
		{"type":"reasoning","id":"rs_x","summary":[],"content":[{"type":"reasoning_text","text":"think"}],"encrypted_content":null}]`)
	res := mustBuild(t, &Params{Input: in})
	got := upstreamInput(t, res.Body)
	want := `{"type":"reasoning","id":"rs_x","summary":[],"content":[{"type":"reasoning_text","text":"think"}]}`
	if got[1] != want {
		t.Errorf("got %s, want %s", got[1], want)
	}
	if res.Stats.EncryptedDropped != 0 || res.Stats.ReasoningReplayed != 1 {
		t.Errorf("stats %+v", res.Stats)
	}
}

// A replayed item already in history (same id, same projection) is sent and stored once; the same
// id with different content is a 400.
func TestDuplicatesAreDroppedAndConflictsRejected(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"q"}],"status":"completed"}`,
		`{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"E1","status":"completed"}`,
		`{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}","status":"completed"}`,
		`{"id":"fco_1","type":"function_call_output","call_id":"c1","output":"o"}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"a","annotations":[]}],"status":"completed"}`,
	)
	// The client replays all of it (different status, no encrypted_content, extra fields), twice
	// for one item, then says something new.
	in := mustInput(t, `[
		{"id":"msg_1","type":"message","role":"user","content":"q"},
		{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"t"}]},
		{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}","status":"in_progress"},
		{"id":"fco_1","type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"o"}]},
		{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}],"status":"incomplete","x":1},
		{"id":"msg_2","type":"message","role":"assistant","content":"a"},
		{"id":"msg_3","role":"user","content":"new"},
		{"id":"msg_3","role":"user","content":"new"}]`)
	res := mustBuild(t, &Params{History: hist, Input: in})
	alone := mustBuild(t, &Params{History: hist, Input: mustInput(t, `[{"id":"msg_3","role":"user","content":"new"}]`)})
	if !bytes.Equal(res.Body, alone.Body) {
		t.Errorf("replayed duplicates changed the body:\n%s\n%s", res.Body, alone.Body)
	}
	if res.Stats.DuplicatesDropped != 7 {
		t.Errorf("DuplicatesDropped = %d, want 7", res.Stats.DuplicatesDropped)
	}
	if len(res.Input) != 1 || res.Input[0].ID != "msg_3" {
		t.Errorf("stored input %v, want only msg_3", res.Input)
	}

	ae := buildErr(t, &Params{History: hist, Input: mustInput(t, `[{"role":"user","content":"x"},{"id":"msg_1","type":"message","role":"user","content":"changed"}]`)})
	checkErr(t, ae, "item_id_conflict", "input[1]",
		"Item 'msg_1' in 'input[1]' has the same id as an earlier item but different content; an id must always name the same item.")
	ae = buildErr(t, &Params{History: hist, Input: mustInput(t, `[{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"other"}]}]`)})
	checkErr(t, ae, "item_id_conflict", "input[0]", "")
	ae = buildErr(t, &Params{Input: mustInput(t, `[{"id":"m","role":"user","content":"a"},{"id":"m","role":"user","content":"b"}]`)})
	checkErr(t, ae, "item_id_conflict", "input[1]", "")
}

// A reasoning item replayed without its plaintext (encrypted-only or summary-only) is the stored
// item when respgate has it: the stored plaintext is replayed instead of a 400.
func TestReasoningWithoutPlaintextUsesTheStoredItem(t *testing.T) {
	stored := mustItem(t, `{"id":"rs_1","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"stored thought"}],"encrypted_content":"E"}`)
	replay := `{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"E"}`
	user := mustItem(t, `{"id":"msg_1","type":"message","role":"user","content":"q"}`)

	// In history: a duplicate.
	res := mustBuild(t, &Params{History: []wire.Item{user, stored}, Input: mustInput(t, "["+replay+`,{"role":"user","content":"n"}]`)})
	if res.Stats.DuplicatesDropped != 1 || res.Stats.ReasoningReplayed != 1 || len(res.Input) != 1 {
		t.Errorf("stats %+v, stored %v", res.Stats, res.Input)
	}
	// Not in history but in the store: resolved like a reference, and ReferencedIDs asks for it.
	in := mustInput(t, `[{"role":"user","content":"q"},`+replay+`]`)
	if ids := ReferencedIDs(in); !slices.Equal(ids, []string{"rs_1"}) {
		t.Errorf("ReferencedIDs = %v", ids)
	}
	res = mustBuild(t, &Params{Input: in, Lookup: MapLookup{"rs_1": stored}})
	got := upstreamInput(t, res.Body)
	if got[1] != `{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"stored thought"}]}` {
		t.Errorf("got %s", got[1])
	}
	if len(res.Input) != 2 || !bytes.Equal(res.Input[1].JSON, stored.JSON) {
		t.Errorf("stored input %v", res.Input)
	}
	// Unknown to respgate: the 400.
	ae := buildErr(t, &Params{Input: in, Lookup: MapLookup{}})
	checkErr(t, ae, "encrypted_reasoning_unsupported", "input[1]", "")
}

// item_reference items are resolved through Lookup; unknown ones are a 400.
func TestItemReferencesAreResolved(t *testing.T) {
	stored := MapLookup{
		"msg_9": mustItem(t, `{"id":"msg_9","type":"message","role":"user","content":[{"type":"input_text","text":"from store"}],"status":"completed"}`),
		"rs_9":  mustItem(t, `{"id":"rs_9","type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"stored reasoning"},{"type":"reasoning_text","text":"part 2"}],"encrypted_content":"ENC9"}`),
		"ws_9":  mustItem(t, `{"id":"ws_9","type":"web_search_call","status":"completed","action":{"type":"search","query":"q"}}`),
	}
	in := mustInput(t, `[{"type":"item_reference","id":"msg_9"},{"id":"rs_9"},{"role":"user","content":"go"}]`)
	if ids := ReferencedIDs(in); !slices.Equal(ids, []string{"msg_9", "rs_9"}) {
		t.Errorf("ReferencedIDs = %v", ids)
	}
	res := mustBuild(t, &Params{Input: in, Lookup: stored})
	got := upstreamInput(t, res.Body)
	want := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"from store"}]}`,
		`{"type":"reasoning","id":"rs_9","summary":[],"content":[{"type":"reasoning_text","text":"stored reasoning\npart 2"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s", strings.Join(got, "\n"))
	}
	if bytes.Contains(res.Body, []byte("ENC9")) {
		t.Error("encrypted_content of a referenced item went upstream")
	}
	if len(res.Input) != 3 || res.Input[0].ID != "msg_9" || res.Input[1].ID != "rs_9" {
		t.Errorf("stored input %v", res.Input)
	}

	// A reference to something history already holds is a duplicate.
	res = mustBuild(t, &Params{History: []wire.Item{stored["msg_9"]}, Input: mustInput(t, `[{"type":"item_reference","id":"msg_9"},{"role":"user","content":"go"}]`), Lookup: stored})
	if res.Stats.DuplicatesDropped != 1 || res.Stats.Items != 2 || len(res.Input) != 1 {
		t.Errorf("stats %+v stored %v", res.Stats, res.Input)
	}

	ae := buildErr(t, &Params{Input: mustInput(t, `[{"role":"user","content":"x"},{"type":"item_reference","id":"msg_404"}]`), Lookup: stored})
	checkErr(t, ae, "item_reference_not_found", "input[1]", "Item 'msg_404' referenced by 'input[1]' was not found.")
	ae = buildErr(t, &Params{Input: mustInput(t, `[{"id":"msg_404"}]`)})
	checkErr(t, ae, "item_reference_not_found", "input[0]", "")
	ae = buildErr(t, &Params{Input: mustInput(t, `[{"type":"item_reference","id":"ws_9"}]`), Lookup: stored})
	checkErr(t, ae, "unsupported_item_type", "input[0]",
		"Item type 'web_search_call' in item 'ws_9' referenced by 'input[0]' is not supported: vLLM accepts only message, reasoning, function_call and function_call_output items.")
}

// A stored item whose JSON has no id of its own is known by the id that referenced it, so a second
// reference to it is a duplicate (dropped), not a second copy. (Upstream it gets a minted id: vLLM
// requires one and no client sees it.)
func TestAReferencedItemWithoutAnIDIsKnownByTheReferencesID(t *testing.T) {
	stored := MapLookup{"rs_noid": mustItem(t, `{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"kept"}]}`)}
	in := mustInput(t, `[{"type":"item_reference","id":"rs_noid"},{"type":"item_reference","id":"rs_noid"},{"role":"user","content":"go"}]`)
	res := mustBuild(t, &Params{Input: in, Lookup: stored})
	got := upstreamInput(t, res.Body)
	if len(got) != 2 || !strings.Contains(got[0], `"text":"kept"`) || res.Stats.DuplicatesDropped != 1 || len(res.Input) != 2 {
		t.Errorf("dropped %d, stored %d items, sent\n%s", res.Stats.DuplicatesDropped, len(res.Input), strings.Join(got, "\n"))
	}
}

// Structural faults vLLM would hit late (or mis-render) are 400s with a param naming the spot.
func TestStructuralErrors(t *testing.T) {
	cases := []struct {
		name, hist, input, code, param, message string
	}{
		{"output without call", ``, `[{"type":"function_call_output","call_id":"call_x","output":"o"}]`,
			"function_call_output_without_call", "input[0]",
			"The function_call_output 'input[0]' has call_id 'call_x', but no function_call with that call_id comes before it; send the function_call item first (or continue the response that made it)."},
		{"output before its call", ``, `[{"type":"function_call_output","call_id":"c","output":"o"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]`,
			"function_call_output_without_call", "input[0]", ""},
		{"output without call in history", `{"id":"fco_1","type":"function_call_output","call_id":"c","output":"o"}`, `"q"`,
			"function_call_output_without_call", "previous_response_id",
			"The function_call_output stored item 'fco_1' (from 'previous_response_id') has call_id 'c', but no function_call with that call_id comes before it; send the function_call item first (or continue the response that made it)."},
		{"hosted item type", ``, `[{"type":"web_search_call","id":"ws_1","status":"completed"}]`,
			"unsupported_item_type", "input[0]",
			"Item type 'web_search_call' in 'input[0]' is not supported: vLLM accepts only message, reasoning, function_call, function_call_output and item_reference items."},
		{"hosted item type in history", `{"type":"mcp_call","id":"mcp_1"}`, `"q"`, "unsupported_item_type", "previous_response_id",
			"Item type 'mcp_call' in stored item 'mcp_1' (from 'previous_response_id') is not supported: vLLM accepts only message, reasoning, function_call and function_call_output items."},
		{"bad role", ``, `[{"role":"tool","content":"x"}]`, "invalid_value", "input[0].role",
			"Invalid value for 'input[0].role': 'tool'. Supported values are: 'user', 'assistant', 'system' and 'developer'."},
		{"missing role", ``, `[{"type":"message","content":"x"}]`, "missing_required_parameter", "input[0].role",
			"Missing required parameter: 'input[0].role'."},
		{"content a number", ``, `[{"role":"user","content":5}]`, "invalid_type", "input[0].content",
			"Invalid type for 'input[0].content': expected a string or an array of content parts."},
		{"content null", ``, `[{"role":"user","content":null}]`, "missing_required_parameter", "input[0].content", ""},
		{"no type, no role", ``, `[{"content":"x"}]`, "missing_required_parameter", "input[0].type",
			"Missing required parameter: 'input[0].type' (an item needs a 'type', or a 'role' and 'content' for a message)."},
		{"type a number", ``, `[{"type":5,"role":"user","content":"x"}]`, "invalid_type", "input[0].type", ""},
		{"part not an object", ``, `[{"role":"user","content":["x"]}]`, "invalid_type", "input[0].content[0]", ""},
		{"part without type", ``, `[{"role":"user","content":[{"text":"x"}]}]`, "missing_required_parameter", "input[0].content[0].type", ""},
		{"part text a number", ``, `[{"role":"user","content":[{"type":"input_text","text":1}]}]`, "invalid_type", "input[0].content[0].text", ""},
		{"input_file", ``, `[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_file","file_id":"f"}]}]`,
			"unsupported_content_type", "input[0].content[1]",
			"Content part type 'input_file' in 'input[0].content[1]' is not supported: vLLM accepts input_text and input_image (image_url) parts in user, system and developer messages here."},
		{"image by file_id", ``, `[{"role":"user","content":[{"type":"input_image","file_id":"f","detail":"auto"}]}]`,
			"unsupported_content_type", "input[0].content[0].image_url",
			"Missing 'input[0].content[0].image_url': vLLM accepts images only by image_url (not file_id)."},
		{"image in an assistant message", ``, `[{"role":"assistant","content":[{"type":"input_image","image_url":"u"}]}]`,
			"unsupported_content_type", "input[0].content[0]", ""},
		{"missing call_id", ``, `[{"type":"function_call","name":"f","arguments":"{}"}]`, "missing_required_parameter", "input[0].call_id", ""},
		{"missing name", ``, `[{"type":"function_call","call_id":"c","arguments":"{}"}]`, "missing_required_parameter", "input[0].name", ""},
		{"arguments an object", ``, `[{"type":"function_call","call_id":"c","name":"f","arguments":{"a":1}}]`, "invalid_type", "input[0].arguments",
			"Invalid type for 'input[0].arguments': expected a string (the JSON-encoded arguments)."},
		{"missing output", `{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}`, `[{"type":"function_call_output","call_id":"c"}]`,
			"missing_required_parameter", "input[0].output", ""},
		{"output a number", `{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}`, `[{"type":"function_call_output","call_id":"c","output":1}]`,
			"invalid_type", "input[0].output", ""},
		{"summary not an array", ``, `[{"type":"reasoning","summary":"s","content":[{"type":"reasoning_text","text":"t"}]}]`, "invalid_type", "input[0].summary", ""},
		{"encrypted_content a number", ``, `[{"type":"reasoning","summary":[],"encrypted_content":1}]`, "invalid_type", "input[0].encrypted_content", ""},
		{"reasoning text missing", ``, `[{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text"}]}]`, "missing_required_parameter", "input[0].content[0].text", ""},
		{"reference without id", ``, `[{"type":"item_reference"}]`, "missing_required_parameter", "input[0].id", ""},
		{"invalid field in history", `{"id":"msg_1","type":"message","role":"user","content":7}`, `"q"`, "invalid_type", "previous_response_id",
			"Invalid type for 'content' of stored item 'msg_1' (from 'previous_response_id'): expected a string or an array of content parts."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &Params{Input: mustInput(t, c.input)}
			if c.hist != "" {
				p.History = mustItems(t, c.hist)
			}
			checkErr(t, buildErr(t, p), c.code, c.param, c.message)
		})
	}

	t.Run("empty input", func(t *testing.T) {
		checkErr(t, buildErr(t, &Params{}), "empty_input", "input",
			"The request has no input: send at least one input item, or continue a response or conversation that has items.")
		checkErr(t, buildErr(t, &Params{Input: mustInput(t, `[]`)}), "empty_input", "input", "")
	})
	t.Run("id not a string", func(t *testing.T) {
		p := &Params{Input: []wire.Item{{JSON: []byte(`{"id":5,"role":"user","content":"x"}`)}}}
		checkErr(t, buildErr(t, p), "invalid_type", "input[0].id", "")
	})
	t.Run("item not JSON", func(t *testing.T) {
		p := &Params{Input: []wire.Item{{JSON: []byte(`{"role":"user","content":"x"`)}}}
		checkErr(t, buildErr(t, p), "invalid_json", "input[0]", "Invalid JSON in 'input[0]'.")
	})
	t.Run("corrupt stored item is not a client fault", func(t *testing.T) {
		p := &Params{History: []wire.Item{{ID: "msg_1", JSON: []byte(`{"id":"msg_1",`)}}, Input: mustInput(t, `"q"`), NewID: seqIDs()}
		_, err := Build(p)
		var ae *wire.APIError
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("err = %v, want a plain (server) error", err)
		}
	})
}

// Only what vLLM understands crosses, with store:false always and stream as the client asked.
func TestRequestMembersAreFiltered(t *testing.T) {
	req := mustRequest(t, `{
		"model":"gpt-x","instructions":"be terse","stream":true,"store":true,
		"previous_response_id":"resp_1","background":false,
		"stream_options":{"include_obfuscation":true},"prompt_cache_key":"k","prompt_cache_retention":"24h",
		"safety_identifier":"s","client_metadata":{"a":"b"},"unknown_member":1,
		"context_management":[{"type":"compaction"}],"moderation":true,
		"tools":[{"type":"function","name":"a","parameters":{"type":"object"},"strict":true},{"type":"web_search"},
			{"type":"namespace","name":"ns","tools":[{"type":"function","name":"b"}]},{"type":"custom","name":"c"},
			{"type":"function","name":"d","description":"x"},{"type":"web_search"}],
		"tool_choice":"auto","parallel_tool_calls":false,"max_output_tokens":100,"max_tool_calls":3,
		"reasoning":{"effort":"high","summary":"auto","generate_summary":"concise"},
		"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}},"verbosity":"low"},
		"truncation":"auto","temperature":0.5,"top_p":0.9,"top_logprobs":2,
		"include":["reasoning.encrypted_content","web_search_call.results","message.output_text.logprobs","web_search_call.action.sources"],
		"metadata":{"k":"v"},"user":"u1","service_tier":"auto",
		"seed":42,"top_k":5,"stop":["END"],"repetition_penalty":1.1,"ignore_eos":false,"logit_bias":{"1":1},
		"skip_special_tokens":false,"include_stop_str_in_output":true,"structured_outputs":null,
		"request_id":"r","priority":-5,"cache_salt":"salt","vllm_xargs":{"a":1},"mm_processor_kwargs":{},
		"enable_response_messages":true,"previous_input_messages":[{"role":"user","content":"inject"}]
	}`)
	res := mustBuild(t, &Params{Input: mustInput(t, `"hi"`), Request: req})
	got := members(t, res.Body)
	want := map[string]string{
		"model": `"gpt-x"`, "instructions": `"be terse"`, "stream": `true`, "store": `false`,
		"tools":       `[{"type":"function","name":"a","parameters":{"type":"object"},"strict":true},{"type":"function","name":"ns__b"},{"type":"function","name":"d","description":"x"}]`,
		"tool_choice": `"auto"`, "parallel_tool_calls": `false`, "max_output_tokens": `100`, "max_tool_calls": `3`,
		"reasoning":  `{"effort":"high"}`,
		"text":       `{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}},"verbosity":"low"}`,
		"truncation": `"auto"`, "temperature": `0.5`, "top_p": `0.9`, "top_logprobs": `2`,
		"include":  `["message.output_text.logprobs"]`,
		"metadata": `{"k":"v"}`, "user": `"u1"`, "service_tier": `"auto"`,
		"seed": `42`, "top_k": `5`, "stop": `["END"]`, "repetition_penalty": `1.1`, "ignore_eos": `false`,
		"logit_bias": `{"1":1}`, "skip_special_tokens": `false`, "include_stop_str_in_output": `true`,
		"input": `[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]`,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || compact(t, g) != v {
			t.Errorf("%s = %s, want %s", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected member %s = %s", k, got[k])
		}
	}
	if !slices.Equal(res.DroppedTools, []string{"web_search", "custom"}) {
		t.Errorf("DroppedTools = %v", res.DroppedTools)
	}
	if want := map[string]wire.ToolName{"ns__b": {Namespace: "ns", Name: "b"}}; !maps.Equal(res.ToolNames, want) {
		t.Errorf("ToolNames = %v, want %v", res.ToolNames, want)
	}

	// Defaults and dropped forms.
	res = mustBuild(t, &Params{Input: mustInput(t, `"hi"`), Request: mustRequest(t,
		`{"model":"m","stream":null,"temperature":null,"tool_choice":{"type":"web_search_preview"},"tools":[{"type":"file_search"}],
		  "reasoning":{"summary":"auto"},"include":["reasoning.encrypted_content"]}`)})
	got = members(t, res.Body)
	if string(got["stream"]) != "false" || string(got["store"]) != "false" {
		t.Errorf("stream %s store %s", got["stream"], got["store"])
	}
	for _, k := range []string{"temperature", "tool_choice", "tools", "reasoning", "include"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s forwarded: %s", k, got[k])
		}
	}
	if !slices.Equal(res.DroppedTools, []string{"file_search", "web_search_preview"}) {
		t.Errorf("DroppedTools = %v", res.DroppedTools)
	}
	// The function and allowed_tools forms of tool_choice cross.
	for _, tc := range []string{`{"type":"function","name":"a"}`, `{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"a"}]}`, `"required"`} {
		res = mustBuild(t, &Params{Input: mustInput(t, `"hi"`), Request: mustRequest(t, `{"model":"m","tool_choice":`+tc+`}`)})
		if g := compact(t, members(t, res.Body)["tool_choice"]); g != tc {
			t.Errorf("tool_choice %s, want %s", g, tc)
		}
	}
}

// Build reads its inputs and never writes them: items are immutable and shared with the store.
func TestBuildNeverMutatesItems(t *testing.T) {
	hist := mustItems(t,
		`{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"q"}],"status":"in_progress"}`,
		`{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"a"},{"type":"reasoning_text","text":"b"}],"encrypted_content":"E"}`,
		`{"id":"fc_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}`,
		`{"id":"fco_1","type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}`,
		`{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"output_text","text":"b"}]}`,
	)
	inputs := [][]wire.Item{
		mustInput(t, `[{"role":"user","content":"easy"},{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"E"},{"id":"msg_9"},{"type":"function_call","call_id":"d","name":"f","arguments":"{}"}]`),
		mustInput(t, `[{"type":"reasoning","id":"rs_x","summary":[],"encrypted_content":"E"}]`), // fails
		mustInput(t, `[{"id":"msg_1","role":"user","content":"conflict"}]`),                     // fails
	}
	lookup := MapLookup{"msg_9": mustItem(t, `{"id":"msg_9","type":"message","role":"user","content":"ref"}`)}
	snapshot := func(items []wire.Item) []string {
		out := make([]string, len(items))
		for i, it := range items {
			out[i] = it.ID + "|" + it.Type + "|" + string(it.JSON)
		}
		return out
	}
	before := snapshot(hist)
	refBefore := string(lookup["msg_9"].JSON)
	for _, in := range inputs {
		inBefore := snapshot(in)
		req := mustRequest(t, `{"model":"m","tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"g"}]}]}`)
		reqBefore := fmt.Sprintf("%+v", *req)
		_, _ = Build(&Params{History: hist, Input: in, Lookup: lookup, Request: req, NewID: seqIDs()})
		if !slices.Equal(snapshot(hist), before) || !slices.Equal(snapshot(in), inBefore) ||
			string(lookup["msg_9"].JSON) != refBefore || fmt.Sprintf("%+v", *req) != reqBefore {
			t.Fatal("Build changed an item or the request")
		}
	}
}

// Invalid UTF-8 (which encoding/json lets through in raw values; the server's intake rejects it,
// but Build does not rely on that) never reaches vLLM: it is replaced by U+FFFD, as decoding it
// would.
func TestInvalidUTF8IsRepaired(t *testing.T) {
	hist := []wire.Item{
		{JSON: []byte("{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"user\",\"content\":\"bad \xff byte\"}")},
		{JSON: []byte("{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"r\xfe\"}]}")},
	}
	req := mustDecode(t, map[string]json.RawMessage{
		"model":        json.RawMessage("\"m\""),
		"instructions": json.RawMessage("\"i\xff\""),
		"logit_bias":   json.RawMessage("{\"k\":\"v\xff\",\"n\":12345678901234567890}"),
	})
	res := mustBuild(t, &Params{History: hist, Request: req})
	for _, want := range []string{"bad \ufffd byte", "r\ufffd", "\"i\ufffd\"", "{\"k\":\"v\ufffd\",\"n\":12345678901234567890}"} {
		if !bytes.Contains(res.Body, []byte(want)) {
			t.Errorf("body lacks %q: %q", want, res.Body)
		}
	}
	if !utf8.Valid(res.Body) {
		t.Errorf("body is not UTF-8: %q", res.Body)
	}
}

// Nesting is bounded by jsonscan.MaxDepth (200), counting the item itself. The scanner rehydrate
// had before allowed 10,000 levels and the accumulator's 200; the shared rule keeps the stricter
// bound, so a client item one level deeper is a 400, not a late vLLM failure. Request members are
// bounded by the server's intake, which decodes them (TestDecodeCreateBoundsMemberNesting).
func TestNestingPastMaxDepthIsInvalidJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	user := `[{"type":"message","role":"user","content":"hi"}]`
	cases := []struct {
		name  string
		input string
		stop  string
		param string // "" when the request is fine
	}{
		{"an input item at the limit", `[{"type":"message","role":"user","content":"hi","x":` + deep(jsonscan.MaxDepth-1) + `}]`, "{}", ""},
		{"an input item one level past", `[{"type":"message","role":"user","content":"hi","x":` + deep(jsonscan.MaxDepth) + `}]`, "{}", "input"},
		{"a request member at the limit", user, deep(jsonscan.MaxDepth), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := mustDecode(t, map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "stop": json.RawMessage(c.stop)})
			_, err := Build(&Params{Input: mustInput(t, c.input), Request: req, NewID: seqIDs()})
			if c.param == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *wire.APIError
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != CodeInvalidJSON || !strings.HasPrefix(ae.Param, c.param) {
				t.Fatalf("error %v, want 400 %s for %s", err, CodeInvalidJSON, c.param)
			}
		})
	}
}

// Keys and values spelled with escapes mean what encoding/json (and vLLM's Python) read.
func TestEscapedKeysAndValues(t *testing.T) {
	in := mustInput(t, `[{"\u0074ype":"m\u0065ssage","role":"\u0075ser","content":[{"type":"input_text","\u0074ext":"a\u00e9\n"}]},
		{"type":"reasoning","id":"rs_\u0031","summary":[],"content":[{"type":"reasoning_text","text":"x\ty"}],"encrypted\u005fcontent":"SECRET"}]`)
	res := mustBuild(t, &Params{Input: in})
	got := upstreamInput(t, res.Body)
	want := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"a\u00e9\n"}]}`,
		`{"type":"reasoning","id":"rs_\u0031","summary":[],"content":[{"type":"reasoning_text","text":"x\ty"}]}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s", strings.Join(got, "\n"))
	}
	if bytes.Contains(res.Body, []byte("SECRET")) || res.Stats.EncryptedDropped != 1 {
		t.Errorf("escaped encrypted_content key not recognised: %s", res.Body)
	}
	if res.Input[1].ID != "rs_1" {
		t.Errorf("stored id %q", res.Input[1].ID)
	}
}
