package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/respgatetest"
	"github.com/respgate/respgate/seal"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// These tests cover respgate-sealed reasoning (docs/reasoning.md): encrypted_content minted by
// respgate and opened on the way back, the exposure policy and the context policy.

var auth = []string{"Authorization", "Bearer test-key"}

// reasoningTexts returns the reasoning items of an upstream body as "id: text" (text of the
// joined content), in order.
func reasoningTexts(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for _, it := range upstreamInput(t, body) {
		if it["type"] != wire.TypeReasoning {
			continue
		}
		if _, has := it["encrypted_content"]; has {
			t.Fatalf("encrypted_content reached vLLM: %v", it)
		}
		text := ""
		if parts, ok := it["content"].([]any); ok {
			for _, p := range parts {
				text += p.(map[string]any)["text"].(string)
			}
		}
		out = append(out, fmt.Sprintf("%s: %s", it["id"], text))
	}
	return out
}

// TestStatelessClientKeepingOnlyEncryptedContentContinuesFiveTurns is the ZDR pattern: store:false,
// include reasoning.encrypted_content, and a client that keeps of each reasoning item only its
// encrypted_content. Every turn the simulator must receive every earlier reasoning item's
// plaintext, in place; its answer counts them and its reasoning quotes the last one.
func TestStatelessClientKeepingOnlyEncryptedContentContinuesFiveTurns(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		var history []json.RawMessage
		var reasoning []string // the plaintext of each turn's reasoning, as the client saw it
		for turn := 1; turn <= 5; turn++ {
			history = append(history, json.RawMessage(fmt.Sprintf(`{"role":"user","content":"question %d"}`, turn)))
			in, _ := json.Marshal(history)
			r := g.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":`+string(in)+`}`)
			if want := fmt.Sprintf("%d reasoning items", turn-1); !strings.Contains(r.OutputText(), want) {
				t.Fatalf("turn %d: answer %q does not say %q", turn, r.OutputText(), want)
			}
			for _, it := range r.Output {
				switch it.Type {
				case "reasoning":
					rs := it.AsReasoning()
					if !strings.HasPrefix(rs.EncryptedContent, "rgr1.") || len(rs.Content) == 0 {
						t.Fatalf("turn %d: reasoning item %s", turn, it.RawJSON())
					}
					if turn > 1 && !strings.Contains(rs.Content[0].Text, `Prior reasoning: "Thinking about "question `+fmt.Sprint(turn-1)) {
						t.Fatalf("turn %d: the reasoning does not quote the last one: %q", turn, rs.Content[0].Text)
					}
					reasoning = append(reasoning, rs.ID+": "+rs.Content[0].Text)
					// Keep only the blob, as a ZDR client does.
					kept, _ := json.Marshal(map[string]any{"type": "reasoning", "id": rs.ID, "summary": []any{}, "encrypted_content": rs.EncryptedContent})
					history = append(history, kept)
				default:
					history = append(history, json.RawMessage(it.RawJSON()))
				}
			}
			reqs := g.UpstreamRequests()
			got := reasoningTexts(t, reqs[len(reqs)-1])
			if strings.Join(got, "\n") != strings.Join(reasoning[:turn-1], "\n") {
				t.Fatalf("turn %d: vLLM received reasoning\n%s\nwant\n%s", turn, strings.Join(got, "\n"), strings.Join(reasoning[:turn-1], "\n"))
			}
			if bytes.Contains(reqs[len(reqs)-1], []byte("rgr1.")) {
				t.Fatalf("turn %d: a blob reached vLLM", turn)
			}
			t.Logf("turn %d: vLLM received reasoning %q; answered %q", turn, got, r.OutputText())
		}
	})
}

// TestSealedReasoningThatDoesNotOpenIsRefusedBeforeTheModelRuns: another key's blob, a modified
// blob and another item's blob are 400s naming the item; vLLM is not called.
func TestSealedReasoningThatDoesNotOpenIsRefusedBeforeTheModelRuns(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{Logger: logger}})
	r := g.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":"hello"}`)
	rs := r.Output[0].AsReasoning()
	if !strings.HasPrefix(rs.EncryptedContent, "rgr1.auto.") {
		t.Fatalf("first item %s", r.Output[0].RawJSON())
	}
	blob := rs.EncryptedContent
	// One character of the sealed payload changed, away from its end: the last characters of
	// base64 may carry padding bits, whose change would make the blob malformed, not modified.
	mid := len(blob) - 20
	tampered := blob[:mid] + map[bool]string{true: "A", false: "B"}[blob[mid] != 'A'] + blob[mid+1:]
	item := func(id, enc, content string) string {
		return `{"model":"` + harmony + `","store":false,"input":[{"role":"user","content":"hello"},{"type":"reasoning","id":"` + id +
			`","summary":[],"encrypted_content":"` + enc + `"` + content + `},{"role":"user","content":"next"}]}`
	}
	before := len(g.UpstreamRequests())
	for _, tc := range []struct {
		name, body, key, code, says string
	}{
		{"another API key", item(rs.ID, blob, ""), "other-key", "invalid_encrypted_content", "another API key"},
		{"modified", item(rs.ID, tampered, ""), "test-key", "invalid_encrypted_content", "modified"},
		{"another item id", item("rs_other", blob, ""), "test-key", "invalid_encrypted_content", "another item"},
	} {
		status, body, _ := rawDo(t, "POST", g.URL+"/responses", tc.body, "Authorization", "Bearer "+tc.key)
		_, code, param, msg := envelope(t, body)
		if status != 400 || code != tc.code || param != "input[1]" || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %s", tc.name, status, body)
		}
		if strings.Contains(string(body), "Thinking") || strings.Contains(string(body), blob) {
			t.Errorf("%s: the error reveals content: %s", tc.name, body)
		}
	}
	if n := len(g.UpstreamRequests()); n != before {
		t.Fatalf("vLLM was called %d times for refused requests", n-before)
	}
	mu.Lock()
	if strings.Contains(logs.String(), blob[len("rgr1.auto."):len("rgr1.auto.")+20]) || strings.Contains(logs.String(), canary) {
		t.Errorf("a blob or reasoning reached the logs:\n%s", logs.String())
	}
	mu.Unlock()
	// The same blob, with its own content or alone, continues.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.Output[0].RawJSON()), &raw); err != nil {
		t.Fatal(err)
	}
	g.create(t, item(rs.ID, blob, `,"content":`+string(raw["content"])))
	g.create(t, item(rs.ID, blob, ""))
}

// TestReplicasOnOneStoreOpenEachOthersBlobs: the generated key lives in the store, so a second
// gateway on the same database opens what the first sealed.
func TestReplicasOnOneStoreOpenEachOthersBlobs(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := newStore(t)
		a := newGateway(t, st)
		if st == nil {
			st = a.Store // SQLite: share the first gateway's store
		}
		b := newGateway(t, st)
		r := a.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":"hi"}`)
		rs := r.Output[0].AsReasoning()
		next := b.create(t, `{"model":"`+harmony+`","store":false,"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"`+rs.ID+
			`","summary":[],"encrypted_content":"`+rs.EncryptedContent+`"},{"role":"user","content":"more"}]}`)
		if !strings.Contains(next.OutputText(), "1 reasoning items") {
			t.Fatalf("the second replica did not replay the reasoning: %q", next.OutputText())
		}
	})
}

// canary is a phrase only the simulator's reasoning contains ("Thinking about …").
const canary = "Thinking about"

// With --reasoning-exposure hidden, a client holding a blob cannot test a guess of the text it
// hides: content sent beside the blob, equal to the hidden text or not, gets the same answer, and
// vLLM is replayed the blob's text either way (issue 38 item 4). Before, an equal guess was a 200
// and any other a 400 encrypted_content_mismatch.
func TestHiddenReasoningHasNoEqualityOracle(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t), respgatetest.Options{Server: server.Config{ReasoningExposure: server.ExposureHidden}})
		r := g.create(t, `{"model":"`+harmony+`","store":false,"input":"hello"}`)
		rs := r.Output[0].AsReasoning()
		if !strings.HasPrefix(rs.EncryptedContent, "rgr1.") {
			t.Fatalf("first item %s", r.Output[0].RawJSON())
		}
		turn := func(content string) (int, []byte, string) {
			t.Helper()
			body := `{"model":"` + harmony + `","store":false,"input":[{"role":"user","content":"hello"},{"type":"reasoning","id":"` + rs.ID +
				`","summary":[],"encrypted_content":"` + rs.EncryptedContent + `"` + content + `},{"role":"user","content":"next"}]}`
			status, b, _ := rawDo(t, "POST", g.URL+"/responses", body, auth...)
			reqs := g.Sim.Requests()
			var sent struct {
				Input []struct {
					Type    string
					Content []struct{ Text string }
				}
			}
			if err := json.Unmarshal(reqs[len(reqs)-1].Body, &sent); err != nil {
				t.Fatal(err)
			}
			for _, it := range sent.Input {
				if it.Type == "reasoning" && len(it.Content) == 1 {
					return status, b, it.Content[0].Text
				}
			}
			return status, b, ""
		}
		_, _, hidden := turn("") // the blob alone: what vLLM is replayed is the hidden text
		if !strings.Contains(hidden, canary) {
			t.Fatalf("the blob alone replayed %q", hidden)
		}
		right := `,"content":[{"type":"reasoning_text","text":` + string(mustJSON(t, hidden)) + `}]`
		wrong := `,"content":[{"type":"reasoning_text","text":"a wrong guess"}]`
		s1, b1, got1 := turn(right)
		s2, b2, got2 := turn(wrong)
		if s1 != 200 || s2 != 200 || got1 != hidden || got2 != hidden {
			t.Fatalf("right guess: %d (replayed %q); wrong guess: %d (replayed %q)\n%s\n%s", s1, got1, s2, got2, b1, b2)
		}
		for _, b := range [][]byte{b1, b2} {
			if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte("a wrong guess")) {
				t.Fatalf("the answer shows reasoning: %s", b)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHiddenReasoningReachesNoClientByteButIsStoredAndReplayed runs streamed and non-streamed
// turns, a conversation and every read route with --reasoning-exposure hidden: the canary from
// the model's reasoning appears in no byte a client receives, reasoning items carry
// encrypted_content and an empty summary, the stored items keep the plaintext, and
// previous_response_id replays it to vLLM.
func TestHiddenReasoningReachesNoClientByteButIsStoredAndReplayed(t *testing.T) {
	g := newGateway(t, nil, respgatetest.Options{Server: server.Config{ReasoningExposure: server.ExposureHidden}})
	var seen bytes.Buffer
	check := func(what string, b []byte) {
		t.Helper()
		seen.Write(b)
		if bytes.Contains(b, []byte(canary)) || bytes.Contains(b, []byte("reasoning_text")) {
			t.Fatalf("%s shows reasoning:\n%s", what, b)
		}
	}
	post := func(body string) []byte {
		status, b, _ := rawDo(t, "POST", g.URL+"/responses", body, auth...)
		if status != 200 {
			t.Fatalf("POST %s: %d %s", body, status, b)
		}
		return b
	}
	get := func(path string) []byte {
		status, b, _ := rawDo(t, "GET", g.URL+path, "", auth...)
		if status != 200 {
			t.Fatalf("GET %s: %d %s", path, status, b)
		}
		return b
	}
	sync := post(`{"model":"` + harmony + `","input":"first"}`)
	check("non-streamed body", sync)
	var first struct {
		ID     string            `json:"id"`
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(sync, &first); err != nil {
		t.Fatal(err)
	}
	var rs struct {
		EncryptedContent string `json:"encrypted_content"`
		Summary          []any  `json:"summary"`
		Content          *[]any `json:"content"`
	}
	_ = json.Unmarshal(first.Output[0], &rs)
	if !strings.HasPrefix(rs.EncryptedContent, "rgr1.") || rs.Summary == nil || len(rs.Summary) != 0 || rs.Content != nil {
		t.Fatalf("hidden reasoning item %s", first.Output[0])
	}

	stream := post(`{"model":"` + harmony + `","stream":true,"previous_response_id":"` + first.ID + `","input":"second"}`)
	check("stream", stream)
	evs := readAllSSE(t, string(stream))
	var secondID string
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %d", i, ev.Type, ev.Seq)
		}
		if ev.Type == "response.completed" {
			var d struct{ Response struct{ ID string } }
			_ = json.Unmarshal([]byte(ev.Data), &d)
			secondID = d.Response.ID
		}
	}
	// The stream passes openai-go's strict helpers too.
	checked := g.stream(t, `{"model":"`+harmony+`","stream":true,"input":"third"}`)
	for _, ev := range checked.events {
		check("openai-go event "+ev.Type, []byte(ev.RawJSON()))
	}

	// vLLM got the first turn's reasoning in plaintext through previous_response_id.
	reqs := g.UpstreamRequests()
	if got := reasoningTexts(t, reqs[1]); len(got) != 1 || !strings.Contains(got[0], canary+` "first"`) {
		t.Fatalf("previous_response_id replayed %q", got)
	}
	// The store keeps it.
	_, out, err := g.Store.ResponseGet(t.Context(), &store.ResponseGetParams{Tenant: g.Server.TenantOf("test-key"), ID: first.ID})
	if err != nil || !bytes.Contains(out[0].JSON, []byte(canary)) {
		t.Fatalf("stored item %s (%v)", out[0].JSON, err)
	}

	conv := newConversation(t, g, `{}`)
	check("conversation turn", post(`{"model":"`+harmony+`","conversation":"`+conv+`","input":"fourth"}`))
	check("conversation items", get("/conversations/"+conv+"/items"))
	check("GET", get("/responses/"+first.ID))
	check("GET include", get("/responses/"+first.ID+"?include[]=reasoning.encrypted_content"))
	check("GET stream (log)", get("/responses/"+secondID+"?stream=true"))
	check("GET stream (replayed)", get("/responses/"+first.ID+"?stream=true"))
	check("input_items", get("/responses/"+secondID+"/input_items"))
	if !bytes.Contains(seen.Bytes(), []byte(`"encrypted_content":"rgr1.`)) {
		t.Fatal("no route showed encrypted_content")
	}
	// A stateless client continues from the hidden items alone.
	next := g.create(t, `{"model":"`+harmony+`","store":false,"input":[{"role":"user","content":"first"},`+string(first.Output[0])+`,{"role":"user","content":"go on"}]}`)
	if !strings.Contains(next.OutputText(), "1 reasoning items") {
		t.Fatalf("continuing from the hidden item: %q", next.OutputText())
	}
}

// TestEveryRouteCarriesMintedEncryptedContentWhenIncluded: with include, the non-streamed body,
// output_item.done, response.completed, GET, input_items and conversation items all carry
// respgate's blob, and GET shows the same blob the stream did.
func TestEveryRouteCarriesMintedEncryptedContentWhenIncluded(t *testing.T) {
	g := newGateway(t, nil)
	conv := newConversation(t, g, `{}`)
	body := g.create(t, `{"model":"`+harmony+`","conversation":"`+conv+`","include":["reasoning.encrypted_content"],"input":"one"}`)
	s := g.stream(t, `{"model":"`+harmony+`","stream":true,"previous_response_id":"`+body.ID+`","include":["reasoning.encrypted_content"],"input":"two"}`)
	blobOf := func(what string, it responses.ResponseOutputItemUnion) string {
		t.Helper()
		if it.Type != "reasoning" || !strings.HasPrefix(it.AsReasoning().EncryptedContent, "rgr1.") {
			t.Fatalf("%s: %s", what, it.RawJSON())
		}
		return it.AsReasoning().EncryptedContent
	}
	blobOf("non-streamed body", body.Output[0])
	var done string
	for _, ev := range s.events {
		if ev.Type == "response.output_item.done" && ev.Item.Type == "reasoning" {
			done = blobOf("output_item.done", ev.Item)
		}
	}
	if blobOf("response.completed", s.final.Output[0]) != done {
		t.Fatal("response.completed and output_item.done carry different blobs")
	}
	got, err := g.client.Responses.Get(t.Context(), s.final.ID, responsesGetParams())
	if err != nil || blobOf("GET", got.Output[0]) != done {
		t.Fatalf("GET: %v", err)
	}
	_, list, _ := rawDo(t, "GET", g.URL+"/responses/"+s.final.ID+"/input_items?order=asc", "", auth...)
	if !bytes.Contains(list, []byte(`"encrypted_content":"rgr1.`)) {
		t.Fatalf("input_items: %s", list)
	}
	_, items, _ := rawDo(t, "GET", g.URL+"/conversations/"+conv+"/items", "", auth...)
	if !bytes.Contains(items, []byte(`"encrypted_content":"rgr1.`)) {
		t.Fatalf("conversation items: %s", items)
	}
	// A conversation item added with respgate's blob alone is stored with its plaintext.
	rs := body.Output[0].AsReasoning()
	conv2 := newConversation(t, g, `{}`)
	added := addItems(t, g, conv2, `[{"role":"user","content":"one"},{"type":"reasoning","id":"`+rs.ID+`","summary":[],"encrypted_content":"`+rs.EncryptedContent+`"}]`)
	if len(added) != 2 || len(added[1].AsReasoning().Content) == 0 {
		t.Fatalf("added items %v", added)
	}
	status, refused, _ := rawDo(t, "POST", g.URL+"/conversations/"+conv2+"/items",
		`{"items":[{"type":"reasoning","id":"rs_other","summary":[],"encrypted_content":"`+rs.EncryptedContent+`"}]}`, auth...)
	if _, code, param, _ := envelope(t, refused); status != 400 || code != "invalid_encrypted_content" || param != "items[0]" {
		t.Fatalf("a blob of another item added to a conversation: %d %s", status, refused)
	}
}

// TestCurrentTurnReplaysOnlyTheActiveToolLoop: a three-step tool loop (each tool output followed
// by a user nudge, since the simulator answers after one tool output), its final answer, then a
// new user turn. With reasoning.context current_turn every step of the loop replays the loop's
// reasoning, and the new turn replays none of it; the response echoes the context; the stored
// items are unchanged. The recorded upstream bodies prove it.
func TestCurrentTurnReplaysOnlyTheActiveToolLoop(t *testing.T) {
	g := newGateway(t, nil)
	const tools = `"tools":[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}]`
	turn := func(prev, input string) *responses.Response {
		body := `{"model":"` + harmony + `","reasoning":{"context":"current_turn"},` + tools + `,"input":` + input
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		return g.create(t, body+"}")
	}
	callOutput := func(r *responses.Response) string {
		for _, it := range r.Output {
			if it.Type == "function_call" {
				return `{"type":"function_call_output","call_id":"` + it.AsFunctionCall().CallID + `","output":"result"}`
			}
		}
		t.Fatalf("no function call in %s", r.RawJSON())
		return ""
	}
	r := turn("", `"call lookup for the loop"`)
	if !strings.Contains(r.RawJSON(), `"context":"current_turn"`) {
		t.Fatalf("reasoning.context not echoed: %s", r.RawJSON())
	}
	for range 2 {
		r = turn(r.ID, `[`+callOutput(r)+`,{"role":"user","content":"call lookup again"}]`)
	}
	r = turn(r.ID, `[`+callOutput(r)+`]`) // the final answer
	if !strings.Contains(r.OutputText(), "Tool said") {
		t.Fatalf("the loop did not end in an answer: %q", r.OutputText())
	}
	final := turn(r.ID, `"a new question"`)
	reqs := g.UpstreamRequests()
	var counts []int
	for i, body := range reqs {
		got := reasoningTexts(t, body)
		counts = append(counts, len(got))
		t.Logf("upstream request %d replayed %d reasoning items: %q", i+1, len(got), got)
	}
	// Requests 1-4 are the loop (0, 1, 2, 3 reasoning items before them), 5 the new turn.
	if fmt.Sprint(counts) != "[0 1 2 3 0]" {
		t.Fatalf("reasoning replayed per request %v, want [0 1 2 3 0]", counts)
	}
	if !strings.Contains(final.OutputText(), "0 reasoning items") {
		t.Fatalf("the new turn's answer %q", final.OutputText())
	}
	// all_turns (the default) replays all four for the same history.
	all := g.create(t, `{"model":"`+harmony+`",`+tools+`,"previous_response_id":"`+r.ID+`","input":"a new question"}`)
	if !strings.Contains(all.OutputText(), "4 reasoning items") {
		t.Fatalf("all_turns answer %q", all.OutputText())
	}
	status, body, _ := rawDo(t, "POST", g.URL+"/responses", `{"model":"`+harmony+`","reasoning":{"context":"some_turns"},"input":"x"}`, auth...)
	if _, code, param, _ := envelope(t, body); status != 400 || code != "invalid_value" || param != "reasoning.context" {
		t.Fatalf("unknown context: %d %s", status, body)
	}
}

// TestRotatedKeysOpenOldBlobsUntilRetired: a blob sealed under k1 opens on a gateway that seals
// with k2 and still lists k1, and is refused with a message naming the retired key once k1 is
// retired.
func TestRotatedKeysOpenOldBlobsUntilRetired(t *testing.T) {
	k1 := seal.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}
	k2 := seal.Key{ID: "k2", Secret: bytes.Repeat([]byte{2}, 32)}
	old := newGateway(t, nil, respgatetest.Options{Server: server.Config{SealKeys: []seal.Key{k1}}})
	r := old.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":"hi"}`)
	rs := r.Output[0].AsReasoning()
	if !strings.HasPrefix(rs.EncryptedContent, "rgr1.k1.") {
		t.Fatalf("sealed under %q, want k1", rs.EncryptedContent)
	}
	body := `{"model":"` + harmony + `","store":false,"include":["reasoning.encrypted_content"],"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"` + rs.ID +
		`","summary":[],"encrypted_content":"` + rs.EncryptedContent + `"},{"role":"user","content":"more"}]}`
	rotated := newGateway(t, old.Store, respgatetest.Options{Server: server.Config{SealKeys: []seal.Key{k2, k1}}})
	next := rotated.create(t, body)
	if !strings.Contains(next.OutputText(), "1 reasoning items") || !strings.HasPrefix(next.Output[0].AsReasoning().EncryptedContent, "rgr1.k2.") {
		t.Fatalf("after rotation: %s", next.RawJSON())
	}
	retired := newGateway(t, old.Store, respgatetest.Options{Server: server.Config{SealKeys: []seal.Key{k2}, SealRetired: []string{"k1"}}})
	status, refused, _ := rawDo(t, "POST", retired.URL+"/responses", body, auth...)
	if _, code, param, msg := envelope(t, refused); status != 400 || code != "invalid_encrypted_content" || param != "input[1]" || !strings.Contains(msg, "'k1', which has been retired") {
		t.Fatalf("retired key: %d %s", status, refused)
	}
}

// TestStatelessReplayInFastAgentsEnvelopes continues a store:false turn the way the Fast-Agent
// client of docs/reasoning.md ("Real clients") persists reasoning: its early minimal object (type,
// encrypted_content, id), its SDK snapshot without status, and its current envelope (type, id,
// summary, encrypted_content, non-empty content only when present). Each must replay the first
// turn's reasoning to vLLM in plaintext.
func TestStatelessReplayInFastAgentsEnvelopes(t *testing.T) {
	g := newGateway(t, nil)
	first := g.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":"question 1"}`)
	var rs responses.ResponseReasoningItem
	var snapshot map[string]any
	for _, it := range first.Output {
		if it.Type == "reasoning" {
			rs = it.AsReasoning()
			_ = json.Unmarshal([]byte(it.RawJSON()), &snapshot)
		}
	}
	if rs.ID == "" || !strings.HasPrefix(rs.EncryptedContent, "rgr1.") {
		t.Fatalf("first turn has no sealed reasoning item: %s", first.RawJSON())
	}
	delete(snapshot, "status")
	envelopes := map[string]map[string]any{
		"v0.10.4 minimal":       {"type": "reasoning", "encrypted_content": rs.EncryptedContent, "id": rs.ID},
		"v0.10.6 snapshot":      snapshot,
		"canonical":             {"type": "reasoning", "id": rs.ID, "summary": []any{}, "encrypted_content": rs.EncryptedContent},
		"canonical, no summary": {"type": "reasoning", "id": rs.ID, "encrypted_content": rs.EncryptedContent},
	}
	for name, env := range envelopes {
		t.Run(name, func(t *testing.T) {
			in, _ := json.Marshal([]any{
				map[string]any{"role": "user", "content": "question 1"},
				env,
				map[string]any{"role": "assistant", "content": first.OutputText()},
				map[string]any{"role": "user", "content": "question 2"},
			})
			r := g.create(t, `{"model":"`+harmony+`","store":false,"include":["reasoning.encrypted_content"],"input":`+string(in)+`}`)
			if !strings.Contains(r.OutputText(), "1 reasoning items") {
				t.Fatalf("answer %q: the model did not see the replayed reasoning", r.OutputText())
			}
			reqs := g.UpstreamRequests()
			got := reasoningTexts(t, reqs[len(reqs)-1])
			if len(got) != 1 || got[0] != rs.ID+": "+rs.Content[0].Text {
				t.Fatalf("vLLM received reasoning %q, want the first turn's", got)
			}
		})
	}
}
