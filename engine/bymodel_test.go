package engine

import (
	"strings"
	"testing"

	"github.com/respgate/respgate/wire"
)

func TestPerModelSettingsParseAndMatchTheFirstPattern(t *testing.T) {
	ws, err := ParseContextWindows(" openai/gpt-oss-* = 4096 , 32768 ,")
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]int{"openai/gpt-oss-20b": 4096, "Qwen/Qwen3-8B": 32768} {
		if got, ok := lookupByModel(ws, model); !ok || got != want {
			t.Errorf("window of %s = %d, %v; want %d", model, got, ok, want)
		}
	}
	cs, err := ParseReasoningContext("a/*=current_turn")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := lookupByModel(cs, "a/b"); !ok || v != "current_turn" {
		t.Errorf("a/b: %q, %v", v, ok)
	}
	if _, ok := lookupByModel(cs, "b/c"); ok {
		t.Error("b/c matched a/*")
	}
	if ws, err := ParseContextWindows(""); err != nil || len(ws) != 0 {
		t.Errorf("empty setting: %v, %v", ws, err)
	}
}

func TestPerModelSettingsRejectBadValuesAndPatterns(t *testing.T) {
	for _, c := range []struct {
		parse func(string) error
		spec  string
		want  string
	}{
		{func(s string) error { _, err := ParseContextWindows(s); return err }, "m=0", `context window "m=0": the value must be a positive number of tokens`},
		{func(s string) error { _, err := ParseContextWindows(s); return err }, "lots", `context window "lots": the value must be`},
		{func(s string) error { _, err := ParseContextWindows(s); return err }, "[=10", `context window "[=10": bad model pattern`},
		{func(s string) error { _, err := ParseReasoningContext(s); return err }, "x=some_turns", `reasoning context "x=some_turns": the value must be all_turns or current_turn`},
		{func(s string) error { _, err := ParseReasoningContext(s); return err }, "[=all_turns", `reasoning context "[=all_turns": bad model pattern`},
	} {
		err := c.parse(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.spec, err, c.want)
		}
	}
}

// A request's own reasoning.context wins; a request without one (with or without other reasoning
// members) gets its model's default, else all turns.
func TestReasoningContextIsTheRequestsElseItsModelsDefault(t *testing.T) {
	contexts, err := ParseReasoningContext("org/*=" + wire.ContextCurrentTurn)
	if err != nil {
		t.Fatal(err)
	}
	s := &Engine{contexts: contexts}
	own, effort := wire.ContextAllTurns, "low"
	for _, tc := range []struct {
		name  string
		model string
		r     *wire.Reasoning
		want  string
	}{
		{"its own, over the model's default", "org/m", &wire.Reasoning{Context: &own}, wire.ContextAllTurns},
		{"reasoning without a context", "org/m", &wire.Reasoning{Effort: &effort}, wire.ContextCurrentTurn},
		{"no reasoning", "org/m", nil, wire.ContextCurrentTurn},
		{"no default for the model", "other", &wire.Reasoning{Effort: &effort}, wire.ContextAllTurns},
	} {
		r := &wire.CreateRequest{Reasoning: tc.r}
		r.Model.Value = tc.model
		if got := s.reasoningContext(r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The configured default context reaches the server New builds, and an empty one means
// all_turns.
func TestNewKeepsTheConfiguredReasoningContext(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{wire.ContextCurrentTurn, wire.ContextCurrentTurn},
		{"", wire.ContextAllTurns},
	} {
		s, _ := newSimEngine(t, Config{ReasoningContext: tc.spec}, nil)
		r := &wire.CreateRequest{}
		r.Model.Value = "any/model"
		if got := s.reasoningContext(r); got != tc.want {
			t.Errorf("configured %q: %q, want %q", tc.spec, got, tc.want)
		}
	}
}
