package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/server"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/store/postgres"
	"github.com/respgate/respgate/store/sqlite"
	"github.com/respgate/respgate/upstream"
	"github.com/respgate/respgate/wire"
)

// benchKey is the bearer key of every benchmark request; its tenant is computed with the
// server's own function (server.TenantOf) over the secret stored in the arm's database.
const benchKey = "bench"

// backendStore opens, in this process, the store of a respgate arm (D: Postgres, E: SQLite) and
// returns the tenant of benchKey in it.
func (b *bench) backendStore(ctx context.Context, name string) (store.Store, string, error) {
	dsn := b.pgDSN
	if name == "E" {
		dsn = "sqlite:" + filepath.Join(b.sqliteDir, "E.db")
	}
	st, err := openStore(ctx, dsn)
	if err != nil {
		return nil, "", err
	}
	up, err := upstream.New(upstream.Config{BaseURL: b.sim.baseURL()})
	if err != nil {
		st.Close()
		return nil, "", err
	}
	srv, err := server.New(ctx, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, upstream.Single(up))
	if err != nil {
		st.Close()
		return nil, "", err
	}
	return st, srv.TenantOf(benchKey), nil
}

// openStore opens the store at dsn in this process, as bin/respgate opens it.
func openStore(ctx context.Context, dsn string) (store.Store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return postgres.Open(ctx, dsn)
	case strings.HasPrefix(dsn, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(dsn, "sqlite:"))
	}
	return nil, errors.New("database url must be a postgres:// or sqlite: URL")
}

// one sends a single request and returns its sample (an error if it failed).
func (b *bench) one(ctx context.Context, a *arm, body []byte, keepTerminal bool) (loadgen.Sample, error) {
	rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Requests: 1, KeepTerminal: keepTerminal,
		Body: constBody(body)})
	if err != nil {
		return loadgen.Sample{}, err
	}
	s := rs.samples[0]
	if !s.OK() {
		p := s.Err
		if p == "" && len(s.Check.Problems) > 0 {
			p = s.Check.Problems[0]
		}
		return s, fmt.Errorf("%s: request failed: %s", a.Name, p)
	}
	return s, nil
}

// nextNonce is a fresh nonce of fixed width (no nonce is a prefix of another).
func (b *bench) nextNonce() string {
	b.nonceSeq++
	return fmt.Sprintf("%sc%08d", nonceMark, b.nonceSeq)
}

// noncePlaceholder has a nonce's width; a body built once with it is re-tagged per request by
// replacing it.
var noncePlaceholder = nonceMark + "c00000000"

func retag(body []byte, nonce string) []byte {
	return bytes.Replace(body, []byte(noncePlaceholder), []byte(nonce), 1)
}

// oneTagged sends one request whose body carries nonce and also returns its time to upstream:
// from the client sending it to the simulator holding the whole request (µs).
func (b *bench) oneTagged(ctx context.Context, a *arm, body []byte, nonce string, keepTerminal bool) (loadgen.Sample, float64, error) {
	rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Requests: 1, KeepTerminal: keepTerminal,
		Body: constBody(body)})
	if err != nil {
		return loadgen.Sample{}, 0, err
	}
	s := rs.samples[0]
	if !s.OK() {
		p := s.Err
		if p == "" && len(s.Check.Problems) > 0 {
			p = s.Check.Problems[0]
		}
		return s, 0, fmt.Errorf("%s: request failed: %s", a.Name, p)
	}
	m, err := b.stamps(nonce)
	if err != nil {
		return s, 0, err
	}
	st := m[nonce]
	if st == nil {
		return s, 0, fmt.Errorf("%s: the simulator saw no request tagged %s", a.Name, nonce)
	}
	send := rs.started.UnixNano() + int64(s.Start)
	return s, float64(st.Body-send) / 1e3, nil
}

// --- chain depth -------------------------------------------------------------------------------

type chainResult struct {
	Depths []*chainDepth `json:"depths"`
}

type chainDepth struct {
	Label         string                   `json:"label"`
	Depth         int                      `json:"depth"`
	HistoryBytes  int                      `json:"history_bytes"`
	UpstreamBytes int                      `json:"upstream_bytes"`
	A             []float64                `json:"a_ttfb_us"`
	AP50          float64                  `json:"a_ttfb_p50_us"`
	AP99          float64                  `json:"a_ttfb_p99_us"`
	AUp           []float64                `json:"a_to_upstream_us"`
	AUpP50        float64                  `json:"a_to_upstream_p50_us"`
	Backends      map[string]*chainBackend `json:"backends"`
}

type chainBackend struct {
	// Cold figures are medians over the copies of the chain (ColdAll, UpColdAll).
	ColdAll   []float64 `json:"cold_ttfb_all_us"`
	UpColdAll []float64 `json:"to_upstream_cold_all_us"`
	ColdUS    float64   `json:"cold_ttfb_us"`
	Warm      []float64 `json:"warm_ttfb_us"`
	Raw       []float64 `json:"raw_query_us"`
	// Added figures are X − A: over A's median for cold and the warm p50, over A's p99 for the
	// warm p99.
	AddedCold    float64 `json:"added_cold_us"`
	AddedWarmP50 float64 `json:"added_warm_p50_us"`
	AddedWarmP99 float64 `json:"added_warm_p99_us"`
	RawP50       float64 `json:"raw_query_p50_us"`
	RawP99       float64 `json:"raw_query_p99_us"`
	// To upstream: from the client sending the request to the simulator holding all of it
	// (simulator-stamped), so free of the model's own time; added is X − A's median (p99: − A's
	// p99). This is the gateway's work before the model can start: parse, chain load,
	// rehydration, forwarding.
	UpCold      float64   `json:"to_upstream_cold_us"`
	Up          []float64 `json:"to_upstream_us"`
	AddedUpCold float64   `json:"added_to_upstream_cold_us"`
	AddedUpP50  float64   `json:"added_to_upstream_p50_us"`
	AddedUpP99  float64   `json:"added_to_upstream_p99_us"`
}

// summarize computes the depth's figures from its samples (A, AUp and each backend's ColdAll,
// UpColdAll, Warm, Up, Raw): medians, nearest-rank p99s, and the added figures X − A.
func (cd *chainDepth) summarize() {
	cd.AP50, cd.AP99 = stats.MedianOf(cd.A), stats.QuantileOf(cd.A, 0.99)
	cd.AUpP50 = stats.MedianOf(cd.AUp)
	for _, cb := range cd.Backends {
		cb.ColdUS, cb.UpCold = stats.MedianOf(cb.ColdAll), stats.MedianOf(cb.UpColdAll)
		cb.RawP50, cb.RawP99 = stats.MedianOf(cb.Raw), stats.QuantileOf(cb.Raw, 0.99)
		cb.AddedCold = cb.ColdUS - cd.AP50
		cb.AddedWarmP50 = stats.MedianOf(cb.Warm) - cd.AP50
		cb.AddedWarmP99 = stats.QuantileOf(cb.Warm, 0.99) - cd.AP99
		cb.AddedUpCold = cb.UpCold - cd.AUpP50
		cb.AddedUpP50 = stats.MedianOf(cb.Up) - cd.AUpP50
		cb.AddedUpP99 = stats.QuantileOf(cb.Up, 0.99) - stats.QuantileOf(cd.AUp, 0.99)
	}
}

// template is one real turn stored by respgate, whose items give the synthesised chains their
// exact stored shape.
type template struct {
	resp    store.Response
	in, out wire.Item
}

func (b *bench) templateTurn(ctx context.Context, a *arm, st store.Store, tenant string) (*template, error) {
	body := a.body(model(0, 8, "reasoning=0"), "template turn", true, nil)
	s, err := b.one(ctx, a, body, false)
	if err != nil {
		return nil, err
	}
	resp, out, err := st.ResponseGet(ctx, &store.ResponseGetParams{Tenant: tenant, ID: s.Check.ResponseID})
	if err != nil {
		return nil, fmt.Errorf("read template turn: %w", err)
	}
	in, err := st.ItemListByResponse(ctx, &store.ItemListByResponseParams{Tenant: tenant, ResponseID: resp.ID, Role: store.RoleInput, Limit: 10})
	if err != nil {
		return nil, fmt.Errorf("read template input: %w", err)
	}
	if len(in.Items) != 1 || len(out) != 1 {
		return nil, fmt.Errorf("template turn stored %d input and %d output items, want 1 and 1", len(in.Items), len(out))
	}
	return &template{resp: *resp, in: in.Items[0], out: out[0]}, nil
}

// retext copies a stored message item with a new id and its (first) text replaced.
func retext(it wire.Item, id, text string) (wire.Item, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(it.JSON, &m); err != nil {
		return wire.Item{}, err
	}
	q := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	m["id"] = q(id)
	if c := m["content"]; len(c) > 0 && c[0] == '"' {
		m["content"] = q(text)
	} else {
		var parts []map[string]json.RawMessage
		if err := json.Unmarshal(c, &parts); err != nil || len(parts) == 0 {
			return wire.Item{}, errors.New("template item has no content parts")
		}
		parts[0]["text"] = q(text)
		m["content"] = q(parts)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return wire.Item{}, err
	}
	return wire.ParseItem(raw)
}

// filler is n bytes of 64-byte words (the simulator counts words as tokens and, like vLLM,
// rejects a prompt over its context length of 131,072; long words keep a 2 MB history within it).
func filler(word string, n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < n; i++ {
		w := fmt.Sprintf("%s%d", word, i)
		sb.WriteString(w)
		sb.WriteString(strings.Repeat("x", max(63-len(w), 0)))
		sb.WriteByte(' ')
	}
	return sb.String()[:n]
}

// buildChain commits depth turns of two message items (input and output, each about itemBytes
// of stored JSON) chained by previous_response_id, directly through the store: the same records
// respgate writes, without a thousand model calls. It returns the response ids, oldest first.
func buildChain(ctx context.Context, st store.Store, tenant string, t *template, depth, itemBytes int) ([]string, error) {
	text := max(itemBytes-160, 16)
	inText, outText := filler("question", text), filler("answer", text)
	ids := make([]string, depth)
	prev := ""
	for i := range depth {
		in, err := retext(t.in, wire.NewID(wire.PrefixMessage), inText)
		if err != nil {
			return nil, err
		}
		out, err := retext(t.out, wire.NewID(wire.PrefixMessage), outText)
		if err != nil {
			return nil, err
		}
		now := time.Now().UTC()
		r := t.resp
		r.ID, r.Tenant, r.PreviousResponseID, r.Status, r.CreatedAt, r.CompletedAt = wire.NewID(wire.PrefixResponse), tenant, prev, wire.StatusCompleted, now, &now
		if err := st.ResponseCommit(ctx, &store.ResponseCommitParams{Response: r, Input: []wire.Item{in}, Output: []wire.Item{out}}); err != nil {
			return nil, fmt.Errorf("build chain: %w", err)
		}
		ids[i], prev = r.ID, r.ID
	}
	return ids, nil
}

// chainArm is one respgate arm of the chain scenario: its store, opened in this process, and the
// chains built in it.
type chainArm struct {
	name   string
	a      *arm
	st     store.Store
	tenant string
	ids    []string // the 1 KiB-per-item chain
	big    []string // the 2 MB chain
	// Copies of both, for more cold samples: each copy's first request is a first load.
	idsCopies, bigCopies [][]string
}

// chainLevel is one measured point: a depth of the 1 KiB chain, or the 2 MB chain.
type chainLevel struct {
	label string
	depth int
	tip   func(x *chainArm) string
	tips  func(x *chainArm) []string // the tip of every copy, the main chain's first
}

// chainRun is what every level of the chain scenario shares.
type chainRun struct {
	b           *bench
	backs       []string
	bk          map[string]*chainArm
	A           *arm
	mdl, input  string
	parsedInput []wire.Item
}

func (b *bench) scenarioChain(ctx context.Context) error {
	p := b.p
	res := &chainResult{}
	b.rep.Chain = res
	cr := &chainRun{b: b, backs: []string{"D", "E"}, bk: map[string]*chainArm{}}
	maxDepth := 0
	for _, d := range p.Depths {
		maxDepth = max(maxDepth, d)
	}
	for _, name := range cr.backs {
		x, err := b.openChainArm(ctx, name, maxDepth)
		if err != nil {
			return err
		}
		defer x.st.Close()
		cr.bk[name] = x
	}
	levels := chainLevels(p)

	cr.mdl = model(0, 2, "reasoning=0")
	cr.input = "next question " + noncePlaceholder
	var err error
	if cr.parsedInput, err = rehydrate.ParseInput(json.RawMessage(`"` + cr.input + `"`)); err != nil {
		return err
	}
	cr.A = b.arms[0]
	for _, lv := range levels {
		cd := &chainDepth{Label: lv.label, Depth: lv.depth, Backends: map[string]*chainBackend{}}
		res.Depths = append(res.Depths, cd)
		if err := cr.measureLevel(ctx, lv, cd); err != nil {
			return err
		}
		if b.opt.profile && lv.label == fmt.Sprint(maxDepth) { // not the 2 MB chain
			d := cr.bk["D"]
			b.profileTwin(ctx, fmt.Sprintf("twin-pg-chain%d-warm", lv.depth),
				fmt.Sprintf("one warm continuation at a time of D's depth-%d chain (history from the chain cache)", lv.depth), profileSeconds, true,
				loadgen.Config{Stream: true, Concurrency: 1, Requests: 20,
					Body: constBody(d.a.body(cr.mdl, cr.input, true, map[string]any{"previous_response_id": lv.tip(d)}))})
		}
	}
	return nil
}

// openChainArm opens the store of arm name and builds its chains there. The caller closes x.st.
func (b *bench) openChainArm(ctx context.Context, name string, maxDepth int) (*chainArm, error) {
	st, tenant, err := b.backendStore(ctx, name)
	if err != nil {
		return nil, err
	}
	x := &chainArm{name: name, a: b.armByKey[name], st: st, tenant: tenant}
	if err := b.buildChains(ctx, x, maxDepth); err != nil {
		st.Close()
		return nil, err
	}
	return x, nil
}

// buildChains builds x's 1 KiB-per-item chain of maxDepth turns and its 2 MB chain, and
// ColdChains − 1 copies of each, from one real template turn.
func (b *bench) buildChains(ctx context.Context, x *chainArm, maxDepth int) error {
	p := b.p
	t, err := b.templateTurn(ctx, x.a, x.st, x.tenant)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if x.ids, err = buildChain(ctx, x.st, x.tenant, t, maxDepth, p.ItemBytes); err != nil {
		return err
	}
	if x.big, err = buildChain(ctx, x.st, x.tenant, t, p.BigDepth, p.BigItem); err != nil {
		return err
	}
	x.idsCopies, x.bigCopies = [][]string{x.ids}, [][]string{x.big}
	for range p.ColdChains - 1 {
		ids, err := buildChain(ctx, x.st, x.tenant, t, maxDepth, p.ItemBytes)
		if err != nil {
			return err
		}
		big, err := buildChain(ctx, x.st, x.tenant, t, p.BigDepth, p.BigItem)
		if err != nil {
			return err
		}
		x.idsCopies, x.bigCopies = append(x.idsCopies, ids), append(x.bigCopies, big)
	}
	b.log.Info("chains built", "backend", x.name, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// chainLevels lists the measured points: each of p.Depths on the 1 KiB chain, then the 2 MB chain.
func chainLevels(p params) []chainLevel {
	var levels []chainLevel
	for _, d := range p.Depths {
		levels = append(levels, chainLevel{fmt.Sprintf("%d", d), d, func(x *chainArm) string { return x.ids[d-1] },
			func(x *chainArm) []string {
				var out []string
				for _, c := range x.idsCopies {
					out = append(out, c[d-1])
				}
				return out
			}})
	}
	return append(levels, chainLevel{fmt.Sprintf("%d turns × 2 × %d KiB (2 MB)", p.BigDepth, p.BigItem>>10), p.BigDepth,
		func(x *chainArm) string { return x.big[len(x.big)-1] },
		func(x *chainArm) []string {
			var out []string
			for _, c := range x.bigCopies {
				out = append(out, c[len(c)-1])
			}
			return out
		}})
}

// measureLevel measures one level into cd: cold loads of every copy, then ChainN rounds of A and
// the warm arms, interleaved.
func (cr *chainRun) measureLevel(ctx context.Context, lv chainLevel, cd *chainDepth) error {
	aBody, err := cr.armABody(ctx, lv, cd)
	if err != nil {
		return err
	}
	bodies := map[string][]byte{"A": aBody}
	for _, name := range cr.backs {
		x := cr.bk[name]
		bodies[name] = x.a.body(cr.mdl, cr.input, true, map[string]any{"previous_response_id": lv.tip(x)})
		cd.Backends[name] = &chainBackend{}
	}
	if err := cr.measureCold(ctx, lv, cd); err != nil {
		return err
	}
	if err := cr.measureWarm(ctx, lv, cd, bodies); err != nil {
		return err
	}
	cd.summarize()
	cr.b.log.Info("chain depth measured", "depth", lv.label, "added_ttfb_p50_D", fmtUS(cd.Backends["D"].AddedWarmP50),
		"added_to_upstream_p50_D", fmtUS(cd.Backends["D"].AddedUpP50), "raw_query_p50_D", fmtUS(cd.Backends["D"].RawP50))
	return nil
}

// armABody is the body arm A gets for the level: the very body respgate sends upstream for this
// chain (rehydrate.Build over the stored history), what a stateless client would have to send
// itself. It also records the history's and that body's sizes in cd.
func (cr *chainRun) armABody(ctx context.Context, lv chainLevel, cd *chainDepth) ([]byte, error) {
	d := cr.bk["D"]
	chain, err := d.st.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: d.tenant, ID: lv.tip(d)})
	if err != nil {
		return nil, err
	}
	for _, it := range chain.Items() {
		cd.HistoryBytes += len(it.JSON)
	}
	raw := map[string]json.RawMessage{}
	for k, v := range map[string]any{"model": cr.mdl, "input": cr.input, "stream": true} {
		raw[k], _ = json.Marshal(v)
	}
	req, err := wire.DecodeCreateRequest(raw)
	if err != nil {
		return nil, fmt.Errorf("decode the arm A request: %w", err)
	}
	built, err := rehydrate.Build(&rehydrate.Params{History: chain.Items(), Input: cr.parsedInput, Request: req, NewID: wire.NewID})
	if err != nil {
		return nil, fmt.Errorf("rehydrate chain for arm A: %w", err)
	}
	cd.UpstreamBytes = len(built.Body)
	return built.Body, nil
}

// measureCold measures the first load of a chain by the respgate process (it has no chain cache,
// and the database pages are warm: they were just written), once per copy of the chain.
func (cr *chainRun) measureCold(ctx context.Context, lv chainLevel, cd *chainDepth) error {
	b := cr.b
	for k := range b.p.ColdChains {
		for _, name := range cr.backs {
			x := cr.bk[name]
			nonce := b.nextNonce()
			body := x.a.body(cr.mdl, cr.input, true, map[string]any{"previous_response_id": lv.tips(x)[k]})
			s, up, err := b.oneTagged(ctx, x.a, retag(body, nonce), nonce, false)
			if err != nil {
				return err
			}
			cb := cd.Backends[name]
			cb.ColdAll, cb.UpColdAll = append(cb.ColdAll, stats.Micros(s.TTFB)), append(cb.UpColdAll, up)
		}
	}
	return nil
}

// measureWarm sends ChainN rounds of the level's bodies (by arm: A and the backends), rotating the
// order, and after each backend request times the raw chain query on its store.
func (cr *chainRun) measureWarm(ctx context.Context, lv chainLevel, cd *chainDepth, bodies map[string][]byte) error {
	b := cr.b
	order := append([]string{"A"}, cr.backs...)
	for i := range b.p.ChainN {
		for _, name := range rotate(order, i) {
			nonce := b.nextNonce()
			if name == "A" {
				s, up, err := b.oneTagged(ctx, cr.A, retag(bodies["A"], nonce), nonce, false)
				if err != nil {
					return err
				}
				cd.A = append(cd.A, stats.Micros(s.TTFB))
				cd.AUp = append(cd.AUp, up)
				continue
			}
			x := cr.bk[name]
			s, up, err := b.oneTagged(ctx, x.a, retag(bodies[name], nonce), nonce, false)
			if err != nil {
				return err
			}
			cb := cd.Backends[name]
			cb.Warm = append(cb.Warm, stats.Micros(s.TTFB))
			cb.Up = append(cb.Up, up)
			t0 := time.Now()
			if _, err := x.st.ResponseChainGet(ctx, &store.ResponseChainGetParams{Tenant: x.tenant, ID: lv.tip(x)}); err != nil {
				return err
			}
			cb.Raw = append(cb.Raw, stats.Micros(time.Since(t0)))
		}
	}
	return nil
}

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
