package upstream

import "context"

// Route is what a turn tells the upstream about one call, so that a fleet of vLLM servers can
// pick the replica (docs/design.md §10): the model picks the pool, the key keeps a chain on one
// replica (its lineage root, its conversation, the client's prompt_cache_key, or a digest of the
// turn's opening), Prefer names the replica that served the chain's previous turn, whose prefix
// cache is the freshest, and Away is that turn's Served.Away: the chain is away from its key's
// first choice because that replica was down, and goes back once it is healthy again (a chain
// that left it because of the load bound stays with its freshest prefix). The zero Route is a
// call with no affinity.
type Route struct {
	Model  string
	Key    string
	Prefer string
	Away   bool
}

// Served is where a call ran: the replica that answered ("" for a single server), and whether
// the chain is away from its key's first choice because that replica was down when the call
// was routed or failed it, or the chain was away before and has not gone back (the next turn's
// Route.Away). The turn stores both with the response.
type Served struct {
	Replica string
	Away    bool
}

// Caller is the upstream as the turn engine calls it: one vLLM server (Single) or a fleet of
// them. Each call reports where it ran (Served), which the turn stores so that the chain's next
// turn can prefer that replica.
type Caller interface {
	// Create is Client.Create on the replica the route picks.
	Create(ctx context.Context, rt Route, body []byte) (raw []byte, at Served, err error)
	// StreamLent is Client.StreamLent on the replica the route picks: release is called exactly
	// once, when no replica holds body any more.
	StreamLent(ctx context.Context, rt Route, body []byte, release func()) (s *Stream, at Served, err error)
	// Tokenize is Client.Tokenize on a replica serving the route's model.
	Tokenize(ctx context.Context, rt Route, body []byte) ([]byte, error)
	// Models is the raw JSON list of the models served (GET /v1/models).
	Models(ctx context.Context) ([]byte, error)
}

// Single is the Caller of one vLLM server: every route goes to c.
func Single(c *Client) Caller { return single{c} }

type single struct{ c *Client }

func (s single) Create(ctx context.Context, _ Route, body []byte) ([]byte, Served, error) {
	raw, err := s.c.Create(ctx, body)
	return raw, Served{}, err
}

func (s single) StreamLent(ctx context.Context, _ Route, body []byte, release func()) (*Stream, Served, error) {
	st, err := s.c.StreamLent(ctx, body, release)
	return st, Served{}, err
}

func (s single) Tokenize(ctx context.Context, _ Route, body []byte) ([]byte, error) {
	return s.c.Tokenize(ctx, body)
}

func (s single) Models(ctx context.Context) ([]byte, error) { return s.c.Models(ctx) }
