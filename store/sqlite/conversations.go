package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ConversationCreate inserts the conversation and its initial items (seq 0…n-1) in one
// transaction.
func (s *Store) ConversationCreate(ctx context.Context, p *store.ConversationCreateParams) error {
	c := &p.Conversation
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO conversations (tenant, id, metadata, created_at) VALUES (?1, ?2, ?3, ?4)`,
			c.Tenant, c.ID, objectJSON(c.Metadata), micros(c.CreatedAt)); err != nil {
			return interpretError(err)
		}
		var seq int64
		return insertItems(ctx, tx, c.Tenant, nil, "", p.Items, c.ID, &seq)
	})
	if err != nil {
		return fmt.Errorf("create conversation: %w", err)
	}
	return nil
}

func scanConversation(row *sql.Row) (*store.Conversation, error) {
	var c store.Conversation
	var meta []byte
	var created int64
	if err := row.Scan(&c.ID, &c.Tenant, &meta, &created); err != nil {
		return nil, err
	}
	c.Metadata = []byte(objectJSON(meta))
	c.CreatedAt = fromMicros(created)
	return &c, nil
}

// ConversationGet returns a conversation; its metadata is {} when empty.
func (s *Store) ConversationGet(ctx context.Context, p *store.ConversationGetParams) (*store.Conversation, error) {
	c, err := scanConversation(s.db.QueryRowContext(ctx,
		`SELECT id, tenant, metadata, created_at FROM conversations WHERE tenant = ?1 AND id = ?2`, p.Tenant, p.ID))
	if err != nil {
		return nil, fmt.Errorf("get conversation: %w", interpretError(err))
	}
	return c, nil
}

// ConversationUpdate replaces the metadata (nil or null: {}) and returns the conversation.
func (s *Store) ConversationUpdate(ctx context.Context, p *store.ConversationUpdateParams) (*store.Conversation, error) {
	c, err := scanConversation(s.db.QueryRowContext(ctx, `
		UPDATE conversations SET metadata = ?3 WHERE tenant = ?1 AND id = ?2
		RETURNING id, tenant, metadata, created_at`, p.Tenant, p.ID, objectJSON(p.Metadata)))
	if err != nil {
		return nil, fmt.Errorf("update conversation: %w", interpretError(err))
	}
	return c, nil
}

// ConversationDelete deletes the conversation and its list (by cascade), and the items created
// directly in it (response_id NULL); items of responses stay with their responses. While a turn
// holds the lease (live at Now) nothing is deleted: ErrConflict.
func (s *Store) ConversationDelete(ctx context.Context, p *store.ConversationDeleteParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var held bool
		err := tx.QueryRowContext(ctx, `SELECT coalesce(turn_response_id IS NOT NULL AND turn_expires_at > ?3, 0)
			FROM conversations WHERE tenant = ?1 AND id = ?2`, p.Tenant, p.ID, micros(p.Now)).Scan(&held)
		if err != nil {
			return interpretError(err)
		}
		if held {
			return fmt.Errorf("a turn holds it: %w", store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM items WHERE tenant = ?1 AND response_id IS NULL
			AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2)`, p.Tenant, p.ID); err != nil {
			return interpretError(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM conversations WHERE tenant = ?1 AND id = ?2`, p.Tenant, p.ID)
		if err != nil {
			return interpretError(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete conversation: %w", err)
	}
	return nil
}

// conversationExists checks the conversation inside a transaction.
func conversationExists(ctx context.Context, tx *sql.Tx, tenant, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2`, tenant, id).Scan(&one)
	return interpretError(err)
}

// ConversationItemAppend appends items at max(seq)+1… in one transaction.
func (s *Store) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := conversationExists(ctx, tx, p.Tenant, p.ConversationID); err != nil {
			return err
		}
		seq, err := nextSeq(ctx, tx, p.Tenant, p.ConversationID)
		if err != nil {
			return err
		}
		return insertItems(ctx, tx, p.Tenant, nil, "", p.Items, p.ConversationID, &seq)
	})
	if err != nil {
		return fmt.Errorf("append conversation items: %w", err)
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
		WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1
		  AND (?3 = '' OR ci.seq > (SELECT max(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
		                            WHERE c2.tenant = ?1 AND c2.conversation_id = ?2 AND i2.tenant = ?1 AND i2.id = ?3))
		ORDER BY ci.seq LIMIT ?4`
	if desc {
		q = `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1
		  AND (?3 = '' OR ci.seq < (SELECT min(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
		                            WHERE c2.tenant = ?1 AND c2.conversation_id = ?2 AND i2.tenant = ?1 AND i2.id = ?3))
		ORDER BY ci.seq DESC LIMIT ?4`
	}
	rows, err := s.db.QueryContext(ctx, q, p.Tenant, p.ConversationID, p.After, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list conversation items: %w", interpretError(err))
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("list conversation items: %w", interpretError(err))
	}
	if len(items) == 0 {
		var found, cursor bool
		err := s.db.QueryRowContext(ctx, `SELECT
			EXISTS (SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2),
			?3 = '' OR EXISTS (SELECT 1 FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
			                   WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1 AND i.id = ?3)`,
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
	rows, err := s.db.QueryContext(ctx, `
		SELECT -1 AS seq, '' AS id, '' AS type, NULL AS data FROM conversations WHERE tenant = ?1 AND id = ?2
		UNION ALL
		SELECT ci.seq, i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1
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
	err := s.db.QueryRowContext(ctx, `
		SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
		WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1 AND i.id = ?3
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
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Direct items go with their list entries (by cascade) …
		if _, err := tx.ExecContext(ctx, `DELETE FROM items WHERE tenant = ?1 AND response_id IS NULL AND id = ?3
			AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2)`,
			p.Tenant, p.ConversationID, p.ItemID); err != nil {
			return interpretError(err)
		}
		var direct int64
		if err := tx.QueryRowContext(ctx, `SELECT changes()`).Scan(&direct); err != nil {
			return err
		}
		// … response items only leave the list.
		res, err := tx.ExecContext(ctx, `DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2
			AND item_pk IN (SELECT pk FROM items WHERE tenant = ?1 AND id = ?3)`, p.Tenant, p.ConversationID, p.ItemID)
		if err != nil {
			return interpretError(err)
		}
		listed, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if direct+listed == 0 {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete conversation item: %w", err)
	}
	return nil
}

// ConversationTurnAcquire takes the turn lease if it is free, expired, or already ResponseID's.
func (s *Store) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE conversations SET turn_response_id = ?3, turn_expires_at = ?4
			WHERE tenant = ?1 AND id = ?2
			  AND (turn_response_id IS NULL OR turn_response_id = ?3 OR turn_expires_at <= ?5)`,
			p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UnixMicro(), time.Now().UnixMicro())
		if err != nil {
			return interpretError(err)
		}
		if n, err := res.RowsAffected(); err == nil && n > 0 {
			return nil
		}
		if err := conversationExists(ctx, tx, p.Tenant, p.ConversationID); err != nil {
			return err
		}
		return store.ErrConflict
	})
	if err != nil {
		return fmt.Errorf("acquire conversation turn: %w", err)
	}
	return nil
}

// ConversationTurnExtend moves the turn lease forward if ResponseID holds it; it never takes a
// free lease, so a response whose lease was released or retaken cannot get it back this way.
func (s *Store) ConversationTurnExtend(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	res, err := s.db.ExecContext(ctx, `
		UPDATE conversations SET turn_expires_at = ?4
		WHERE tenant = ?1 AND id = ?2 AND turn_response_id = ?3`, p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UnixMicro())
	if err != nil {
		return fmt.Errorf("extend conversation turn: %w", interpretError(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("extend conversation turn: %w", store.ErrNotFound)
	}
	return nil
}

// ConversationTurnRelease drops the turn lease if ResponseID holds it.
func (s *Store) ConversationTurnRelease(ctx context.Context, p *store.ConversationTurnReleaseParams) error {
	_, err := s.db.ExecContext(ctx, `
		UPDATE conversations SET turn_response_id = NULL, turn_expires_at = NULL
		WHERE tenant = ?1 AND id = ?2 AND turn_response_id = ?3`, p.Tenant, p.ConversationID, p.ResponseID)
	if err != nil {
		return fmt.Errorf("release conversation turn: %w", interpretError(err))
	}
	return nil
}
