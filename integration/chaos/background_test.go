package chaos

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"
)

// The races of a background response's first moments (issue 38; docs/background.md, "Crashes,
// cancels, time limits"), on the real binary: its runs are held at a stage by the chaoshooks
// build (engine/chaoshooks.go), so the kill -9 or the cancel lands in the window by an event (the
// hold's log line), never by a timer.

const (
	// sweepInterval is the gateways' --sweep-interval (lease sweep and requeue of stranded jobs).
	sweepInterval = 200 * time.Millisecond
	// cancelWait is how long POST /v1/responses/{id}/cancel waits for a running response's
	// worker (engine/background.go): the documented bound of a cancel's answer.
	cancelWait = 10 * time.Second
	// requeueLease is the --lease-ttl of the replica that requeues a stranded job: long enough
	// against boundSlack that a requeue one lease late breaks the bound.
	requeueLease = 5 * time.Second
	// boundSlack is what the auditor allows over a documented bound measured by this harness:
	// the bound's times are when the harness read a log line, on a loaded 2-core machine.
	boundSlack = 2 * time.Second

	holdMark    = `"msg":"chaos hold"`
	requeueMark = `"msg":"requeued background responses`
)

// bgExpect is what a background response's run must come to; the auditor checks it
// (auditBackground). A cancel's and a final read's transcripts point to their response's.
type bgExpect struct {
	want   string // the terminal status it must be stored with, by the gateway itself
	marker string // in its input only: the simulator's request log counts its runs
	runs   int    // how many times its turn must reach the simulator
	// what must happen within bound of from (to: when it was seen; zero: never).
	what     string
	from, to time.Time
	bound    time.Duration
}

func backgroundScenarios() []scenario {
	return []scenario{
		// Issue 38 item 1: the worker has claimed the response (queued → in_progress, its lease
		// taken) and holds before its turn reaches upstream; the cancel lands there. No fault
		// class: a stored failure would be false.
		{name: "background/cancel-between-claim-and-upstream", backends: both, process: true, run: bgCancelAfterClaim},
		// Issue 38 item 2: River handed the job to a worker that is killed before it claims the
		// response. Another replica (Postgres) or a restart (SQLite) requeues it within
		// --lease-ttl + --sweep-interval and runs it once.
		{name: "background/kill9-between-fetch-and-claim", backends: both, faults: fKill, process: true, run: bgKillBeforeClaim(false)},
		// ... and a cancel of it, on a replacement that does not requeue it (its lease is longer
		// than the scenario), ends it cancelled at once.
		{name: "background/cancel-after-kill9-between-fetch-and-claim", backends: both, faults: fKill, process: true, run: bgKillBeforeClaim(true)},
	}
}

func bgCancelAfterClaim(e *env, rng *rand.Rand) {
	// The hold keeps the claim-to-upstream window open far longer than a real run does, and
	// nothing renews a claimed response's lease before its turn starts: a lease longer than the
	// hold, so the sweeper does not end what the cancel must end.
	p := e.startProcessEnv([]string{"RESPGATE_CHAOS_HOLD=claimed"}, "--lease-ttl", "30s")
	e.gwURL = p.url
	tr := e.bgCreate(rng, chain(e, rng))
	if tr.bg != nil {
		tr.bg.want = "cancelled"
		if _, ok := p.waitMark(holdMark); ok {
			e.cancel(tr)
		} else {
			e.notReached("the worker never held after its claim (last log line: %s)", p.last)
		}
		e.awaitTerminal(tr)
	}
	stop(p)
}

func bgKillBeforeClaim(cancel bool) func(e *env, rng *rand.Rand) {
	return func(e *env, rng *rand.Rand) {
		a := e.startProcessEnv([]string{"RESPGATE_CHAOS_HOLD=fetched"})
		e.gwURL = a.url
		tr := e.bgCreate(rng, chain(e, rng))
		if tr.bg == nil {
			a.kill()
			return
		}
		fetched, ok := a.waitMark(holdMark)
		if !ok {
			a.kill()
			e.notReached("the worker never held after River's fetch (last log line: %s)", a.last)
			return
		}
		if cancel {
			// The replacement's --lease-ttl is longer than the scenario: it never requeues the
			// job, so the cancel finds it held by the dead worker.
			b, _ := e.replace(a, "--lease-ttl", "1m")
			tr.bg.want = "cancelled"
			e.cancel(tr)
			e.awaitTerminal(tr)
			stop(b)
			return
		}
		// Its --commit-timeout, which bounds the requeue pass (engine/engine.go requeueStranded),
		// keeps the harness's ratio to the lease: at the harness's 1.5 s a loaded machine's
		// requeue pass could time out every sweep.
		b, up := e.replace(a, "--lease-ttl", requeueLease.String(), "--commit-timeout", (requeueLease * 3 / 4).String())
		tr.bg.want, tr.bg.runs = "completed", 1
		// docs/background.md: the worst case from the fetch to the re-run is --lease-ttl +
		// --sweep-interval, counted from when a replica is up: the fetch, or the replacement's
		// readiness (after its River workers and sweeper started) when it came later.
		tr.bg.what, tr.bg.from, tr.bg.bound = "the requeue", later(fetched, up), requeueLease+sweepInterval
		tr.bg.to, _ = b.waitMark(requeueMark)
		e.awaitTerminal(tr)
		stop(b)
	}
}

// replace kills a, whose worker is frozen between fetch and claim, and starts the process that
// must recover its job, returning it and when it was up: on Postgres another replica, started
// while a still holds the job (a surviving replica); on SQLite, where one process runs
// everything, a restart after the kill.
func (e *env) replace(a *proc, extra ...string) (*proc, time.Time) {
	if e.backend != "postgres" {
		a.kill()
	}
	b := e.startProcess(extra...)
	up := time.Now()
	a.kill()
	e.gwURL = b.url
	return b, up
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stop shuts p down in order (SIGTERM) and waits for it.
func stop(p *proc) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.waited
}

// notReached records that the scenario did not reach its window (a violation).
func (e *env) notReached(format string, args ...any) {
	e.mu.Lock()
	e.setup = append(e.setup, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// bgCreate creates a background response (on prev, a previous_response_id field or "") whose
// input carries a marker of its own; tr.bg is nil when it was not answered queued.
func (e *env) bgCreate(rng *rand.Rand, prev string) *transcript {
	marker := fmt.Sprintf("background run %016x", rng.Uint64())
	extra := append([]string{`"background":true`}, opt(prev)...)
	tr := e.do("bg-create", "POST", "", "/v1/responses", body(model(rng, ""), fact(rng)+" ("+marker+")", false, extra...))
	if tr.status != 200 || tr.id == "" || tr.terminal != "queued" {
		e.notReached("background create answered %d %s %s %q (transport %q)", tr.status, tr.terminal, tr.errCode, tr.errMsg, tr.transport)
		return tr
	}
	tr.bg = &bgExpect{marker: marker}
	return tr
}

// cancel cancels created's response and records the answer and how long it took.
func (e *env) cancel(created *transcript) {
	start := time.Now()
	tr := e.send("cancel", "POST", "", "/v1/responses/"+created.id+"/cancel", "")
	tr.took = time.Since(start)
	tr.bg = created.bg
	e.record(tr)
}

// awaitTerminal reads created's response until it is terminal (or a minute passed) and records
// the last answer.
func (e *env) awaitTerminal(created *transcript) {
	deadline := time.Now().Add(time.Minute)
	for {
		tr := e.send("get", "GET", "", "/v1/responses/"+created.id, "")
		if isTerminal(tr.terminal) || time.Now().After(deadline) {
			tr.bg = created.bg
			e.record(tr)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isTerminal(status string) bool {
	switch status {
	case "completed", "incomplete", "failed", "cancelled":
		return true
	}
	return false
}

// auditBackground checks every background response against its bgExpect, on the rows as the
// gateways left them (before the auditor's own sweep): it ended by itself in the status its
// run must come to (a cancelled one with no error: not "failed" by a lease sweep), reached the
// model as often as it must, within the documented bound; every cancel and read answered that
// terminal state, the cancel within its documented wait.
func (e *env) auditBackground(d *sql.DB, pre []row) []violation {
	var vs []violation
	bad := func(rule, format string, args ...any) {
		vs = append(vs, violation{rule, fmt.Sprintf(format, args...)})
	}
	byID := map[string]row{}
	for _, r := range pre {
		byID[r.id] = r
	}
	e.mu.Lock()
	trs := append([]*transcript(nil), e.trs...)
	e.mu.Unlock()
	for _, tr := range trs {
		x := tr.bg
		if x == nil {
			continue
		}
		r, ok := byID[tr.id]
		if tr.kind == "bg-create" {
			switch {
			case !ok:
				bad("background-true-terminal", "%s: the background response is not stored", tr.id)
			case !isTerminal(r.status):
				bad("background-true-terminal", "%s is still %s: no replica ended it", tr.id, r.status)
			case r.status != x.want || (r.status == "cancelled" && (r.errCode != "" || r.errMsg != "")):
				bad("background-true-terminal", "%s is stored %s (%s %q), its run must end %s", tr.id, r.status, r.errCode, r.errMsg, x.want)
			}
			if n := e.simRuns(x.marker); n != x.runs {
				bad("background-runs-once", "%s reached the model %d times, want %d", tr.id, n, x.runs)
			}
			switch took := x.to.Sub(x.from); {
			case x.what == "":
			case x.to.IsZero():
				bad("background-within-bound", "%s: %s never came (the documented bound is %v)", tr.id, x.what, x.bound)
			default:
				e.t.Logf("background %s: %s %v after the fetch or the first replica up (bound %v)", tr.id, x.what, took.Round(time.Millisecond), x.bound)
				if took > x.bound+boundSlack {
					bad("background-within-bound", "%s: %s came %v after the fetch or the first replica up, the documented bound is %v (+%v for the harness)",
						tr.id, x.what, took, x.bound, boundSlack)
				}
			}
			continue
		}
		// A cancel's or a read's answer: that terminal state, as stored.
		switch {
		case tr.status != 200:
			bad("background-answer", "%s %s answered %d %s %q (transport %q)", tr.kind, tr.id, tr.status, tr.errCode, tr.errMsg, tr.transport)
		case !isTerminal(tr.terminal):
			bad("background-answer", "%s %s answered %s, not a terminal state", tr.kind, tr.id, tr.terminal)
		case !ok || tr.terminal != r.status || tr.errCode != r.errCode:
			bad("background-answer", "%s %s answered %s (%s), stored %s (%s)", tr.kind, tr.id, tr.terminal, tr.errCode, r.status, r.errCode)
		case tr.terminal == "completed" && len(tr.output) != len(e.items(d, tr.id, "output")):
			bad("background-answer", "%s %s answered %d output items, %d are stored", tr.kind, tr.id, len(tr.output), len(e.items(d, tr.id, "output")))
		}
		if tr.kind == "cancel" {
			e.t.Logf("background %s: the cancel answered %s in %v", tr.id, tr.terminal, tr.took.Round(time.Millisecond))
			if tr.took > cancelWait {
				bad("background-within-bound", "cancel %s took %v, past its documented wait of %v", tr.id, tr.took, cancelWait)
			}
		}
	}
	return vs
}

// simRuns counts the turns (not token counts) the simulator was sent whose input holds marker.
func (e *env) simRuns(marker string) int {
	n := 0
	for _, r := range e.sim.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/responses") && strings.Contains(string(r.Body), marker) {
			n++
		}
	}
	return n
}
