//go:build soak

package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The soak (make soak): waves of concurrent streams with faults injected at random, against one
// gateway on Postgres. After each wave the process's RSS, goroutines and open files must come
// back within 10% of the baseline taken after a warm-up wave, the error rate of the streams that
// were left alone must not drift, and the auditor must pass (after every wave and at the end).
// SOAK_DURATION bounds it (make soak: 10m); SOAK_STREAMS sets the wave size (500). It is built
// only with the soak tag (make soak), so make test neither runs nor skips it.
func TestSoak(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("SOAK_DURATION"))
	if err != nil || dur <= 0 {
		t.Fatalf("SOAK_DURATION must be a positive duration, got %q (make soak sets 10m)", os.Getenv("SOAK_DURATION"))
	}
	streams := 500
	if n, err := strconv.Atoi(os.Getenv("SOAK_STREAMS")); err == nil && n > 0 {
		streams = n
	}
	e := newEnv(t, "soak", "postgres", 1)
	// 500 streams renew leases, flush event logs and commit through one pool: pgx's default
	// (4 connections on 2 cores) queues them past the commit timeout on a loaded machine.
	e.gwDSN += "&pool_max_conns=32"
	e.startGateway(10 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	injected := fClient | fUpstream

	// Warm-up: pools, caches, the simulator's request log (a ring of 1,024) and the auditor's
	// gateway reach their working size; then one more wave.
	var warm float64
	for full := false; !full; {
		full = len(e.sim.Requests()) >= 1024
		warm = wave(e, rng, streams)
		e.auditWave(t, injected, 0)
	}
	base := measure(t, nil)
	t.Logf("baseline after warm-up (%d streams, %.1f%% of undisturbed streams failed): %s", streams, 100*warm, base)
	fmt.Printf("soak baseline: %s\n", base)
	deadline := time.Now().Add(dur)
	var rates []float64
	for w := 1; time.Now().Before(deadline); w++ {
		rate := wave(e, rng, streams)
		rates = append(rates, rate)
		e.auditWave(t, injected, w)
		m := measure(t, &base)
		line := fmt.Sprintf("wave %d: %d streams, undisturbed failed %.2f%%; %s", w, streams, 100*rate, m)
		t.Log(line)
		fmt.Println("soak " + line)
		if m.rss > base.rss*11/10 || m.goroutines > base.goroutines*11/10 || m.fds > base.fds*11/10 {
			t.Errorf("wave %d: resources did not return within 10%% of the baseline: %s vs %s", w, m, base)
		}
	}
	// No drift: the last third of the waves fails no more often than the first third (plus one
	// percentage point for noise); undisturbed streams should essentially never fail.
	if n := len(rates) / 3; n > 0 {
		first, last := mean(rates[:n]), mean(rates[len(rates)-n:])
		if last > first+0.01 {
			t.Errorf("error rate drifted from %.2f%% to %.2f%%", 100*first, 100*last)
		}
	}
	e.stopGW()
	if vs := e.audit(injected); len(vs) > 0 {
		for _, v := range vs {
			t.Errorf("VIOLATION %s: %s (soak, final audit)", v.rule, v.detail)
		}
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// wave runs n concurrent streams, each left alone or disturbed at random (a client that leaves
// with FIN or RST at a random phase, an upstream cut, a slow reader), and returns the failure
// rate of the undisturbed ones.
func wave(e *env, rng *rand.Rand, n int) float64 {
	type job struct {
		body string
		o    streamOpts
		calm bool
	}
	jobs := make([]job, n)
	for i := range jobs {
		q := "delay_ms=5&tokens=" + strconv.Itoa(20+rng.IntN(40))
		var o streamOpts
		calm := false
		switch r := rng.IntN(100); {
		case r < 10:
			o = streamOpts{at: phases[rng.IntN(len(phases))], act: actFIN}
		case r < 20:
			o = streamOpts{at: phases[rng.IntN(len(phases))], act: actRST}
		case r < 30:
			q += "&cut_after=" + strconv.Itoa(rng.IntN(12))
		case r < 40:
			o = streamOpts{slow: time.Millisecond}
		default:
			calm = true
		}
		jobs[i] = job{body: body(harmony+"?"+q, fact(rng), true), o: o, calm: calm}
	}
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		calm, failed int
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := e.stream(j.body, j.o)
			if j.calm {
				mu.Lock()
				calm++
				if tr.terminal != "completed" {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if calm == 0 {
		return 0
	}
	return float64(failed) / float64(calm)
}

// auditWave audits what the wave did, then forgets its transcripts so that they do not count
// as memory the gateway kept.
func (e *env) auditWave(t *testing.T, injected faults, w int) {
	d := e.db()
	waitFor(t, "every turn of the wave to end", func() bool {
		var n int
		_ = d.QueryRow(`SELECT count(*) FROM responses WHERE status IN ('queued', 'in_progress')`).Scan(&n)
		return n == 0
	})
	d.Close()
	for _, v := range e.audit(injected) {
		t.Errorf("VIOLATION %s: %s (soak wave %d)", v.rule, v.detail, w)
	}
	e.mu.Lock()
	e.trs = nil
	e.mu.Unlock()
}

type usage struct{ rss, goroutines, fds int }

func (u usage) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d goroutines, %d open files", float64(u.rss)/(1<<20), u.goroutines, u.fds)
}

// measure reads the process's RSS (after a GC that returns freed memory to the OS), goroutines
// and open files. With a baseline it first waits (up to a minute) for goroutines and files to
// come back down: connections close and handlers return a moment after the clients are done.
func measure(t *testing.T, base *usage) usage {
	read := func() usage {
		runtime.GC()
		debug.FreeOSMemory()
		var u usage
		if b, err := os.ReadFile("/proc/self/statm"); err == nil {
			f := strings.Fields(string(b))
			if len(f) > 1 {
				pages, _ := strconv.Atoi(f[1])
				u.rss = pages * os.Getpagesize()
			}
		}
		u.goroutines = runtime.NumGoroutine()
		if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
			u.fds = len(ents)
		}
		return u
	}
	u := read()
	if base == nil {
		return u
	}
	deadline := time.Now().Add(time.Minute)
	for (u.goroutines > base.goroutines*11/10 || u.fds > base.fds*11/10 || u.rss > base.rss*11/10) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		u = read()
	}
	return u
}
