package postgres

// The methods that write in one transaction, whose strategy is this backend's own: each is one
// pipelined batch or one statement (one round trip). The rest of store.Store is store.Base.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ResponseBegin inserts an in-progress (or queued) response holding a lease, with its input
// items, in one implicit transaction.
func (s *Store) ResponseBegin(ctx context.Context, p *store.ResponseBeginParams) error {
	// One round trip, one implicit transaction (a batch ends with a single Sync), committed
	// asynchronously: the in-progress record must not add a WAL flush to time-to-first-byte
	// (docs/design.md §1). The final ResponseCommit is the durable one; only a crash of Postgres itself
	// within wal_writer_delay could lose this row, and then no final commit happened either.
	b, err := s.beginBatch(p)
	if err != nil {
		return err
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("begin response: %w", interpretError(err))
	}
	return nil
}

// beginBatch is ResponseBegin's batch: synchronous_commit off for its transaction, the record,
// its input items.
func (s *Store) beginBatch(p *store.ResponseBeginParams) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	args, err := store.BeginArgs(s.Driver, p)
	if err != nil {
		return nil, err
	}
	b.Queue(responseBeginSQL, args...)
	if len(p.Input) > 0 {
		var items itemArrays
		items.add(store.RoleInput, p.Input)
		queueInsertItems(b, p.Response.Tenant, p.Response.ID, nil, &items)
	}
	return b, nil
}

// ResponseCommit stores a finished turn in one transaction and ONE round trip; see
// store.Store. The statements go in one pipelined batch, which Postgres runs as one implicit
// transaction (one Sync): write the response (upsert, or only update when Begun), lock the
// conversation (releasing the turn), append the stored input (when Begun) or insert it, insert
// the output and the conversation append, and log the events. A statement that finds no row it
// needs raises (respgate_no_row, migrations/postgres/006), which rolls the whole batch back:
// when the response write changed nothing, commitNoop then explains why (store.CommitDecision),
// in a second round trip that only retries and lost races take.
func (s *Store) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	if err := store.CommitCheck(p); err != nil {
		return fmt.Errorf("commit response: %w", err)
	}
	r := &p.Response
	var items itemArrays
	if !p.Begun {
		items.add(store.RoleInput, p.Input)
	}
	items.add(store.RoleOutput, p.Output)
	conv := store.NullString(p.ConversationID)

	b := &pgx.Batch{}
	if p.Begun {
		b.Queue(mustWrite("WITH", finishResponseSQL, noResponseWritten), store.FinishArgs(s.Driver, r)...)
	} else {
		b.Queue(mustWrite(lineageCTE+",", upsertResponseInsertSQL, noResponseWritten),
			append(store.ResponseArgs(s.Driver, r, r.Status), store.ReplicaArgs(r)...)...)
	}
	switch {
	case conv != nil:
		b.Queue(mustWrite("WITH", lockConversationReleaseTurnSQL, noConversation), r.Tenant, p.ConversationID, r.ID)
		if p.Begun {
			b.Queue(appendStoredInputSQL, r.Tenant, r.ID, p.ConversationID)
		}
	case p.ReleaseTurn != "":
		b.Queue(lockConversationReleaseTurnSQL, r.Tenant, p.ReleaseTurn, r.ID)
	}
	if items.len() > 0 {
		queueInsertItems(b, r.Tenant, r.ID, conv, &items)
	}
	if len(p.Events) > 0 {
		seqs, types, data := eventArrays(p.Events)
		b.Queue(insertEventsSQL, r.Tenant, r.ID, seqs, types, data)
	}
	if p.Notify {
		// In the batch's transaction: delivered when it commits, never for a rolled-back one.
		b.Queue(notifySQL, s.channel, r.ID)
	}
	err := s.pool.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == noRowCode && pgErr.Message == noResponseWritten:
		return s.commitNoop(ctx, p)
	case errors.As(err, &pgErr) && pgErr.Code == noRowCode && pgErr.Message == noConversation:
		return fmt.Errorf("commit response: conversation: %w", store.ErrNotFound)
	}
	return fmt.Errorf("commit response: %w", interpretError(err))
}

// The no_data_found errors mustWrite raises, told apart by message.
const (
	noRowCode         = "P0002"
	noResponseWritten = "respgate: the commit wrote no response row"
	noConversation    = "respgate: no such conversation"
)

// mustWrite wraps a data-modifying statement that returns rows so that it raises message when
// it returns none (aborting the batch's transaction) and returns one row otherwise. with opens
// the statement's CTE list ("WITH", or the statement's own CTEs and a comma: a data-modifying
// CTE must be at the top level).
func mustWrite(with, sql, message string) string {
	return with + ` w AS (` + sql + `)
SELECT CASE WHEN EXISTS (SELECT 1 FROM w) THEN 1 ELSE respgate_no_row('` + message + `') END`
}

// commitNoop explains a commit whose response write changed no row (its batch rolled back) by
// store.CommitDecision on the stored status. Only a no-op or an error can come of it here; a
// record that changed meanwhile is a conflict.
func (s *Store) commitNoop(ctx context.Context, p *store.ResponseCommitParams) error {
	var stored wire.Status
	err := interpretError(s.pool.QueryRow(ctx, store.ResponseStatusSQL, p.Response.Tenant, p.Response.ID).Scan(&stored))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("commit response: read status: %w", err)
	}
	switch action, err := store.CommitDecision(stored, p); {
	case err != nil:
		return fmt.Errorf("commit response: %w", err)
	case action != store.CommitNoop:
		return fmt.Errorf("commit response: changed while committing: %w", store.ErrConflict)
	}
	return nil
}

// ResponseEventAppend logs the events of several responses, idempotently by seq, in one
// statement, pipelined with the notifications of those that ask for them in one implicit
// transaction: one round trip.
func (s *Store) ResponseEventAppend(ctx context.Context, ps []store.ResponseEventAppendParams) ([]int, error) {
	var found []int64
	b := &pgx.Batch{}
	b.Queue(appendEventsSQL, appendArgs(ps)...).QueryRow(func(row pgx.Row) error { return row.Scan(&found) })
	for i := range ps {
		if ps[i].Notify {
			b.Queue(notifySQL, s.channel, ps[i].ResponseID)
		}
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("append response events: %w", interpretError(err))
	}
	return missing(len(ps), found), nil
}

// missing is the indexes in [0, n) that found (appendEventsSQL's 1-based places of the responses
// that exist) does not hold, in order.
func missing(n int, found []int64) []int {
	seen := make([]bool, n)
	for _, f := range found {
		if f >= 1 && f <= int64(n) {
			seen[f-1] = true
		}
	}
	var out []int
	for i, ok := range seen {
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

// appendArgs are appendEventsSQL's arguments for ps.
func appendArgs(ps []store.ResponseEventAppendParams) []any {
	n := 0
	for i := range ps {
		n += len(ps[i].Events)
	}
	tenants, ids := make([]string, len(ps)), make([]string, len(ps))
	places, seqs, types, data := make([]int64, 0, n), make([]int64, 0, n), make([]string, 0, n), make([][]byte, 0, n)
	for i := range ps {
		tenants[i], ids[i] = ps[i].Tenant, ps[i].ResponseID
		for range ps[i].Events {
			places = append(places, int64(i+1))
		}
		seqs, types, data = appendEventArrays(seqs, types, data, ps[i].Events)
	}
	return []any{tenants, ids, places, seqs, types, data}
}

// ResponseDelete deletes a response, its items and (by cascade) its event log, detaching
// (response_id NULL) the items a conversation still lists and releasing the conversation turn
// lease it holds (a queued background turn's). The statements run pipelined in one
// implicit transaction: the first locks the row and reports whether its lease is live; the
// others do nothing in that case (the lock keeps the answer true until the end).
func (s *Store) ResponseDelete(ctx context.Context, p *store.ResponseDeleteParams) error {
	held, err := s.guardedDelete(ctx, p.Tenant, p.ID, store.NowOr(p.Now),
		responseDeleteLockSQL, responseDetachItemsSQL, responseDeleteItemsSQL, responseBumpGenerationSQL, responseReleaseTurnSQL, responseDeleteSQL)
	if err == nil && held {
		err = store.ErrLeaseHeld
	}
	if err != nil {
		return fmt.Errorf("delete response: %w", err)
	}
	return nil
}

// guardedDelete runs lock, which reports whether a guard holds, then the statements, pipelined
// in one implicit transaction, each on (tenant, id, at); the statements themselves do nothing
// when the guard holds.
func (s *Store) guardedDelete(ctx context.Context, tenant, id string, at any, lock string, stmts ...string) (bool, error) {
	b := &pgx.Batch{}
	b.Queue(lock, tenant, id, at)
	for _, q := range stmts {
		b.Queue(q, tenant, id, at)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var held bool
	if err := br.QueryRow().Scan(&held); err != nil {
		return false, interpretError(err)
	}
	for range stmts {
		if _, err := br.Exec(); err != nil {
			return false, interpretError(err)
		}
	}
	if err := br.Close(); err != nil {
		return false, interpretError(err)
	}
	return held, nil
}

// ResponsePurge deletes the oldest terminal responses created before Before (retention), in
// one statement (purgeSQL).
func (s *Store) ResponsePurge(ctx context.Context, p *store.ResponsePurgeParams) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, purgeSQL, p.Before.UTC(), p.Limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("purge responses: %w", interpretError(err))
	}
	return n, nil
}

// ConversationCreate inserts the conversation and its initial items (seq 0…n-1), pipelined in
// one implicit transaction.
func (s *Store) ConversationCreate(ctx context.Context, p *store.ConversationCreateParams) error {
	b := &pgx.Batch{}
	c := &p.Conversation
	b.Queue(store.ConversationInsertSQL, c.Tenant, c.ID, s.Driver.JSON(store.ObjectJSON(c.Metadata)), store.NowOr(c.CreatedAt))
	if len(p.Items) > 0 {
		var items itemArrays
		items.add("", p.Items)
		queueInsertItems(b, c.Tenant, nil, c.ID, &items)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("create conversation: %w", interpretError(err))
	}
	return nil
}

// ConversationDelete deletes the conversation and its list (by cascade), and the items created
// directly in it (response_id NULL); items of responses stay with their responses. The
// statements run pipelined in one implicit transaction after the row lock, and do nothing while
// a turn holds the conversation (conversationDeleteLockSQL).
func (s *Store) ConversationDelete(ctx context.Context, p *store.ConversationDeleteParams) error {
	held, err := s.guardedDelete(ctx, p.Tenant, p.ID, store.NowOr(p.Now),
		conversationDeleteLockSQL, conversationDeleteItemsSQL, conversationDeleteSQL)
	if err == nil && held {
		err = store.ErrTurnHeld
	}
	if err != nil {
		return fmt.Errorf("delete conversation: %w", err)
	}
	return nil
}

// ConversationItemAppend appends items at max(seq)+1… in one transaction: it locks the
// conversation's row, refuses an id of the live turn's input with other content
// (store.TurnItemConflict), reads the items it lists under the ids of items, refuses an id that
// names other content (store.ItemIDConflict: a concurrent append of the same id waits for the
// lock and then sees this one's item), and inserts.
func (s *Store) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var turn string
		if err := tx.QueryRow(ctx, conversationLockSQL, p.Tenant, p.ConversationID, time.Now().UTC()).Scan(&turn); err != nil {
			return interpretError(err)
		}
		if len(p.Items) == 0 {
			return nil
		}
		if err := store.TurnItemConflict(turn, p.Items); err != nil {
			return err
		}
		held, err := heldItems(ctx, tx, p.Tenant, p.ConversationID, store.ItemIDs(p.Items))
		if err != nil {
			return err
		}
		if err := store.ItemIDConflict(held, p.Items); err != nil {
			return err
		}
		var items itemArrays
		items.add("", p.Items)
		b := &pgx.Batch{}
		queueInsertItems(b, p.Tenant, nil, p.ConversationID, &items)
		return interpretError(tx.SendBatch(ctx, b).Close())
	})
	if err != nil {
		return fmt.Errorf("append conversation items: %w", err)
	}
	return nil
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// turnAcquire runs turnAcquireSQL on q and decides.
func turnAcquire(ctx context.Context, q rowQuerier, p *store.ConversationTurnAcquireParams) error {
	var exists, taken bool
	err := q.QueryRow(ctx, turnAcquireSQL, p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UTC(), time.Now().UTC(),
		store.NullString(store.TurnItems(p.Items))).Scan(&exists, &taken)
	if err != nil {
		return interpretError(err)
	}
	return store.TurnAcquireDecision(store.TurnAcquireResult{Exists: exists, Taken: taken})
}

// heldItems is every item conversation lists under one of ids (each occurrence).
func heldItems(ctx context.Context, tx pgx.Tx, tenant, conversation string, ids []string) ([]wire.Item, error) {
	rows, err := tx.Query(ctx, conversationItemsByIDSQL, tenant, conversation, ids)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []wire.Item
	for rows.Next() {
		var it wire.Item
		var data string
		if err := rows.Scan(&it.ID, &it.Type, &data); err != nil {
			return nil, err
		}
		it.JSON = []byte(data)
		out = append(out, it)
	}
	return out, rows.Err()
}

// ConversationItemDelete removes every occurrence of the item id from the conversation, in one
// statement. Items created directly in the conversation are deleted; a response's items stay
// with the response.
func (s *Store) ConversationItemDelete(ctx context.Context, p *store.ConversationItemDeleteParams) error {
	var n int
	if err := s.pool.QueryRow(ctx, conversationItemDeleteSQL, p.Tenant, p.ConversationID, p.ItemID).Scan(&n); err != nil {
		return fmt.Errorf("delete conversation item: %w", interpretError(err))
	}
	if n == 0 {
		return fmt.Errorf("delete conversation item: %w", store.ErrNotFound)
	}
	return nil
}

// ConversationTurnAcquire takes the turn lease if it is free, expired, or already ResponseID's,
// in one statement that also reports whether the conversation exists; with Items, in a
// transaction that then refuses an id the conversation lists with other content.
func (s *Store) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	var err error
	if len(p.Items) == 0 {
		err = turnAcquire(ctx, s.pool, p)
	} else {
		// The lease and the check in one transaction: the acquire's update holds the row lock
		// that ConversationItemAppend takes, so the items read next include every append that
		// committed first, and a later append sees this turn's items.
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if err := turnAcquire(ctx, tx, p); err != nil {
				return err
			}
			held, err := heldItems(ctx, tx, p.Tenant, p.ConversationID, store.ItemIDs(p.Items))
			if err != nil {
				return err
			}
			return store.ItemIDConflict(held, p.Items)
		})
	}
	if err != nil {
		return fmt.Errorf("acquire conversation turn: %w", interpretError(err))
	}
	return nil
}
