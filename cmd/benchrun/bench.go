package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
)

// params are the scenario sizes. defaultParams keeps the whole run under ten minutes on a shared
// two-core machine.
type params struct {
	PaceMS      int           `json:"pace_ms"`      // sim delay before each delta: 20 ms = 50 tokens/s
	Tokens      int           `json:"tokens"`       // answer length of the c=256 streams
	ProbeDur    time.Duration `json:"probe_ns"`     // c=1 time-to-first-byte probe per arm and round
	ProbeTokens int           `json:"probe_tokens"` // answer length of the probe requests
	GapTokens   int           `json:"gap_tokens"`   // answer length of the c=1 gap stream
	GapStreams  int           `json:"gap_streams"`  // c=1 gap streams per arm and round
	Conc        int           `json:"concurrency"`  // the c=256 scenario's concurrency
	Spread      time.Duration `json:"spread_ns"`    // stagger of stream starts
	RampPaceMS  int           `json:"ramp_pace_ms"` // 40 ms = 25 tokens/s
	RampTokens  int           `json:"ramp_tokens"`  // answer length in the capacity ramp
	RampSpread  time.Duration `json:"ramp_spread_ns"`
	Depths      []int         `json:"depths"`
	ItemBytes   int           `json:"item_bytes"`    // size of each of a chain turn's two items
	BigDepth    int           `json:"big_depth"`     // the 2 MB-history variant: turns…
	BigItem     int           `json:"big_item"`      // …of two items of this size
	ChainN      int           `json:"chain_samples"` // warm samples per depth
	ColdChains  int           `json:"cold_chains"`   // copies of each chain: cold samples per depth
	AgentTurns  int           `json:"agent_turns"`
	ToolBytes   int           `json:"tool_bytes"` // size of each tool output in the agent session
	AgentProbes int           `json:"agent_probes"`
	NSDur       time.Duration `json:"nonstream_ns"`
	NSConc      int           `json:"nonstream_c"`
	AllocN      int           `json:"alloc_requests"`
	// The fleet scenario: concurrent agent sessions of FleetTurns turns, each turn about
	// FleetWords words of input and a FleetAnswer-token answer paced at FleetDecode a token.
	FleetSessions int           `json:"fleet_sessions"`
	FleetTurns    int           `json:"fleet_turns"`
	FleetWords    int           `json:"fleet_words"`
	FleetAnswer   int           `json:"fleet_answer_tokens"`
	FleetDecode   time.Duration `json:"fleet_decode_ns"`
	FleetSpread   time.Duration `json:"fleet_spread_ns"` // the sessions' starts are spread over it
	FleetEpsilon  float64       `json:"fleet_epsilon"`   // chain-affine's ε (-fleet-epsilon)
	// FleetMinSlack is chain-affine's min_slack (-fleet-min-slack); -1: respgate's default.
	FleetMinSlack int `json:"fleet_min_slack"`
}

func defaultParams(o *options) params {
	p := params{
		PaceMS: 20, Tokens: 256, ProbeDur: 2 * time.Second, ProbeTokens: 2, GapTokens: 128, GapStreams: 1,
		Conc: 256, Spread: time.Second,
		RampPaceMS: 40, RampTokens: 256, RampSpread: 2 * time.Second,
		Depths: []int{1, 10, perfChainDepth, 100, 1000}, ItemBytes: 1024, BigDepth: 10, BigItem: 100 << 10, ChainN: 15, ColdChains: 3,
		AgentTurns: 150, ToolBytes: 2048, AgentProbes: 10,
		NSDur: 2 * time.Second, NSConc: 16, AllocN: 16,
		FleetSessions: 64, FleetTurns: 30, FleetWords: 185, FleetAnswer: 16, FleetDecode: 2 * time.Millisecond, FleetSpread: 2 * time.Second,
	}
	if o.quick {
		p.ProbeDur, p.GapTokens, p.Tokens, p.Conc = 500*time.Millisecond, 32, 64, 64
		p.RampTokens, p.RampSpread = 64, 500*time.Millisecond
		p.Depths, p.ChainN, p.AgentTurns, p.AgentProbes, p.ColdChains = []int{1, 10, perfChainDepth, 100}, 5, 20, 3, 2
		p.NSDur, p.AllocN = 500*time.Millisecond, 8
		p.FleetSessions, p.FleetTurns = 16, 20
	}
	if len(o.depths) > 0 {
		p.Depths = o.depths
	}
	p.FleetEpsilon = fleetEpsilon
	if o.fleetEpsilon > 0 {
		p.FleetEpsilon = o.fleetEpsilon
	}
	p.FleetMinSlack = o.fleetMinSlack
	return p
}

// arm is one way of reaching the simulator.
type arm struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	URL   string `json:"url"`
	proc  *child // nil for A (no process between client and simulator)
	// store is sent as "store" ("" omits it); done is whether the arm ends streams with [DONE].
	store string
	done  bool
	// background sends background:true (the background scenario's arms).
	background bool
	// idleRSS is the process's RSS right after it started, before any load.
	idleRSS int64
}

type bench struct {
	opt     *options
	p       params
	log     *slog.Logger
	logDir  string
	started time.Time
	rep     *report

	self     string // this executable
	pgConns  int    // --database-max-conns of each Postgres respgate process (pgConnShare)
	sim      *child
	proxy    *child
	gws      map[string]*child // respgate binaries by arm
	twins    map[string]*child // respgate with --debug-listen, for counters and profiles: "pg", "sqlite"
	arms     []*arm
	armByKey map[string]*arm
	clients  map[string]*http.Client

	pgBase    string // the configured Postgres URL
	pgDSN     string // with search_path set to schema
	schema    string
	sqliteDir string
	simPID    int
	nonceSeq  int
}

// clientFor is the HTTP client of arm a: one per arm, so keep-alive connections are reused
// across its runs (a client does not pay a connect per request).
func (b *bench) clientFor(a *arm) *http.Client {
	if b.clients == nil {
		b.clients = map[string]*http.Client{}
	}
	c := b.clients[a.Name]
	if c == nil {
		c = loadgen.NewClient(4096)
		b.clients[a.Name] = c
	}
	return c
}

func (b *bench) run(ctx context.Context) error {
	if err := b.setup(ctx); err != nil {
		return err
	}
	type sc struct {
		name string
		fn   func(context.Context) error
	}
	for _, s := range []sc{
		{"latency", b.scenarioLatency},
		{"background", b.scenarioBackground},
		{"c256", b.scenarioC256},
		{"allocs", b.scenarioAllocs},
		{"nonstream", b.scenarioNonStream},
		{"chain", b.scenarioChain},
		{"agent", b.scenarioAgent},
		{"capacity", b.scenarioCapacity},
		{"fleet", b.scenarioFleet}, // last: it stops the arms' respgate processes
	} {
		if !b.opt.want(s.name) {
			continue
		}
		t0 := time.Now()
		b.log.Info("scenario start", "scenario", s.name)
		if err := s.fn(ctx); err != nil {
			b.rep.Errors = append(b.rep.Errors, fmt.Sprintf("%s: %v", s.name, err))
			b.log.Error("scenario failed", "scenario", s.name, "error", err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		b.rep.Timings[s.name] = time.Since(t0).Seconds()
		b.log.Info("scenario done", "scenario", s.name, "took", time.Since(t0).Round(100*time.Millisecond))
		for _, c := range b.allChildren() {
			if !c.alive() {
				return fmt.Errorf("%s died during %s; see %s", c.name, s.name, c.log)
			}
		}
	}
	if len(b.rep.Errors) > 0 {
		return fmt.Errorf("%d scenario(s) failed: %s", len(b.rep.Errors), strings.Join(b.rep.Errors, "; "))
	}
	// A stream that is not whole outside the capacity ramp (whose top steps may fail by
	// design) is a defect, not a figure: fail the run (after the report is written).
	if n := b.rep.unexpectedFailures(); n > 0 {
		return fmt.Errorf("%d requests failed or streams were not whole outside the capacity ramp (see Failed requests in the report)", n)
	}
	return nil
}

func (b *bench) allChildren() []*child {
	out := []*child{b.sim, b.proxy}
	for _, k := range slices.Sorted(mapsKeys(b.gws)) {
		out = append(out, b.gws[k])
	}
	for _, k := range slices.Sorted(mapsKeys(b.twins)) {
		out = append(out, b.twins[k])
	}
	return slices.DeleteFunc(out, func(c *child) bool { return c == nil })
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// setup creates the Postgres schema and the SQLite folder and starts every process.
func (b *bench) setup(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b.self = self
	respgate, err := filepath.Abs(filepath.Join(b.opt.binDir, "respgate"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(respgate); err != nil {
		return fmt.Errorf("respgate binary: %w (run `make build` first)", err)
	}
	if err := b.createSchema(ctx); err != nil {
		return err
	}
	b.sqliteDir = filepath.Join(b.logDir, "sqlite")
	if b.fleetOnly(ctx) {
		return nil
	}

	if b.sim, err = startChild(ctx, b.logDir, "sim", self, []string{"sim", "-listen", "ADDR"}, "/v1/models"); err != nil {
		return err
	}
	b.simPID = b.sim.pid()
	simBase := "http://" + b.sim.addr
	if b.proxy, err = startChild(ctx, b.logDir, "proxy", self, []string{"proxy", "-listen", "ADDR", "-target", simBase}, "/v1/models"); err != nil {
		return err
	}
	b.gws = map[string]*child{}
	b.twins = map[string]*child{}
	b.rep.Postgres = b.pgSettings(ctx)
	b.pgConns = pgConnShare(b.rep.Postgres)
	for _, g := range []struct{ arm, name, dsn string }{
		{"C", "C", b.pgDSN},
		{"D", "D", b.pgDSN},
		// D* is a diagnostic: D with every commit asynchronous, to show how much of D's cost
		// is waiting for the WAL flush of synchronous commits.
		{"D*", "Dstar", b.pgDSN + "&synchronous_commit=off"},
		{"E", "E", "sqlite:" + filepath.Join(b.sqliteDir, "E.db")},
	} {
		c, err := startChild(ctx, b.logDir, "respgate-"+g.name, respgate, b.gatewayArgs(g.dsn), "/readyz")
		if err != nil {
			return err
		}
		b.gws[g.arm] = c
	}
	for _, t := range []struct{ name, dsn string }{
		{"pg", b.pgDSN},
		{"sqlite", "sqlite:" + filepath.Join(b.sqliteDir, "twin.db")},
	} {
		c, err := startChild(ctx, b.logDir, "twin-"+t.name, respgate, append(b.gatewayArgs(t.dsn), "--debug-listen", "DEBUGADDR"), "/readyz")
		if err != nil {
			return err
		}
		b.twins[t.name] = c
	}
	b.arms = []*arm{
		{Name: "A", Label: "direct to the simulator", URL: b.sim.baseURL()},
		{Name: "B", Label: "bare httputil.ReverseProxy", URL: b.proxy.baseURL(), proc: b.proxy},
		{Name: "C", Label: "respgate, store:false", URL: b.gws["C"].baseURL(), proc: b.gws["C"], store: "false", done: true},
		{Name: "D", Label: "respgate, Postgres", URL: b.gws["D"].baseURL(), proc: b.gws["D"], done: true},
		{Name: "D*", Label: "respgate, Postgres with synchronous_commit=off (diagnostic)", URL: b.gws["D*"].baseURL(), proc: b.gws["D*"], done: true},
		{Name: "E", Label: "respgate, SQLite", URL: b.gws["E"].baseURL(), proc: b.gws["E"], done: true},
	}
	b.armByKey = map[string]*arm{}
	for _, a := range b.arms {
		b.armByKey[a.Name] = a
		if a.proc != nil {
			st, err := loadgen.ReadProc(a.proc.pid())
			if err != nil {
				return err
			}
			a.idleRSS = st.RSS
		}
	}
	b.rep.Arms = b.arms
	return nil
}

// fleetOnly reports a run of the fleet scenario alone, which starts its own processes: setup
// then only reads the Postgres settings.
func (b *bench) fleetOnly(ctx context.Context) bool {
	if len(b.opt.only) != 1 || !b.opt.only["fleet"] {
		return false
	}
	b.rep.Postgres = b.pgSettings(ctx)
	b.pgConns = pgConnShare(b.rep.Postgres)
	return true
}

// pgProcesses is how many respgate processes of a run may hold Postgres connections at once: C,
// D, D*, the Postgres twin and the capacity ramp's fresh D.
const pgProcesses = 5

// pgConnShare is the --database-max-conns of every Postgres respgate process of the run: an equal
// share of the server's max_connections, less the superuser reserve and what benchrun's own
// connections need, at most respgate's default of 32. Idle pools keep their connections (pgxpool
// closes them after 30 minutes), so without a budget the processes together outgrow a default
// max_connections of 100 and streams fail with "too many clients", counted as the gateway's.
func pgConnShare(settings map[string]string) int {
	maxConns, err1 := strconv.Atoi(settings["max_connections"])
	reserved, err2 := strconv.Atoi(settings["superuser_reserved_connections"])
	if err1 != nil || err2 != nil {
		return 16
	}
	const own = 10 // benchrun's in-process stores (4 each) and its administrative connections
	return min(max((maxConns-reserved-own)/pgProcesses, 4), 32)
}

// gatewayArgs are the flags of a respgate arm or twin on dsn.
func (b *bench) gatewayArgs(dsn string) []string {
	return []string{"--listen", "ADDR", "--upstream-url", b.sim.baseURL(), "--database-url", dsn,
		"--database-max-conns", strconv.Itoa(b.pgConns)}
}

// createSchema makes a fresh schema for this run in the configured database; every Postgres
// user of the run (the respgate binaries, the twin, the in-process store) points its search_path
// at it. teardown drops it.
func (b *bench) createSchema(ctx context.Context) error {
	b.pgBase = b.opt.dsn
	b.schema = fmt.Sprintf("benchrun_%d_%d", os.Getpid(), time.Now().Unix())
	conn, err := pgx.Connect(ctx, b.pgBase)
	if err != nil {
		return fmt.Errorf("connect to Postgres at -database-url: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{b.schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	u, err := url.Parse(b.pgBase)
	if err != nil {
		return fmt.Errorf("-database-url must be a postgres:// URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", b.schema)
	u.RawQuery = q.Encode()
	b.pgDSN = u.String()
	return nil
}

func (b *bench) pgSettings(ctx context.Context) map[string]string {
	out := map[string]string{}
	conn, err := pgx.Connect(ctx, b.pgBase)
	if err != nil {
		return out
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range []string{"server_version", "synchronous_commit", "fsync", "wal_sync_method", "shared_buffers",
		"max_connections", "superuser_reserved_connections"} {
		var v string
		if conn.QueryRow(ctx, "SHOW "+s).Scan(&v) == nil {
			out[s] = v
		}
	}
	return out
}

func (b *bench) teardown() {
	for _, c := range b.allChildren() {
		c.stop()
	}
	if b.schema != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, b.pgBase); err == nil {
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE"); err != nil {
				b.log.Warn("drop schema", "schema", b.schema, "error", err)
			}
			conn.Close(ctx)
		}
	}
}

// model is the simulator model name with its pacing faults (quirks off: a strictly valid OpenAI
// stream on every arm, so one checker judges them all).
func model(paceMS, tokens int, extra string) string {
	m := fmt.Sprintf("openai/gpt-oss-sim?delay_ms=%d&tokens=%d&quirks=none", paceMS, tokens)
	if extra != "" {
		m += "&" + extra
	}
	return m
}

// body is a create-response request body for arm a.
func (a *arm) body(mdl string, input any, stream bool, extra map[string]any) []byte {
	m := map[string]any{"model": mdl, "input": input, "stream": stream}
	if a.store != "" {
		m["store"] = a.store == "true"
	}
	for k, v := range extra {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return out
}

// runStats is one loadgen run against one arm with the processes' resource use during it.
type runStats struct {
	Summary loadgen.Summary `json:"summary"`
	// CPU used during the run by the arm's own process (0 for A), the simulator and this
	// process (the client), in microseconds.
	GatewayCPU float64 `json:"gateway_cpu_us"`
	SimCPU     float64 `json:"sim_cpu_us"`
	ClientCPU  float64 `json:"client_cpu_us"`
	// DBCPU is the CPU of every local Postgres process (server and backends) during the run:
	// the database's share of a turn, which Postgres arms add on the same cores.
	DBCPU float64 `json:"db_cpu_us"`
	// RSS of the arm's process just before the run and its peak during it (bytes).
	RSSBefore int64 `json:"rss_before"`
	RSSPeak   int64 `json:"rss_peak"`
	// OutputBytes is the mean text a stream accumulated.
	OutputBytes float64 `json:"output_bytes"`

	samples []loadgen.Sample
	started time.Time
}

// measure runs cfg against a, charging CPU and RSS to the processes.
func (b *bench) measure(ctx context.Context, a *arm, cfg loadgen.Config) (*runStats, error) {
	cfg.URL = a.URL + "/responses"
	cfg.RequireDone = a.done
	if cfg.ExpectStatus == "" {
		cfg.ExpectStatus = "completed"
	}
	if cfg.Header == nil {
		cfg.Header = map[string][]string{"Authorization": {"Bearer bench"}}
	}
	if cfg.Client == nil {
		cfg.Client = b.clientFor(a)
		if cfg.Concurrency > 16 {
			// Idle keep-alive connections left by a wide run would sit in the server's RSS
			// during the next one.
			defer cfg.Client.CloseIdleConnections()
		}
	}
	pids := []int{b.simPID, os.Getpid()}
	if a.proc != nil {
		pids = append(pids, a.proc.pid())
	}
	before := map[int]loadgen.ProcStat{}
	for _, p := range pids {
		st, err := loadgen.ReadProc(p)
		if err != nil {
			return nil, err
		}
		before[p] = st
	}
	dbBefore := loadgen.ProcsCPU("postgres")
	sampler := loadgen.StartSampler(pids[2:], 50*time.Millisecond)
	res, err := loadgen.Run(ctx, cfg)
	peaks := sampler.Stop()
	dbCPU := loadgen.CPUSince(dbBefore, loadgen.ProcsCPU("postgres"))
	if err != nil {
		return nil, err
	}
	rs := &runStats{Summary: loadgen.Summarize(res), samples: res.Samples, started: res.Started}
	cpu := func(p int) float64 {
		st, err := loadgen.ReadProc(p)
		if err != nil {
			return 0
		}
		return float64(st.CPU-before[p].CPU) / 1e3
	}
	rs.SimCPU, rs.ClientCPU, rs.DBCPU = cpu(b.simPID), cpu(os.Getpid()), float64(dbCPU.Microseconds())
	if a.proc != nil {
		rs.GatewayCPU = cpu(a.proc.pid())
		rs.RSSBefore, rs.RSSPeak = before[a.proc.pid()].RSS, peaks[a.proc.pid()]
	}
	var out int
	for _, s := range res.Samples {
		out += s.Check.OutputBytes
	}
	if len(res.Samples) > 0 {
		rs.OutputBytes = float64(out) / float64(len(res.Samples))
	}
	return rs, nil
}

// rotate returns arms in the order for round r: each round starts one arm later, so no arm
// always runs first (or right after the same neighbour).
func rotate[T any](xs []T, r int) []T {
	n := len(xs)
	out := make([]T, 0, n)
	for i := range n {
		out = append(out, xs[(i+r)%n])
	}
	return out
}

// stampedBody returns a request-body function whose i-th body carries the nonce prefix+i in its
// input, so the simulator time-stamps that request's delta events (see stamper).
func (b *bench) stampedBody(a *arm, mdl string) (func(int) []byte, string) {
	b.nonceSeq++
	prefix := fmt.Sprintf("%sr%d-", nonceMark, b.nonceSeq)
	return func(i int) []byte {
		return a.body(mdl, fmt.Sprintf("%s %s%d", benchInput, prefix, i), true, nil)
	}, prefix
}

// measureStamped runs cfg against a with stamped bodies (stampedBody, model mdl), keeping every
// inter-event gap and delta arrival time, and matches the deltas with the simulator's stamps
// (relay): the runs whose gaps and relay latency the report shows.
func (b *bench) measureStamped(ctx context.Context, a *arm, mdl string, cfg loadgen.Config) (*runStats, relayStats, error) {
	body, prefix := b.stampedBody(a, mdl)
	cfg.KeepGaps, cfg.KeepDeltaTimes, cfg.Body = true, true, body
	rs, err := b.measure(ctx, a, cfg)
	if err != nil {
		return nil, relayStats{}, err
	}
	rl, err := b.relay(prefix, rs.samples)
	if err != nil {
		return nil, relayStats{}, err
	}
	return rs, rl, nil
}

// relayStats are per-delta relay figures of a run, in microseconds: the latency from the
// simulator's flush of a delta event to its arrival at the client, and the jitter that adds to
// the gap between consecutive deltas (latency of delta k − latency of delta k−1). Both are free of
// the simulator's own pacing jitter.
type relayStats struct {
	LatP50    float64 `json:"latency_p50_us"`
	LatP99    float64 `json:"latency_p99_us"`
	JitP50    float64 `json:"jitter_p50_us"`
	JitP99    float64 `json:"jitter_p99_us"`
	Matched   int     `json:"matched"`
	Unmatched int     `json:"unmatched_streams"`
}

// relay fetches the simulator's stamps for the nonces with prefix and matches them with the
// samples' delta arrival times.
func (b *bench) relay(prefix string, samples []loadgen.Sample) (relayStats, error) {
	m, err := b.stamps(prefix)
	if err != nil {
		return relayStats{}, err
	}
	return relayFigures(m, prefix, samples), nil
}

// relayFigures matches the simulator's stamps (by nonce, prefix + sample index) with the samples'
// delta arrival times. A stream whose delta count differs from its stamps' is left out (counted
// in Unmatched): its deltas cannot be paired.
func relayFigures(m map[string]*stamps, prefix string, samples []loadgen.Sample) relayStats {
	var rs relayStats
	var lat, jit []float64
	for _, s := range samples {
		var st []int64
		if x := m[fmt.Sprintf("%s%d", prefix, s.Index)]; x != nil {
			st = x.Deltas
		}
		if len(st) != len(s.DeltaTimes) || len(st) == 0 {
			rs.Unmatched++
			continue
		}
		prev := 0.0
		for k := range st {
			l := float64(s.DeltaTimes[k]-st[k]) / 1e3
			lat = append(lat, l)
			if k > 0 {
				jit = append(jit, l-prev)
			}
			prev = l
		}
	}
	rs.Matched = len(lat)
	rs.LatP50, rs.LatP99 = stats.QuantileOf(lat, 0.5), stats.QuantileOf(lat, 0.99)
	rs.JitP50, rs.JitP99 = stats.QuantileOf(jit, 0.5), stats.QuantileOf(jit, 0.99)
	return rs
}

// stamps fetches (and makes the simulator forget) the stamps of the nonces with prefix.
func (b *bench) stamps(prefix string) (map[string]*stamps, error) {
	resp, err := http.Get("http://" + b.sim.addr + stampsPath + "?prefix=" + url.QueryEscape(prefix))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var m map[string]*stamps
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, fmt.Errorf("read stamps: %w", err)
	}
	return m, nil
}
