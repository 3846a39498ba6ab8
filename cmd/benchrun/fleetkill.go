package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fleetKill is the kill pass: one instance killed (SIGKILL) a third of the way through a
// chain-affine pass and started again on its port at two thirds.
type fleetKill struct {
	Victim string `json:"victim"`
	// Home is, per session, where its last turn before the kill ran; HomeOnVictim of them on
	// the killed instance.
	Sessions     int `json:"sessions"`
	HomeOnVictim int `json:"home_on_victim"`
	// MovedVictim and MovedOther: sessions whose first turn after the kill ran elsewhere than
	// home, among those at home on the victim and the others.
	MovedVictim int `json:"moved_victim"`
	MovedOther  int `json:"moved_other"`
	// FailedBefore: turns answered with an HTTP error (no stream started); Cut: streams that
	// ended without a terminal event; FailedStream: streams that ended response.failed, and
	// StoredFailed how many of those the store holds as failed.
	FailedBefore int `json:"failed_before_stream"`
	Cut          int `json:"cut_streams"`
	FailedStream int `json:"failed_streams"`
	StoredFailed int `json:"stored_failed"`
	// CameBack: of the sessions whose key's first choice is the victim (its chains:
	// FirstOnVictim) that ran a turn after its return (BackOf), how many ran a turn on it again;
	// Back, how many ran their last turn on it (the drain at the pass's end, where the bound
	// moves chains between replicas as sessions stop, can take a chain off again). HomeBack and
	// HomeBackOf count the same among the sessions at home on it before the kill, some of which
	// lived there only after a spill (its own first choice is elsewhere) and have no reason to
	// come back.
	FirstOnVictim int `json:"first_on_victim"`
	CameBack      int `json:"came_back"`
	Back          int `json:"back"`
	BackOf        int `json:"back_of"`
	HomeBack      int `json:"home_back"`
	HomeBackOf    int `json:"home_back_of"`
	// BackSteady and BackSteadyOf count Back and BackOf over the turns started before the first
	// session ended (the pass still at full load), so that the drain at its end, where the
	// bound moves chains between replicas as sessions stop, does not decide them.
	BackSteady   int `json:"back_steady"`
	BackSteadyOf int `json:"back_steady_of"`
	// NotBack is, per chain of the victim that did not end on it (or never came back), where its turns ran from the
	// kill on: one letter per turn in order, V for the victim, a–z for the others, "." for a
	// turn that failed, "|" where the victim came back.
	NotBack   []string           `json:"not_back,omitempty"`
	Spilled   float64            `json:"spilled"`
	Failovers float64            `json:"failovers"`
	Routed    map[string]float64 `json:"routed"`
}

// killPass runs the kill pass and judges it.
func (fr *fleetRun) killPass(ctx context.Context) error {
	total := fr.b.p.FleetSessions * fr.b.p.FleetTurns
	const victim = 0
	addr := fr.sims[victim].addr
	k := &fleetKill{Victim: fr.sims[victim].baseURL(), Sessions: fr.b.p.FleetSessions}
	fr.res.Kill = k
	killNow, backNow := make(chan struct{}), make(chan struct{})
	var once1, once2 sync.Once
	hook := func(n int) {
		if n >= total/3 {
			once1.Do(func() { close(killNow) })
		}
		if n >= 2*total/3 {
			once2.Do(func() { close(backNow) })
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	var killAt, backAt time.Time
	var ctrlErr error
	var ctrl sync.WaitGroup
	ctrl.Go(func() {
		select {
		case <-killNow:
		case <-cctx.Done():
			return
		}
		killAt = time.Now()
		fr.sims[victim].kill()
		select {
		case <-backNow:
		case <-cctx.Done():
			return
		}
		c, err := startChildAt(cctx, fr.b.logDir, "fleet-sim-0-again", fr.bin, fr.simArgs, "/health", addr)
		if err != nil {
			ctrlErr = err
			return
		}
		fr.sims[victim] = c
		backAt = time.Now()
	})
	pass, err := fr.pass(ctx, "kill", hook)
	cancel()
	ctrl.Wait()
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	if ctrlErr != nil {
		return fmt.Errorf("kill: restart the instance: %w", ctrlErr)
	}
	if killAt.IsZero() || backAt.IsZero() {
		return fmt.Errorf("kill: the instance was not killed and restarted during the pass")
	}
	fr.res.Passes["kill"] = pass
	k.Routed, k.Spilled, k.Failovers = pass.Routed, pass.Routed["spilled"], pass.Routed["failovers"]
	first, err := fr.firstChoices(ctx, "kill")
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	if err := fr.judgeKill(ctx, k, pass.turns, first, killAt, backAt); err != nil {
		return err
	}
	fr.b.log.Info("fleet kill pass judged", "home_on_victim", k.HomeOnVictim, "moved_other", k.MovedOther,
		"failed_before_stream", k.FailedBefore, "failed_streams", k.FailedStream, "stored_failed", k.StoredFailed, "back", k.Back, "back_of", k.BackOf,
		"came_back", k.CameBack, "home_back", k.HomeBack, "home_back_of", k.HomeBackOf)
	return nil
}

// firstChoices finds each session's first choice, the vLLM replica its key goes to when every
// replica is healthy and nothing is in flight: it sends the session's first turn again, alone, to
// one respgate replica (the same opening has the same key, docs/fleet.md "The routing key"; both
// replicas pick alike, the agreement target) and reads back where it ran.
func (fr *fleetRun) firstChoices(ctx context.Context, pass string) (map[int]string, error) {
	turns := make([]fleetTurn, fr.b.p.FleetSessions)
	for s := range turns {
		var m map[string]any
		if err := json.Unmarshal(fr.body(pass, s, 1, "", ""), &m); err != nil {
			return nil, err
		}
		m["stream"] = false
		body, _ := json.Marshal(m)
		id, err := fr.create(ctx, fr.gws[0], body)
		if err != nil {
			return nil, fmt.Errorf("first-choice probe: %w", err)
		}
		turns[s] = fleetTurn{session: s, id: id}
	}
	if err := fr.replicas(ctx, turns); err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, t := range turns {
		out[t.session] = t.replica
	}
	return out, nil
}

// settle is how long after the kill (and the return) turns are left out of the "after"
// replica: the turns already running when it happened.
const settle = time.Second

// judgeKill fills k from the pass's turns; first is each session's first choice (firstChoices).
func (fr *fleetRun) judgeKill(ctx context.Context, k *fleetKill, turns []fleetTurn, first map[int]string, killAt, backAt time.Time) error {
	bySession := map[int][]fleetTurn{}
	var failedIDs []string
	for _, t := range turns {
		switch t.status {
		case "completed":
			bySession[t.session] = append(bySession[t.session], t)
		case "":
			k.FailedBefore++
		case "cut":
			k.Cut++
		default:
			k.FailedStream++
			failedIDs = append(failedIDs, t.id)
		}
	}
	firstDone := firstSessionEnd(bySession)
	for s, ts := range bySession {
		slices.SortFunc(ts, func(a, b fleetTurn) int { return a.turn - b.turn })
		home, during, last, steady := "", "", "", ""
		cameBack := false
		for _, t := range ts {
			switch {
			case t.end.Before(killAt):
				home = t.replica
			case during == "" && t.start.After(killAt.Add(settle)) && t.start.Before(backAt):
				during = t.replica
			}
			// A turn on it from its return on brings the chain back, also one started before
			// every respgate replica has seen it healthy again.
			cameBack = cameBack || t.start.After(backAt) && t.replica == k.Victim
			if t.start.After(backAt.Add(settle)) {
				last = t.replica
				if t.start.Before(firstDone) {
					steady = t.replica
				}
			}
		}
		if first[s] == k.Victim {
			k.countReturn(cameBack, last, steady, func() string { return fmt.Sprintf("session %d: %s", s, trail(turns, s, k.Victim, killAt, backAt)) })
		}
		if home == "" || during == "" {
			continue
		}
		if home == k.Victim {
			k.HomeOnVictim++
			if during != home {
				k.MovedVictim++
			}
			if last != "" {
				k.HomeBackOf++
				if last == k.Victim {
					k.HomeBack++
				}
			}
		} else if during != home {
			k.MovedOther++
		}
	}
	if len(failedIDs) == 0 {
		return nil
	}
	return fr.conn.QueryRow(ctx, "SELECT count(*) FROM responses WHERE id = ANY($1) AND status = 'failed'", failedIDs).Scan(&k.StoredFailed)
}

// countReturn counts one of the victim's chains: whether it came back after the return, where its
// last turn ran (last, "" if none ran after the return) and its last turn started before the
// first session ended (steady); trail describes it when it did not end on the victim.
func (k *fleetKill) countReturn(cameBack bool, last, steady string, trail func() string) {
	k.FirstOnVictim++
	if last != "" {
		k.BackOf++
		if cameBack {
			k.CameBack++
		}
		if last == k.Victim {
			k.Back++
		} else {
			k.NotBack = append(k.NotBack, trail())
		}
	}
	if steady != "" {
		k.BackSteadyOf++
		if steady == k.Victim {
			k.BackSteady++
		}
	}
}

// firstSessionEnd is when the first session to finish ended its last completed turn.
func firstSessionEnd(bySession map[int][]fleetTurn) time.Time {
	var first time.Time
	for _, ts := range bySession {
		var end time.Time
		for _, t := range ts {
			if t.end.After(end) {
				end = t.end
			}
		}
		if first.IsZero() || end.Before(first) {
			first = end
		}
	}
	return first
}

// trail is where session s's turns ran from the kill on (fleetKill.NotBack), every attempt.
func trail(turns []fleetTurn, s int, victim string, killAt, backAt time.Time) string {
	var ts []fleetTurn
	for _, t := range turns {
		if t.session == s && t.start.After(killAt) {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b fleetTurn) int { return a.start.Compare(b.start) })
	letters := map[string]byte{victim: 'V'}
	var sb strings.Builder
	marked := false
	for _, t := range ts {
		if !marked && t.start.After(backAt) {
			sb.WriteByte('|')
			marked = true
		}
		switch l, ok := letters[t.replica]; {
		case t.status != "completed":
			sb.WriteByte('.')
		case ok:
			sb.WriteByte(l)
		default:
			l = "abcdefghijklmnopqrstuvwxyz"[len(letters)-1]
			letters[t.replica] = l
			sb.WriteByte(l)
		}
	}
	return sb.String()
}

// agreement opens fresh chains, one request each on both respgate replicas with nothing else
// running, and counts those the two sent to the same vLLM replica.
func (fr *fleetRun) agreement(ctx context.Context) error {
	var ids [][2]string
	for i := range fr.b.p.FleetSessions {
		var pair [2]string
		for g, gw := range fr.gws {
			body, _ := json.Marshal(map[string]any{"model": "openai/gpt-oss-sim?tokens=2&reasoning=0&quirks=none",
				"input": fmt.Sprintf("Agreement probe %d: which replica takes this chain?", i)})
			id, err := fr.create(ctx, gw, body)
			if err != nil {
				return fmt.Errorf("agreement probe: %w", err)
			}
			pair[g] = id
		}
		ids = append(ids, pair)
	}
	var turns []fleetTurn
	for _, p := range ids {
		turns = append(turns, fleetTurn{id: p[0]}, fleetTurn{id: p[1]})
	}
	if err := fr.replicas(ctx, turns); err != nil {
		return err
	}
	for i := 0; i < len(turns); i += 2 {
		fr.res.AgreeTotal++
		if turns[i].replica != "" && turns[i].replica == turns[i+1].replica {
			fr.res.AgreeSame++
		}
	}
	return nil
}

// create sends a non-streamed turn and returns its response id.
func (fr *fleetRun) create(ctx context.Context, gw *child, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.baseURL()+"/responses", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set("Content-Type", "application/json")
	resp, err := fr.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", gw.name, resp.Status)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.ID == "" {
		return "", fmt.Errorf("%s: no response id", gw.name)
	}
	return r.ID, nil
}

// sampleInFlight reads both respgate replicas' in-flight gauges every 100 ms until ctx ends
// and returns each vLLM replica's mean (summed over the respgate replicas).
func (fr *fleetRun) sampleInFlight(ctx context.Context) map[string]float64 {
	sum := map[string]float64{}
	n := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			out := map[string]float64{}
			for k, v := range sum {
				out[k] = v / float64(max(n, 1))
			}
			return out
		case <-tick.C:
		}
		snap := map[string]float64{}
		ok := true
		for _, g := range fr.gws {
			m, err := fr.metric(ctx, g, "respgate_upstream_replica_in_flight", "replica")
			if err != nil {
				ok = false
				break
			}
			for k, v := range m {
				snap[k] += v
			}
		}
		if !ok {
			continue
		}
		n++
		for k, v := range snap {
			sum[k] += v
		}
	}
}

// routed is respgate_upstream_pool_routed_total by outcome, and the failovers as "failovers",
// summed over both respgate replicas.
func (fr *fleetRun) routed(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, g := range fr.gws {
		m, _ := fr.metric(ctx, g, "respgate_upstream_pool_routed_total", "outcome")
		for k, v := range m {
			out[k] += v
		}
		f, _ := fr.metric(ctx, g, "respgate_upstream_pool_failovers_total", "pool")
		for _, v := range f {
			out["failovers"] += v
		}
	}
	return out
}

// metric reads one metric family from a respgate replica's /metrics, by the value of label
// (series with the same label value are summed).
func (fr *fleetRun) metric(ctx context.Context, g *child, name, label string) (map[string]float64, error) {
	var body bytes.Buffer
	if err := get(ctx, "http://"+g.addr+"/metrics", &body); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(&body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		_, rest, ok := strings.Cut(line[:sp], label+`="`)
		if !ok {
			continue
		}
		val, _, _ := strings.Cut(rest, `"`)
		out[val] += v
	}
	return out, sc.Err()
}
