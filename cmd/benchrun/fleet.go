package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
)

// --- fleet: chain-affine routing over simulated vLLM replicas with prefix caches (issue 39) -----
//
// Four vllm-sim processes (one instance each, so one can be killed and restarted) model vLLM's
// prefix cache, each holding about a quarter of the sessions' final prefixes, with a prefill cost
// per uncached token. Two bin/respgate replicas on one Postgres schema share the load: turn t of
// session s goes to replica (s+t) mod 2, so every chain crosses replicas on every turn. The pool's
// policy is switched between passes by rewriting the --upstreams file and sending SIGHUP to both
// (the reload path of docs/fleet.md). The passes, one after the other on the same processes:
//
//	round-robin, chain-affine, least-loaded   the same agent sessions, one policy each
//	floor                                     the same sessions against one more instance whose
//	                                          cache holds everything (the ideal-cache floor)
//	kill                                      chain-affine again; one instance is killed a third of
//	                                          the way through and restarted at two thirds
//
// Every session's opening names its pass, so no pass reuses another's cached prefixes.

// fleetPolicies are the compared policies, in the order their passes run.
var fleetPolicies = []string{"round-robin", "chain-affine", "least-loaded"}

type fleetResult struct {
	Sessions    int                   `json:"sessions"`
	Turns       int                   `json:"turns"`
	Instances   int                   `json:"instances"`
	CacheBlocks int                   `json:"cache_blocks_per_instance"`
	PrefillUS   int                   `json:"prefill_us_per_token"`
	Passes      map[string]*fleetPass `json:"passes"`
	// Agreement: fresh chains opened on both respgate replicas with no load (both see the same
	// healthy set and no bound is near): how many went to the same vLLM replica.
	AgreeSame  int        `json:"agreement_same"`
	AgreeTotal int        `json:"agreement_total"`
	Kill       *fleetKill `json:"kill,omitempty"`
}

// fleetPass is one pass's figures.
type fleetPass struct {
	WallS float64 `json:"wall_s"`
	// HitRatio is cached ÷ input tokens (the usage respgate relayed) over continuation turns.
	HitRatio float64 `json:"hit_ratio"`
	Input    int64   `json:"input_tokens"`
	Cached   int64   `json:"cached_tokens"`
	// TTFT: time to the first delta at the client, turns 20–30 (µs).
	TTFT []float64 `json:"ttft_late_us"`
	// InFlight is each vLLM replica's mean calls in flight over the pass (both respgate replicas'
	// respgate_upstream_replica_in_flight, summed, sampled every 100 ms); LoadRatio is the
	// largest over their mean.
	InFlight  map[string]float64 `json:"in_flight_mean"`
	LoadRatio float64            `json:"load_max_over_mean"`
	// Sticky is the share of continuation turns served by the replica of the turn before (sent
	// through the other respgate replica).
	Sticky float64 `json:"sticky"`
	// Routed is respgate_upstream_pool_routed_total by outcome during the pass, both replicas.
	Routed map[string]float64 `json:"routed"`
	Failed int                `json:"failed_turns"`
	// InputByTurn and HitByTurn: the mean input tokens and the hit ratio of each turn (from 1).
	InputByTurn []float64 `json:"input_by_turn"`
	HitByTurn   []float64 `json:"hit_by_turn"`
	turns       []fleetTurn
}

// fleetTurn is one turn (one attempt of it) as the client saw it.
type fleetTurn struct {
	session, turn int
	start, end    time.Time
	ttft          time.Duration
	id, status    string // status: the terminal event's; "" when no stream started, "cut" without one
	input, cached int64
	replica       string // read back from the store
	httpErr       string // set when the turn failed before a stream started
}

// fleetRun holds the scenario's processes.
type fleetRun struct {
	b   *bench
	bin string // bin/vllm-sim
	// shared serves the instances of every pass but the kill pass, in one process (vllm-sim
	// --instances), at sharedURLs; sims are the kill pass's, one process each so that one can be
	// killed (startSeparate).
	shared     *child
	sharedURLs []string
	sims       []*child
	simArgs    []string
	floor      *child
	gws        [2]*child
	file       string
	reloads    int
	client     *http.Client
	conn       *pgx.Conn
	res        *fleetResult
}

func (b *bench) scenarioFleet(ctx context.Context) error {
	p := b.p
	b.stopArms() // the fleet's respgate replicas take the Postgres connections they held
	fr := &fleetRun{b: b, client: loadgen.NewClient(4 * p.FleetSessions)}
	defer fr.close(context.WithoutCancel(ctx))
	// A session's prompt grows by about 300 tokens a turn (FleetWords words of input, and on odd
	// turns a tool call that quotes the user's message). An instance's cache holds a quarter of
	// the sessions' final prompts × (1+ε): the load bound lets a replica hold that many chains.
	finalTokens := p.FleetTurns * 300
	fr.res = &fleetResult{Sessions: p.FleetSessions, Turns: p.FleetTurns, Instances: 4, PrefillUS: 50,
		CacheBlocks: p.FleetSessions * finalTokens * 5 / 4 / 4 / 16, Passes: map[string]*fleetPass{}}
	b.rep.Fleet = fr.res
	if err := fr.start(ctx); err != nil {
		return err
	}
	for _, pol := range fleetPolicies {
		if err := fr.reload(ctx, pol, fr.sharedURLs); err != nil {
			return err
		}
		stopProfile := fr.profilePass(ctx, pol)
		pass, err := fr.pass(ctx, pol, nil)
		stopProfile()
		if err != nil {
			return fmt.Errorf("%s: %w", pol, err)
		}
		fr.res.Passes[pol] = pass
		if pol == "chain-affine" {
			if err := fr.agreement(ctx); err != nil {
				return err
			}
		}
	}
	if err := fr.reload(ctx, "chain-affine", []string{fr.floor.baseURL()}); err != nil {
		return err
	}
	pass, err := fr.pass(ctx, "floor", nil)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	fr.res.Passes["floor"] = pass
	if err := fr.startSeparate(ctx); err != nil {
		return err
	}
	if err := fr.reload(ctx, "chain-affine", fr.simURLs()); err != nil {
		return err
	}
	return fr.killPass(ctx)
}

// stopArms stops the single-upstream arms' respgate processes (the fleet scenario runs last):
// together with the fleet's two they would outgrow Postgres' max_connections.
func (b *bench) stopArms() {
	for _, m := range []map[string]*child{b.gws, b.twins} {
		for k, c := range m {
			c.stop()
			delete(m, k)
		}
	}
}

// startSeparate stops the shared instances and starts the kill pass's, one process each.
func (fr *fleetRun) startSeparate(ctx context.Context) error {
	fr.shared.stop()
	fr.shared = nil
	for i := range fr.res.Instances {
		c, err := startChild(ctx, fr.b.logDir, fmt.Sprintf("fleet-sim-%d", i), fr.bin, fr.simArgs, "/health")
		if err != nil {
			return err
		}
		fr.sims = append(fr.sims, c)
	}
	return nil
}

func (fr *fleetRun) simURLs() []string {
	out := make([]string, len(fr.sims))
	for i, s := range fr.sims {
		out[i] = s.baseURL()
	}
	return out
}

// start runs the four instances, the floor instance and the two respgate replicas.
func (fr *fleetRun) start(ctx context.Context) error {
	b, p := fr.b, fr.b.p
	var err error
	if fr.bin, err = filepath.Abs(filepath.Join(b.opt.binDir, "vllm-sim")); err != nil {
		return err
	}
	if _, err := os.Stat(fr.bin); err != nil {
		return fmt.Errorf("vllm-sim binary: %w (run `make build` first)", err)
	}
	costs := []string{"--prefill-per-token", "50us", "--decode-per-token", p.FleetDecode.String(), "--shutdown-timeout", "1s"}
	fr.simArgs = append([]string{"--listen", "ADDR", "--prefix-cache-blocks", strconv.Itoa(fr.res.CacheBlocks)}, costs...)
	// The instances in one process, as the floor's one instance is: with a process each, the
	// chain-affine pass ran 1.34× and 1.64× the floor's time to first token where one process
	// ran 1.01× and 1.08×, at the same hit ratio (docs/benchmarks.md, "Fleet"): four Go runtimes
	// beside two respgate processes, Postgres and the client contend for two cores.
	addrs, err := freeRun(fr.res.Instances)
	if err != nil {
		return err
	}
	sharedArgs := append(append([]string{}, fr.simArgs...), "--instances", strconv.Itoa(fr.res.Instances))
	if fr.shared, err = startChildAt(ctx, b.logDir, "fleet-sims", fr.bin, sharedArgs, "/health", addrs[0]); err != nil {
		return err
	}
	for _, a := range addrs {
		fr.sharedURLs = append(fr.sharedURLs, "http://"+a+"/v1")
	}
	// The floor: one instance whose cache never evicts (2^24 blocks).
	floorArgs := append([]string{"--listen", "ADDR", "--prefix-cache-blocks", strconv.Itoa(1 << 24)}, costs...)
	if fr.floor, err = startChild(ctx, b.logDir, "fleet-sim-floor", fr.bin, floorArgs, "/health"); err != nil {
		return err
	}
	fr.file = filepath.Join(b.logDir, "upstreams.yaml")
	if err := fr.writeTopology("chain-affine", fr.sharedURLs); err != nil {
		return err
	}
	respgate, err := filepath.Abs(filepath.Join(b.opt.binDir, "respgate"))
	if err != nil {
		return err
	}
	conns := strconv.Itoa(max(b.pgConns, pgConnShare(b.rep.Postgres)))
	for i := range fr.gws {
		args := []string{"--listen", "ADDR", "--upstreams", fr.file, "--database-url", b.pgDSN, "--database-max-conns", conns}
		if i == 0 && b.opt.profile {
			args = append(args, "--debug-listen", "DEBUGADDR")
		}
		if fr.gws[i], err = startChild(ctx, b.logDir, fmt.Sprintf("fleet-respgate-%d", i), respgate, args, "/readyz"); err != nil {
			return err
		}
	}
	fr.conn, err = pgx.Connect(ctx, b.pgDSN)
	return err
}

// profilePass, under -profile, takes a CPU profile of the first respgate replica over the first
// fleetProfileSeconds of the chain-affine pass (what a fleet turn costs the gateway); the
// returned func waits for it. Other passes, and runs without -profile, take none.
func (fr *fleetRun) profilePass(ctx context.Context, pol string) (wait func()) {
	if !fr.b.opt.profile || pol != "chain-affine" {
		return func() {}
	}
	path := filepath.Join(fr.b.logDir, "fleet-respgate-0-chain-affine.cpu.pprof")
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		err = fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", fr.gws[0].debugAddr, fleetProfileSeconds), path)
	})
	return func() {
		wg.Wait()
		if err != nil {
			fr.b.rep.Problems = append(fr.b.rep.Problems, fmt.Sprintf("profile the fleet's chain-affine pass: %v", err))
			return
		}
		fr.b.rep.Profiles = append(fr.b.rep.Profiles, profileRef{Path: path,
			What: fmt.Sprintf("one of the two respgate replicas over the first %d s of the fleet's chain-affine pass (CPU per fleet turn)", fleetProfileSeconds)})
	}
}

// fleetProfileSeconds is how long profilePass profiles: within the chain-affine pass (about 10 s).
const fleetProfileSeconds = 6

func (fr *fleetRun) close(ctx context.Context) {
	for _, c := range append([]*child{fr.gws[0], fr.gws[1], fr.floor, fr.shared}, fr.sims...) {
		if c != nil {
			c.stop()
		}
	}
	if fr.conn != nil {
		_ = fr.conn.Close(ctx)
	}
	fr.client.CloseIdleConnections()
}

// writeTopology writes the --upstreams file: one pool of urls under policy. A killed instance is
// marked down by the first call that cannot connect to it (passive marking); the probes, every
// 500 ms, see its return. Three probes in a row must fail, each after 5 s, to mark a replica down:
// on a loaded machine a probe can wait long for a core, and a false "down" would move chains.
func (fr *fleetRun) writeTopology(policy string, urls []string) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "pools:\n  - name: sim\n    models: [\"*\"]\n    policy: %s\n    epsilon: %g\n", policy, fr.b.p.FleetEpsilon)
	if fr.b.p.FleetMinSlack >= 0 {
		fmt.Fprintf(&sb, "    min_slack: %d\n", fr.b.p.FleetMinSlack)
	}
	sb.WriteString("    urls:\n")
	for _, u := range urls {
		fmt.Fprintf(&sb, "      - %s\n", u)
	}
	sb.WriteString("health:\n  interval: 500ms\n  timeout: 5s\n  min_backoff: 100ms\n  max_backoff: 500ms\n  fall: 3\n")
	return os.WriteFile(fr.file, []byte(sb.String()), 0o600)
}

// reload rewrites the file and sends SIGHUP to both respgate replicas, then waits until each
// logged the reload.
func (fr *fleetRun) reload(ctx context.Context, policy string, urls []string) error {
	if err := fr.writeTopology(policy, urls); err != nil {
		return err
	}
	fr.reloads++
	for _, g := range fr.gws {
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, g := range fr.gws {
		for {
			b, err := os.ReadFile(g.log)
			if err != nil {
				return err
			}
			if strings.Count(string(b), "upstreams reloaded") >= fr.reloads {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s did not log the reload to %s; see %s", g.name, policy, g.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// pass runs every session to its last turn, concurrently, with the in-flight sampler running;
// hook, when set, is called after every completed turn (the kill pass's trigger).
func (fr *fleetRun) pass(ctx context.Context, name string, hook func(done int)) (*fleetPass, error) {
	p := fr.b.p
	routedBefore := fr.routed(ctx)
	sctx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	inflight := map[string]float64{}
	sampler.Go(func() { inflight = fr.sampleInFlight(sctx) })
	t0 := time.Now()
	var mu sync.Mutex
	var turns []fleetTurn
	done := 0
	errs := make([]error, p.FleetSessions)
	var wg sync.WaitGroup
	for s := range p.FleetSessions {
		wg.Go(func() {
			// The sessions start spread over FleetSpread, as agents do, not in one burst.
			select {
			case <-time.After(p.FleetSpread * time.Duration(s) / time.Duration(p.FleetSessions)):
			case <-ctx.Done():
				return
			}
			errs[s] = fr.session(ctx, name, s, func(t fleetTurn) {
				mu.Lock()
				turns = append(turns, t)
				if t.status == "completed" {
					done++
				}
				n := done
				mu.Unlock()
				if hook != nil && t.status == "completed" {
					hook(n)
				}
			})
		})
	}
	wg.Wait()
	stopSampler()
	sampler.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	pass := &fleetPass{WallS: time.Since(t0).Seconds(), InFlight: inflight, turns: turns, Routed: map[string]float64{}}
	for k, v := range fr.routed(ctx) {
		pass.Routed[k] = v - routedBefore[k]
	}
	if err := fr.replicas(ctx, pass.turns); err != nil {
		return nil, err
	}
	pass.summarise()
	fr.b.log.Info("fleet pass done", "pass", name, "hit_ratio", fmt.Sprintf("%.3f", pass.HitRatio),
		"ttft_p50", fmtUS(stats.MedianOf(pass.TTFT)), "load", fmt.Sprintf("%.2f", pass.LoadRatio), "wall", time.Since(t0).Round(time.Second))
	return pass, nil
}

// summarise computes the pass's figures from its turns.
func (p *fleetPass) summarise() {
	last := map[[2]int]string{} // (session, turn) → the replica of its completed attempt
	for _, t := range p.turns {
		if t.status == "completed" {
			last[[2]int{t.session, t.turn}] = t.replica
		} else {
			p.Failed++
		}
	}
	same, cont := 0, 0
	for _, t := range p.turns {
		if t.status != "completed" || t.turn < 2 {
			continue
		}
		p.Input += t.input
		p.Cached += t.cached
		if t.turn >= 20 {
			p.TTFT = append(p.TTFT, stats.Micros(t.ttft))
		}
		if prev, ok := last[[2]int{t.session, t.turn - 1}]; ok {
			cont++
			if prev == t.replica {
				same++
			}
		}
	}
	p.HitRatio = float64(p.Cached) / float64(max(p.Input, 1))
	var in, ca, n []float64
	for _, t := range p.turns {
		if t.status != "completed" {
			continue
		}
		for len(in) < t.turn {
			in, ca, n = append(in, 0), append(ca, 0), append(n, 0)
		}
		in[t.turn-1] += float64(t.input)
		ca[t.turn-1] += float64(t.cached)
		n[t.turn-1]++
	}
	for i := range in {
		p.InputByTurn = append(p.InputByTurn, in[i]/max(n[i], 1))
		p.HitByTurn = append(p.HitByTurn, ca[i]/max(in[i], 1))
	}
	p.Sticky = float64(same) / float64(max(cont, 1))
	sum, top := 0.0, 0.0
	for _, v := range p.InFlight {
		sum += v
		top = max(top, v)
	}
	if len(p.InFlight) > 0 && sum > 0 {
		p.LoadRatio = top / (sum / float64(len(p.InFlight)))
	}
}

// session runs one agent session's turns through alternating respgate replicas. A turn whose
// stream ended response.failed (the kill pass) is sent again; a turn that failed before a
// stream started is recorded and sent again too, at most twice.
func (fr *fleetRun) session(ctx context.Context, pass string, s int, record func(fleetTurn)) error {
	prev, call := "", ""
	for t := 1; t <= fr.b.p.FleetTurns; t++ {
		body := fr.body(pass, s, t, prev, call)
		for attempt := 0; ; attempt++ {
			ft, c, err := fr.turn(ctx, fr.gws[(s+t)%2], body)
			if err != nil {
				return fmt.Errorf("session %d turn %d: %w", s, t, err)
			}
			ft.session, ft.turn = s, t
			record(ft)
			if ft.status == "completed" {
				prev, call = ft.id, c
				break
			}
			if attempt == 3 {
				return fmt.Errorf("session %d turn %d failed %d times (%s %s)", s, t, attempt+1, ft.status, ft.httpErr)
			}
		}
	}
	return nil
}

// body is turn t of session s: odd turns a user message asking for a tool call, even turns the
// tool's output for the call of the turn before, each about FleetWords words (the simulator
// counts a token per word).
func (fr *fleetRun) body(pass string, s, t int, prev, call string) []byte {
	words := make([]string, fr.b.p.FleetWords)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", (i*7+t)%997)
	}
	text := strings.Join(words, " ")
	var input any
	if t%2 == 1 {
		input = []any{map[string]any{"type": "message", "role": "user",
			"content": fmt.Sprintf("Session %s-%d step %d: call lookup for the next fact. %s", pass, s, t, text)}}
	} else {
		input = []any{map[string]any{"type": "function_call_output", "call_id": call, "output": text}}
	}
	m := map[string]any{"model": fmt.Sprintf("openai/gpt-oss-sim?tokens=%d&reasoning=0&quirks=none", fr.b.p.FleetAnswer),
		"input": input, "stream": true, "tools": agentTools}
	if prev != "" {
		m["previous_response_id"] = prev
	}
	out, _ := json.Marshal(m)
	return out
}

// turn sends one streamed turn and reads its terminal response.
func (fr *fleetRun) turn(ctx context.Context, gw *child, body []byte) (fleetTurn, string, error) {
	start := time.Now()
	res, err := loadgen.Run(ctx, loadgen.Config{URL: gw.baseURL() + "/responses", Body: constBody(body), Stream: true,
		Concurrency: 1, Requests: 1, KeepTerminal: true, RequireDone: true, Client: fr.client, Timeout: 2 * time.Minute,
		Header: http.Header{"Authorization": {"Bearer bench"}}})
	if err != nil {
		return fleetTurn{}, "", err
	}
	s := res.Samples[0]
	ft := fleetTurn{start: start, end: time.Now(), ttft: s.TTFD, id: s.Check.ResponseID, status: s.Check.Status}
	if s.Status != http.StatusOK {
		ft.status, ft.httpErr = "", fmt.Sprintf("status %d %s", s.Status, s.Err)
		return ft, "", nil
	}
	if len(s.Check.Terminal) == 0 {
		ft.status = "cut" // a stream started and ended without a terminal event
		return ft, "", nil
	}
	var term struct {
		Usage struct {
			Input   int64 `json:"input_tokens"`
			Details struct {
				Cached int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
		Output []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"output"`
	}
	if err := json.Unmarshal(s.Check.Terminal, &term); err != nil {
		return ft, "", fmt.Errorf("terminal response: %w", err)
	}
	ft.input, ft.cached = term.Usage.Input, term.Usage.Details.Cached
	call := ""
	for _, o := range term.Output {
		if o.Type == "function_call" && call == "" {
			call = o.CallID
		}
	}
	if ft.status == "completed" && !s.Check.OK() {
		return ft, "", fmt.Errorf("stream not whole: %v", s.Check.Problems)
	}
	return ft, call, nil
}

// replicas reads back the replica respgate stored on each turn's response.
func (fr *fleetRun) replicas(ctx context.Context, turns []fleetTurn) error {
	var ids []string
	for _, t := range turns {
		if t.id != "" {
			ids = append(ids, t.id)
		}
	}
	rows, err := fr.conn.Query(ctx, "SELECT id, coalesce(replica, '') FROM responses WHERE id = ANY($1)", ids)
	if err != nil {
		return fmt.Errorf("read replicas: %w", err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, r string
		if err := rows.Scan(&id, &r); err != nil {
			return err
		}
		got[id] = r
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range turns {
		turns[i].replica = got[turns[i].id]
	}
	return nil
}

// fleetEpsilon is the fleet scenario's chain-affine ε: docs/fleet.md ("Sizing ε") sizes it 0.5
// for two to four respgate replicas sharing a pool, as the scenario's two do (respgate's own
// default, fleet.DefaultEpsilon, is for one).
const fleetEpsilon = 0.5
