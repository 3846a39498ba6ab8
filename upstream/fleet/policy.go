package fleet

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// Policy is how a pool picks the replica of a call.
type Policy int

// Policies.
const (
	// PolicyChainAffine (the default) keeps every turn of a chain on one replica: the route's Prefer
	// replica when it is healthy and within the load bound (unless the key's first choice came
	// back after the chain's previous turn), else the first replica of the key's rendezvous order
	// within the bound (ChainAffine).
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

// Candidate is a replica as a policy sees it: its identity (the same string on every respgate
// replica: the pool's configuration gives it), whether it is healthy, its calls in flight, and
// when this fleet last saw it come back healthy after being down (zero: never, since the fleet
// started or the replica joined).
type Candidate struct {
	ID       string
	Healthy  bool
	InFlight int
	UpSince  time.Time
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
	// Returned: the key's first choice, over the route's Prefer, because the first choice came
	// back healthy after the chain's previous turn: the chain had left it because it was down,
	// not because of the bound (ChainAffine).
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
// the choice, the rest the failover order), and how the first was chosen.
type Pick struct {
	Order   []int
	Outcome Outcome
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
// (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam 2018), at least 1.
// A replica whose in-flight count is below Bound can take the call.
func Bound(cands []Candidate, eps float64) int {
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
	return max(b, 1)
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
	// PreviousAt when that turn was created (upstream.Route.PreviousAt; zero: unknown).
	Prefer     string
	PreviousAt time.Time
	// Epsilon is the load slack of Bound.
	Epsilon float64
	// Lag is how much later than this fleet another respgate replica may see a replica come
	// back (its probe backoff and timeout, Fleet.returnLag): a turn it served that long after
	// this fleet's UpSince may still have found the replica down.
	Lag time.Duration
}

// returned reports whether c, the key's first healthy choice, came back after the chain's
// previous turn was routed (or within Lag of it): the chain left c because c was down, and goes
// back to it, as rendezvous hashing without a Prefer would send it. A chain that left c because
// of the bound, while c was healthy, is not returned: its previous turn came after c's UpSince.
func (a *Affinity) returned(c *Candidate) bool {
	return !c.UpSince.IsZero() && !a.PreviousAt.IsZero() && a.PreviousAt.Before(c.UpSince.Add(a.Lag))
}

// ChainAffine picks for a.Key with bounded load a.Epsilon, in order:
//
//  1. the Prefer replica (by ID), when it is healthy and below Bound (Preferred, or FirstChoice
//     when it is the first choice): it holds the chain's freshest prefix, also after a spill;
//     but when the key's first healthy choice in rendezvous order is below Bound too and came
//     back after the chain's previous turn (Affinity.returned), the first choice (Returned): the
//     chain had left it only because it was down;
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
	for _, i := range Rendezvous(a.Key, ids) {
		if cands[i].Healthy {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return Pick{Outcome: NoReplica}
	}
	bound := Bound(cands, a.Epsilon)
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
	if first := &cands[order[0]]; choice > 0 && first.InFlight < bound && a.returned(first) {
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
	return Pick{Order: order, Outcome: outcome}
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
		return Pick{Outcome: NoReplica}
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(cands[a].InFlight, cands[b].InFlight); c != 0 {
			return c
		}
		return cmp.Compare(rank[a], rank[b])
	})
	return Pick{Order: order, Outcome: Balanced}
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
		return Pick{Outcome: NoReplica}
	}
	start := int(turn % uint64(len(healthy))) //nolint:gosec // G115: less than len(healthy)
	return Pick{Order: append(healthy[start:len(healthy):len(healthy)], healthy[:start]...), Outcome: Balanced}
}
