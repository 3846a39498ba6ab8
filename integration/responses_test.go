package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/respgate/respgate/store"
)

const tools = `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}]`

func TestChainOfTenTurnsReplaysFullHistoryWithPlaintextReasoning(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		g := newGateway(t, newStore(t))
		prev := ""
		var lastCalls []responses.ResponseOutputItemUnion
		var userTexts []string
		for turn := 1; turn <= 10; turn++ {
			var input string
			switch {
			case turn == 3: // answer the parallel calls of turn 2
				var outs []string
				for _, c := range lastCalls {
					outs = append(outs, fmt.Sprintf(`{"type":"function_call_output","call_id":%q,"output":"result for %s"}`, c.CallID, c.Name))
				}
				input = "[" + strings.Join(outs, ",") + "]"
			case turn == 2:
				userTexts = append(userTexts, "please use tools now")
				input = `"please use tools now"`
			default:
				text := fmt.Sprintf("turn %d. remember: fact number %d", turn, turn)
				userTexts = append(userTexts, text)
				input = fmt.Sprintf("%q", text)
			}
			body := fmt.Sprintf(`{"model":%q,"input":%s,"tools":%s,"stream":%v`, harmony, input, tools, turn%2 == 0)
			if prev != "" {
				body += fmt.Sprintf(`,"previous_response_id":%q`, prev)
			}
			body += "}"
			var r *responses.Response
			if turn%2 == 0 {
				r = g.stream(t, body).final
			} else {
				r = g.create(t, body)
			}
			if r.Status != "completed" {
				t.Fatalf("turn %d: status %s", turn, r.Status)
			}
			lastCalls = nil
			for _, it := range r.Output {
				if it.Type == "function_call" {
					lastCalls = append(lastCalls, it)
				}
			}
			if turn == 2 && len(lastCalls) != 2 {
				t.Fatalf("turn 2: want 2 parallel calls, got %d", len(lastCalls))
			}
			prev = r.ID
		}
		reqs := g.UpstreamRequests()
		if len(reqs) != 10 {
			t.Fatalf("simulator got %d requests, want 10", len(reqs))
		}
		for i, b := range reqs {
			if strings.Contains(string(b), "encrypted_content") {
				t.Fatalf("request %d carries encrypted_content", i+1)
			}
			var top map[string]json.RawMessage
			_ = json.Unmarshal(b, &top)
			if string(top["store"]) != "false" {
				t.Fatalf("request %d: store = %s, want false", i+1, top["store"])
			}
			if _, ok := top["previous_response_id"]; ok {
				t.Fatalf("request %d forwards previous_response_id", i+1)
			}
		}
		// The last request holds the whole history in order: per turn the user input, then the
		// reasoning, then the answer (or calls), and turn 3's outputs right after turn 2's calls.
		in := upstreamInput(t, reqs[9])
		var seq []string
		var users []string
		reasoning := 0
		for _, it := range in {
			typ, _ := it["type"].(string)
			role, _ := it["role"].(string)
			seq = append(seq, typ+":"+role)
			if typ == "message" && role == "user" {
				users = append(users, messageText(it))
			}
			if typ == "reasoning" {
				reasoning++
				c, _ := it["content"].([]any)
				if len(c) == 0 || !strings.HasPrefix(c[0].(map[string]any)["text"].(string), "Thinking about") {
					t.Fatalf("reasoning replayed without its plaintext: %v", it)
				}
			}
		}
		if reasoning != 9 {
			t.Fatalf("history replays %d reasoning items, want 9 (one per earlier turn)", reasoning)
		}
		if strings.Join(users, "|") != strings.Join(userTexts, "|") {
			t.Fatalf("user messages out of order:\n%v\n%v", users, userTexts)
		}
		want := "message:user reasoning: message:assistant " + // turn 1
			"message:user reasoning: function_call: function_call: " + // turn 2
			"function_call_output: function_call_output: reasoning: message:assistant" // turn 3
		if got := strings.Join(seq[:11], " "); got != want {
			t.Fatalf("history order:\n got %s\nwant %s", got, want)
		}
		// The model's last answer proves it saw the facts of every earlier turn, and the reasoning
		// quotes the prior reasoning it was given.
		last := lastAnswer(t, g, prev)
		for _, n := range []int{1, 4, 9} {
			if !strings.Contains(last, fmt.Sprintf("fact number %d", n)) {
				t.Fatalf("last answer misses fact %d: %s", n, last)
			}
		}
	})
}

func messageText(it map[string]any) string {
	switch c := it["content"].(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

// lastAnswer reads a stored response through the API and returns its output text.
func lastAnswer(t *testing.T, g *gw, id string) string {
	t.Helper()
	r, err := g.client.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return r.OutputText()
}
