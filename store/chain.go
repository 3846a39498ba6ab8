package store

import (
	"errors"
	"fmt"

	"github.com/respgate/respgate/wire"
)

// maxChainDepth bounds the recursion of the chain queries so that a corrupt, cyclic chain cannot
// run forever; no real conversation comes near it.
const maxChainDepth = 100_000

// Items flattens the chain into the history it stands for: each turn's input items then its
// output items, oldest turn first: the order rehydration replays a chain in.
func (c *Chain) Items() []wire.Item {
	n := 0
	for _, t := range c.Turns {
		n += len(t.Input) + len(t.Output)
	}
	out := make([]wire.Item, 0, n)
	for _, t := range c.Turns {
		out = append(append(out, t.Input...), t.Output...)
	}
	return out
}

// Kinds of a record row.
const (
	kindResponse   = 0
	kindInput      = 1
	kindOutput     = 2
	kindGeneration = 3 // the chain query's first row: the lineage generation in position
)

// recordRow is one row of a query mixing response records (kind 0) with their items (kind 1:
// input, 2: output), each record followed by its items:
//
//	(depth, kind, id, tenant, status, model, previous_response_id, conversation_id, created_at,
//	 completed_at, echo, usage, error, incomplete_details, item_id, item_type, data, position,
//	 replica, replica_away)
//
// The text columns of the other kind are ” and the others NULL; depth and position only order
// the rows.
type recordRow struct {
	depth, kind, position int
	r                     Response
	status                string
	created, completed    nullTime
	echo, usage, errJSON  []byte
	incomplete            []byte
	item                  wire.Item
	data                  []byte
}

func (rr *recordRow) scan(row Row) error {
	return row.Scan(&rr.depth, &rr.kind, &rr.r.ID, &rr.r.Tenant, &rr.status, &rr.r.Model,
		&rr.r.PreviousResponseID, &rr.r.ConversationID, &rr.created, &rr.completed,
		&rr.echo, &rr.usage, &rr.errJSON, &rr.incomplete, &rr.item.ID, &rr.item.Type, &rr.data, &rr.position,
		&rr.r.Replica, &rr.r.ReplicaAway)
}

func (rr *recordRow) response() Response {
	r := rr.r
	r.Status = wire.Status(rr.status)
	r.CreatedAt = rr.created.t
	r.CompletedAt = rr.completed.ptr()
	r.Echo, r.Usage, r.Error, r.IncompleteDetails = rr.echo, rr.usage, rr.errJSON, rr.incomplete
	return r
}

func (rr *recordRow) itemOf() wire.Item {
	it := rr.item
	it.JSON = rr.data
	return it
}

var errItemFirst = errors.New("an item row before any response row")

// AssembleChain reads a chain query's record rows, oldest member first, into a Chain: each
// record opens a turn and the item rows after it fill the turn's input and output. No row is
// ErrNotFound. The chain is the run of turns ending at the target in which each names the one
// before as its previous response; if the oldest of them names one, that response no longer
// exists (for this tenant): it is Chain.Missing.
func AssembleChain(rows Rows) (*Chain, error) {
	chain := &Chain{}
	for rows.Next() {
		var rr recordRow
		if err := rr.scan(rows); err != nil {
			return nil, err
		}
		switch n := len(chain.Turns); {
		case rr.kind == kindGeneration:
			chain.Generation = int64(rr.position)
		case rr.kind == kindResponse:
			chain.Turns = append(chain.Turns, ChainTurn{Response: rr.response()})
		case n == 0:
			return nil, errItemFirst
		case rr.kind == kindInput:
			chain.Turns[n-1].Input = append(chain.Turns[n-1].Input, rr.itemOf())
		default:
			chain.Turns[n-1].Output = append(chain.Turns[n-1].Output, rr.itemOf())
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(chain.Turns) == 0 {
		return nil, ErrNotFound
	}
	if len(chain.Turns) > maxChainDepth {
		return nil, fmt.Errorf("deeper than %d responses (cyclic?)", maxChainDepth)
	}
	// The rows come by lineage (migrations/postgres/006): below a deleted ancestor the scan may
	// still return older rows of the branch. The chain is the unbroken run ending at the target.
	first := len(chain.Turns) - 1
	for first > 0 && chain.Turns[first].Response.PreviousResponseID == chain.Turns[first-1].Response.ID {
		first--
	}
	chain.Turns = chain.Turns[first:]
	chain.Missing = chain.Turns[0].Response.PreviousResponseID
	return chain, nil
}

// responseWithOutput is ResponseGet's result: a chain of one turn, its output only.
type responseWithOutput struct {
	r      *Response
	output []wire.Item
}

// assembleResponse reads ResponseGet's record rows (one record, its output items).
func assembleResponse(rows Rows) (responseWithOutput, error) {
	chain, err := AssembleChain(rows)
	if err != nil {
		return responseWithOutput{}, err
	}
	t := &chain.Turns[len(chain.Turns)-1]
	return responseWithOutput{r: &t.Response, output: t.Output}, nil
}
