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
	// replica when it is healthy and within the load bound, else the first replica of the key's
	// rendezvous order within the bound (ChainAffine).
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
	// Balanced: a policy without affinity chose (LeastLoaded, RoundRobin).
	Balanced
)

var outcomeNames = [...]string{NoReplica: "none", FirstChoice: "first_choice", Preferred: "preferred", Spilled: "spilled", Balanced: "balanced"}

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

// ChainAffine picks for key with bounded load ε: the Prefer replica (by ID) first when it is
// healthy and below Bound; else the first healthy replica in key's rendezvous order below Bound
// (Spilled when that was not the first healthy one). The rest of Order is the healthy
// replicas in rendezvous order, the failover order. When every healthy replica is at the bound
// the key's first healthy choice takes the call (the bound is ≥ the mean, so this happens only
// as in-flight counts change under the policy's feet). The result depends only on the
// arguments.
func ChainAffine(key, prefer string, cands []Candidate, eps float64) Pick {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	var order []int
	for _, i := range Rendezvous(key, ids) {
		if cands[i].Healthy {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return Pick{Outcome: NoReplica}
	}
	bound := Bound(cands, eps)
	choice, outcome := -1, FirstChoice
	if prefer != "" {
		for k, i := range order {
			if cands[i].ID == prefer && cands[i].InFlight < bound {
				choice = k
				if k != 0 {
					outcome = Preferred
				}
				break
			}
		}
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
