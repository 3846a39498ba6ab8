package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/respgate/respgate/compact"
	"github.com/respgate/respgate/internal/pgtest"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/upstream/vllmsim"
)

// Context management (engine/context.go, engine/compact.go, docs/compaction.md) on both store
// backends: the guard for an input with more user turns than compaction keeps, a history the
// client already cut with its own compaction item, compact_threshold's exact boundary, and the
// instructions of the summary call of POST /v1/responses/compact.

const simModel = "openai/gpt-oss-sim"

// onBothStores runs f once per store backend; f builds its engine with simEngineOn.
func onBothStores(t *testing.T, f func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		f(t, func(t *testing.T) store.Store {
			pg, err := postgres.Open(t.Context(), pgtest.DSN(t))
			if err != nil {
				t.Fatalf("open postgres: %v", err)
			}
			t.Cleanup(func() { _ = pg.Close() })
			return pg
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		f(t, newSQLite)
	})
}

// simEngineOn is an Engine over st with the simulator as upstream (newSimEngine's).
func simEngineOn(t *testing.T, cfg Config, st store.Store) (*Engine, *vllmsim.Sim) {
	t.Helper()
	return newSimEngine(t, cfg, func(store.Store) store.Store { return st })
}

// turnResult is what the context tests read of a non-streamed response.
type turnResult struct {
	ID     string `json:"id"`
	Output []struct {
		Type string `json:"type"`
	} `json:"output"`
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func (r *turnResult) compacted() bool {
	return len(r.Output) > 0 && r.Output[0].Type == compact.TypeCompaction
}

// create runs one non-streamed turn that must succeed.
func create(t *testing.T, e *Engine, body string) *turnResult {
	t.Helper()
	return createAt(t, e, body, 0)
}

// createAt is create with the request's context_management compact_threshold (the Spec field
// server/request.go reads it into; specOf does not): 0 for none.
func createAt(t *testing.T, e *Engine, body string, threshold int) *turnResult {
	t.Helper()
	spec := specOf(t, body)
	spec.CompactThreshold = threshold
	status, out := callSpec(t, e, spec)
	if status != http.StatusOK {
		t.Fatalf("create %s: %d %s", body, status, out)
	}
	var r turnResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
		t.Fatalf("create answered %s (%v)", out, err)
	}
	return &r
}

// An input that alone holds more user turns than compaction keeps (2 by default) puts the plan's
// boundary inside the input: the turn must not compact (it would cut the client's own input), and
// must not fail. Without autoCompact's len(plan.Recent) < len(ex.input) guard, slicing the
// recent history panics.
func TestAnInputWithMoreUserTurnsThanKeptIsNotCompacted(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e, sim := simEngineOn(t, Config{}, newStore(t))
		first := create(t, e, `{"model":"`+simModel+`","input":"one"}`)
		input := `[{"role":"user","content":"alpha"},{"role":"user","content":"beta"},{"role":"user","content":"gamma"}]`
		r := createAt(t, e, `{"model":"`+simModel+`","previous_response_id":"`+first.ID+`","input":`+input+`}`, 1)
		if r.compacted() {
			t.Fatalf("the turn compacted although its input holds more user turns than are kept: %+v", r.Output)
		}
		body := lastResponsesBody(t, sim)
		for _, w := range []string{"one", "alpha", "beta", "gamma"} {
			if !bytes.Contains(body, []byte(`"`+w+`"`)) {
				t.Fatalf("vLLM did not receive %q: %s", w, body)
			}
		}
	})
}

// A history the client already cut with its own compaction item (the output of
// POST /v1/responses/compact sent back as input on the same chain) is sized anew, not by the
// previous response's usage, which counted the region the item replaced: it is not compacted
// again. Without sessionSize's !ex.historyCut, the previous turn's reported usage (100000 tokens,
// the simulator's input_tokens fault) crosses the threshold and the turn compacts a second time.
func TestAHistoryCutByTheClientsCompactionItemIsNotCompactedAgain(t *testing.T) {
	t.Parallel()
	const reported, limit = 100000, 50000
	onBothStores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e, sim := simEngineOn(t, Config{}, newStore(t))
		first := create(t, e, `{"model":"`+simModel+`","input":"remember: the code is 7"}`)
		second := create(t, e, fmt.Sprintf(`{"model":"%s?input_tokens=%d","previous_response_id":%q,"input":"and the colour is blue"}`,
			simModel, reported, first.ID))
		if second.Usage.InputTokens != reported {
			t.Fatalf("the second turn reported %d input tokens, want the fault's %d", second.Usage.InputTokens, reported)
		}
		spec := specOf(t, `{"model":"`+simModel+`","previous_response_id":"`+second.ID+`","input":"keep going"}`)
		spec.Store = true
		out, err := e.Compact(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		item := out.Output[len(out.Output)-1]
		if !compact.IsCompaction(item) {
			t.Fatalf("the compact answer ends with %s", item.JSON)
		}
		next := createAt(t, e, `{"model":"`+simModel+`","previous_response_id":"`+second.ID+`","input":[`+string(item.JSON)+
			`,{"role":"user","content":"go on"}]}`, limit)
		if next.compacted() {
			t.Fatalf("a history the client's compaction item cut was compacted again (the turn counted %d input tokens)", next.Usage.InputTokens)
		}
		if next.Usage.InputTokens >= limit {
			t.Fatalf("the cut turn really is %d tokens, past the threshold %d: the test proves nothing", next.Usage.InputTokens, limit)
		}
		body := lastResponsesBody(t, sim)
		if !bytes.Contains(body, []byte(compact.SummaryMarker)) || bytes.Contains(body, []byte("Stop here.")) {
			t.Fatalf("vLLM did not receive the client's summary in place of the region, or was asked for another: %s", body)
		}
	})
}

// compact_threshold is "the size reaches N" (docs/compaction.md §6): a turn of exactly N tokens
// (the previous response's usage plus vLLM's /tokenize count of the new input) compacts, and the
// same turn under a threshold of N+1 does not. Each side kills one mutation of manageContext's
// comparison: > (N does not compact) and >= N-1 or any looser bound (N+1 compacts).
func TestCompactThresholdIsReachedAtExactlyN(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		logs := &sizeLog{}
		e, sim := simEngineOn(t, Config{Logger: slog.New(logs)}, newStore(t))
		first := create(t, e, `{"model":"`+simModel+`","input":"one"}`)
		second := create(t, e, `{"model":"`+simModel+`","previous_response_id":"`+first.ID+`","input":"two"}`)
		n := second.Usage.InputTokens + second.Usage.OutputTokens + tokenizeCount(t, sim, "three")
		next := func(limit int) *turnResult {
			return createAt(t, e, `{"model":"`+simModel+`","store":false,"previous_response_id":"`+second.ID+`","input":"three"}`, limit)
		}
		if r := next(n + 1); r.compacted() {
			t.Fatalf("a turn of %d tokens compacted under compact_threshold %d", n, n+1)
		}
		if got := logs.last(); got != n {
			t.Fatalf("the engine sized the turn at %d tokens, the test at %d: the boundary is not where the test looks", got, n)
		}
		if r := next(n); !r.compacted() {
			t.Fatalf("a turn of %d tokens did not compact under compact_threshold %d", n, n)
		}
	})
}

// The summary call of POST /v1/responses/compact carries the request's instructions: the model
// summarises the session under the same system prompt it worked under.
func TestCompactAsksForTheSummaryWithTheRequestsInstructions(t *testing.T) {
	t.Parallel()
	const instructions = "You are a ship's navigator; answer in nautical terms."
	onBothStores(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e, sim := simEngineOn(t, Config{}, newStore(t))
		spec := specOf(t, `{"model":"`+simModel+`","input":"plot a course","instructions":"`+instructions+`"}`)
		spec.Store = true
		if _, err := e.Compact(t.Context(), spec); err != nil {
			t.Fatal(err)
		}
		var sent struct {
			Instructions *string `json:"instructions"`
		}
		body := lastResponsesBody(t, sim)
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(body, []byte("Stop here.")) {
			t.Fatalf("the last upstream call is not the summary call: %s", body)
		}
		if sent.Instructions == nil || *sent.Instructions != instructions {
			t.Fatalf("the summary call carried instructions %v, want %q: %s", sent.Instructions, instructions, body)
		}
	})
}

// lastResponsesBody is the body of the last POST /v1/responses the simulator received.
func lastResponsesBody(t *testing.T, sim *vllmsim.Sim) []byte {
	t.Helper()
	reqs := sim.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Path == "/v1/responses" {
			return reqs[i].Body
		}
	}
	t.Fatal("the simulator received no /v1/responses call")
	return nil
}

// tokenizeCount is the simulator's /tokenize count of one user message of text, as the engine
// asks it for a turn's new input (engine/tokens.go countTokens).
func tokenizeCount(t *testing.T, sim *vllmsim.Sim, text string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, simModel, text)
	sim.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenize", strings.NewReader(body)))
	var out struct {
		Count int `json:"count"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Count <= 0 {
		t.Fatalf("tokenize: %d %s", rec.Code, rec.Body)
	}
	return out.Count
}

// sizeLog is a slog handler that keeps the tokens of the engine's last "turn size" line.
type sizeLog struct {
	mu     sync.Mutex
	tokens int
}

func (l *sizeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *sizeLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *sizeLog) WithGroup(string) slog.Handler            { return l }

func (l *sizeLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "turn size" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "tokens" {
			l.mu.Lock()
			l.tokens = int(a.Value.Int64())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *sizeLog) last() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens
}
