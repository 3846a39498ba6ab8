package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
	"github.com/respgate/respgate/rehydrate"
	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

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
