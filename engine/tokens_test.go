package engine

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/respgate/respgate/internal/logtest"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// The previous response's usage sizes the history: its input plus its output (which the
// continuation replays); a missing or null usage is unknown (0), never a guess.
func TestUsageTokensAddsTheOutputTheContinuationReplays(t *testing.T) {
	for raw, want := range map[string]int{
		`{"input_tokens":100,"output_tokens":20,"total_tokens":120}`: 120,
		`{"input_tokens":7}`:                    7,
		`null`:                                  0,
		``:                                      0,
		`{"input_tokens":-5,"output_tokens":1}`: 0,
		`{"input_tokens":0,"output_tokens":9}`:  9,
		`{"input_tokens":9,"output_tokens":0}`:  9,
	} {
		if got := usageTokens(json.RawMessage(raw)); got != want {
			t.Errorf("usageTokens(%s) = %d, want %d", raw, got, want)
		}
	}
}

// Items become the chat messages /tokenize counts with the model's template: messages keep their
// role (developer as system) and text, calls and outputs their text; what has no chat form is
// left to the estimate.
func TestTokenizeMessagesKeepsTheTextOfEveryItem(t *testing.T) {
	raw := []string{
		`{"role":"user","content":"hello there"}`,
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"be brief"}]}`,
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"b"}]}`,
		`{"type":"function_call","name":"get_weather","arguments":"{\"city\":\"Paris\"}","call_id":"c"}`,
		`{"type":"function_call_output","call_id":"c","output":"sunny"}`,
		`{"type":"reasoning","content":[{"type":"reasoning_text","text":"think"}],"summary":[]}`,
		`{"type":"item_reference","id":"msg_1"}`,
	}
	items := make([]wire.Item, len(raw))
	for i, r := range raw {
		it, err := wire.ParseItem([]byte(r))
		if err != nil {
			t.Fatal(err)
		}
		items[i] = it
	}
	msgs, rest := tokenizeMessages(items)
	want := []tokenMessage{{"user", "hello there"}, {"system", "be brief"}, {"assistant", "a\nb"},
		{"assistant", `get_weather {"city":"Paris"}`}, {"user", "sunny"}, {"assistant", "think"}}
	if len(msgs) != len(want) || len(rest) != 1 || rest[0].Type != "item_reference" {
		t.Fatalf("messages %+v, rest %v", msgs, rest)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("message %d = %+v, want %+v", i, msgs[i], want[i])
		}
	}
}

// A continuation is sized by its previous response's usage (what vLLM counted), not by a count or
// an estimate of the history.
func TestAContinuationIsSizedByThePreviousUsage(t *testing.T) {
	logs := &logtest.Records{}
	s, _ := newSimEngine(t, Config{Logger: slog.New(logs), ContextWindow: "openai/gpt-oss-sim=100000", CompactionThreshold: 0.9}, nil)
	code, body := call(t, s, `{"model":"openai/gpt-oss-sim","input":"first"}`)
	var r struct{ ID string }
	if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
		t.Fatalf("first turn: %d %s", code, body)
	}
	if code, body = call(t, s, `{"model":"openai/gpt-oss-sim","input":"second","previous_response_id":"`+r.ID+`"}`); code != http.StatusOK {
		t.Fatalf("second turn: %d %s", code, body)
	}
	sized := false
	for _, line := range logs.Snapshot() {
		sized = sized || strings.HasPrefix(line, "DEBUG turn size ") && strings.Contains(line, " history_from=usage")
	}
	if !sized {
		t.Fatalf("the continuation was not sized by the previous usage: %q", logs.Snapshot())
	}
}

// One request naming a model the upstream does not serve gets vLLM's 404 from /tokenize; that
// must not switch /tokenize off for the replica: the next turn of a served model is counted.
// An upstream that has no /tokenize route (a plain 404) is remembered as such.
func TestAnUnknownModelDoesNotSwitchTokenizeOff(t *testing.T) {
	s, _ := newSimEngine(t, Config{}, nil)
	items := []wire.Item{{Type: wire.TypeMessage, JSON: []byte(`{"type":"message","role":"user","content":"count these words"}`)}}
	for _, model := range []string{"no-such/Model", "NO-SUCH-MODEL"} {
		if _, ok := s.countTokens(t.Context(), model, items); ok {
			t.Fatalf("%s was counted", model)
		}
	}
	if s.noTokenize.Load() {
		t.Fatal("an unknown model switched /tokenize off")
	}
	if n, ok := s.countTokens(t.Context(), "openai/gpt-oss-sim", items); !ok || n <= 0 {
		t.Fatalf("the served model after an unknown one: %d, %v", n, ok)
	}

	for _, answer := range []string{`{"detail":"Not Found"}`, `{"error":{"message":"Not Found","type":"NotFoundError","code":404}}`} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(answer))
		}))
		t.Cleanup(up.Close)
		uc, err := upstream.New(upstream.Config{BaseURL: up.URL + "/v1"})
		if err != nil {
			t.Fatal(err)
		}
		bare := newTestEngine(t, Config{}, newSQLite(t), upstream.Single(uc))
		if _, ok := bare.countTokens(t.Context(), "openai/gpt-oss-sim", items); ok || !bare.noTokenize.Load() {
			t.Fatalf("an upstream answering %s on /tokenize is not remembered as having none", answer)
		}
	}
}
