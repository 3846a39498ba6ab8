package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/respgate/respgate/bench/stats"
	"github.com/respgate/respgate/upstream/fleet"
)

// fleetTargets judges the fleet scenario against issue 39's figures.
func (r *report) fleetTargets() []target {
	f := r.Fleet
	if f == nil || f.Passes["chain-affine"] == nil || f.Passes["round-robin"] == nil || f.Passes["floor"] == nil {
		return nil
	}
	ca, rr, ll, fl := f.Passes["chain-affine"], f.Passes["round-robin"], f.Passes["least-loaded"], f.Passes["floor"]
	caP50, rrP50, flP50 := stats.MedianOf(ca.TTFT), stats.MedianOf(rr.TTFT), stats.MedianOf(fl.TTFT)
	ts := []target{
		{Name: "Fleet: prefix-cache hit ratio on continuation turns, chain-affine", Limit: "≥ 0.9", Figure: fmt.Sprintf("%.3f", ca.HitRatio),
			Met: boolp(ca.HitRatio >= 0.9), Note: fmt.Sprintf("round-robin %.3f, least-loaded %s, the ideal-cache floor %.3f", rr.HitRatio, passHit(ll), fl.HitRatio)},
		{Name: "Fleet: TTFT turns 20–30 p50, chain-affine over the ideal-cache floor", Limit: "≤ 1.2×", Figure: fmt.Sprintf("%.2f×", caP50/flP50),
			Met: boolp(caP50/flP50 <= 1.2), Note: fmt.Sprintf("%s vs %s; p99 %s vs %s", fmtUS(caP50), fmtUS(flP50), fmtUS(stats.QuantileOf(ca.TTFT, 0.99)), fmtUS(stats.QuantileOf(fl.TTFT, 0.99)))},
		{Name: "Fleet: TTFT turns 20–30 p50, chain-affine over round-robin", Limit: "≤ 0.25×", Figure: fmt.Sprintf("%.2f×", caP50/rrP50),
			Met: boolp(caP50/rrP50 <= 0.25), Note: fmt.Sprintf("%s vs %s; p99 %s vs %s", fmtUS(caP50), fmtUS(rrP50), fmtUS(stats.QuantileOf(ca.TTFT, 0.99)), fmtUS(stats.QuantileOf(rr.TTFT, 0.99)))},
		{Name: "Fleet: load max ÷ mean in-flight per vLLM replica, chain-affine", Limit: "≤ 1.25", Figure: fmt.Sprintf("%.2f", ca.LoadRatio),
			Met: boolp(ca.LoadRatio <= 1.25), Note: "means over the pass: " + inFlightLine(ca.InFlight)},
		{Name: "Fleet: both respgate replicas pick the same vLLM replica (same healthy set, no load)", Limit: "100%",
			Figure: fmt.Sprintf("%d / %d", f.AgreeSame, f.AgreeTotal), Met: boolp(f.AgreeTotal > 0 && f.AgreeSame == f.AgreeTotal),
			Note: fmt.Sprintf("under load, %.1f%% of chain-affine continuations (each sent through the other respgate replica) ran on the replica of the turn before", 100*ca.Sticky)},
	}
	if k := f.Kill; k != nil {
		allowance := float64(f.Sessions) / float64(f.Instances) * r.Params.FleetEpsilon
		ts = append(ts,
			target{Name: "Fleet kill: failed turns among those not streaming yet", Limit: "0", Figure: fmt.Sprint(k.FailedBefore), Met: boolp(k.FailedBefore == 0),
				Note: fmt.Sprintf("%.0f failovers before the first byte", k.Failovers)},
			target{Name: "Fleet kill: turns streaming on the killed instance end response.failed, stored", Limit: "all", Figure: fmt.Sprintf("%d of %d stored failed; %d cut without a terminal event", k.StoredFailed, k.FailedStream, k.Cut),
				Met: boolp(k.Cut == 0 && k.StoredFailed == k.FailedStream)},
			target{Name: "Fleet kill: only the killed instance's chains move", Limit: fmt.Sprintf("others ≤ ε × sessions/N = %.0f", allowance),
				Figure: fmt.Sprintf("%d of %d chains at home on it moved; %d others moved", k.MovedVictim, k.HomeOnVictim, k.MovedOther),
				Met:    boolp(k.MovedVictim == k.HomeOnVictim && float64(k.MovedOther) <= allowance), Note: fmt.Sprintf("%.0f spilled routes in the pass", k.Spilled)},
			target{Name: "Fleet kill: the instance's return brings its chains back", Limit: "all", Figure: fmt.Sprintf("%d of %d", k.CameBack, k.BackOf),
				Met: boolp(k.BackOf > 0 && k.CameBack == k.BackOf),
				Note: fmt.Sprintf("its chains: the sessions whose key's first choice it is (%d; the bound admits about %.0f chains a replica) that ran a turn after its return, back on it for a turn or more; on it at their last turn %d, at the last turn started before the first session ended %d of %d; of the %d sessions at home on it at the kill, %d at their last turn",
					k.FirstOnVictim, math.Ceil(float64(f.Sessions)/float64(f.Instances)*(1+r.Params.FleetEpsilon)), k.Back, k.BackSteady, k.BackSteadyOf, k.HomeBackOf, k.HomeBack)},
		)
	}
	return ts
}

func passHit(p *fleetPass) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.3f", p.HitRatio)
}

func inFlightLine(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// fleetMD is the fleet scenario's section.
func (r *report) fleetMD(w writer) {
	f := r.Fleet
	if f == nil {
		return
	}
	p := r.Params
	w("## Fleet: routing by chain over simulated vLLM replicas\n\n")
	w("%d agent sessions of %d turns (each turn about %d words of input, a user message asking for a tool call or the tool's output, and a %d-token answer at %s a token) run concurrently through two respgate replicas on one Postgres schema, alternating replicas turn by turn; %d `vllm-sim` instances in one process (`--instances`; the kill pass, one process each), cache %d blocks of 16 tokens each (a quarter of the sessions' final prompts × 1.25, the load bound's slack), prefill %d µs per uncached token; chain-affine's ε is %g, its min_slack %s. The passes run one after the other; the policy is switched by SIGHUP. The floor is the same sessions against one more instance whose cache never evicts.\n\n",
		f.Sessions, f.Turns, p.FleetWords, p.FleetAnswer, p.FleetDecode, f.Instances, f.CacheBlocks, f.PrefillUS, p.FleetEpsilon, minSlackText(p.FleetMinSlack))
	w("| pass | hit ratio (continuations) | TTFT turns 20–30 p50 / p99 | × floor p50 | load max ÷ mean | same replica as the turn before | routed | failed turns | wall |\n|---|---|---|---|---|---|---|---|---|\n")
	floor := 0.0
	if fl := f.Passes["floor"]; fl != nil {
		floor = stats.MedianOf(fl.TTFT)
	}
	for _, name := range append(slices.Clone(fleetPolicies), "floor", "kill") {
		ps := f.Passes[name]
		if ps == nil {
			continue
		}
		p50 := stats.MedianOf(ps.TTFT)
		w("| %s | %.3f | %s | %.2f× | %.2f | %.1f%% | %s | %d | %.0f s |\n", name, ps.HitRatio, pair(p50, stats.QuantileOf(ps.TTFT, 0.99)),
			p50/floor, ps.LoadRatio, 100*ps.Sticky, routedLine(ps.Routed), ps.Failed, ps.WallS)
	}
	w("\n")
	if k := f.Kill; k != nil {
		w("Kill pass: %s was killed (SIGKILL) after a third of the turns and started again on its port after two thirds. Of %d sessions, %d were at home on it; %d of those moved, and %d others moved. %d turns failed before a stream started; %d streams ended response.failed (%d stored as failed) and %d were cut without a terminal event. After its return %d of the %d sessions whose key's first choice it is ran their last turn there again (%d of the %d that had lived on it at the kill).\n\n",
			k.Victim, k.Sessions, k.HomeOnVictim, k.MovedVictim, k.MovedOther, k.FailedBefore, k.FailedStream, k.StoredFailed, k.Cut, k.Back, k.BackOf, k.HomeBack, k.HomeBackOf)
		if len(k.NotBack) > 0 {
			w("Where the chains that did not come back ran from the kill on (V the killed instance, a–c the others, . a failed turn, | its return):\n\n")
			for _, nb := range k.NotBack {
				w("- %s\n", nb)
			}
			w("\n")
		}
	}
}

func routedLine(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// minSlackText names the fleet scenario's min_slack (-1: respgate's default).
func minSlackText(n int) string {
	if n < 0 {
		return fmt.Sprintf("respgate's default (%d)", fleet.DefaultMinSlack)
	}
	return fmt.Sprint(n)
}
