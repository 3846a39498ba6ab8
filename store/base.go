package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/respgate/respgate/wire"
)

// Queries is a backend's SQL for the methods Base implements, each in the row shape its
// consumer names (store/rows.go, store/chain.go) and with the arguments Base passes, in order.
type Queries struct {
	ResponseEventList    string // (tenant, id, after, limit or NULL) → eventRows rows
	ResponseChain        string // (tenant, id, max depth) → record rows, oldest first
	ResponseContext      string // (tenant, id, max depth) → contextItems rows
	ItemGetMany          string // (tenant, Driver.Strings(ids)) → item rows
	ConversationItemsAll string // (tenant, conversation) → seqItems rows
	// BackgroundCancelRead (tenant, response) → job_id, status, conversation ("" for none),
	// locking the response where the backend can.
	BackgroundCancelRead string

	Replay ReplayQueries
}

// Base implements the store.Store methods whose logic is the same in every backend, over the
// backend's Driver and Queries; a backend embeds it and adds the methods that need a
// transaction, where its strategy differs (Postgres pipelines one batch, SQLite runs Go between
// statements). Safe for concurrent use when the Driver is.
type Base struct {
	Driver  Driver
	Queries *Queries
}

// Ping checks that the database answers (readiness).
func (b *Base) Ping(ctx context.Context) error { return b.Driver.Ping(ctx) }

// ItemCount returns how many item rows the tenant has (storetest.ItemCounter; also handy for
// operators checking growth).
func (b *Base) ItemCount(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := b.Driver.QueryRow(ctx, itemCountSQL, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count items: %w", b.Driver.InterpretError(err))
	}
	return n, nil
}

// ResponseQueuedCount counts the queued (background) responses of every tenant, up to
// p.Limit; see Store.
func (b *Base) ResponseQueuedCount(ctx context.Context, p *ResponseQueuedCountParams) (int, error) {
	var n int
	if err := b.Driver.QueryRow(ctx, queuedCountSQL, p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued responses: %w", b.Driver.InterpretError(err))
	}
	return n, nil
}

// SecretGetOrCreate returns the named secret, storing Generate's value first if there is none.
// Concurrent callers race on an insert that does nothing on conflict and all read the winner's
// value.
func (b *Base) SecretGetOrCreate(ctx context.Context, p *SecretGetOrCreateParams) ([]byte, error) {
	d := b.Driver
	var v []byte
	err := d.InterpretError(d.QueryRow(ctx, secretGetSQL, p.Name).Scan(&v))
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("get secret: %w", err)
	}
	gen, err := p.Generate()
	if err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	if gen == nil {
		gen = []byte{}
	}
	if _, err := exec(ctx, d, "insert secret", nil, secretInsertSQL, p.Name, gen, d.Time(time.Now())); err != nil {
		return nil, err
	}
	if err := d.QueryRow(ctx, secretGetSQL, p.Name).Scan(&v); err != nil {
		return nil, fmt.Errorf("get secret: %w", d.InterpretError(err))
	}
	return v, nil
}

// ResponseLeaseExtend moves an unfinished response's lease forward if LeaseOwner holds it.
func (b *Base) ResponseLeaseExtend(ctx context.Context, p *ResponseLeaseExtendParams) error {
	_, err := exec(ctx, b.Driver, "extend response lease", ErrNotFound, responseLeaseExtendSQL,
		p.Tenant, p.ID, p.LeaseOwner, b.Driver.Time(p.LeaseExpiresAt))
	return err
}

// ResponseEventList reads a response's events after a seq in one query; its first row only
// proves the response exists, so an empty log is told from an unknown response.
func (b *Base) ResponseEventList(ctx context.Context, p *ResponseEventListParams) ([]Event, error) {
	var limit any
	if p.Limit > 0 {
		limit = p.Limit
	}
	return query(ctx, b.Driver, "list response events", eventRows, b.Queries.ResponseEventList, p.Tenant, p.ResponseID, p.After, limit)
}

// ResponseGet returns a response and its output items in one query.
func (b *Base) ResponseGet(ctx context.Context, p *ResponseGetParams) (*Response, []wire.Item, error) {
	r, err := query(ctx, b.Driver, "get response", assembleResponse, responseGetSQL, p.Tenant, p.ID)
	return r.r, r.output, err
}

// ResponseChainGet loads a previous_response_id chain in one query (range scans by lineage).
func (b *Base) ResponseChainGet(ctx context.Context, p *ResponseChainGetParams) (*Chain, error) {
	return query(ctx, b.Driver, "get response chain", AssembleChain, b.Queries.ResponseChain, p.Tenant, p.ID, maxChainDepth)
}

// ChainGeneration reads the tenant's lineage generation in one query.
func (b *Base) ChainGeneration(ctx context.Context, p *ChainGenerationParams) (int64, error) {
	var g int64
	if err := b.Driver.QueryRow(ctx, chainGenerationSQL, p.Tenant).Scan(&g); err != nil {
		return 0, fmt.Errorf("get chain generation: %w", b.Driver.InterpretError(err))
	}
	return g, nil
}

// ResponseContextGet loads the items a response was generated from in one query.
func (b *Base) ResponseContextGet(ctx context.Context, p *ResponseContextGetParams) ([]wire.Item, error) {
	return query(ctx, b.Driver, "get response context", contextItems, b.Queries.ResponseContext, p.Tenant, p.ID, maxChainDepth)
}

// ResponseSweep fails every unfinished response whose lease expired before Now.
func (b *Base) ResponseSweep(ctx context.Context, p *ResponseSweepParams) (int, error) {
	errJSON, err := sweepError(p.Message)
	if err != nil {
		return 0, fmt.Errorf("sweep responses: %w", err)
	}
	return exec(ctx, b.Driver, "sweep responses", nil, sweepSQL, b.Driver.Time(p.Now), b.Driver.JSON(errJSON))
}

// ItemListByResponse pages through a response's items of one role by position. After names the
// last item of the previous page; if that id occurs more than once in the list, the occurrence
// farthest in the direction of travel counts, so paging always ends. An unknown response or
// cursor is ErrNotFound.
func (b *Base) ItemListByResponse(ctx context.Context, p *ItemListByResponseParams) (*ItemPage, error) {
	if p.Role != RoleInput && p.Role != RoleOutput {
		return nil, fmt.Errorf("list response items: unknown role %q", p.Role)
	}
	return listPage(ctx, b.Driver, "list response items", &responseItemsSQL, p.Order, p.Limit,
		p.Tenant, p.ResponseID, p.Role, p.After)
}

// ItemGet returns the tenant's most recently stored item with this id.
func (b *Base) ItemGet(ctx context.Context, p *ItemGetParams) (wire.Item, error) {
	it, err := scanItem(b.Driver.QueryRow(ctx, itemGetSQL, p.Tenant, p.ID))
	if err != nil {
		return wire.Item{}, fmt.Errorf("get item: %w", b.Driver.InterpretError(err))
	}
	return it, nil
}

// ItemGetMany returns the tenant's most recently stored item for each id, in one query.
func (b *Base) ItemGetMany(ctx context.Context, p *ItemGetManyParams) (map[string]wire.Item, error) {
	if len(p.IDs) == 0 {
		return map[string]wire.Item{}, nil
	}
	ids, err := b.Driver.Strings(p.IDs)
	if err != nil {
		return nil, fmt.Errorf("get items: %w", err)
	}
	return query(ctx, b.Driver, "get items", itemsByID, b.Queries.ItemGetMany, p.Tenant, ids)
}

// ConversationGet returns a conversation; its metadata is {} when empty.
func (b *Base) ConversationGet(ctx context.Context, p *ConversationGetParams) (*Conversation, error) {
	c, err := scanConversation(b.Driver.QueryRow(ctx, conversationGetSQL, p.Tenant, p.ID))
	if err != nil {
		return nil, fmt.Errorf("get conversation: %w", b.Driver.InterpretError(err))
	}
	return c, nil
}

// ConversationUpdate replaces the metadata (nil or null: {}) and returns the conversation.
func (b *Base) ConversationUpdate(ctx context.Context, p *ConversationUpdateParams) (*Conversation, error) {
	c, err := scanConversation(b.Driver.QueryRow(ctx, conversationUpdateSQL, p.Tenant, p.ID, b.Driver.JSON(ObjectJSON(p.Metadata))))
	if err != nil {
		return nil, fmt.Errorf("update conversation: %w", b.Driver.InterpretError(err))
	}
	return c, nil
}

// ConversationItemList pages through a conversation's items by seq. After works as in
// ItemListByResponse; an unknown conversation or cursor is ErrNotFound.
func (b *Base) ConversationItemList(ctx context.Context, p *ConversationItemListParams) (*ItemPage, error) {
	return listPage(ctx, b.Driver, "list conversation items", &conversationItemsSQL, p.Order, p.Limit,
		p.Tenant, p.ConversationID, p.After)
}

// ConversationItemsAll loads a conversation's items in seq order in one query; its first row
// only proves the conversation exists, so an empty one is told from an unknown one.
func (b *Base) ConversationItemsAll(ctx context.Context, p *ConversationItemsAllParams) ([]wire.Item, error) {
	return query(ctx, b.Driver, "load conversation items", seqItems, b.Queries.ConversationItemsAll, p.Tenant, p.ConversationID)
}

// ConversationItemGet returns the conversation's item with this id (its latest occurrence).
func (b *Base) ConversationItemGet(ctx context.Context, p *ConversationItemGetParams) (wire.Item, error) {
	it, err := scanItem(b.Driver.QueryRow(ctx, conversationItemGetSQL, p.Tenant, p.ConversationID, p.ItemID))
	if err != nil {
		return wire.Item{}, fmt.Errorf("get conversation item: %w", b.Driver.InterpretError(err))
	}
	return it, nil
}

// ConversationTurnExtend moves the turn lease forward if ResponseID holds it; it never takes a
// free lease, so a response whose lease was released or retaken cannot get it back this way.
func (b *Base) ConversationTurnExtend(ctx context.Context, p *ConversationTurnAcquireParams) error {
	_, err := exec(ctx, b.Driver, "extend conversation turn", ErrNotFound, turnExtendSQL,
		p.Tenant, p.ConversationID, p.ResponseID, b.Driver.Time(p.ExpiresAt))
	return err
}

// ConversationTurnRelease drops the turn lease if ResponseID holds it.
func (b *Base) ConversationTurnRelease(ctx context.Context, p *ConversationTurnReleaseParams) error {
	_, err := exec(ctx, b.Driver, "release conversation turn", nil, turnReleaseSQL,
		p.Tenant, p.ConversationID, p.ResponseID)
	return err
}

// BackgroundTurnGet returns a background response's turn; see Store.
func (b *Base) BackgroundTurnGet(ctx context.Context, p *BackgroundTurnGetParams) (*BackgroundTurn, error) {
	var t BackgroundTurn
	var state string
	if err := b.Driver.QueryRow(ctx, bgTurnGetSQL, p.Tenant, p.ResponseID).Scan(&t.JobID, &t.Body, &state); err != nil {
		return nil, fmt.Errorf("get background turn: %w", b.Driver.InterpretError(err))
	}
	t.State = []byte(state)
	return &t, nil
}

// ResponseBackgroundClaim moves a queued response to in_progress under a lease; see Store. A
// response that exists but is no longer queued is ErrConflict.
func (b *Base) ResponseBackgroundClaim(ctx context.Context, p *ResponseBackgroundClaimParams) error {
	d := b.Driver
	n, err := exec(ctx, d, "claim background response", nil, bgClaimSQL, p.Tenant, p.ID, p.LeaseOwner, d.Time(p.LeaseExpiresAt), p.Again)
	if err != nil || n == 1 {
		return err
	}
	var one int
	err = d.InterpretError(d.QueryRow(ctx, ResponseExistsSQL, p.Tenant, p.ID).Scan(&one))
	if err == nil {
		err = ErrConflict
	}
	return fmt.Errorf("claim background response: %w", err)
}
