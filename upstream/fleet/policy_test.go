package fleet

import (
	"fmt"
	"slices"
	"testing"

	"github.com/respgate/respgate/upstream"
)

func cands(spec ...any) []Candidate {
	// spec: id, healthy, inflight, id, healthy, inflight, …
	var out []Candidate
	for i := 0; i+2 < len(spec); i += 3 {
		out = append(out, Candidate{ID: spec[i].(string), Healthy: spec[i+1].(bool), InFlight: spec[i+2].(int)})
	}
	return out
}

func TestRendezvousIsAPureFunctionOfKeyAndIDs(t *testing.T) {
	ids := []string{"http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1", "http://d:8000/v1"}
	// Golden orders: every respgate replica, build and architecture must agree on these.
	for _, tc := range []struct {
		key  string
		want []int
	}{
		{"chain-1", []int{2, 0, 3, 1}},
		{"", []int{2, 3, 1, 0}},
	} {
		got := Rendezvous(tc.key, ids)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Rendezvous(%q) = %v, want %v", tc.key, got, tc.want)
		}
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if !slices.Equal(sorted, []int{0, 1, 2, 3}) {
			t.Errorf("Rendezvous(%q) = %v, not a permutation", tc.key, got)
		}
	}
	// Reordering the configuration does not change the replica chosen.
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	for k := range 200 {
		key := fmt.Sprint("key-", k)
		if a, b := ids[Rendezvous(key, ids)[0]], rev[Rendezvous(key, rev)[0]]; a != b {
			t.Fatalf("key %s: %s in one order, %s in the other", key, a, b)
		}
	}
}

func TestRendezvousGoldenScores(t *testing.T) {
	// Fixed values pin the hash: a change here moves every chain of every deployment.
	for _, tc := range []struct {
		key, id string
		want    uint64
	}{
		{"k", "a", 0x2253abbcc64dc683},
		{"chain-1", "http://a:8000/v1", 0x49e338cf0585ca83},
	} {
		if got := score(tc.key, tc.id); got != tc.want {
			t.Errorf("score(%q, %q) = %#x, want %#x", tc.key, tc.id, got, tc.want)
		}
	}
	if score("ab", "c") == score("a", "bc") {
		t.Error("the separator does not separate key and id")
	}
}

func TestRendezvousMovesOnlyTheRemovedReplicasKeys(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	without := []string{"a", "b", "d", "e"} // c left
	moved, owned := 0, 0
	for k := range 5000 {
		key := fmt.Sprint("chain-", k)
		before := ids[Rendezvous(key, ids)[0]]
		after := without[Rendezvous(key, without)[0]]
		if before == "c" {
			owned++
			continue
		}
		if before != after {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d keys moved that c did not own", moved)
	}
	if owned < 800 || owned > 1200 {
		t.Errorf("c owned %d of 5000 keys, want about 1000", owned)
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []Candidate
		eps   float64
		slack int
		want  int
	}{
		{"idle pool", cands("a", true, 0, "b", true, 0), 0.25, 0, 1},
		{"the new call counts in the mean", cands("a", true, 3, "b", true, 4), 0.25, 0, 5},                 // 1.25×8/2 = 5
		{"rounded up", cands("a", true, 1, "b", true, 1, "c", true, 1), 0.25, 0, 2},                        // 1.25×4/3 = 1.67
		{"unhealthy replicas count neither load nor share", cands("a", true, 2, "b", false, 9), 0.5, 0, 5}, // 1.5×3/1 = 4.5
		{"no healthy replica", cands("a", false, 0), 0.25, 0, 0},
		{"no healthy replica, with a slack", cands("a", false, 0), 0.25, 2, 0},
		// The least slack in calls: ⌈mean⌉ + slack when that is above the paper's capacity.
		{"low load: the slack in calls wins", cands("a", true, 2, "b", true, 1, "c", true, 0, "d", true, 0), 0.5, 2, 3}, // max(⌈1.5×4/4⌉ = 2, ⌈4/4⌉ + 2 = 3)
		{"the mean is rounded up before the slack", cands("a", true, 2, "b", true, 2, "c", true, 0), 0.01, 1, 3},        // max(⌈1.01×5/3⌉ = 2, ⌈5/3⌉ + 1 = 3)
		{"higher load: ε wins", cands("a", true, 10, "b", true, 10, "c", true, 10, "d", true, 9), 0.5, 2, 15},           // max(⌈1.5×40/4⌉ = 15, 10 + 2 = 12)
		{"idle pool with a slack", cands("a", true, 0, "b", true, 0), 0.25, 2, 3},                                       // max(1, ⌈1/2⌉ + 2 = 3)
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bound(tc.cands, tc.eps, tc.slack); got != tc.want {
				t.Errorf("Bound = %d, want %d", got, tc.want)
			}
		})
	}
}

// The bound is the capacity of consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam): with m calls in flight on n replicas, a replica takes the new call when its load
// with the call is within ⌈(1+ε)(m+1)/n⌉, the new call counted in m+1. Exhaustively over small
// loads, where rounding matters most, the key's first choice takes the call exactly then.
func TestChainAffineBoundIsThePapersCapacity(t *testing.T) {
	ids := []string{"a", "b", "c"}
	first := Rendezvous("k", ids)[0]
	for l0 := range 7 {
		for l1 := range 7 {
			for l2 := range 7 {
				loads := []int{l0, l1, l2}
				c := make([]Candidate, len(ids))
				m := 0
				for i, id := range ids {
					c[i] = Candidate{ID: id, Healthy: true, InFlight: loads[i]}
					m += loads[i]
				}
				// ⌈(1+1/4)(m+1)/n⌉ in integers: ⌈5(m+1) / 4n⌉.
				capacity := (5*(m+1) + 4*len(ids) - 1) / (4 * len(ids))
				takes := ChainAffine(Affinity{Key: "k", Epsilon: 0.25}, c).Outcome == FirstChoice
				if want := loads[first]+1 <= capacity; takes != want {
					t.Fatalf("loads %v (first choice %s): first choice takes the call %v, want %v (capacity %d)", loads, ids[first], takes, want, capacity)
				}
			}
		}
	}
}

func TestChainAffine(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	order := Rendezvous("k", ids)
	first, second, third, fourth := ids[order[0]], ids[order[1]], ids[order[2]], ids[order[3]]
	mk := func(load map[string]int, down ...string) []Candidate {
		var out []Candidate
		for _, id := range ids {
			out = append(out, Candidate{ID: id, Healthy: !slices.Contains(down, id), InFlight: load[id]})
		}
		return out
	}
	idsOf := func(c []Candidate, p Pick) []string {
		var out []string
		for _, i := range p.Order {
			out = append(out, c[i].ID)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		prefer  string
		away    bool
		c       []Candidate
		eps     float64
		first   string
		outcome Outcome
		n       int // replicas in the order
	}{
		{"idle: the key's first choice", "", false, mk(nil), 0.25, first, FirstChoice, 4},
		{"prefer wins when healthy and within the bound", second, false, mk(nil), 0.25, second, Preferred, 4},
		{"prefer equal to the first choice is a first choice", first, false, mk(nil), 0.25, first, FirstChoice, 4},
		{"prefer over the bound falls back to rendezvous order", second, false, mk(map[string]int{second: 5, first: 0}), 0.25, first, FirstChoice, 4},
		{"prefer down falls back", second, false, mk(nil, second), 0.25, first, FirstChoice, 3},
		// 1 in flight: the bound ⌈1.25×2/4⌉ = 1, which prefer's 1 call reaches.
		{"prefer at the bound falls back", second, false, mk(map[string]int{second: 1}), 0.25, first, FirstChoice, 4},
		{"unknown prefer is ignored", "zzz", false, mk(nil), 0.25, first, FirstChoice, 4},
		{"first choice over the bound spills to the next in order", "", false, mk(map[string]int{first: 4}), 0.25, second, Spilled, 4},
		{"a spill walks past every full replica", "", false, mk(map[string]int{first: 4, second: 4}), 0.25, third, Spilled, 4},
		{"first choice down: the next is the key's first healthy choice", "", false, mk(nil, first), 0.25, second, FirstChoice, 3},
		{"all down: nothing", "", false, mk(nil, "a", "b", "c", "d"), 0.25, "", NoReplica, 0},
		{"a large epsilon keeps affinity under load", "", false, mk(map[string]int{first: 4}), 4, first, FirstChoice, 4},

		// The return: a chain away from its first choice (it left it because it was down) goes
		// back to it from Prefer once it is healthy and within the bound.
		{"away, first choice healthy again: returned", second, true, mk(nil), 0.25, first, Returned, 4},
		{"not away (a spill), first choice healthy: prefer keeps the chain", second, false, mk(nil), 0.25, second, Preferred, 4},
		{"away, first choice at the bound: prefer keeps the chain", second, true, mk(map[string]int{first: 4}), 0.25, second, Preferred, 4},
		// 12 in flight: the bound ⌈1.25·13/4⌉ = 5, which the first choice's 4 calls are below.
		{"away, first choice loaded but below the bound: returned", second, true, mk(map[string]int{first: 4, second: 3, third: 3, fourth: 2}), 0.25, first, Returned, 4},
		// 13 in flight: the bound ⌈1.25·14/4⌉ = 5, which the first choice's 5 calls reach.
		{"away, first choice exactly at the bound: prefer keeps the chain", second, true, mk(map[string]int{first: 5, second: 3, third: 3, fourth: 2}), 0.25, second, Preferred, 4},
		{"not away, first choice below the bound: prefer keeps the chain", second, false, mk(map[string]int{first: 2, second: 2, third: 2, fourth: 2}), 0.25, second, Preferred, 4},
		{"away, first choice and prefer at the bound: spill", second, true, mk(map[string]int{first: 4, second: 4}), 0.25, third, Spilled, 4},
		{"away, prefer down: the first choice", second, true, mk(nil, second), 0.25, first, FirstChoice, 3},
		{"away without prefer: a first choice", "", true, mk(nil), 0.25, first, FirstChoice, 4},
		{"away, prefer is the first choice: a first choice", first, true, mk(nil), 0.25, first, FirstChoice, 4},
		{"away, first choice still down: prefer, not the second back before it", third, true, mk(nil, first), 0.25, third, Preferred, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ChainAffine(Affinity{Key: "k", Prefer: tc.prefer, Away: tc.away, Epsilon: tc.eps}, tc.c)
			got := idsOf(tc.c, p)
			if p.Outcome != tc.outcome || len(got) != tc.n || (tc.n > 0 && got[0] != tc.first) {
				t.Fatalf("pick %v (%s), want %s first (%s) of %d", got, p.Outcome, tc.first, tc.outcome, tc.n)
			}
			// Home is the key's first choice whatever its health.
			if p.Home != order[0] {
				t.Errorf("home %d, want %d (%s)", p.Home, order[0], first)
			}
			// The failover order after the choice is the rendezvous order of the healthy rest.
			var rest []string
			for _, i := range order {
				if id := ids[i]; tc.c[i].Healthy && id != tc.first {
					rest = append(rest, id)
				}
			}
			if tc.n > 0 && !slices.Equal(got[1:], rest) {
				t.Errorf("failover order %v, want %v", got[1:], rest)
			}
		})
	}
}

// At low load the least slack in calls keeps a chain home where ε alone would spill it: with 3
// calls in flight over 4 replicas and ε = 0.5 the paper's capacity is 2, and the first choice
// runs 2.
func TestChainAffineMinSlackKeepsAChainHomeAtLowLoad(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	order := Rendezvous("k", ids)
	c := make([]Candidate, len(ids))
	for i, id := range ids {
		c[i] = Candidate{ID: id, Healthy: true}
	}
	c[order[0]].InFlight, c[order[1]].InFlight = 2, 1
	if p := ChainAffine(Affinity{Key: "k", Epsilon: 0.5}, c); p.Outcome != Spilled {
		t.Errorf("without a slack in calls: %s, want spilled", p.Outcome)
	}
	if p := ChainAffine(Affinity{Key: "k", Epsilon: 0.5, MinSlack: 2}, c); p.Outcome != FirstChoice || p.Order[0] != order[0] {
		t.Errorf("with min_slack 2: %s on %s, want the first choice %s", p.Outcome, c[p.Order[0]].ID, ids[order[0]])
	}
}

// A pool's ε and least slack reach the policy with the route's affinity.
func TestAffinityCarriesThePoolsSlack(t *testing.T) {
	rt := upstream.Route{Model: "m", Key: "k", Prefer: "p", Away: true}
	want := Affinity{Key: "k", Prefer: "p", Away: true, Epsilon: 0.5, MinSlack: 3}
	if got := affinity(rt, Pool{Epsilon: 0.5, MinSlack: 3}); got != want {
		t.Errorf("affinity %+v, want %+v", got, want)
	}
}

// A call leaves its chain away from the key's first choice only when it ran elsewhere while
// that replica was down, or the chain was away already and did not go back; the policies
// without affinity (no home) never do.
func TestAway(t *testing.T) {
	for _, tc := range []struct {
		wasAway      bool
		home, served string
		homeUp, want bool
	}{
		{false, "a", "b", false, true},  // left a down home
		{false, "a", "b", true, false},  // a spill or a preferred replica: stays, not away
		{false, "a", "a", false, false}, // ran at home
		{true, "a", "b", true, true},    // away and not back yet (home at the bound)
		{true, "a", "b", false, true},   // away, home still down
		{true, "a", "a", true, false},   // back home
		{true, "", "b", false, false},   // no home: least-loaded, round-robin
		{false, "", "b", false, false},
	} {
		if got := Away(tc.wasAway, tc.home, tc.served, tc.homeUp); got != tc.want {
			t.Errorf("Away(%v, %q, %q, %v) = %v, want %v", tc.wasAway, tc.home, tc.served, tc.homeUp, got, tc.want)
		}
	}
}

func TestChainAffineKeepsLoadWithinTheBound(t *testing.T) {
	// Many keys arriving with no call ending: every replica stays within ⌈(1+ε)·mean⌉.
	ids := []string{"a", "b", "c", "d"}
	c := make([]Candidate, len(ids))
	for i, id := range ids {
		c[i] = Candidate{ID: id, Healthy: true}
	}
	const eps = 0.25
	for k := range 400 {
		b := Bound(c, eps, 0)
		p := ChainAffine(Affinity{Key: fmt.Sprint("s", k), Epsilon: eps}, c)
		c[p.Order[0]].InFlight++
		total := 0
		for _, x := range c {
			total += x.InFlight
		}
		for _, x := range c {
			if x.InFlight > b {
				t.Fatalf("after %d calls %s holds %d > bound %d", total, x.ID, x.InFlight, b)
			}
		}
	}
}

func TestLeastLoaded(t *testing.T) {
	c := cands("a", true, 3, "b", true, 1, "c", false, 0, "d", true, 2)
	p := LeastLoaded("k", c)
	var got []string
	for _, i := range p.Order {
		got = append(got, c[i].ID)
	}
	if !slices.Equal(got, []string{"b", "d", "a"}) || p.Outcome != Balanced {
		t.Errorf("order %v (%s), want [b d a] balanced", got, p.Outcome)
	}
	// Ties follow the key's rendezvous order, not the configuration's.
	even := cands("a", true, 0, "b", true, 0, "c", true, 0)
	if got, want := LeastLoaded("k2", even).Order[0], Rendezvous("k2", []string{"a", "b", "c"})[0]; got != want {
		t.Errorf("tie broken to %d, want %d", got, want)
	}
	if p := LeastLoaded("k", cands("a", false, 0)); p.Outcome != NoReplica || len(p.Order) != 0 {
		t.Errorf("all down: %+v", p)
	}
}

func TestRoundRobin(t *testing.T) {
	c := cands("a", true, 0, "b", false, 0, "c", true, 0, "d", true, 0)
	for _, tc := range []struct {
		turn uint64
		want []int
	}{
		{0, []int{0, 2, 3}},
		{1, []int{2, 3, 0}},
		{2, []int{3, 0, 2}},
		{3, []int{0, 2, 3}},
	} {
		if p := RoundRobin(tc.turn, c); !slices.Equal(p.Order, tc.want) {
			t.Errorf("turn %d: %v, want %v", tc.turn, p.Order, tc.want)
		}
	}
	if p := RoundRobin(7, cands("a", false, 0)); p.Outcome != NoReplica {
		t.Errorf("all down: %+v", p)
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": PolicyChainAffine, "chain-affine": PolicyChainAffine, "least-loaded": PolicyLeastLoaded, "round-robin": PolicyRoundRobin} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("random"); err == nil {
		t.Error("ParsePolicy(random) succeeded")
	}
}
