package upstream

import (
	"context"
	"time"
)

// Route is what a turn tells the upstream about one call, so that a fleet of vLLM servers can
// pick the replica (docs/design.md §10): the model picks the pool, the key keeps a chain on one
// replica (its lineage root, its conversation, the client's prompt_cache_key, or a digest of the
// turn's opening), and Prefer names the replica that served the chain's previous turn, whose
// prefix cache is the freshest, and PreviousAt when that turn was created (zero: unknown), which
// tells a chain that left its first choice because it was down (it goes back once it is healthy
// again) from one that left it because of the load bound (it stays). The zero Route is a call
// with no affinity.
type Route struct {
	Model      string
	Key        string
	Prefer     string
	PreviousAt time.Time
}

// Caller is the upstream as the turn engine calls it: one vLLM server (Single) or a fleet of
// them. Each call reports the replica that answered ("" for a single server), which the turn
// stores so that the chain's next turn can prefer it.
type Caller interface {
	// Create is Client.Create on the replica the route picks.
	Create(ctx context.Context, rt Route, body []byte) (raw []byte, replica string, err error)
	// StreamLent is Client.StreamLent on the replica the route picks: release is called exactly
	// once, when no replica holds body any more.
	StreamLent(ctx context.Context, rt Route, body []byte, release func()) (s *Stream, replica string, err error)
	// Tokenize is Client.Tokenize on a replica serving the route's model.
	Tokenize(ctx context.Context, rt Route, body []byte) ([]byte, error)
	// Models is the raw JSON list of the models served (GET /v1/models).
	Models(ctx context.Context) ([]byte, error)
}

// Single is the Caller of one vLLM server: every route goes to c.
func Single(c *Client) Caller { return single{c} }

type single struct{ c *Client }

func (s single) Create(ctx context.Context, _ Route, body []byte) ([]byte, string, error) {
	raw, err := s.c.Create(ctx, body)
	return raw, "", err
}

func (s single) StreamLent(ctx context.Context, _ Route, body []byte, release func()) (*Stream, string, error) {
	st, err := s.c.StreamLent(ctx, body, release)
	return st, "", err
}

func (s single) Tokenize(ctx context.Context, _ Route, body []byte) ([]byte, error) {
	return s.c.Tokenize(ctx, body)
}

func (s single) Models(ctx context.Context) ([]byte, error) { return s.c.Models(ctx) }
