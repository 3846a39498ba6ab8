package fleet

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// Policy is how a pool picks the replica of a call.
type Policy int

// Policies.
const (
	// PolicyChainAffine (the default) keeps every turn of a chain on one replica: the route's Prefer
	// replica when it is healthy and within the load bound (unless the chain is away from the
	// key's first choice, which is healthy again), else the first replica of the key's rendezvous
	// order within the bound (ChainAffine).
	PolicyChainAffine Policy = iota
	// PolicyLeastLoaded picks the replica with the fewest calls in flight.
	PolicyLeastLoaded
	// PolicyRoundRobin takes the replicas in turn.
	PolicyRoundRobin
)

var policyNames = [...]string{PolicyChainAffine: "chain-affine", PolicyLeastLoaded: "least-loaded", PolicyRoundRobin: "round-robin"}

// String returns the policy's configuration name.
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("policy(%d)", int(p))
}

// ParsePolicy reads a policy's configuration name ("" is PolicyChainAffine).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return PolicyChainAffine, nil
	}
	for p, name := range policyNames {
		if s == name {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("unknown policy %q (want %s)", s, strings.Join(policyNames[:], ", "))
}

// DefaultEpsilon is the default load slack of ChainAffine: a replica takes a key's call while
// its calls in flight stay within (1+ε) × the pool's mean (docs/fleet.md, "Sizing ε").
const DefaultEpsilon = 0.25

// DefaultMinSlack is the default least slack of ChainAffine in calls: whatever ε, a replica
// takes a key's call while its calls in flight are below ⌈mean⌉ + 2 (Bound).
const DefaultMinSlack = 2

// Candidate is a replica as a policy sees it: its identity (the same string on every respgate
// replica: the pool's configuration gives it), whether it is healthy, and its calls in flight.
type Candidate struct {
	ID       string
	Healthy  bool
	InFlight int
}

// Outcome says how a policy chose.
type Outcome int

// Outcomes, counted per pool (docs/fleet.md, "Metrics").
const (
	// NoReplica: no healthy candidate.
	NoReplica Outcome = iota
	// FirstChoice: the key's first healthy replica in rendezvous order (an affinity hit).
	FirstChoice
	// Preferred: the route's Prefer replica, which is not the key's first choice (the chain
	// spilled earlier and stays where its freshest prefix is).
	Preferred
	// Spilled: the first choice was over the load bound, and the walk went on.
	Spilled
	// Returned: the key's first choice, over the route's Prefer, because the chain is away from
	// it (Affinity.Away): it had left it because it was down, not because of the bound
	// (ChainAffine).
	Returned
	// Balanced: a policy without affinity chose (LeastLoaded, RoundRobin).
	Balanced
)

var outcomeNames = [...]string{NoReplica: "none", FirstChoice: "first_choice", Preferred: "preferred", Spilled: "spilled", Returned: "returned", Balanced: "balanced"}

// String is the outcome's metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Pick is a policy's answer: the healthy candidates to try, by index, in order (the first is
// the choice, the rest the failover order), and how the first was chosen. Home is the index of
// the key's first choice among all the candidates, healthy or not (ChainAffine; -1 for the
// policies without affinity): a call that runs elsewhere while it is down leaves the chain away
// from it (Away).
type Pick struct {
	Order   []int
	Outcome Outcome
	Home    int
}

// score is the rendezvous (highest random weight) score of id for key: FNV-1a over
// key, a separator and id, finished by splitmix64's mixer so that neighbouring ids spread.
// It is a pure function, the same in every process and on every architecture.
func score(key, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Rendezvous returns the indexes of ids in key's rendezvous order: highest score first, ties
// (equal ids) by index. Removing an id moves only the keys whose first choice it was.
func Rendezvous(key string, ids []string) []int {
	type ranked struct {
		i int
		s uint64
	}
	r := make([]ranked, len(ids))
	for i, id := range ids {
		r[i] = ranked{i, score(key, id)}
	}
	slices.SortFunc(r, func(a, b ranked) int {
		if c := cmp.Compare(b.s, a.s); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	out := make([]int, len(r))
	for k, v := range r {
		out[k] = v.i
	}
	return out
}

// Bound is the most calls in flight a replica may hold and still take a key's call under
// ChainAffine: ⌈(1+ε) × (in flight + 1) / healthy replicas⌉, the mean counted with the new call
// (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam 2018), but at least
// minSlack calls above the mean (⌈mean⌉ + minSlack), and at least 1. A replica whose in-flight
// count is below Bound can take the call.
//
// minSlack keeps chains on their cache at low load, where ε of a small mean is less than one
// call: with 3 calls in flight over 4 replicas the paper's capacity with ε = 0.5 is 2, so a
// replica running 2 calls would send a chain to an idle one to re-prefill its whole prefix,
// for an imbalance of one call, which a vLLM replica batches at no cost. The cache-aware
// routers hold off the same way (SGLang's model gateway balances only past an absolute
// difference in requests, Ray Serve's prefix-aware router only past an imbalance threshold).
func Bound(cands []Candidate, eps float64, minSlack int) int {
	total, healthy := 1, 0
	for _, c := range cands {
		if c.Healthy {
			total += c.InFlight
			healthy++
		}
	}
	if healthy == 0 {
		return 0
	}
	b := int(ceilDiv((1+eps)*float64(total), float64(healthy)))
	return max(b, int(ceilDiv(float64(total), float64(healthy)))+minSlack, 1)
}

func ceilDiv(a, b float64) float64 {
	q := a / b
	if f := float64(int64(q)); f < q {
		return f + 1
	}
	return q
}

// Affinity is what ChainAffine knows of a call besides the candidates.
type Affinity struct {
	// Key is the chain's routing key (upstream.Route.Key).
	Key string
	// Prefer is the replica that served the chain's previous turn (upstream.Route.Prefer), and
	// Away whether that turn left the chain away from its key's first choice (upstream.Route.Away).
	Prefer string
	Away   bool
	// Epsilon and MinSlack are the load slack of Bound.
	Epsilon  float64
	MinSlack int
}

// Away is upstream.Served.Away of a call whose pick had home as the key's first choice
// (Pick.Home; "" when the policy has none) and that ran on served: the chain is away when it
// ran elsewhere than home while home was down (at the pick, or marked down by a failed attempt
// of the call: homeUp is false if either saw it down), or when it was away already (wasAway,
// upstream.Route.Away) and has not gone back. A chain that ran elsewhere only because of the load bound is
// not away: it stays with its freshest prefix. Every respgate replica that sees home healthy
// sends an away chain back, whichever routed its previous turns, so the return does not
// depend on when each of them saw home come back.
func Away(wasAway bool, home, served string, homeUp bool) bool {
	return home != "" && served != home && (wasAway || !homeUp)
}

// ChainAffine picks for a.Key with bounded load a.Epsilon, in order:
//
//  1. the Prefer replica (by ID), when it is healthy and below Bound (Preferred, or FirstChoice
//     when it is the first choice): it holds the chain's freshest prefix, also after a spill;
//     but when the chain is away (Affinity.Away) and the key's first choice is healthy and below
//     Bound, the first choice (Returned): the chain had left it only because it was down;
//  2. else the first healthy replica in the key's rendezvous order below Bound (Spilled when
//     that was not the first healthy one).
//
// The rest of Order is the healthy replicas in rendezvous order, the failover order. When every
// healthy replica is at the bound the key's first healthy choice takes the call (the bound is ≥
// the mean, so this happens only as in-flight counts change under the policy's feet). The
// result depends only on the arguments.
func ChainAffine(a Affinity, cands []Candidate) Pick {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	var order []int
	all := Rendezvous(a.Key, ids)
	for _, i := range all {
		if cands[i].Healthy {
			order = append(order, i)
		}
	}
	home := -1
	if len(all) > 0 {
		home = all[0]
	}
	if len(order) == 0 {
		return Pick{Outcome: NoReplica, Home: home}
	}
	bound := Bound(cands, a.Epsilon, a.MinSlack)
	choice, outcome := -1, FirstChoice
	if a.Prefer != "" {
		for k, i := range order {
			if cands[i].ID == a.Prefer && cands[i].InFlight < bound {
				choice = k
				if k != 0 {
					outcome = Preferred
				}
				break
			}
		}
	}
	if first := &cands[order[0]]; choice > 0 && a.Away && order[0] == home && first.InFlight < bound {
		choice, outcome = 0, Returned
	}
	if choice < 0 {
		choice = 0
		for k, i := range order {
			if cands[i].InFlight < bound {
				choice = k
				break
			}
		}
		if choice != 0 {
			outcome = Spilled
		}
	}
	if choice != 0 {
		c := order[choice]
		order = append(append([]int{c}, order[:choice]...), order[choice+1:]...)
	}
	return Pick{Order: order, Outcome: outcome, Home: home}
}

// LeastLoaded orders the healthy replicas by calls in flight, ties in key's rendezvous order
// (so equal loads do not all go to the first replica listed).
func LeastLoaded(key string, cands []Candidate) Pick {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	rank := make([]int, len(cands))
	for k, i := range Rendezvous(key, ids) {
		rank[i] = k
	}
	var order []int
	for i, c := range cands {
		if c.Healthy {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return Pick{Outcome: NoReplica, Home: -1}
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(cands[a].InFlight, cands[b].InFlight); c != 0 {
			return c
		}
		return cmp.Compare(rank[a], rank[b])
	})
	return Pick{Order: order, Outcome: Balanced, Home: -1}
}

// RoundRobin orders the healthy replicas starting at the turn-th of them, in configuration
// order; the caller advances turn once per call.
func RoundRobin(turn uint64, cands []Candidate) Pick {
	var healthy []int
	for i, c := range cands {
		if c.Healthy {
			healthy = append(healthy, i)
		}
	}
	if len(healthy) == 0 {
		return Pick{Outcome: NoReplica, Home: -1}
	}
	start := int(turn % uint64(len(healthy))) //nolint:gosec // G115: less than len(healthy)
	return Pick{Order: append(healthy[start:len(healthy):len(healthy)], healthy[:start]...), Outcome: Balanced, Home: -1}
}
