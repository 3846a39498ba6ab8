package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/respgate/respgate/upstream"
)

// Config configures a Fleet.
type Config struct {
	// Topology is the pools and the probes (ParseTopology, SingleTopology).
	Topology Topology
	// Client is the template of every replica's upstream.Client: its timeouts, limits and
	// Transport; BaseURL and APIKey come from the pool.
	Client upstream.Config
	// AffinityHeader, when set, names a request header that carries AffinityValue of the
	// route's key, for an external router's session affinity (docs/fleet.md, "Behind an
	// external router"). AffinitySecret keys its HMAC; every respgate replica needs the same.
	AffinityHeader string
	AffinitySecret []byte
	// Logger receives health changes and reloads (never bodies, keys or URL credentials).
	// Nil discards.
	Logger *slog.Logger
	// OnHealth, when set, is called after every change of a replica's health, on the goroutine
	// that saw it; it must not block. Tests wait on it instead of sleeping.
	OnHealth func(replica string, healthy bool)
}

// Fleet is an upstream.Caller over pools of vLLM replicas (package doc). It is safe for
// concurrent use. New starts one prober goroutine per replica; Close stops them and waits.
type Fleet struct {
	cfg    Config
	log    *slog.Logger
	health Health
	probe  *http.Client
	probeT *http.Transport
	met    atomic.Pointer[meters]

	mu       sync.Mutex // serialises Reload and Close
	closed   bool
	gen      atomic.Pointer[generation]
	draining map[*replica]struct{} // removed by a reload, streams still running
}

// generation is one configuration's pools; a reload swaps it whole.
type generation struct {
	pools []*pool
}

type pool struct {
	cfg      Pool
	replicas []*replica
	turn     atomic.Uint64 // PolicyRoundRobin's counter
}

// replica is one vLLM server.
type replica struct {
	id     string
	pool   string
	apiKey string
	client *upstream.Client
	health string // its /health URL

	inFlight atomic.Int64
	healthy  atomic.Bool
	draining atomic.Bool
	models   atomic.Pointer[[]modelEntry] // what its /v1/models said last; nil: never asked

	mu    sync.Mutex
	state healthState

	kick chan struct{} // asks the prober to probe soon (passive marking)
	stop context.CancelFunc
	done chan struct{} // closed when the prober returned
}

// New builds the fleet, probes every replica once (at most Health.Timeout, all at once) so
// that routing starts from the real healthy set and discovered models, and starts the probers.
// ctx bounds only that first probe.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if len(cfg.Topology.Pools) == 0 {
		return nil, errors.New("fleet: no pools")
	}
	if cfg.AffinityHeader != "" && len(cfg.AffinitySecret) == 0 {
		return nil, errors.New("fleet: an affinity header needs a secret")
	}
	cfg.Topology.Health.defaults()
	f := &Fleet{cfg: cfg, log: cfg.Logger, health: cfg.Topology.Health, draining: map[*replica]struct{}{}}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.probeT = &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 1, IdleConnTimeout: 2 * f.health.Interval}
	f.probe = &http.Client{
		Transport:     f.probeT,
		Timeout:       f.health.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	g, fresh, err := f.build(cfg.Topology, nil)
	if err != nil {
		return nil, err
	}
	f.firstProbe(ctx, fresh)
	f.gen.Store(g)
	for _, r := range fresh {
		f.startProber(ctx, r)
	}
	return f, nil
}

// build makes the generation of t, reusing the replicas of old with the same identity and key
// (their in-flight counts, health and probers carry over); fresh are the new ones.
func (f *Fleet) build(t Topology, old *generation) (g *generation, fresh []*replica, err error) {
	reuse := map[string]*replica{}
	if old != nil {
		for _, p := range old.pools {
			for _, r := range p.replicas {
				reuse[r.id] = r
			}
		}
	}
	g = &generation{}
	for _, pc := range t.Pools {
		if pc.Epsilon <= 0 {
			pc.Epsilon = DefaultEpsilon
		}
		p := &pool{cfg: pc}
		for _, u := range pc.URLs {
			id := ReplicaID(u)
			if r, ok := reuse[id]; ok && r.apiKey == pc.APIKey && r.pool == pc.Name {
				delete(reuse, id)
				p.replicas = append(p.replicas, r)
				continue
			}
			cc := f.cfg.Client
			cc.BaseURL, cc.APIKey = u, pc.APIKey
			c, err := upstream.New(cc)
			if err != nil {
				for _, r := range fresh {
					r.client.CloseIdleConnections()
				}
				return nil, nil, fmt.Errorf("fleet: pool %s: %w", pc.Name, err)
			}
			r := &replica{id: id, pool: pc.Name, apiKey: pc.APIKey, client: c, health: healthURL(u), kick: make(chan struct{}, 1)}
			r.healthy.Store(true)
			r.state.Healthy = true
			p.replicas = append(p.replicas, r)
			fresh = append(fresh, r)
		}
		g.pools = append(g.pools, p)
	}
	return g, fresh, nil
}

// healthURL is vLLM's /health beside /v1 (like /tokenize).
func healthURL(base string) string {
	b := base
	for len(b) > 0 && b[len(b)-1] == '/' {
		b = b[:len(b)-1]
	}
	if len(b) >= 3 && b[len(b)-3:] == "/v1" {
		b = b[:len(b)-3]
	}
	return b + "/health"
}

// firstProbe probes rs at once and asks the healthy ones for their models.
func (f *Fleet) firstProbe(ctx context.Context, rs []*replica) {
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(func() {
			ok := f.probeOnce(ctx, r)
			r.mu.Lock()
			r.state = healthState{Healthy: ok}
			if !ok {
				r.state.Fails = f.health.Fall
			}
			r.healthy.Store(ok)
			r.mu.Unlock()
			if ok {
				f.refreshModels(ctx, r)
			} else {
				f.log.Warn("upstream replica down at start", "pool", r.pool, "replica", r.id)
			}
		})
	}
	wg.Wait()
}

// Reload replaces the topology (SIGHUP): new replicas are probed once and start serving,
// replicas kept (same URL, pool and key) keep their state, and removed replicas drain: they
// take no new call, their probers stop, and their running streams finish on their own
// connections, which close when the last one ends.
func (f *Fleet) Reload(ctx context.Context, t Topology) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("fleet: closed")
	}
	if len(t.Pools) == 0 {
		return errors.New("fleet: no pools")
	}
	old := f.gen.Load()
	g, fresh, err := f.build(t, old)
	if err != nil {
		return err
	}
	f.firstProbe(ctx, fresh)
	kept := map[*replica]bool{}
	for _, p := range g.pools {
		for _, r := range p.replicas {
			kept[r] = true
		}
	}
	f.gen.Store(g)
	for _, r := range fresh {
		f.startProber(ctx, r)
	}
	for r := range f.draining {
		if r.inFlight.Load() == 0 {
			delete(f.draining, r) // drained since the last reload
		}
	}
	for _, p := range old.pools {
		for _, r := range p.replicas {
			if kept[r] {
				continue
			}
			r.stop()
			<-r.done
			r.draining.Store(true)
			f.draining[r] = struct{}{}
			f.log.Info("upstream replica draining", "pool", r.pool, "replica", r.id, "in_flight", r.inFlight.Load())
			f.settle(r)
		}
	}
	f.log.Info("upstreams reloaded", "pools", len(g.pools), "new_replicas", len(fresh))
	return nil
}

// settle closes a draining replica's connections once nothing runs on it.
func (f *Fleet) settle(r *replica) {
	if r.draining.Load() && r.inFlight.Load() == 0 {
		r.client.CloseIdleConnections()
	}
}

// Close stops every prober and waits for it, and closes idle connections. Calls still running
// finish; no new call may start.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for _, p := range f.gen.Load().pools {
		for _, r := range p.replicas {
			r.stop()
			<-r.done
			r.client.CloseIdleConnections()
		}
	}
	for r := range f.draining {
		r.client.CloseIdleConnections()
	}
	f.probeT.CloseIdleConnections()
}

// String summarises the fleet without keys or URL credentials.
func (f *Fleet) String() string {
	g := f.gen.Load()
	s := "fleet{"
	for i, p := range g.pools {
		if i > 0 {
			s += "; "
		}
		s += p.cfg.String()
	}
	return s + "}"
}

// candidates is p's replicas as the policies see them.
func (p *pool) candidates() []Candidate {
	c := make([]Candidate, len(p.replicas))
	for i, r := range p.replicas {
		c[i] = Candidate{ID: r.id, Healthy: r.healthy.Load(), InFlight: int(r.inFlight.Load())}
	}
	return c
}

// pick applies p's policy to rt, whose candidates it returns too.
func (p *pool) pick(rt upstream.Route) (Pick, []Candidate) {
	cands := p.candidates()
	switch p.cfg.Policy {
	case PolicyLeastLoaded:
		return LeastLoaded(rt.Key, cands), cands
	case PolicyRoundRobin:
		return RoundRobin(p.turn.Add(1)-1, cands), cands
	default:
		return ChainAffine(affinity(rt, p.cfg), cands), cands
	}
}

// affinity is what ChainAffine knows of rt in pool cfg.
func affinity(rt upstream.Route, cfg Pool) Affinity {
	return Affinity{Key: rt.Key, Prefer: rt.Prefer, Away: rt.Away, Epsilon: cfg.Epsilon, MinSlack: cfg.MinSlack}
}

// retryAfter is the Retry-After of a 503 for a model whose replicas are all down: the next
// probe of a healthy-again replica is at most one interval away.
func (f *Fleet) retryAfter() string {
	return strconv.Itoa(max(1, int((f.health.Interval+time.Second-1)/time.Second)))
}

// unavailable is the 503 of a model none of whose replicas can take a call.
func (f *Fleet) unavailable(model string) error {
	msg := "No upstream replica is available; retry later."
	if model != "" {
		msg = "No upstream replica serving model `" + model + "` is available; retry later."
	}
	return &upstream.Error{Kind: upstream.KindHTTP, Status: http.StatusServiceUnavailable, Message: msg,
		RetryAfter: f.retryAfter()}
}

// notFound is the 404 model_not_found of a model no pool serves, in the words vLLM uses
// (upstream.Error maps it, docs/errors.md).
func notFound(model string) error {
	return &upstream.Error{Kind: upstream.KindHTTP, Status: http.StatusNotFound, Type: "NotFoundError",
		Param: "model", Message: "The model `" + model + "` does not exist."}
}

// poolFor is the first pool serving model; "" takes the first pool. A model no pool is known to
// serve is a 404 unless a pool that discovers its models has not been able to ask any replica
// yet (then it may be that one's: 503).
func (g *generation) poolFor(model string) (*pool, bool) {
	if model == "" {
		return g.pools[0], true
	}
	unknown := false
	for _, p := range g.pools {
		serves, known := p.serves(model)
		if serves {
			return p, true
		}
		unknown = unknown || !known
	}
	return nil, unknown
}

// serves reports whether p serves model, and whether p knows its models at all.
func (p *pool) serves(model string) (serves, known bool) {
	if len(p.cfg.Models) > 0 {
		return matches(p.cfg.Models, model), true
	}
	for _, r := range p.replicas {
		ms := r.models.Load()
		if ms == nil {
			continue
		}
		known = true
		for _, m := range *ms {
			if m.ID == model {
				return true, true
			}
		}
	}
	return false, known
}

// routing is a route's resolution: the pool, the replicas to try in order, and the key's
// first choice (Pick.Home; nil without one) with whether it was healthy at the pick.
type routing struct {
	pool   *pool
	order  []*replica
	home   *replica
	homeUp bool
	away   bool // the route's Away
}

// route resolves rt to its pool and the replicas to try, in order.
func (f *Fleet) route(ctx context.Context, rt upstream.Route) (*routing, error) {
	p, maybe := f.gen.Load().poolFor(rt.Model)
	if p == nil {
		if maybe {
			return nil, f.unavailable(rt.Model)
		}
		return nil, notFound(rt.Model)
	}
	pk, cands := p.pick(rt)
	f.met.Load().routed(ctx, p.cfg.Name, pk.Outcome)
	if len(pk.Order) == 0 {
		return nil, f.unavailable(rt.Model)
	}
	rg := &routing{pool: p, order: make([]*replica, len(pk.Order)), away: rt.Away}
	for i, k := range pk.Order {
		rg.order[i] = p.replicas[k]
	}
	if pk.Home >= 0 {
		rg.home, rg.homeUp = p.replicas[pk.Home], cands[pk.Home].Healthy
	}
	return rg, nil
}

// served is where a call routed by rg ran, on r (Away): home counts as down if the pick or a
// failed attempt of the call (passive marking) saw it down.
func (rg *routing) served(r *replica) upstream.Served {
	if rg.home == nil {
		return upstream.Served{Replica: r.id}
	}
	return upstream.Served{Replica: r.id, Away: Away(rg.away, rg.home.id, r.id, rg.homeUp && rg.home.healthy.Load())}
}

// withAffinity adds the routing-key header when one is configured.
func (f *Fleet) withAffinity(ctx context.Context, rt upstream.Route) context.Context {
	if f.cfg.AffinityHeader == "" || rt.Key == "" {
		return ctx
	}
	return upstream.WithHeader(ctx, f.cfg.AffinityHeader, AffinityValue(f.cfg.AffinitySecret, rt.Key))
}

// failover says whether a call that failed with err may go to the next replica (nothing reached
// the client, and another replica may answer), and whether err marks the replica down: it could
// not be reached, timed out before answering, broke, or answered 5xx. A 429 moves on without
// marking; a client error (4xx), a cancelled or expired caller, or vLLM's 501 for an unsupported
// tool_choice do not move on.
func failover(ctx context.Context, err error) (next, markDown bool) {
	var e *upstream.Error
	if ctx.Err() != nil || !errors.As(err, &e) {
		return false, false
	}
	switch e.Kind {
	case upstream.KindUnreachable, upstream.KindTimeout, upstream.KindStreamBroken:
		return true, true
	case upstream.KindHTTP, upstream.KindBadBody:
		switch {
		case e.Status == http.StatusTooManyRequests:
			return true, false
		case e.Status == http.StatusNotImplemented:
			return false, false
		case e.Status >= 500:
			return true, true
		}
	}
	return false, false
}

// attempt runs call on each replica of the route in order until one answers or failover says
// stop. It counts the replica's call in flight for call's duration unless keep is set (a
// stream, which ends later: its Stream releases the count).
func (f *Fleet) attempt(ctx context.Context, rt upstream.Route, call func(ctx context.Context, r *replica) (keep bool, err error)) (upstream.Served, error) {
	rg, err := f.route(ctx, rt)
	if err != nil {
		return upstream.Served{}, err
	}
	p, rs := rg.pool, rg.order
	ctx = f.withAffinity(ctx, rt)
	span := trace.SpanFromContext(ctx)
	m := f.met.Load()
	for i, r := range rs {
		r.inFlight.Add(1)
		m.request(ctx, r)
		keep, err := call(ctx, r)
		if !keep {
			f.done(r)
		}
		if err == nil {
			span.SetAttributes(attribute.String("respgate.upstream.pool", p.cfg.Name), attribute.String("respgate.upstream.replica", r.id))
			return rg.served(r), nil
		}
		next, down := failover(ctx, err)
		if upstream.IsClientGone(err) {
			return rg.served(r), err
		}
		m.failure(ctx, r, err)
		if down {
			f.markDown(r)
		}
		if !next {
			return rg.served(r), err
		}
		if i+1 < len(rs) {
			m.failover(ctx, p.cfg.Name)
			span.AddEvent("upstream.failover", trace.WithAttributes(attribute.String("respgate.upstream.replica", r.id)))
			f.log.Warn("upstream replica failed before the first byte; trying the next", "pool", p.cfg.Name, "replica", r.id, "error", err)
			continue
		}
		// Every replica failed: when none is healthy any more, the model is unavailable.
		for _, c := range p.replicas {
			if c.healthy.Load() {
				return rg.served(r), err
			}
		}
		return rg.served(r), f.unavailable(rt.Model)
	}
	return upstream.Served{}, f.unavailable(rt.Model) // not reached: rs is never empty
}

// done ends one call on r.
func (f *Fleet) done(r *replica) {
	if r.inFlight.Add(-1) == 0 && r.draining.Load() {
		f.settle(r)
	}
}

// Create is upstream.Client.Create on the replica the route picks, failing over while no
// replica has answered (upstream.Caller).
func (f *Fleet) Create(ctx context.Context, rt upstream.Route, body []byte) ([]byte, upstream.Served, error) {
	var raw []byte
	at, err := f.attempt(ctx, rt, func(ctx context.Context, r *replica) (bool, error) {
		var err error
		raw, err = r.client.Create(ctx, body)
		if err == nil {
			f.met.Load().usage(ctx, r, raw)
		}
		return false, err
	})
	if err != nil {
		return nil, at, err
	}
	return raw, at, nil
}

// StreamLent is upstream.Client.StreamLent on the replica the route picks, failing over while
// no replica has answered with a stream that began with an ordinary event (Stream.Peek; the
// turn opens the client's stream only once it has the Stream) (upstream.Caller). Every attempt lends body to its
// transport; release is called exactly once, after the last attempt's transport let go of it.
func (f *Fleet) StreamLent(ctx context.Context, rt upstream.Route, body []byte, release func()) (*upstream.Stream, upstream.Served, error) {
	var l *lender
	if release != nil {
		l = &lender{release: release}
		l.n.Store(1) // the loop's own hold
		defer l.drop()
	}
	var st *upstream.Stream
	at, err := f.attempt(ctx, rt, func(ctx context.Context, r *replica) (bool, error) {
		var rel func()
		if l != nil {
			rel = l.hold()
		}
		s, err := r.client.StreamLent(ctx, body, rel)
		if err != nil {
			return false, err
		}
		// Nothing reaches the client before the turn has the stream: a replica that answered
		// 200 and then failed before its first event (an error event, a cut, a silence past the
		// idle timeout) is a failure before the first byte too, and the call moves on.
		if err := s.Peek(); err != nil {
			_ = s.Close()
			return false, err
		}
		s.OnRelease(func() { f.done(r) })
		st = s
		return true, nil
	})
	if err != nil {
		return nil, at, err
	}
	return st, at, nil
}

// Tokenize is upstream.Client.Tokenize on a replica serving the route's model, in the route's
// order, failing over like Create.
func (f *Fleet) Tokenize(ctx context.Context, rt upstream.Route, body []byte) ([]byte, error) {
	var raw []byte
	_, err := f.attempt(ctx, rt, func(ctx context.Context, r *replica) (bool, error) {
		var err error
		raw, err = r.client.Tokenize(ctx, body)
		return false, err
	})
	return raw, err
}

// lender counts the holders of a lent body: the attempt loop and each attempt's transport. The
// caller's release runs once, when the count reaches zero.
type lender struct {
	n       atomic.Int32
	release func()
}

// hold adds a holder and returns its release, which counts once however often it is called.
func (l *lender) hold() func() {
	l.n.Add(1)
	var once sync.Once
	return func() { once.Do(l.drop) }
}

func (l *lender) drop() {
	if l.n.Add(-1) == 0 {
		l.release()
	}
}

var _ upstream.Caller = (*Fleet)(nil)
