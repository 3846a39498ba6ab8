package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/store"
)

// ConversationCreate inserts the conversation and its initial items (seq 0…n-1), pipelined in
// one implicit transaction.
func (s *Store) ConversationCreate(ctx context.Context, p *store.ConversationCreateParams) error {
	c := &p.Conversation
	b := &pgx.Batch{}
	b.Queue(conversationInsertSQL, c.Tenant, c.ID, s.Driver.JSON(store.ObjectJSON(c.Metadata)), store.NowOr(c.CreatedAt))
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

// ConversationItemAppend appends items at max(seq)+1… under the conversation's row lock, in one
// pipelined implicit transaction.
func (s *Store) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	var items itemArrays
	items.add("", p.Items)
	b := &pgx.Batch{}
	b.Queue(conversationLockSQL, p.Tenant, p.ConversationID)
	if items.len() > 0 {
		queueInsertItems(b, p.Tenant, nil, p.ConversationID, &items)
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
// in one statement that also reports whether the conversation exists.
func (s *Store) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	var exists, taken bool
	err := s.pool.QueryRow(ctx, turnAcquireSQL, p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UTC(), time.Now().UTC()).Scan(&exists, &taken)
	if err == nil {
		err = store.TurnAcquireDecision(exists, taken)
	}
	if err != nil {
		return fmt.Errorf("acquire conversation turn: %w", interpretError(err))
	}
	return nil
}
