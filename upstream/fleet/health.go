package fleet

import (
	"context"
	"io"
	"net/http"
	"time"
)

// healthState is a replica's health as its probes and calls saw it.
type healthState struct {
	Healthy bool
	Fails   int // failed probes in a row (passive marking counts as Fall of them)
}

// next is the state after a probe that succeeded (ok) or failed, and the wait before the next
// probe: Interval while healthy; a failed probe of a healthy replica is confirmed after
// MinBackoff, and Fall failures in a row mark it down; a down replica is probed after
// MinBackoff, doubling per failure up to MaxBackoff; one good probe brings it back. A pure
// function of its arguments.
func (h Health) next(s healthState, ok bool) (healthState, time.Duration) {
	if ok {
		return healthState{Healthy: true}, h.Interval
	}
	s.Fails++
	if s.Healthy && s.Fails < h.Fall {
		return s, h.MinBackoff
	}
	s.Healthy = false
	return s, h.backoff(s.Fails - h.Fall)
}

// backoff is MinBackoff × 2^n, at most MaxBackoff.
func (h Health) backoff(n int) time.Duration {
	d := h.MinBackoff
	for range max(n, 0) {
		if d >= h.MaxBackoff/2 {
			return h.MaxBackoff
		}
		d *= 2
	}
	return min(d, h.MaxBackoff)
}

// marked is the state after a call saw the replica fail (passive marking): down at once, as
// after Fall failed probes, so the next probe comes after MinBackoff.
func (h Health) marked() healthState { return healthState{Healthy: false, Fails: h.Fall} }

// startProber starts r's prober, which outlives ctx (New's or Reload's; only its values are
// kept): Close, or a reload that removes r, stops it and waits.
func (f *Fleet) startProber(ctx context.Context, r *replica) {
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.done = stop, make(chan struct{})
	first := f.health.Interval
	if !r.healthy.Load() {
		first = f.health.MinBackoff
	}
	go f.probeLoop(ctx, r, first)
}

// probeLoop probes r until ctx ends.
func (f *Fleet) probeLoop(ctx context.Context, r *replica, wait time.Duration) {
	defer close(r.done)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			t.Reset(f.health.MinBackoff)
			continue
		case <-t.C:
		}
		ok := f.probeOnce(ctx, r)
		if ctx.Err() != nil {
			return
		}
		t.Reset(f.observe(ctx, r, ok))
	}
}

// observe records a probe's result and returns the wait before the next probe.
func (f *Fleet) observe(ctx context.Context, r *replica, ok bool) time.Duration {
	r.mu.Lock()
	was := r.state.Healthy
	var d time.Duration
	r.state, d = f.health.next(r.state, ok)
	now := r.state.Healthy
	r.healthy.Store(now)
	r.mu.Unlock()
	if was != now {
		f.changed(r, now)
		if now {
			f.refreshModels(ctx, r)
		}
	}
	return d
}

// markDown is passive marking: a call saw r fail.
func (f *Fleet) markDown(r *replica) {
	r.mu.Lock()
	was := r.state.Healthy
	r.state = f.health.marked()
	r.healthy.Store(false)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	if was {
		f.changed(r, false)
	}
}

func (f *Fleet) changed(r *replica, healthy bool) {
	if healthy {
		f.log.Info("upstream replica healthy", "pool", r.pool, "replica", r.id)
	} else {
		f.log.Warn("upstream replica down", "pool", r.pool, "replica", r.id)
	}
	if f.cfg.OnHealth != nil {
		f.cfg.OnHealth(r.id, healthy)
	}
}

// probeOnce asks r's /health (vLLM answers 200 while its engine is alive).
func (f *Fleet) probeOnce(ctx context.Context, r *replica) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.health, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "respgate")
	if r.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	resp, err := f.probe.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
