package chaos

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// chaosSeeds is the number of seeds per scenario: CHAOS_SEEDS (`make chaos` sets 10), else 1,
// the fast subset that `make test` runs.
func chaosSeeds() int {
	if n, err := strconv.Atoi(os.Getenv("CHAOS_SEEDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// tally counts runs and violations per scenario and backend for the table.
type tally struct {
	mu   sync.Mutex
	runs map[string][2]int
}

func (ta *tally) add(key string, violations int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	c := ta.runs[key]
	c[0]++
	c[1] += violations
	ta.runs[key] = c
}

// TestChaos runs the matrix: every scenario × the backends it applies to × the seeds. Each run
// gets its own database, simulator, proxies and gateway; the auditor judges it.
func TestChaos(t *testing.T) {
	seeds := chaosSeeds()
	ta := &tally{runs: map[string][2]int{}}
	scs := allScenarios()
	names := map[string]bool{}
	for _, sc := range scs {
		if names[sc.name] {
			t.Fatalf("two scenarios named %s", sc.name)
		}
		names[sc.name] = true
	}
	t.Cleanup(func() { printTable(t, scs, ta, seeds) })
	for _, sc := range scs {
		if sc.fullOnly && seeds == 1 {
			continue // make chaos runs it
		}
		for _, backend := range sc.backends {
			for seed := 1; seed <= seeds; seed++ {
				name := fmt.Sprintf("%s/%s/seed-%02d", sc.name, backend, seed)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runOne(t, sc, backend, int64(seed), ta)
				})
			}
		}
	}
}

func runOne(t *testing.T, sc scenario, backend string, seed int64, ta *tally) {
	h := fnv.New64a()
	h.Write([]byte(sc.name))
	rng := rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	e := newEnv(t, sc.name, backend, seed)
	if !sc.process {
		up := 10 * time.Second
		if sc.quick {
			up = time.Second
		}
		e.startGateway(up)
	}
	sc.run(e, rng)
	e.clean()
	if e.stopGW != nil {
		e.stopGW()
	}
	vs := e.audit(sc.faults)
	ta.add(sc.name+"\t"+backend, len(vs))
	for _, v := range vs {
		t.Errorf("VIOLATION %s: %s\n  scenario %s, backend %s, seed %d\n  replay: make chaos CHAOS_RUN='%s/%s/seed-%02d'",
			v.rule, v.detail, sc.name, backend, seed, sc.name, backend, seed)
	}
}

func printTable(t *testing.T, scs []scenario, ta *tally, seeds int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos matrix: %d scenarios, %d seed(s) each\n", len(scs), seeds)
	fmt.Fprintf(&b, "| %-53s | %-8s | %4s | %10s |\n|%s|%s|%s|%s|\n", "scenario", "backend", "runs", "violations",
		strings.Repeat("-", 55), strings.Repeat("-", 10), strings.Repeat("-", 6), strings.Repeat("-", 12))
	keys := make([]string, 0, len(ta.runs))
	for k := range ta.runs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	runs, viol, distinct := 0, 0, map[string]bool{}
	for _, k := range keys {
		c := ta.runs[k]
		sc, be, _ := strings.Cut(k, "\t")
		distinct[sc] = true
		fmt.Fprintf(&b, "| %-53s | %-8s | %4d | %10d |\n", sc, be, c[0], c[1])
		runs += c[0]
		viol += c[1]
	}
	fmt.Fprintf(&b, "total: %d distinct scenarios run, %d runs, %d violations\n", len(distinct), runs, viol)
	fmt.Print(b.String())
	if p := os.Getenv("CHAOS_TABLE"); p != "" {
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
}
