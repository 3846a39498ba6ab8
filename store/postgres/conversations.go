package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ConversationCreate inserts the conversation and its initial items (seq 0…n-1), pipelined in
// one implicit transaction.
func (s *Store) ConversationCreate(ctx context.Context, p *store.ConversationCreateParams) error {
	c := &p.Conversation
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO conversations (tenant, id, metadata, created_at) VALUES ($1, $2, $3, $4)`,
		c.Tenant, c.ID, objectJSON(c.Metadata), timeOr(c.CreatedAt))
	if len(p.Items) > 0 {
		var items itemArrays
		items.add("", p.Items)
		queueInsertItems(b, c.Tenant, nil, &c.ID, &items)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("create conversation: %w", interpretError(err))
	}
	return nil
}

func scanConversation(row pgx.Row) (*store.Conversation, error) {
	var c store.Conversation
	var meta []byte
	if err := row.Scan(&c.ID, &c.Tenant, &meta, &c.CreatedAt); err != nil {
		return nil, err
	}
	c.Metadata = objectJSON(meta)
	c.CreatedAt = c.CreatedAt.UTC()
	return &c, nil
}

// ConversationGet returns a conversation; its metadata is {} when empty.
func (s *Store) ConversationGet(ctx context.Context, p *store.ConversationGetParams) (*store.Conversation, error) {
	c, err := scanConversation(s.pool.QueryRow(ctx,
		`SELECT id, tenant, metadata, created_at FROM conversations WHERE tenant = $1 AND id = $2`, p.Tenant, p.ID))
	if err != nil {
		return nil, fmt.Errorf("get conversation: %w", interpretError(err))
	}
	return c, nil
}

// ConversationUpdate replaces the metadata (nil or null: {}) and returns the conversation.
func (s *Store) ConversationUpdate(ctx context.Context, p *store.ConversationUpdateParams) (*store.Conversation, error) {
	c, err := scanConversation(s.pool.QueryRow(ctx, `
		UPDATE conversations SET metadata = $3 WHERE tenant = $1 AND id = $2
		RETURNING id, tenant, metadata, created_at`, p.Tenant, p.ID, objectJSON(p.Metadata)))
	if err != nil {
		return nil, fmt.Errorf("update conversation: %w", interpretError(err))
	}
	return c, nil
}

// turnHeldSQL is true when conversation $2's turn lease is held and live at $3: the guard under
// which ConversationDelete deletes nothing.
const turnHeldSQL = `turn_response_id IS NOT NULL AND turn_expires_at > $3`

// ConversationDelete deletes the conversation and its list (by cascade), and the items created
// directly in it (response_id NULL); items of responses stay with their responses. The
// statements run pipelined in one implicit transaction; the first locks the row (so an append
// committing meanwhile is either seen by the next statement or waits, never leaving behind direct
// items that nothing lists) and reports whether a turn holds it, in which case the others do
// nothing (the lock keeps the answer true until the end).
func (s *Store) ConversationDelete(ctx context.Context, p *store.ConversationDeleteParams) error {
	at := timeOr(p.Now)
	unheld := `NOT EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2 AND ` + turnHeldSQL + `)`
	b := &pgx.Batch{}
	b.Queue(`SELECT coalesce(`+turnHeldSQL+`, false) FROM conversations WHERE tenant = $1 AND id = $2 FOR UPDATE`, p.Tenant, p.ID, at)
	b.Queue(`DELETE FROM items WHERE tenant = $1 AND response_id IS NULL AND `+unheld+`
		AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = $1 AND conversation_id = $2)`, p.Tenant, p.ID, at)
	b.Queue(`DELETE FROM conversations WHERE tenant = $1 AND id = $2 AND NOT coalesce(`+turnHeldSQL+`, false)`, p.Tenant, p.ID, at)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var held bool
	if err := br.QueryRow().Scan(&held); err != nil {
		return fmt.Errorf("delete conversation: %w", interpretError(err))
	}
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("delete conversation: %w", interpretError(err))
		}
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("delete conversation: %w", interpretError(err))
	}
	if held {
		return fmt.Errorf("delete conversation: a turn holds it: %w", store.ErrConflict)
	}
	return nil
}

// ConversationItemAppend appends items at max(seq)+1… under the conversation's row lock, in one
// pipelined implicit transaction.
func (s *Store) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	var items itemArrays
	items.add("", p.Items)
	b := &pgx.Batch{}
	b.Queue(`SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2 FOR UPDATE`, p.Tenant, p.ConversationID)
	if items.len() > 0 {
		queueInsertItems(b, p.Tenant, nil, &p.ConversationID, &items)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var one int
	if err := br.QueryRow().Scan(&one); err != nil {
		// With no conversation, the insert after it fails too and the whole batch rolls back.
		return fmt.Errorf("append conversation items: %w", interpretError(err))
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("append conversation items: %w", interpretError(err))
	}
	return nil
}

// ConversationItemList pages through a conversation's items by seq. After works as in
// ItemListByResponse; an unknown conversation or cursor is ErrNotFound.
func (s *Store) ConversationItemList(ctx context.Context, p *store.ConversationItemListParams) (*store.ItemPage, error) {
	desc, err := p.Order.Descending()
	if err != nil {
		return nil, err
	}
	limit := store.PageLimit(p.Limit)
	q := `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
		  AND ($3 = '' OR ci.seq > (SELECT max(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
		                            WHERE c2.tenant = $1 AND c2.conversation_id = $2 AND i2.tenant = $1 AND i2.id = $3))
		ORDER BY ci.seq LIMIT $4`
	if desc {
		q = `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
		  AND ($3 = '' OR ci.seq < (SELECT min(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
		                            WHERE c2.tenant = $1 AND c2.conversation_id = $2 AND i2.tenant = $1 AND i2.id = $3))
		ORDER BY ci.seq DESC LIMIT $4`
	}
	rows, err := s.pool.Query(ctx, q, p.Tenant, p.ConversationID, p.After, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list conversation items: %w", interpretError(err))
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("list conversation items: %w", interpretError(err))
	}
	if len(items) == 0 {
		var found, cursor bool
		err := s.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2),
			$3 = '' OR EXISTS (SELECT 1 FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
			                   WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3)`,
			p.Tenant, p.ConversationID, p.After).Scan(&found, &cursor)
		if err != nil {
			return nil, fmt.Errorf("list conversation items: %w", interpretError(err))
		}
		if !found || !cursor {
			return nil, fmt.Errorf("list conversation items: %w", store.ErrNotFound)
		}
	}
	return store.PageOf(items, limit), nil
}

// ConversationItemsAll loads a conversation's items in seq order in one query; its first row
// (seq -1) only proves the conversation exists, so an empty one is told from an unknown one.
func (s *Store) ConversationItemsAll(ctx context.Context, p *store.ConversationItemsAllParams) ([]wire.Item, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT -1 AS seq, '' AS id, '' AS type, NULL::json AS data FROM conversations WHERE tenant = $1 AND id = $2
		UNION ALL
		SELECT ci.seq, i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
		ORDER BY seq`, p.Tenant, p.ConversationID)
	if err != nil {
		return nil, fmt.Errorf("load conversation items: %w", interpretError(err))
	}
	defer rows.Close()
	found := false
	items := []wire.Item{}
	for rows.Next() {
		var seq int64
		var it wire.Item
		var data []byte
		if err := rows.Scan(&seq, &it.ID, &it.Type, &data); err != nil {
			return nil, fmt.Errorf("load conversation items: %w", err)
		}
		if seq < 0 {
			found = true
			continue
		}
		it.JSON = data
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load conversation items: %w", interpretError(err))
	}
	if !found {
		return nil, fmt.Errorf("load conversation items: %w", store.ErrNotFound)
	}
	return items, nil
}

// ConversationItemGet returns the conversation's item with this id (its latest occurrence).
func (s *Store) ConversationItemGet(ctx context.Context, p *store.ConversationItemGetParams) (wire.Item, error) {
	var it wire.Item
	var data []byte
	err := s.pool.QueryRow(ctx, `
		SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3
		ORDER BY ci.seq DESC LIMIT 1`, p.Tenant, p.ConversationID, p.ItemID).Scan(&it.ID, &it.Type, &data)
	if err != nil {
		return wire.Item{}, fmt.Errorf("get conversation item: %w", interpretError(err))
	}
	it.JSON = data
	return it, nil
}

// ConversationItemDelete removes every occurrence of the item id from the conversation. Items
// created directly in the conversation are deleted; a response's items stay with the response.
func (s *Store) ConversationItemDelete(ctx context.Context, p *store.ConversationItemDeleteParams) error {
	var n int
	err := s.pool.QueryRow(ctx, `
		WITH gone AS (
		    DELETE FROM conversation_items ci USING items i
		    WHERE i.pk = ci.item_pk AND ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3
		    RETURNING ci.item_pk
		), dropped AS (
		    DELETE FROM items WHERE tenant = $1 AND response_id IS NULL AND pk IN (SELECT item_pk FROM gone)
		)
		SELECT count(*) FROM gone`, p.Tenant, p.ConversationID, p.ItemID).Scan(&n)
	if err != nil {
		return fmt.Errorf("delete conversation item: %w", interpretError(err))
	}
	if n == 0 {
		return fmt.Errorf("delete conversation item: %w", store.ErrNotFound)
	}
	return nil
}

// ConversationTurnAcquire takes the turn lease if it is free, expired, or already ResponseID's.
func (s *Store) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	// One statement: the UPDATE takes the lease if it may; the outer SELECT also reports whether
	// the conversation exists, to tell ErrConflict from ErrNotFound.
	var exists, taken bool
	err := s.pool.QueryRow(ctx, `
		WITH took AS (
		    UPDATE conversations SET turn_response_id = $3, turn_expires_at = $4
		    WHERE tenant = $1 AND id = $2
		      AND (turn_response_id IS NULL OR turn_response_id = $3 OR turn_expires_at <= $5)
		    RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2), EXISTS (SELECT 1 FROM took)`,
		p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UTC(), time.Now().UTC()).Scan(&exists, &taken)
	if err != nil {
		return fmt.Errorf("acquire conversation turn: %w", interpretError(err))
	}
	switch {
	case !exists:
		return fmt.Errorf("acquire conversation turn: %w", store.ErrNotFound)
	case !taken:
		return fmt.Errorf("acquire conversation turn: %w", store.ErrConflict)
	}
	return nil
}

// ConversationTurnExtend moves the turn lease forward if ResponseID holds it; it never takes a
// free lease, so a response whose lease was released or retaken cannot get it back this way.
func (s *Store) ConversationTurnExtend(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE conversations SET turn_expires_at = $4
		WHERE tenant = $1 AND id = $2 AND turn_response_id = $3`, p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UTC())
	if err != nil {
		return fmt.Errorf("extend conversation turn: %w", interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("extend conversation turn: %w", store.ErrNotFound)
	}
	return nil
}

// ConversationTurnRelease drops the turn lease if ResponseID holds it.
func (s *Store) ConversationTurnRelease(ctx context.Context, p *store.ConversationTurnReleaseParams) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE conversations SET turn_response_id = NULL, turn_expires_at = NULL
		WHERE tenant = $1 AND id = $2 AND turn_response_id = $3`, p.Tenant, p.ConversationID, p.ResponseID)
	if err != nil {
		return fmt.Errorf("release conversation turn: %w", interpretError(err))
	}
	return nil
}
