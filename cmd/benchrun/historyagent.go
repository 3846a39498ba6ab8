package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// --- agent session -----------------------------------------------------------------------------

type agentResult struct {
	Turns    int                      `json:"turns"`
	Backends map[string]*agentBackend `json:"backends"`
}

type agentTurn struct {
	TTFBUS      float64 `json:"ttfb_us"`
	RequestB    int     `json:"request_bytes"`
	NewBytes    int     `json:"new_bytes"`    // the turn's own input and output items (JSON)
	StoredBytes int64   `json:"stored_bytes"` // Postgres: the response row and its item rows
	Items       int     `json:"items"`
}

type agentBackend struct {
	Turns      []agentTurn `json:"turns"`
	ProbeFirst []float64   `json:"probe_turn1_ttfb_us"`
	ProbeLast  []float64   `json:"probe_last_ttfb_us"`
	RatioP50   float64     `json:"ratio_p50"`
	RatioP99   float64     `json:"ratio_p99"`
	// A, on D only: the simulator reached directly with the bodies respgate sends upstream for
	// the same two turns.
	AFirst    []float64 `json:"a_turn1_ttfb_us,omitempty"`
	ALast     []float64 `json:"a_last_ttfb_us,omitempty"`
	ARatioP50 float64   `json:"a_ratio_p50,omitempty"`
	// Time to upstream (simulator-stamped) of the same probes: respgate's work before the
	// model starts, turn 1 and turn n, and A's (transfer only).
	UpFirst  []float64 `json:"to_upstream_turn1_us"`
	UpLast   []float64 `json:"to_upstream_last_us"`
	AUpFirst []float64 `json:"a_to_upstream_turn1_us,omitempty"`
	AUpLast  []float64 `json:"a_to_upstream_last_us,omitempty"`
	// Bytes stored (Postgres only): median over the first and the last ten turns, their ratio,
	// and stored bytes per byte of the turn's own items.
	StoredFirst10 float64      `json:"stored_first10"`
	StoredLast10  float64      `json:"stored_last10"`
	StoredPerNew  stats.Spread `json:"stored_per_new_byte"`
	// RelationGrowth is the growth of responses + items (with indexes and TOAST) per turn.
	RelationGrowth float64 `json:"relation_growth_per_turn"`
}

var agentTools = []any{map[string]any{
	"type": "function", "name": "lookup", "description": "Look a term up in the knowledge base.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}},
		"required": []string{"query"}},
}}

// agentBody is turn's request: odd turns a user message that makes the model call the tool, even
// turns the tool's output (ToolBytes) for the previous turn's call.
func (b *bench) agentBody(a *arm, turn int, prev, callID, nonce string) []byte {
	var input any
	if turn%2 == 1 {
		input = []any{map[string]any{"type": "message", "role": "user", "content": fmt.Sprintf("Step %d: call lookup for the next fact. %s", turn, nonce)}}
	} else {
		input = []any{map[string]any{"type": "function_call_output", "call_id": callID,
			"output": filler(fmt.Sprintf("result%d-", turn), b.p.ToolBytes) + " " + nonce}}
	}
	extra := map[string]any{"tools": agentTools}
	if prev != "" {
		extra["previous_response_id"] = prev
	}
	return a.body(model(0, 24, ""), input, true, extra)
}

func (b *bench) scenarioAgent(ctx context.Context) error {
	p := b.p
	n := p.AgentTurns
	if n%2 == 1 {
		n++ // end on a tool output, so the last turn carries one
	}
	res := &agentResult{Turns: n, Backends: map[string]*agentBackend{}}
	b.rep.Agent = res
	for _, name := range []string{"D", "E"} {
		as := &agentSession{b: b, a: b.armByKey[name], ab: &agentBackend{}, n: n}
		res.Backends[name] = as.ab
		if name == "D" {
			defer as.closeDB(ctx)
			if err := as.openDB(ctx); err != nil {
				return err
			}
		}
		if err := as.runTurns(ctx); err != nil {
			return err
		}
		if as.conn != nil {
			if err := as.measureStorage(ctx); err != nil {
				return err
			}
		}
		if err := as.runProbes(ctx); err != nil {
			return err
		}
		ab := as.ab
		ab.RatioP50 = stats.MedianOf(ab.ProbeLast) / stats.MedianOf(ab.ProbeFirst)
		ab.RatioP99 = stats.QuantileOf(ab.ProbeLast, 0.99) / stats.QuantileOf(ab.ProbeFirst, 0.99)
		if len(ab.AFirst) > 0 {
			ab.ARatioP50 = stats.MedianOf(ab.ALast) / stats.MedianOf(ab.AFirst)
		}
		b.log.Info("agent session measured", "backend", name, "ttfb_ratio_p50", fmt.Sprintf("%.2f", ab.RatioP50))
	}
	return nil
}

// agentSession is one arm's agent session: n turns, then the probes. On D it also holds a Postgres
// connection (for sizes) and the arm's store (for arm A's bodies).
type agentSession struct {
	b  *bench
	a  *arm
	ab *agentBackend
	n  int

	conn       *pgx.Conn // nil but on D
	st         store.Store
	tenant     string
	sizeBefore int64 // responses + items before the session

	ids, calls []string // by turn − 1: response id, and the tool call it made ("" if none)
}

// openDB connects to D's database and store and notes the relations' size before the session.
// closeDB closes what it opened, even when it fails.
func (as *agentSession) openDB(ctx context.Context) error {
	var err error
	if as.conn, err = pgx.Connect(ctx, as.b.pgDSN); err != nil {
		as.conn = nil
		return err
	}
	if as.st, as.tenant, err = as.b.backendStore(ctx, "D"); err != nil {
		return err
	}
	return as.conn.QueryRow(ctx, relSizeSQL).Scan(&as.sizeBefore)
}

func (as *agentSession) closeDB(ctx context.Context) {
	if as.st != nil {
		as.st.Close()
	}
	if as.conn != nil {
		as.conn.Close(context.WithoutCancel(ctx))
	}
}

// runTurns plays the session's n turns, each continuing the previous one, recording each turn's
// figures and the response ids and tool calls.
func (as *agentSession) runTurns(ctx context.Context) error {
	as.ids, as.calls = make([]string, as.n), make([]string, as.n)
	prev, call := "", ""
	for turn := 1; turn <= as.n; turn++ {
		body := as.b.agentBody(as.a, turn, prev, call, "")
		s, err := as.b.one(ctx, as.a, body, true)
		if err != nil {
			return fmt.Errorf("turn %d: %w", turn, err)
		}
		at, c, err := agentTurnOf(body, s)
		if err != nil {
			return fmt.Errorf("turn %d: terminal response: %w", turn, err)
		}
		call = c
		if turn%2 == 1 && call == "" {
			return fmt.Errorf("turn %d: the model made no tool call", turn)
		}
		as.ids[turn-1], as.calls[turn-1] = s.Check.ResponseID, call
		prev = s.Check.ResponseID
		as.ab.Turns = append(as.ab.Turns, at)
	}
	return nil
}

// agentTurnOf is the figures of the turn that sent body and got s, and the call_id of the first
// function call in its output ("" if none).
func agentTurnOf(body []byte, s loadgen.Sample) (agentTurn, string, error) {
	var term struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(s.Check.Terminal, &term); err != nil {
		return agentTurn{}, "", err
	}
	var req struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	at := agentTurn{TTFBUS: stats.Micros(s.TTFB), RequestB: len(body), NewBytes: len(req.Input)}
	call := ""
	for _, o := range term.Output {
		at.NewBytes += len(o)
		var it struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		if json.Unmarshal(o, &it) == nil && it.Type == "function_call" && call == "" {
			call = it.CallID
		}
	}
	return at, call, nil
}

// measureStorage records what the session stored in Postgres: relation growth per turn and each
// turn's stored bytes, summarised over the first and last ten turns.
func (as *agentSession) measureStorage(ctx context.Context) error {
	ab, n := as.ab, as.n
	var sizeAfter int64
	if err := as.conn.QueryRow(ctx, relSizeSQL).Scan(&sizeAfter); err != nil {
		return err
	}
	ab.RelationGrowth = float64(sizeAfter-as.sizeBefore) / float64(n)
	var perNew, first, last []float64
	for i, id := range as.ids {
		t := &ab.Turns[i]
		if err := as.storedBytes(ctx, i, id, t); err != nil {
			return err
		}
		perNew = append(perNew, float64(t.StoredBytes)/float64(max(t.NewBytes, 1)))
		if i < 10 {
			first = append(first, float64(t.StoredBytes))
		}
		if i >= n-10 {
			last = append(last, float64(t.StoredBytes))
		}
	}
	ab.StoredFirst10, ab.StoredLast10 = stats.MedianOf(first), stats.MedianOf(last)
	ab.StoredPerNew = stats.NewSpread(perNew)
	return nil
}

// storedBytes sets t's stored bytes and item count from response id's row and item rows (turn i+1).
func (as *agentSession) storedBytes(ctx context.Context, i int, id string, t *agentTurn) error {
	var rowBytes, itemBytes, items int64
	if err := as.conn.QueryRow(ctx, `SELECT pg_column_size(r.*) FROM responses r WHERE r.tenant = $1 AND r.id = $2`,
		as.tenant, id).Scan(&rowBytes); err != nil {
		return fmt.Errorf("stored bytes of turn %d: %w", i+1, err)
	}
	if err := as.conn.QueryRow(ctx, `SELECT coalesce(sum(pg_column_size(i.*)), 0)::bigint, count(*) FROM items i
					WHERE i.tenant = $1 AND i.response_id = $2`, as.tenant, id).Scan(&itemBytes, &items); err != nil {
		return err
	}
	t.StoredBytes, t.Items = rowBytes+itemBytes, int(items)
	return nil
}

// agentProbe is one probe request of the agent scenario, and where its figures go.
type agentProbe struct {
	name     string
	a        *arm
	body     []byte
	ttfb, up *[]float64
}

// runProbes measures turn 1 (a new session) against turn n (continuing the stored session),
// interleaved; on D also arm A with the same upstream bodies (what a stateless client sends), to
// separate what the history costs upstream from what respgate adds.
func (as *agentSession) runProbes(ctx context.Context) error {
	b, a, ab, n := as.b, as.a, as.ab, as.n
	A := b.arms[0]
	ph := noncePlaceholder
	probes := []agentProbe{
		{"x1", a, b.agentBody(a, 1, "", "", ph), &ab.ProbeFirst, &ab.UpFirst},
		{"xn", a, b.agentBody(a, n, as.ids[n-2], as.calls[n-2], ph), &ab.ProbeLast, &ab.UpLast},
	}
	if as.st != nil {
		chain, err := as.st.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: as.tenant, ID: as.ids[n-2]})
		if err != nil {
			return err
		}
		first, err := upstreamBody(b.agentBody(A, 1, "", "", ph), nil)
		if err != nil {
			return err
		}
		last, err := upstreamBody(b.agentBody(A, n, "", as.calls[n-2], ph), chain.Items())
		if err != nil {
			return err
		}
		probes = append(probes, agentProbe{"a1", A, first, &ab.AFirst, &ab.AUpFirst}, agentProbe{"an", A, last, &ab.ALast, &ab.AUpLast})
	}
	for i := range b.p.AgentProbes {
		for _, pr := range rotate(probes, i) {
			nonce := b.nextNonce()
			s, up, err := b.oneTagged(ctx, pr.a, retag(pr.body, nonce), nonce, false)
			if err != nil {
				return fmt.Errorf("probe %s: %w", pr.name, err)
			}
			*pr.ttfb = append(*pr.ttfb, stats.Micros(s.TTFB))
			*pr.up = append(*pr.up, up)
		}
	}
	return nil
}

const relSizeSQL = `SELECT pg_total_relation_size('responses') + pg_total_relation_size('items')`

// upstreamBody is the body respgate sends upstream for the request body req (without
// previous_response_id) over history: rehydrate.Build, as the server calls it.
func upstreamBody(req []byte, history []wire.Item) ([]byte, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(req, &raw); err != nil {
		return nil, err
	}
	r, err := wire.DecodeCreateRequest(raw)
	if err != nil {
		return nil, err
	}
	in, err := rehydrate.ParseInput(r.Input)
	if err != nil {
		return nil, err
	}
	res, err := rehydrate.Build(&rehydrate.Params{History: history, Input: in, Request: r, NewID: wire.NewID})
	if err != nil {
		return nil, fmt.Errorf("rehydrate for arm A: %w", err)
	}
	return res.Body, nil
}
