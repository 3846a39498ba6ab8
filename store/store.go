// Package store owns respgate's durable records and the Store interface its backends implement
// (docs/design.md §3): responses, their items, conversations and their items, the server secret, and leases
// on in-progress work. Backends live in store/postgres and store/sqlite; store/storetest is the
// conformance suite both run. The interface never exposes driver types or transactions: every
// method that must be atomic is one method.
//
// Logic the backends share is written once here, above the drivers (River's driver shape):
// Base implements the methods that are one query over a backend's Driver and Queries (chain
// assembly, paging, marker-row lists, sweep, lease extends), and the decisions of the methods a
// backend writes itself, in its own transaction strategy, are helpers (CommitDecision,
// BeginArgs, ErrLeaseHeld, TurnAcquireDecision). A backend is its SQL, its driver calls and
// its interpretError.
//
// Every method takes the tenant and filters on it: an object of another tenant is ErrNotFound,
// exactly as an unknown one.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/respgate/respgate/wire"
)

// Sentinel errors every backend maps its driver errors to (in one interpretError per backend).
var (
	// ErrNotFound: no such object for this tenant.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a uniqueness or lease conflict (e.g. a conversation turn already active).
	ErrConflict = errors.New("store: conflict")
)

// Item roles within a response.
const (
	RoleInput  = "input"
	RoleOutput = "output"
)

// Response is a stored response record without its items.
type Response struct {
	ID                 string
	Tenant             string
	Status             wire.Status
	Model              string
	PreviousResponseID string // empty: none
	ConversationID     string // empty: none
	CreatedAt          time.Time
	CompletedAt        *time.Time
	// Echo is the request echo: the response object's request-derived members (everything but
	// input), as a JSON object. Stored verbatim.
	Echo json.RawMessage
	// Usage, Error and IncompleteDetails are the server-set members as JSON, nil meaning null.
	Usage             json.RawMessage
	Error             json.RawMessage
	IncompleteDetails json.RawMessage
	// Replica names the upstream replica that served the response ("" when unknown, or a single
	// upstream): the chain's next turn prefers it, since its prefix cache holds the chain
	// (upstream.Route.Prefer, docs/fleet.md). It is never shown to clients. A commit with an
	// empty Replica keeps the one ResponseBegin stored, with its ReplicaAway.
	Replica string
	// ReplicaAway says the chain was away from its routing key's first replica when the
	// response ran, because that replica was down (upstream.Served.Away, migrations 010): its
	// next turn goes back to it once it is healthy again.
	ReplicaAway bool
}

// Conversation is a stored conversation.
type Conversation struct {
	ID        string
	Tenant    string
	CreatedAt time.Time
	Metadata  json.RawMessage // a JSON object, never nil when read back ({} when empty)
}

// Order of a paginated list.
type Order string

const (
	OrderAsc  Order = "asc"
	OrderDesc Order = "desc"
)

// ItemPage is one page of a paginated item list.
type ItemPage struct {
	Items   []wire.Item
	HasMore bool
}

// Chain is the loaded history of a previous_response_id chain.
type Chain struct {
	// Turns are the chain's responses with their items, oldest first, the target last. Items keep
	// their positions within a response.
	Turns []ChainTurn
	// Missing is the id of an ancestor that a response in the chain names as its
	// previous_response_id but which no longer exists (deleted). Empty when the chain is whole.
	Missing string
	// Generation is the tenant's lineage generation read with the chain (ChainGeneration): a
	// copy of the chain stays right while the generation is unchanged.
	Generation int64
}

// ChainTurn is one response of a chain with its input and output items in position order.
type ChainTurn struct {
	Response Response
	Input    []wire.Item
	Output   []wire.Item
}

// Event is one entry of a streamed response's event log, which lets GET ?stream=true replay
// exactly what the live stream sent. The server writes a run of consecutive client events as one
// entry (one row per flush, not per token): Seq is the sequence_number of the run's first event,
// Type the type of its last, and Data the run's SSE frames exactly as the client received them.
// The store keeps the three opaque and byte-exact.
type Event struct {
	Seq  int64
	Type wire.EventType
	Data []byte
}

// Store is respgate's persistence. Implementations are safe for concurrent use.
type Store interface {
	// Ping checks that the store is reachable (readiness).
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error

	// SecretGetOrCreate returns the named server secret, creating it with Generate if absent. Two
	// concurrent callers get the same value.
	SecretGetOrCreate(ctx context.Context, p *SecretGetOrCreateParams) ([]byte, error)

	// ResponseBegin writes a response record in status in_progress (or queued) holding a lease
	// owned by LeaseOwner until LeaseExpiresAt, with its input items, in one transaction, so a
	// turn whose process dies still has its input stored. ErrConflict if the id exists.
	ResponseBegin(ctx context.Context, p *ResponseBeginParams) error
	// ResponseLeaseExtend moves the lease of an in-progress response forward. ErrNotFound if the
	// response is not in progress under this owner (e.g. the sweeper already failed it).
	ResponseLeaseExtend(ctx context.Context, p *ResponseLeaseExtendParams) error
	// ResponseCommit writes a finished turn in ONE transaction: the final response record
	// (inserted, or, when Begun, updating the in-progress one from ResponseBegin), its input items
	// (unless ResponseBegin stored them), its output items, the remaining events of its event log,
	// and, when ConversationID is set, the append of input then output items to that conversation
	// (releasing the conversation's turn lease). It is idempotent by response id: committing a
	// response that is already terminal with the same status changes nothing and returns nil, so a
	// retry after an unknown outcome never duplicates anything. If the stored response is terminal
	// with another status (the sweeper failed it after its lease expired), nothing changes and the
	// error is ErrConflict, so the caller never reports a success the store does not hold. When
	// Begun and the response no longer exists (it was deleted), nothing is written and the error
	// is ErrNotFound: a commit never resurrects a deleted response.
	ResponseCommit(ctx context.Context, p *ResponseCommitParams) error
	// ResponseEventAppend adds events to the event logs of the responses ps name, in one round
	// trip however many there are (a gateway appends the logs of all its running streams at
	// once), idempotently by Seq: an event already stored is left as it is. missing holds, in
	// order, the indexes in ps of the responses that do not exist: nothing is logged for them,
	// and the others' events are logged. On an error nothing is logged. AppendEvents is the call
	// for one response.
	ResponseEventAppend(ctx context.Context, ps []ResponseEventAppendParams) (missing []int, err error)
	// ResponseEventList returns the response's logged events with Seq > After in Seq order, at
	// most Limit (0: all). ErrNotFound if the response does not exist for the tenant.
	ResponseEventList(ctx context.Context, p *ResponseEventListParams) ([]Event, error)
	// ResponseGet returns a response and its output items in position order.
	ResponseGet(ctx context.Context, p *ResponseGetParams) (*Response, []wire.Item, error)
	// ResponseDelete deletes a response, its items and its event log, and releases the
	// conversation turn lease the response holds (a queued background turn's). Items that a
	// conversation still lists are kept (detached from the response) so the conversation loses
	// nothing. A
	// response in progress whose lease has not expired at Now is not deleted: ErrConflict.
	ResponseDelete(ctx context.Context, p *ResponseDeleteParams) error
	// ResponseChainGet loads the whole history of a previous_response_id chain ending at ID, of
	// any depth, in ONE round trip. ErrNotFound if ID itself does not exist for the tenant.
	ResponseChainGet(ctx context.Context, p *ResponseChainGetParams) (*Chain, error)
	// ChainGeneration returns the tenant's lineage generation, which every deletion of a
	// response (ResponseDelete, ResponsePurge) advances, in the transaction that deletes: a chain
	// read with generation g (Chain.Generation) still loads identically while the generation is
	// g, because a stored terminal response and its items never change otherwise. One round
	// trip, one index lookup.
	ChainGeneration(ctx context.Context, p *ChainGenerationParams) (int64, error)
	// ResponseContextGet returns the items used to generate the response, in order: for a response
	// that continues a chain, each ancestor's input then output items (oldest first) then its own
	// input; for a conversation turn, the conversation's items that preceded the turn's own input
	// (those still listed), then its own input; otherwise its own input. ErrNotFound if the
	// response does not exist for the tenant.
	ResponseContextGet(ctx context.Context, p *ResponseContextGetParams) ([]wire.Item, error)
	// ResponseSweep moves every response still in progress whose lease expired before Now to
	// status failed with error {code:"server_error", message:Message}; it returns how many.
	ResponseSweep(ctx context.Context, p *ResponseSweepParams) (int, error)

	// ResponsePurge deletes up to Limit terminal responses of every tenant created before Before,
	// with their items exactly as ResponseDelete does (items a conversation lists are kept), oldest
	// first, and returns how many it deleted (the retention job).
	ResponsePurge(ctx context.Context, p *ResponsePurgeParams) (int, error)

	// ItemListByResponse pages through a response's items of one role (input_items).
	ItemListByResponse(ctx context.Context, p *ItemListByResponseParams) (*ItemPage, error)
	// ItemGet returns the tenant's stored item with this id (the most recent one when the id was
	// stored more than once), for item_reference resolution. ErrNotFound if none.
	ItemGet(ctx context.Context, p *ItemGetParams) (wire.Item, error)
	// ItemGetMany resolves several item ids at once, in ONE round trip: for each id, the tenant's
	// most recently stored item with that id, as ItemGet would return it, keyed by id. An id
	// with no item is absent from the map (not an error), so the caller names what is missing.
	ItemGetMany(ctx context.Context, p *ItemGetManyParams) (map[string]wire.Item, error)

	// ConversationCreate creates a conversation with optional initial items (seq 0..n-1).
	ConversationCreate(ctx context.Context, p *ConversationCreateParams) error
	ConversationGet(ctx context.Context, p *ConversationGetParams) (*Conversation, error)
	// ConversationUpdate replaces the metadata and returns the updated conversation.
	ConversationUpdate(ctx context.Context, p *ConversationUpdateParams) (*Conversation, error)
	// ConversationDelete deletes the conversation and its item list. Items that belong to a
	// response are kept; items created directly in the conversation are deleted. While a turn
	// holds the conversation's lease (unexpired at Now) nothing is deleted: ErrConflict.
	ConversationDelete(ctx context.Context, p *ConversationDeleteParams) error
	// ConversationItemAppend appends items at the end (dense seq) in one transaction. An item
	// whose id the conversation already lists with other content, or an earlier item of Items
	// does, is an *ItemIDConflictError (errors.Is ErrConflict) and nothing is appended: the check
	// runs inside the appending transaction, under the conversation's lock, so of two concurrent
	// calls adding one id with different content the second sees the first's item (issue 38
	// item 3). An item equal to the one listed is not a conflict and is appended again (callers
	// drop exact repeats first: server/conversations.go dedupeItems). While a turn holds the
	// conversation's lease (live), an item with the id of one of that turn's input items
	// (ConversationTurnAcquireParams.Items) and other content is refused the same way, InTurn set.
	ConversationItemAppend(ctx context.Context, p *ConversationItemAppendParams) error
	// ConversationItemList pages through a conversation's items by seq.
	ConversationItemList(ctx context.Context, p *ConversationItemListParams) (*ItemPage, error)
	// ConversationItemsAll loads every item of a conversation in seq order in ONE round trip
	// (rehydration). ErrNotFound if the conversation does not exist.
	ConversationItemsAll(ctx context.Context, p *ConversationItemsAllParams) ([]wire.Item, error)
	ConversationItemGet(ctx context.Context, p *ConversationItemGetParams) (wire.Item, error)
	// ConversationItemDelete removes an item from the conversation.
	ConversationItemDelete(ctx context.Context, p *ConversationItemDeleteParams) error
	// ConversationTurnAcquire takes the conversation's active-turn lease for ResponseID. It is
	// ErrConflict while another unexpired lease is held, ErrNotFound for an unknown conversation,
	// and an *ItemIDConflictError (nothing taken) when the conversation lists an item with the
	// id of one of Items and other content: checked under the conversation's lock, so an item
	// added after the turn read the conversation is seen here, and one added after the lease is
	// taken is refused by ConversationItemAppend (issue 38 item 3).
	ConversationTurnAcquire(ctx context.Context, p *ConversationTurnAcquireParams) error
	// ConversationTurnExtend moves the turn lease forward only if ResponseID holds it; it never
	// takes a free or expired-and-retaken lease. ErrNotFound if ResponseID does not hold it.
	ConversationTurnExtend(ctx context.Context, p *ConversationTurnAcquireParams) error
	// ConversationTurnRelease drops the lease if ResponseID holds it (no error otherwise).
	ConversationTurnRelease(ctx context.Context, p *ConversationTurnReleaseParams) error

	// ReplayRecordList returns the tenant's replay records of Scope whose End is one of Ends,
	// blocked ones included, in ONE round trip (docs/chat-completions.md).
	ReplayRecordList(ctx context.Context, p *ReplayRecordListParams) ([]ReplayRecord, error)
	// ReplayRecordSave records what one chat turn learned, in ONE transaction: the records to
	// block at a start digest, the new record (a different payload for an existing End blocks
	// that End instead), the use time of the records replayed, and the per-scope bound.
	ReplayRecordSave(ctx context.Context, p *ReplayRecordSaveParams) error
	// ReplayPurge deletes up to Limit replay records of every tenant unused since Before, oldest
	// first, and returns how many (retention).
	ReplayPurge(ctx context.Context, p *ReplayPurgeParams) (int, error)

	// CompactionInsert archives what a compaction item's summary replaced (ErrConflict for an
	// id already archived).
	CompactionInsert(ctx context.Context, p *CompactionInsertParams) error
	// CompactionGet returns the tenant's archive record of a compaction item (ErrNotFound).
	CompactionGet(ctx context.Context, p *CompactionGetParams) (*Compaction, error)
	// ResponseEnqueueBackground stores a background response (docs/background.md) in ONE
	// transaction: the record with status queued, its input items, its BackgroundTurn and its
	// River job (River's transactional enqueue), so a job never names a missing response and a
	// queued response always has its job. ErrQueueFull or ErrTenantBusy past the bounds (nothing
	// written); ErrConflict if the id exists.
	ResponseEnqueueBackground(ctx context.Context, p *ResponseEnqueueBackgroundParams) error
	// ResponseQueuedCount counts the queued background responses of every tenant, stopping at
	// Limit (the queue-depth gauge reads it on every /metrics scrape: its cost is bounded by
	// Limit and, through a partial index of queued rows, by the queue's depth).
	ResponseQueuedCount(ctx context.Context, p *ResponseQueuedCountParams) (int, error)
	// BackgroundTurnGet returns a background response's turn (Body, State, JobID). ErrNotFound if
	// the response is gone or was not created in the background.
	BackgroundTurnGet(ctx context.Context, p *BackgroundTurnGetParams) (*BackgroundTurn, error)
	// ResponseBackgroundClaim moves a queued background response to in_progress under the lease
	// of LeaseOwner, so exactly one worker runs it. ErrConflict if it is not queued (another run
	// claimed it, it was cancelled, or it ended), ErrNotFound if it does not exist. A claim with
	// Again by the owner that holds it already succeeds (renewing the lease), so a claim whose
	// outcome was lost (a timeout or a broken connection after the commit) can be repeated.
	ResponseBackgroundClaim(ctx context.Context, p *ResponseBackgroundClaimParams) error
	// ResponseCancelBackground cancels a background response's River job and, when it was still
	// queued, stores the response cancelled and releases its conversation's turn lease, in one
	// transaction. ErrNotFound if the response is not a background one of the tenant.
	ResponseCancelBackground(ctx context.Context, p *ResponseCancelBackgroundParams) (CancelOutcome, error)
}

// Names of the server secrets (SecretGetOrCreate). Every replica on one database reads the same
// values, so tenants and sealed blobs mean the same on all of them (docs/design.md §6, §9).
const (
	// SecretTenantHMAC keys the HMAC that turns a bearer key into a tenant.
	SecretTenantHMAC = "tenant-hmac"
	// SecretSealKey is the generated default key of the seal ring (32 random bytes), used when
	// no keys are configured and kept as an opening key when they are (docs/reasoning.md).
	SecretSealKey = "seal-key"
	// SecretUpstreamAffinity keys the HMAC of the routing key sent to an external router
	// (--upstream-affinity-header, docs/fleet.md).
	SecretUpstreamAffinity = "upstream-affinity-hmac"
)

type SecretGetOrCreateParams struct {
	Name     string
	Generate func() ([]byte, error)
}

type ResponseBeginParams struct {
	Response       Response
	Input          []wire.Item
	LeaseOwner     string
	LeaseExpiresAt time.Time
}

type ResponseLeaseExtendParams struct {
	Tenant         string
	ID             string
	LeaseOwner     string
	LeaseExpiresAt time.Time
}

type ResponseCommitParams struct {
	// Response is the final record; its Status must be terminal.
	Response Response
	Input    []wire.Item
	Output   []wire.Item
	// ConversationID, when set, appends Input then Output to that conversation.
	ConversationID string
	// ReleaseTurn, when set and ConversationID is not, releases that conversation's turn lease
	// if the response holds it, in the commit's transaction, appending nothing: a turn that did
	// not finish ends its lease with its terminal record (ConversationID's append ends it too).
	ReleaseTurn string
	// Begun: ResponseBegin wrote the in-progress record and the input items; the commit only
	// updates that record (ErrNotFound if it was deleted) and does not write Input again.
	Begun bool
	// Events are the events of the event log not yet appended (ResponseEventAppend).
	Events []Event
	// Notify tells the store's event watchers in every process (EventWatcher) that the response
	// ended, in the commit's transaction: its followers on other replicas read it at once. Set
	// for background turns; a backend without watchers ignores it.
	Notify bool
}

// AppendEvents appends p's events with st.ResponseEventAppend: ErrNotFound when the response
// does not exist.
func AppendEvents(ctx context.Context, st Store, p *ResponseEventAppendParams) error {
	missing, err := st.ResponseEventAppend(ctx, []ResponseEventAppendParams{*p})
	if err == nil && len(missing) > 0 {
		err = fmt.Errorf("append response events: %w", ErrNotFound)
	}
	return err
}

type ResponseEventAppendParams struct {
	Tenant     string
	ResponseID string
	Events     []Event
	// Notify tells the store's event watchers in every process (EventWatcher) that the log
	// grew, as ResponseCommitParams.Notify.
	Notify bool
}

type ResponseQueuedCountParams struct {
	Limit int // > 0
}

type ResponseEventListParams struct {
	Tenant     string
	ResponseID string
	After      int64 // -1: from the first event
	Limit      int   // 0: all
}

type ResponseContextGetParams struct {
	Tenant string
	ID     string
}

type ResponseGetParams struct {
	Tenant string
	ID     string
}

type ResponseDeleteParams struct {
	Tenant string
	ID     string
	// Now decides whether an in-progress response's lease still holds; zero means the current
	// time.
	Now time.Time
}

type ResponseChainGetParams struct {
	Tenant string
	ID     string
}

type ChainGenerationParams struct {
	Tenant string
}

type ResponseSweepParams struct {
	Now     time.Time
	Message string
}

type ResponsePurgeParams struct {
	Before time.Time
	Limit  int
}

type ItemListByResponseParams struct {
	Tenant     string
	ResponseID string
	Role       string // RoleInput or RoleOutput
	After      string // item id cursor; empty: from the start
	Limit      int
	Order      Order
}

type ItemGetParams struct {
	Tenant string
	ID     string
}

type ItemGetManyParams struct {
	Tenant string
	IDs    []string // duplicates allowed
}

type ConversationCreateParams struct {
	Conversation Conversation
	Items        []wire.Item
}

type ConversationGetParams struct {
	Tenant string
	ID     string
}

type ConversationUpdateParams struct {
	Tenant   string
	ID       string
	Metadata json.RawMessage
}

type ConversationDeleteParams struct {
	Tenant string
	ID     string
	// Now decides whether the turn lease still holds; zero means the current time.
	Now time.Time
}

type ConversationItemAppendParams struct {
	Tenant         string
	ConversationID string
	Items          []wire.Item
}

type ConversationItemListParams struct {
	Tenant         string
	ConversationID string
	After          string // item id cursor
	Limit          int
	Order          Order
}

type ConversationItemsAllParams struct {
	Tenant         string
	ConversationID string
}

type ConversationItemGetParams struct {
	Tenant         string
	ConversationID string
	ItemID         string
}

type ConversationItemDeleteParams struct {
	Tenant         string
	ConversationID string
	ItemID         string
}

type ConversationTurnAcquireParams struct {
	Tenant         string
	ConversationID string
	ResponseID     string
	ExpiresAt      time.Time
	// Items, for ConversationTurnAcquire, are the turn's input items that carry a client's id:
	// the lease is not taken when the conversation lists one of their ids with other content
	// (*ItemIDConflictError), and while it is held ConversationItemAppend refuses their ids with
	// other content (TurnItems). ConversationTurnExtend ignores them.
	Items []wire.Item
}

type ConversationTurnReleaseParams struct {
	Tenant         string
	ConversationID string
	ResponseID     string
}
