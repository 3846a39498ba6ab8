package chaos

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/respgate/respgate/internal/faultproxy"
)

// commitSQL is on the wire only in a turn's final commit on Postgres: ResponseCommit is one
// pipelined batch (no COMMIT statement of its own) whose response write checks its row with
// respgate_no_row (store/postgres/writes.go, mustWrite). Matching it reaches the commit phase
// whatever else (River's job transactions) commits on the same pool.
var commitSQL = []byte("respgate_no_row")

// scenario is one row of the matrix. run injects its faults and drives clients through the env;
// it asserts nothing: the auditor judges every run.
type scenario struct {
	name     string
	backends []string // where it applies
	faults   faults   // the fault classes it injects (what may explain a stored failure)
	process  bool     // drives the respgate binary instead of an in-process gateway
	// quick makes the in-process gateway's upstream timeouts short (1 s), for the scenarios that
	// stall vLLM; the others keep 10 s, so that a loaded machine is not an upstream fault.
	quick bool
	// fullOnly keeps a scenario out of the fast subset `make test` runs (it runs in `make
	// chaos`): one whose outcome still depends on how the machine's load falls against a
	// timeout (docs/testing.md, "Chaos and soak").
	fullOnly bool
	run      func(e *env, rng *rand.Rand)
}

var (
	both   = []string{"postgres", "sqlite"}
	pgOnly = []string{"postgres"}
)

// facts are the seeded inputs: each turn says one, so the simulator's answer (which repeats
// every "remember:" fact it was sent) proves the history arrived.
var facts = []string{"the bird is a héron", "the code is 7141", "the city is Zürich", "the colour is teal", "the tea is 绿茶"}

func fact(rng *rand.Rand) string { return "remember: " + facts[rng.IntN(len(facts))] }

// model is the harmony model with simulator fault parameters, and a seeded answer length.
func model(rng *rand.Rand, q string) string {
	m := fmt.Sprintf("%s?tokens=%d", harmony, 8+rng.IntN(24))
	if q != "" {
		m += "&" + q
	}
	return m
}

// chain makes 0-2 fault-free completed turns (seeded) and returns the previous_response_id field
// for the next turn ("" for none), so that faults hit continuations of stored histories too.
func chain(e *env, rng *rand.Rand) string {
	prev := ""
	for i := rng.IntN(3); i > 0; i-- {
		extra := []string{}
		if prev != "" {
			extra = append(extra, prev)
		}
		tr := e.create(body(model(rng, ""), fact(rng), false, extra...))
		if tr.terminal != "completed" {
			e.t.Fatalf("fault-free base turn: %d %s %s %q", tr.status, tr.terminal, tr.errCode, tr.transport)
		}
		prev = fmt.Sprintf(`"previous_response_id":%q`, tr.id)
	}
	return prev
}

func opt(prev string) []string {
	if prev == "" {
		return nil
	}
	return []string{prev}
}

// turnPair is a streamed and a non-streamed turn with the same fault, on a seeded chain.
func turnPair(q string) func(e *env, rng *rand.Rand) {
	return func(e *env, rng *rand.Rand) {
		prev := chain(e, rng)
		e.stream(body(model(rng, q), fact(rng), true, opt(prev)...), streamOpts{})
		e.create(body(model(rng, q), fact(rng), false, opt(prev)...))
	}
}

// withProxy applies a fault to a proxy for one streamed and one plain turn, then cleans up.
func withProxy(set func(e *env)) func(e *env, rng *rand.Rand) {
	return func(e *env, rng *rand.Rand) {
		prev := chain(e, rng)
		set(e)
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
		set(e) // one-shot faults again for the second turn
		e.create(body(model(rng, ""), fact(rng), false, opt(prev)...))
		e.clean()
		// And the gateway works again once the fault is gone.
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
	}
}

// armed arms a trigger on a proxy for one streamed turn and checks that it fired: a trigger
// that never fires means the scenario no longer hits its phase (a changed SQL text, say).
func armed(pick func(e *env) *faultproxy.Proxy, d faultproxy.Direction, s faultproxy.Spec, q string) func(e *env, rng *rand.Rand) {
	return func(e *env, rng *rand.Rand) {
		prev := chain(e, rng)
		tr := pick(e).Arm(d, s)
		e.stream(body(model(rng, q), fact(rng), true, opt(prev)...), streamOpts{})
		e.requireFired(tr, s)
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
	}
}

func upProxy(e *env) *faultproxy.Proxy { return e.up }
func pgProxy(e *env) *faultproxy.Proxy { return e.pg }

// requireFired records a violation (through the auditor's channel) if tr has not fired.
func (e *env) requireFired(tr *faultproxy.Trigger, s faultproxy.Spec) {
	select {
	case <-tr.Fired():
	default:
		e.mu.Lock()
		msg := fmt.Sprintf("trigger %q never fired: the scenario did not reach its phase", s.Match)
		if n := len(e.trs); n > 0 {
			last := e.trs[n-1]
			msg += fmt.Sprintf(" (the last client, %s: HTTP %d, terminal %q, error %q %q, transport %q, %d events)",
				last.kind, last.status, last.terminal, last.errCode, last.errMsg, last.transport, len(last.events))
		}
		e.setup = append(e.setup, msg)
		e.mu.Unlock()
	}
}

// allScenarios is the matrix. Names are path-like (group/case) so -run can pick one.
func allScenarios() []scenario {
	var ss []scenario
	add := func(s scenario) { ss = append(ss, s) }

	// Upstream (vLLM) faults, on both backends.
	add(scenario{name: "upstream/refused", backends: both, faults: fUpstream, run: withProxy(func(e *env) { e.up.Refuse() })})
	add(scenario{name: "upstream/reset-while-sending-request", backends: both, faults: fUpstream,
		run: withProxy(func(e *env) {
			e.up.Arm(faultproxy.ToServer, faultproxy.Spec{Match: []byte("POST /v1/responses"), Action: faultproxy.CutBefore})
		})})
	add(scenario{name: "upstream/request-cut-after-100-bytes", backends: both, faults: fUpstream,
		run: withProxy(func(e *env) { e.up.Set(faultproxy.ToServer, faultproxy.Faults{CutAfter: 100}) })})
	add(scenario{name: "upstream/stall-before-headers", quick: true, backends: both, faults: fUpstream,
		run: withProxy(func(e *env) { e.up.Set(faultproxy.ToClient, faultproxy.Faults{Stall: true}) })})
	add(scenario{name: "upstream/stall-after-headers", quick: true, backends: both, faults: fUpstream, run: turnPair("stall=60s&stall_after=0")})
	add(scenario{name: "upstream/stall-mid-stream", quick: true, backends: both, faults: fUpstream,
		run: armed(upProxy, faultproxy.ToClient, faultproxy.Spec{Match: []byte("output_text.delta"), Action: faultproxy.StallAt}, "")})
	for n := 0; n <= 11; n++ {
		add(scenario{name: fmt.Sprintf("upstream/cut-after-event-%02d", n), backends: both, faults: fUpstream, run: turnPair(fmt.Sprintf("cut_after=%d", n))})
	}
	for _, n := range []int{0, 2, 5} {
		add(scenario{name: fmt.Sprintf("upstream/cut-inside-line-after-%d", n), backends: both, faults: fUpstream, run: turnPair(fmt.Sprintf("cut_inside=%d", n))})
	}
	add(scenario{name: "upstream/cut-inside-utf8-rune", backends: both, faults: fUpstream, run: func(e *env, rng *rand.Rand) {
		// "é" is two bytes: the cut falls between them, inside an answer delta.
		tr := e.up.Arm(faultproxy.ToClient, faultproxy.Spec{Match: []byte("h\xc3\xa9ron"), Action: faultproxy.CutInside, Offset: 2})
		e.stream(body(model(rng, ""), "remember: the bird is a héron", true), streamOpts{})
		e.requireFired(tr, tr.Spec)
	}})
	add(scenario{name: "upstream/reset-mid-stream", backends: both, faults: fUpstream,
		run: armed(upProxy, faultproxy.ToClient, faultproxy.Spec{Match: []byte("output_text.delta"), Action: faultproxy.CutBefore}, "")})
	add(scenario{name: "upstream/malformed-frame", backends: both, faults: fUpstream, run: turnPair("malformed=3")})
	add(scenario{name: "upstream/16MiB-frame", backends: both, faults: fUpstream, run: func(e *env, rng *rand.Rand) {
		e.stream(body(model(rng, "huge=16777216"), fact(rng), true), streamOpts{})
	}})
	add(scenario{name: "upstream/error-frame", backends: both, faults: fUpstream, run: turnPair("error_after=3")})
	add(scenario{name: "upstream/status-500", backends: both, faults: fUpstream, run: turnPair("status=500")})
	add(scenario{name: "upstream/bandwidth-limit", backends: both, faults: fUpstream,
		run: withProxy(func(e *env) { e.up.Set(faultproxy.ToClient, faultproxy.Faults{BytesPerSecond: 64 << 10}) })})
	add(scenario{name: "upstream/latency", backends: both, faults: fUpstream,
		run: withProxy(func(e *env) { e.up.Set(faultproxy.ToClient, faultproxy.Faults{Delay: 3 * time.Millisecond}) })})

	// The client misbehaves at each phase.
	for _, ph := range phases {
		for _, a := range []struct {
			name string
			act  clientAct
		}{{"fin", actFIN}, {"rst", actRST}, {"stop-reading", actStopRead}} {
			add(scenario{name: "client/" + a.name + "-at-" + ph, backends: both, faults: fClient, run: func(e *env, rng *rand.Rand) {
				prev := chain(e, rng)
				q := ""
				if a.act == actStopRead {
					q = "huge=1000000" // more than the socket buffers of a client that does not read: writes block
				}
				e.stream(body(model(rng, q), fact(rng), true, opt(prev)...), streamOpts{at: ph, act: a.act,
					waitGone: func(tr *transcript) {
						if tr.id != "" {
							e.terminalStored(tr.id)
						}
					}})
				// Another client is unaffected.
				e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
			}})
		}
	}

	// Concurrent deletes at each phase.
	for _, ph := range phases[1:] {
		add(scenario{name: "delete/response-at-" + ph, backends: both, faults: fDelete, run: func(e *env, rng *rand.Rand) {
			prev := chain(e, rng)
			tr := e.stream(body(model(rng, "delay_ms=2"), fact(rng), true, opt(prev)...), streamOpts{at: ph,
				hook: func(tr *transcript) { e.deleteResponse(tr.id) }})
			if tr.id != "" {
				e.deleteResponse(tr.id) // once it is over, the delete must hold
			}
		}})
		add(scenario{name: "delete/conversation-at-" + ph, backends: both, faults: fDelete, run: func(e *env, rng *rand.Rand) {
			conv := e.conversation()
			c := fmt.Sprintf(`"conversation":%q`, conv)
			e.create(body(model(rng, ""), fact(rng), false, c))
			e.stream(body(model(rng, "delay_ms=2"), fact(rng), true, c), streamOpts{at: ph,
				hook: func(*transcript) { e.deleteConversation(conv) }})
			e.create(body(model(rng, ""), fact(rng), false, c)) // after the delete: 404, nothing stored
		}})
	}
	add(scenario{name: "delete/ancestor-during-continuation", backends: both, faults: fDelete, run: func(e *env, rng *rand.Rand) {
		base := e.create(body(model(rng, ""), fact(rng), false))
		e.stream(body(model(rng, "delay_ms=2"), fact(rng), true, fmt.Sprintf(`"previous_response_id":%q`, base.id)),
			streamOpts{at: phCreated, hook: func(*transcript) { e.deleteResponse(base.id) }})
	}})

	// Postgres faults.
	add(scenario{name: "pg/down-at-start", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		e.pg.Down()
		e.stream(body(model(rng, ""), fact(rng), true), streamOpts{})
		e.create(body(model(rng, ""), fact(rng), false))
		_ = e.pg.Accept()
		e.stream(body(model(rng, ""), fact(rng), true), streamOpts{})
	}})
	add(scenario{name: "pg/lost-during-history-load", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		// The base turn goes through another gateway, so this one has no cached chain and must
		// load the history from Postgres.
		base := e.do("create", "POST", e.cleanGateway(), "/v1/responses", body(model(rng, ""), fact(rng), false))
		s := faultproxy.Spec{Match: []byte("WITH RECURSIVE"), Fold: true, Action: faultproxy.CutBefore}
		tr := e.pg.Arm(faultproxy.ToServer, s)
		e.stream(body(model(rng, ""), fact(rng), true, fmt.Sprintf(`"previous_response_id":%q`, base.id)), streamOpts{})
		e.requireFired(tr, s)
	}})
	add(scenario{name: "pg/lost-during-in-progress-write", backends: pgOnly, faults: fDB,
		run: armed(pgProxy, faultproxy.ToServer, faultproxy.Spec{Match: []byte("INSERT INTO responses (tenant"), Action: faultproxy.CutBefore}, "")})
	add(scenario{name: "pg/lost-during-final-write", backends: pgOnly, faults: fDB,
		run: armed(pgProxy, faultproxy.ToServer, faultproxy.Spec{Match: []byte("lease_owner = NULL"), Action: faultproxy.CutBefore}, "")})
	add(scenario{name: "pg/lost-during-lease-renewal", backends: pgOnly, faults: fDB,
		run: armed(pgProxy, faultproxy.ToServer, faultproxy.Spec{Match: []byte("SET lease_expires_at"), Action: faultproxy.CutBefore}, "delay_ms=25&tokens=80")})
	for _, c := range []struct {
		name string
		act  faultproxy.Action
	}{{"lost-before-commit", faultproxy.CutBefore}, {"ambiguous-commit", faultproxy.LoseReply}, {"stalled-commit", faultproxy.StallAt}} {
		add(scenario{name: "pg/" + c.name, backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
			prev := chain(e, rng)
			s := faultproxy.Spec{Match: commitSQL, Action: c.act}
			// Armed before the turn: commitSQL is on the wire only in a final commit, so it
			// fires on this turn's. (Armed when the client read output_item.done, it raced the
			// gateway's commit and lost on a loaded machine.)
			tr := e.pg.Arm(faultproxy.ToServer, s)
			e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
			e.requireFired(tr, s)
			tr.Release()
			e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
		}})
	}
	// A stalled write of the in-progress record (issue 37: it ran without a deadline): the turn
	// is answered with a clear error within CommitTimeout, never hangs, and leaves nothing
	// in progress; the gateway works once the statement is let through.
	add(scenario{name: "pg/stalled-in-progress-write", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		prev := chain(e, rng)
		s := faultproxy.Spec{Match: []byte("INSERT INTO responses (tenant"), Action: faultproxy.StallAt}
		tr := e.pg.Arm(faultproxy.ToServer, s)
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
		e.requireFired(tr, s)
		tr.Release()
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
	}})
	// A stalled write of the compaction archive: POST /v1/responses/compact still answers within
	// CommitTimeout (the archive is an audit record, logged when it cannot be written).
	add(scenario{name: "pg/stalled-compaction-archive", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		prev := ""
		for range 3 { // more user turns than compaction keeps verbatim
			tr := e.create(body(model(rng, ""), fact(rng), false, opt(prev)...))
			if tr.terminal != "completed" {
				e.t.Fatalf("fault-free base turn: %d %s %s %q", tr.status, tr.terminal, tr.errCode, tr.transport)
			}
			prev = fmt.Sprintf(`"previous_response_id":%q`, tr.id)
		}
		s := faultproxy.Spec{Match: []byte("INSERT INTO compactions"), Action: faultproxy.StallAt}
		tr := e.pg.Arm(faultproxy.ToServer, s)
		c := e.do("compact", "POST", "", "/v1/responses/compact", body(model(rng, ""), fact(rng), false, prev))
		e.requireFired(tr, s)
		tr.Release()
		if c.status != 200 {
			e.t.Errorf("compact with its archive write stalled: %d %s %q", c.status, c.errCode, c.transport)
		}
	}})
	add(scenario{name: "pg/commit-lands-after-the-gateway-gave-up", backends: pgOnly, faults: fDB | fNoAmbiguity, fullOnly: true, run: func(e *env, rng *rand.Rand) {
		// The COMMIT is held on the wire past the commit timeout; once the gateway reads the
		// outcome back, the COMMIT goes through, and only then does the read-back run. The
		// client must be told what the store holds (server/commit.go, commitLanded).
		prev := chain(e, rng)
		commit := faultproxy.Spec{Match: commitSQL, Action: faultproxy.StallAt}
		readBack := faultproxy.Spec{Match: []byte("0 AS depth, 0 AS kind"), Action: faultproxy.StallAt}
		a := e.pg.Arm(faultproxy.ToServer, commit) // only this turn's final commit matches
		done := make(chan struct{})
		var wg sync.WaitGroup
		e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{at: phItemDone, hook: func(tr *transcript) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer a.Release()
				select {
				case <-a.Fired():
				case <-done:
					return
				}
				b := e.pg.Arm(faultproxy.ToServer, readBack)
				defer b.Release()
				select {
				case <-b.Fired():
				case <-done:
					return
				}
				a.Release()
				d := e.db()
				defer d.Close()
				// (Not waitFor: this is not the test's goroutine. If it never lands, the
				// auditor sees what the client was told against what is stored.)
				for i := 0; i < 3000 && e.stored(d, tr.id) != "completed"; i++ {
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}})
		close(done)
		wg.Wait()
		e.requireFired(a, commit)
	}})
	add(scenario{name: "pg/restart-with-50-streams-open", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		many(e, rng, 50, "delay_ms=10&tokens=60", func() {
			e.pg.Down()
			_ = e.pg.Accept() // restart: every connection dropped, the server back at once
		})
	}})
	add(scenario{name: "pg/down-longer-than-the-lease", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		many(e, rng, 5, "delay_ms=10&tokens=40", func() { e.pg.Down() })
		time.Sleep(leaseTTL + 500*time.Millisecond) // the outage's length is the fault itself
		_ = e.pg.Accept()
		e.stream(body(model(rng, ""), fact(rng), true), streamOpts{})
	}})
	add(scenario{name: "pg/latency", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		e.pg.Set(faultproxy.ToClient, faultproxy.Faults{Delay: 2 * time.Millisecond})
		e.pg.Set(faultproxy.ToServer, faultproxy.Faults{Delay: 2 * time.Millisecond})
		turnPair("")(e, rng)
	}})
	add(scenario{name: "pg/bandwidth-limit", backends: pgOnly, faults: fDB, run: func(e *env, rng *rand.Rand) {
		e.pg.Set(faultproxy.ToClient, faultproxy.Faults{BytesPerSecond: 256 << 10})
		e.pg.Set(faultproxy.ToServer, faultproxy.Faults{BytesPerSecond: 256 << 10})
		turnPair("")(e, rng)
	}})

	ss = append(ss, processScenarios()...)
	ss = append(ss, backgroundScenarios()...)
	return ss
}

// many runs n concurrent streams; once every one has seen response.created, fault runs; then
// it waits for all of them.
func many(e *env, rng *rand.Rand, n int, q string, fault func()) {
	var created, wg sync.WaitGroup
	created.Add(n)
	for i := 0; i < n; i++ {
		b := body(model(rng, q), fact(rng), true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(created.Done)
			defer once()
			e.stream(b, streamOpts{at: phCreated, hook: func(*transcript) { once() }})
		}()
	}
	created.Wait()
	fault()
	wg.Wait()
}
