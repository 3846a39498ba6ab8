package main

import (
	"context"
	"fmt"
	"math"

	"github.com/respgate/respgate/bench/loadgen"
	"github.com/respgate/respgate/bench/stats"
)

// bgResult: c=1, time from POST /v1/responses (stream:true) to the first event the client reads,
// for a foreground turn and a background one (background:true: the create call follows the event
// log a River worker writes), on each backend, side by side in the same rounds. The figure of
// issue 41 is background − foreground per backend, paired per round.
type bgResult struct {
	PerRound table                   `json:"per_round"`
	Added    map[string]stats.Spread `json:"background_minus_foreground_ttfe_p50"`
	Failed   map[string]int          `json:"failed"`
}

// bgArms are the scenario's arms: the floor (A direct, B the bare proxy), then each backend's
// foreground and background twins ("D bg" and "E bg" are D and E with background:true).
func (b *bench) bgArms() []*arm {
	out := []*arm{b.armByKey["A"], b.armByKey["B"]}
	for _, k := range []string{"D", "E"} {
		fg := b.armByKey[k]
		bg := *fg
		bg.Name, bg.Label, bg.background = k+" bg", fg.Label+", background:true", true
		out = append(out, fg, &bg)
	}
	return out
}

func (b *bench) scenarioBackground(ctx context.Context) error {
	p := b.p
	res := &bgResult{PerRound: table{}, Added: map[string]stats.Spread{}, Failed: map[string]int{}}
	b.rep.Background = res
	arms := b.bgArms()
	body := func(a *arm) []byte {
		var extra map[string]any
		if a.background {
			extra = map[string]any{"background": true}
		}
		return a.body(model(p.PaceMS, p.ProbeTokens, "reasoning=0"), benchInput, true, extra)
	}
	for _, a := range arms { // warm connections and the workers
		if _, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Requests: 3, Body: constBody(body(a))}); err != nil {
			return err
		}
	}
	for r := range b.opt.rounds {
		for _, a := range rotate(arms, r) {
			rs, err := b.measure(ctx, a, loadgen.Config{Stream: true, Concurrency: 1, Duration: p.ProbeDur, Body: constBody(body(a))})
			if err != nil {
				return err
			}
			s := rs.Summary
			t := res.PerRound
			t.add(a.Name, "ttfe_p50", s.TTFE.P50)
			t.add(a.Name, "ttfe_p99", s.TTFE.P99)
			t.add(a.Name, "ttfd_p50", s.TTFD.P50)
			t.add(a.Name, "probes", float64(s.OK))
			res.Failed[a.Name] += s.Failed
			b.noteProblems("background "+a.Name, s)
		}
		b.log.Info("background round done", "round", r+1)
	}
	for _, k := range []string{"D", "E"} {
		res.Added[k] = res.PerRound.diff(k+" bg", k, "ttfe_p50")
	}
	return nil
}

// backgroundTargets judges the background turn's first event against the foreground one's.
func (r *report) backgroundTargets() []target {
	if r.Background == nil {
		return nil
	}
	var ts []target
	for _, k := range []string{"D", "E"} {
		d := r.Background.Added[k]
		ts = append(ts, target{Name: "Background turn, create → first event p50, over foreground (" + k + ", c=1)", Limit: "≤ +10 ms",
			Figure: fmtStatUS(d), Met: boolp(!math.IsNaN(d.Median) && d.Median <= 10000),
			Note: fmt.Sprintf("first event p50: background %s, foreground %s; floor B %s, A %s",
				fmtStatUS(r.Background.PerRound.stat(k+" bg", "ttfe_p50")), fmtStatUS(r.Background.PerRound.stat(k, "ttfe_p50")),
				fmtStatUS(r.Background.PerRound.stat("B", "ttfe_p50")), fmtStatUS(r.Background.PerRound.stat("A", "ttfe_p50")))})
	}
	return ts
}

func (r *report) backgroundMD(w writer) {
	g := r.Background
	if g == nil {
		return
	}
	w("## Scenario: background turns at c=1\n\n")
	w("Per arm and round: %s of back-to-back %d-token streams (stream:true, no reasoning), each arm's time from the POST to the first event the client reads (TTFE) and to the first delta (TTFD). \"D bg\" and \"E bg\" send background:true to D and E: the create call follows the response's event log, which a River worker on the gateway writes after it picks the job up.\n\n",
		r.Params.ProbeDur, r.Params.ProbeTokens)
	w("| arm | TTFE p50 | TTFE p99 | TTFD p50 | probes per round | failed |\n|---|---|---|---|---|---|\n")
	for _, a := range []string{"A", "B", "D", "D bg", "E", "E bg"} {
		t := g.PerRound
		w("| %s | %s | %s | %s | %s | %d |\n", a, fmtStatUS(t.stat(a, "ttfe_p50")), fmtStatUS(t.stat(a, "ttfe_p99")),
			fmtStatUS(t.stat(a, "ttfd_p50")), fmtStat(t.stat(a, "probes"), "%.0f"), g.Failed[a])
	}
	w("\nBackground − foreground, TTFE p50 paired per round: Postgres (D) %s, SQLite (E) %s.\n\n", fmtStatUS(g.Added["D"]), fmtStatUS(g.Added["E"]))
}
