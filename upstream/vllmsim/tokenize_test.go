package vllmsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// POST /tokenize answers in vLLM's TokenizeResponse shape, counting what a turn's input_tokens
// counts, and answers a turn for the handoff prompt with the remembered facts.
func TestTokenizeCountsLikeTheContextCheck(t *testing.T) {
	sim := New(Options{MaxModelLen: 777})
	for _, tc := range []struct {
		body  string
		count int
	}{
		{`{"model":"openai/gpt-oss-sim","prompt":"one two  three"}`, 3},
		{`{"model":"openai/gpt-oss-sim","messages":[{"role":"user","content":"a b"},{"role":"assistant","content":[{"type":"text","text":"c"}]}]}`, 9},
	} {
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenize", strings.NewReader(tc.body)))
		var got struct {
			Count       int             `json:"count"`
			MaxModelLen int             `json:"max_model_len"`
			Tokens      []int           `json:"tokens"`
			TokenStrs   json.RawMessage `json:"token_strs"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
		if got.Count != tc.count || len(got.Tokens) != tc.count || got.MaxModelLen != 777 || string(got.TokenStrs) != "null" {
			t.Fatalf("%s: %s", tc.body, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	sim.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenize", strings.NewReader(`{"model":"nope","prompt":"x"}`)))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("unknown model: %d %s", rec.Code, rec.Body)
	}
}

func TestHandoffPromptGetsTheRememberedFacts(t *testing.T) {
	c := &conversation{messages: 3, userTexts: []string{"remember: blue door", "x", "Write a " + HandoffPhrase + " please"}}
	c.lastUser = c.userTexts[2]
	got := answerText(c)
	if !strings.Contains(got, "\nremember: blue door") || strings.Contains(got, "Facts:") {
		t.Fatalf("handoff answer %q", got)
	}
}
