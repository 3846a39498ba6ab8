package chaos

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respgate/respgate/internal/faultproxy"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds cmd/respgate once per test process, with the chaoshooks build tag: its
// background runs can be held at a stage (RESPGATE_CHAOS_HOLD, engine/chaoshooks.go) so that a
// scenario puts a kill -9 or a cancel in a window by an event, not a timer.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "respgate-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "respgate")
		out, err := exec.Command("go", "build", "-tags", "chaoshooks", "-o", binPath, "github.com/respgate/respgate/cmd/respgate").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running respgate binary.
type proc struct {
	cmd    *exec.Cmd
	url    string
	waited chan struct{}
	err    error
	last   string // the last log line, read after waited closes

	mu    sync.Mutex
	marks []mark        // the log lines with a procMarks message, as they were read
	grew  chan struct{} // closed and replaced when marks grows or the process ends
}

// procMarks are the log messages a scenario may wait for (engine/chaoshooks.go,
// engine/engine.go requeueStranded).
var procMarks = []string{`"msg":"chaos hold"`, `"msg":"requeued background responses`}

// mark is a marked log line and when the harness read it.
type mark struct {
	at   time.Time
	line string
}

// waitMark waits until a log line containing msg has been read (or the process ended, or a
// minute passed: a loaded machine is slow, never that slow) and returns when it was read.
func (p *proc) waitMark(msg string) (time.Time, bool) {
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for _, m := range p.marks {
			if strings.Contains(m.line, msg) {
				p.mu.Unlock()
				return m.at, true
			}
		}
		grew := p.grew
		p.mu.Unlock()
		select {
		case <-grew:
		case <-p.waited:
			return time.Time{}, false
		case <-deadline.C:
			return time.Time{}, false
		}
	}
}

// startProcess runs the respgate binary on the env's database (through the Postgres proxy) and
// the simulator (through the upstream proxy), and waits until it is ready.
func (e *env) startProcess(extra ...string) *proc { return e.startProcessEnv(nil, extra...) }

// startProcessEnv is startProcess with extra environment variables (RESPGATE_CHAOS_HOLD).
func (e *env) startProcessEnv(environ []string, extra ...string) *proc {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	db := e.gwDSN
	if e.backend == "sqlite" {
		db = "sqlite:" + e.gwDSN
	}
	args := append([]string{"--listen", addr, "--database-url", db, "--lease-ttl", leaseTTL.String(),
		"--write-timeout", "300ms", "--sweep-interval", sweepInterval.String(), "--upstream-idle-timeout", "10s",
		// respgate refuses a --commit-timeout not less than --lease-ttl (docs/configuration.md).
		"--commit-timeout", (leaseTTL * 3 / 4).String(),
		"--upstream-connect-timeout", "10s",
		// A pool of 4 like the in-process gateways' (pgxpool's default on 2 cores): at the default
		// of 32, the matrix's parallel processes passed Postgres's max_connections (100 in CI)
		// and were refused at start ("too many clients already"). Later flags in extra win.
		"--database-max-conns", "4"}, extra...)
	cmd := exec.Command(binary(e.t), args...)
	cmd.Env = append(append(os.Environ(), "RESPGATE_UPSTREAM_URL=http://"+e.up.Addr()+"/v1"), environ...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, url: "http://" + addr, waited: make(chan struct{}), grew: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.last = sc.Text() // ids, types and counts only (the gateway logs no bodies)
			p.note(p.last)
		}
		p.err = cmd.Wait()
		close(p.waited)
	}()
	e.t.Cleanup(func() { p.kill() })
	waitFor(e.t, "respgate /readyz", func() bool {
		select {
		case <-p.waited:
			e.t.Fatalf("respgate exited at start: %v; last log line: %s", p.err, p.last)
		default:
		}
		res, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	return p
}

// note keeps a marked log line.
func (p *proc) note(line string) {
	for _, m := range procMarks {
		if strings.Contains(line, m) {
			p.mu.Lock()
			p.marks = append(p.marks, mark{at: time.Now(), line: line})
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
			return
		}
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.waited
}

// processScenarios drive the real binary: kill -9 at each phase, SIGTERM under load, and two
// replicas on one Postgres.
func processScenarios() []scenario {
	var ss []scenario
	for _, ph := range []string{"before-headers", phCreated, phDelta, phItemDone} {
		ss = append(ss, scenario{name: "kill9/at-" + ph, backends: both, faults: fKill, process: true, run: func(e *env, rng *rand.Rand) {
			p := e.startProcess()
			e.gwURL = p.url
			prev := chain(e, rng)
			o := streamOpts{at: ph, hook: func(tr *transcript) { tr.faulted = true; p.kill() }}
			var stall *faultproxy.Trigger
			if ph == "before-headers" {
				// The request is with vLLM and the client waits for headers: respgate dies.
				stall = e.up.Arm(faultproxy.ToClient, faultproxy.Spec{Match: []byte("HTTP/1.1"), Action: faultproxy.StallAt})
				o = streamOpts{}
				go func() {
					<-stall.Fired()
					p.kill()
				}()
			}
			tr := e.stream(body(model(rng, "delay_ms=2"), fact(rng), true, opt(prev)...), o)
			tr.faulted = true
			if stall != nil {
				<-stall.Fired()
				stall.Release()
			}
		}})
	}
	ss = append(ss, scenario{name: "kill9/during-commit", backends: pgOnly, faults: fKill | fDB, process: true, run: func(e *env, rng *rand.Rand) {
		p := e.startProcess()
		e.gwURL = p.url
		prev := chain(e, rng)
		s := faultproxy.Spec{Match: commitSQL, Action: faultproxy.StallAt}
		// Armed before the turn (commitSQL is on the wire only in a final commit): respgate dies
		// while this turn's commit is on the wire.
		tr := e.pg.Arm(faultproxy.ToServer, s)
		streamDone := make(chan struct{})
		var killer sync.WaitGroup
		killer.Add(1)
		go func() {
			defer killer.Done()
			select {
			case <-tr.Fired():
				p.kill()
			case <-streamDone:
			}
		}()
		t := e.stream(body(model(rng, ""), fact(rng), true, opt(prev)...), streamOpts{})
		t.faulted = true
		close(streamDone)
		killer.Wait()
		e.requireFired(tr, s)
		tr.Release()
		p.kill()
	}})
	ss = append(ss, scenario{name: "sigterm/200-streams", backends: both, faults: fShutdown, process: true, run: func(e *env, rng *rand.Rand) {
		// 200 streams load two cores: upstream timeouts as in production, so that only the
		// drain deadline cuts streams.
		// The lease is production-like here: 200 streams renewing a 2 s lease every 667 ms
		// through a 4-connection pool starve on two loaded cores, and the test is about the drain.
		p := e.startProcess("--shutdown-timeout", "3s", "--upstream-connect-timeout", "30s", "--upstream-idle-timeout", "30s", "--lease-ttl", "30s",
			"--commit-timeout", "15s") // the default: the cut streams' commits queue for the pool
		e.gwURL = p.url
		// Most end within the drain deadline; one in ten runs past it and is cut, each of those
		// then committing its failed record at once (through pgx's default pool of 4).
		var created, wg sync.WaitGroup
		created.Add(200)
		for i := 0; i < 200; i++ {
			q := "delay_ms=5&tokens=20"
			if i%10 == 1 {
				q = "delay_ms=50&tokens=400"
			}
			b := body(harmony+"?"+q, fact(rng), true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				once := sync.OnceFunc(created.Done)
				defer once()
				e.stream(b, streamOpts{at: phCreated, hook: func(*transcript) { once() }})
			}()
		}
		created.Wait()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		wg.Wait()
		<-p.waited
	}})
	ss = append(ss, scenario{name: "replicas/two-on-one-postgres-one-killed", backends: pgOnly, faults: fKill, process: true, run: func(e *env, rng *rand.Rand) {
		a, b := e.startProcess(), e.startProcess()
		var created, wg sync.WaitGroup
		created.Add(20)
		for i := 0; i < 20; i++ {
			p := a
			if i%2 == 1 {
				p = b
			}
			bd := body(model(rng, "delay_ms=20&tokens=60"), fact(rng), true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				once := sync.OnceFunc(created.Done)
				defer once()
				tr := e.stream(bd, streamOpts{base: p.url, at: phCreated, hook: func(*transcript) { once() }})
				if p == a {
					tr.faulted = true
				}
			}()
		}
		created.Wait()
		a.kill()
		wg.Wait()
		// The survivor serves continuations of what the killed one stored.
		e.gwURL = b.url
		e.stream(body(model(rng, ""), fact(rng), true), streamOpts{})
		// Its sweeper fails the killed replica's turns once their leases expire.
		d := e.db()
		defer d.Close()
		waitFor(e.t, "the survivor to sweep the killed replica's turns", func() bool {
			var n int
			_ = d.QueryRow(`SELECT count(*) FROM responses WHERE status IN ('queued', 'in_progress')`).Scan(&n)
			return n == 0
		})
		b.kill()
	}})
	return ss
}
