package sqlite

// The methods that write in one transaction, whose strategy is this backend's own: Go runs
// between the statements of one transaction. The rest of store.Store is store.Base.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ResponseBegin inserts an in-progress (or queued) response holding a lease, with its input
// items, in one transaction.
func (s *Store) ResponseBegin(ctx context.Context, p *store.ResponseBeginParams) error {
	args, err := store.BeginArgs(s.Driver, p)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(tx *txn) error {
		l, err := lineage(ctx, tx, p.Response.Tenant, p.Response.PreviousResponseID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, responseBeginSQL, append(args, l...)...); err != nil {
			return interpretError(err)
		}
		return insertItems(ctx, tx, p.Response.Tenant, p.Response.ID, store.RoleInput, p.Input, "", nil)
	})
	if err != nil {
		return fmt.Errorf("begin response: %w", interpretError(err))
	}
	return nil
}

// lineage chooses a new response's (branch, depth, fork_branch) in the writing transaction
// (migrations/sqlite/006): continuing the head of a branch extends it; continuing any other
// response forks a new branch from its branch; a response whose previous one does not exist
// starts a branch at depth 0. The transaction holds SQLite's only write lock, so two
// continuations of one head cannot both extend it.
func lineage(ctx context.Context, tx *txn, tenant, prev string) ([]any, error) {
	var branch, depth int64
	if prev != "" {
		err := tx.QueryRowContext(ctx, continueHeadSQL, tenant, prev).Scan(&branch, &depth)
		if err == nil {
			return []any{branch, depth + 1, nil}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("lineage: %w", interpretError(err))
		}
	}
	var fork any
	depth = -1
	if prev != "" {
		err := tx.QueryRowContext(ctx, parentLineageSQL, tenant, prev).Scan(&branch, &depth)
		switch {
		case err == nil:
			fork = branch
		case errors.Is(err, sql.ErrNoRows):
			depth = -1
		default:
			return nil, fmt.Errorf("lineage: %w", interpretError(err))
		}
	}
	if err := tx.QueryRowContext(ctx, nextBranchSQL).Scan(&branch); err != nil {
		return nil, fmt.Errorf("lineage: new branch: %w", interpretError(err))
	}
	return []any{branch, depth + 1, fork}, nil
}

// errNoop rolls back ResponseCommit's transaction when the response is already terminal.
var errNoop = errors.New("already terminal")

// ResponseCommit stores a finished turn in one transaction; see store.Store. Concurrent commits
// are grouped (commitGroup): one transaction on SQLite's single writer carries every commit
// queued while the previous group was writing, each under a savepoint of its own, so one that
// fails or is a no-op rolls back alone and the others still commit together. Durability is the
// database's (a file opens with journal_mode=WAL and synchronous=NORMAL, as before grouping): a
// grouped commit is exactly as durable as a lone one.
func (s *Store) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	if err := store.CommitCheck(p); err != nil {
		return fmt.Errorf("commit response: %w", err)
	}
	if err := s.commits.run(ctx, p, s.commitGroup); err != nil {
		return fmt.Errorf("commit response: %w", err)
	}
	return nil
}

// commitOne is one commit inside a group's transaction: it reads the stored status and lets
// store.CommitDecision say whether to insert, update or do nothing (errNoop).
func (s *Store) commitOne(ctx context.Context, tx *txn, p *store.ResponseCommitParams) error {
	r := &p.Response
	var stored wire.Status
	err := interpretError(tx.QueryRowContext(ctx, store.ResponseStatusSQL, r.Tenant, r.ID).Scan(&stored))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read status: %w", err)
	}
	action, err := store.CommitDecision(stored, p)
	switch {
	case err != nil:
		return err
	case action == store.CommitNoop:
		return errNoop
	case action == store.CommitUpdate:
		_, err = tx.ExecContext(ctx, responseFinishSQL, store.FinishArgs(s.Driver, r)...)
	default:
		var l []any
		if l, err = lineage(ctx, tx, r.Tenant, r.PreviousResponseID); err == nil {
			_, err = tx.ExecContext(ctx, responseInsertSQL, append(append(store.ResponseArgs(s.Driver, r, r.Status), l...), store.ReplicaArgs(r)...)...)
		}
	}
	if err != nil {
		return fmt.Errorf("upsert: %w", interpretError(err))
	}
	return s.commitItems(ctx, tx, p)
}

// commitGroup writes a group of commits in one transaction, each under a savepoint: a commit
// that fails (or is a no-op) is rolled back to its savepoint and gets its error; the others
// commit together. No statement runs under a caller's cancellable context: SQLite answers an
// interrupted write inside a transaction by rolling the whole transaction back, which would
// take the other commits of the group with it. A commit is short and lock waits are bounded by
// the busy timeout.
func (s *Store) commitGroup(group []*pendingCommit) {
	fail := func(err error) {
		for _, c := range group {
			c.err = err
		}
	}
	s.stmts.warm(context.Background())
	sqlTx, err := s.db.BeginTx(context.Background(), nil)
	if err != nil {
		fail(fmt.Errorf("begin: %w", err))
		return
	}
	tx := &txn{Tx: sqlTx, stmts: s.stmts}
	for _, c := range group {
		if _, err := tx.ExecContext(context.Background(), "SAVEPOINT c"); err != nil {
			c.err = err
			continue
		}
		c.err = s.commitOne(context.WithoutCancel(c.ctx), tx, c.p)
		if c.err != nil {
			if _, err := tx.ExecContext(context.Background(), "ROLLBACK TO c"); err != nil {
				_ = tx.Rollback()
				fail(fmt.Errorf("roll back to savepoint: %w", err))
				return
			}
			if errors.Is(c.err, errNoop) {
				c.err = nil
			}
		}
		if _, err := tx.ExecContext(context.Background(), "RELEASE c"); err != nil {
			_ = tx.Rollback()
			fail(fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("commit: %w", interpretError(err)))
	}
}

// commitItems writes the rest of a commit after the record: the conversation's turn release and
// append, the items not yet stored, and the events.
func (s *Store) commitItems(ctx context.Context, tx *txn, p *store.ResponseCommitParams) error {
	r := &p.Response
	var seq int64
	if p.ConversationID == "" && p.ReleaseTurn != "" {
		if _, err := tx.ExecContext(ctx, releaseTurnSQL, r.Tenant, p.ReleaseTurn, r.ID); err != nil {
			return fmt.Errorf("conversation: %w", interpretError(err))
		}
	}
	if p.ConversationID != "" {
		// Release the turn if this response holds it; no row means no such conversation.
		res, err := tx.ExecContext(ctx, releaseTurnSQL, r.Tenant, p.ConversationID, r.ID)
		if err != nil {
			return fmt.Errorf("conversation: %w", interpretError(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("conversation: %w", store.ErrNotFound)
		}
		if seq, err = nextSeq(ctx, tx, r.Tenant, p.ConversationID); err != nil {
			return err
		}
	}
	if p.Begun {
		// ResponseBegin stored the input: only append it.
		if err := appendStoredInput(ctx, tx, r.Tenant, r.ID, p.ConversationID, &seq); err != nil {
			return err
		}
	} else if err := insertItems(ctx, tx, r.Tenant, r.ID, store.RoleInput, p.Input, p.ConversationID, &seq); err != nil {
		return err
	}
	if err := insertItems(ctx, tx, r.Tenant, r.ID, store.RoleOutput, p.Output, p.ConversationID, &seq); err != nil {
		return err
	}
	return insertEvents(ctx, tx, r.Tenant, r.ID, p.Events)
}

// appendStoredInput appends the response's stored input items to conv (if set) in position
// order at *seq, *seq+1…, advancing *seq. The caller runs it inside a transaction.
func appendStoredInput(ctx context.Context, tx *txn, tenant, responseID, conv string, seq *int64) error {
	if conv == "" {
		return nil
	}
	res, err := tx.ExecContext(ctx, appendStoredInputSQL, tenant, responseID, conv, *seq)
	if err != nil {
		return fmt.Errorf("append stored input: %w", interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("append stored input: %w", err)
	}
	*seq += n
	return nil
}

// insertEvents logs events of a response, leaving an already logged seq as it is. The caller
// runs it inside a transaction and has checked that the response exists.
func insertEvents(ctx context.Context, tx *txn, tenant, responseID string, events []store.Event) error {
	for _, e := range events {
		data := e.Data
		if data == nil {
			data = []byte{} // NOT NULL: an empty event is empty bytes
		}
		if _, err := tx.ExecContext(ctx, insertEventSQL, tenant, responseID, e.Seq, e.Type, data); err != nil {
			return fmt.Errorf("insert events: %w", interpretError(err))
		}
	}
	return nil
}

// ResponseEventAppend logs the events of several responses, idempotently by seq, in one
// transaction.
func (s *Store) ResponseEventAppend(ctx context.Context, ps []store.ResponseEventAppendParams) ([]int, error) {
	var missing []int
	err := s.inTx(ctx, func(tx *txn) error {
		for i := range ps {
			p := &ps[i]
			err := exists(ctx, tx, store.ResponseExistsSQL, p.Tenant, p.ResponseID)
			if errors.Is(err, store.ErrNotFound) {
				missing = append(missing, i)
				continue
			}
			if err == nil {
				err = insertEvents(ctx, tx, p.Tenant, p.ResponseID, p.Events)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("append response events: %w", err)
	}
	return missing, nil
}

// ResponseDelete deletes a response, its items and (by cascade) its event log, detaching
// (response_id NULL) the items a conversation still lists, in one transaction. An unfinished
// response whose lease is live at Now is left alone: store.ErrLeaseHeld.
func (s *Store) ResponseDelete(ctx context.Context, p *store.ResponseDeleteParams) error {
	err := s.guardedDelete(ctx, p.Tenant, p.ID, s.Driver.Time(store.NowOr(p.Now)), store.ErrLeaseHeld,
		responseDeleteGuardSQL, responseDetachItemsSQL, responseDeleteItemsSQL, responseBumpGenerationSQL, responseReleaseTurnSQL, responseDeleteSQL)
	if err != nil {
		return fmt.Errorf("delete response: %w", err)
	}
	return nil
}

// ResponsePurge deletes the oldest terminal responses created before Before (retention), as
// ResponseDelete does, in one transaction of three statements for the whole batch (purgeVictims).
// The victims are the same in each statement: the transaction holds the only write lock, and the
// first two statements change no response.
func (s *Store) ResponsePurge(ctx context.Context, p *store.ResponsePurgeParams) (int, error) {
	var n int64
	before := s.Driver.Time(store.NowOr(p.Before))
	err := s.inTx(ctx, func(tx *txn) error {
		for _, q := range []string{purgeBumpSQL, purgeDetachSQL, purgeItemsSQL} {
			if _, err := tx.ExecContext(ctx, q, before, p.Limit); err != nil {
				return interpretError(err)
			}
		}
		res, err := tx.ExecContext(ctx, purgeResponsesSQL, before, p.Limit)
		if err != nil {
			return interpretError(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purge responses: %w", err)
	}
	return int(n), nil
}

// ConversationCreate inserts the conversation and its initial items (seq 0…n-1) in one
// transaction.
func (s *Store) ConversationCreate(ctx context.Context, p *store.ConversationCreateParams) error {
	c := &p.Conversation
	err := s.inTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, store.ConversationInsertSQL,
			c.Tenant, c.ID, s.Driver.JSON(store.ObjectJSON(c.Metadata)), s.Driver.Time(store.NowOr(c.CreatedAt))); err != nil {
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

// ConversationDelete deletes the conversation and its list (by cascade), and the items created
// directly in it (response_id NULL), in one transaction; items of responses stay with their
// responses. While a turn holds the lease (live at Now) nothing is deleted: store.ErrTurnHeld.
func (s *Store) ConversationDelete(ctx context.Context, p *store.ConversationDeleteParams) error {
	err := s.guardedDelete(ctx, p.Tenant, p.ID, s.Driver.Time(store.NowOr(p.Now)), store.ErrTurnHeld,
		conversationDeleteGuardSQL, conversationDeleteItemsSQL, conversationDeleteSQL)
	if err != nil {
		return fmt.Errorf("delete conversation: %w", err)
	}
	return nil
}

// ConversationItemAppend appends items at max(seq)+1… in one transaction (the database's write
// lock, taken at BEGIN IMMEDIATE), after refusing an id of the live turn's input with other
// content (store.TurnItemConflict) and an id the conversation lists with other content
// (store.ItemIDConflict: a concurrent append waits for the lock and then sees this one's item).
func (s *Store) ConversationItemAppend(ctx context.Context, p *store.ConversationItemAppendParams) error {
	err := s.inTx(ctx, func(tx *txn) error {
		var turn string
		err := tx.QueryRowContext(ctx, conversationTurnItemsSQL, p.Tenant, p.ConversationID, time.Now().UnixMicro()).Scan(&turn)
		if err != nil {
			return interpretError(err)
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

// heldItems is every item conversation lists under one of ids (each occurrence).
func heldItems(ctx context.Context, tx *txn, tenant, conversation string, ids []string) ([]wire.Item, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, conversationItemsByIDSQL, tenant, conversation, string(list))
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
// transaction. Items created directly in the conversation are deleted; a response's items stay
// with the response.
func (s *Store) ConversationItemDelete(ctx context.Context, p *store.ConversationItemDeleteParams) error {
	err := s.inTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, conversationItemDeleteDirectSQL, p.Tenant, p.ConversationID, p.ItemID); err != nil {
			return interpretError(err)
		}
		var direct int64
		if err := tx.QueryRowContext(ctx, changesSQL).Scan(&direct); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, conversationItemDeleteListedSQL, p.Tenant, p.ConversationID, p.ItemID)
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

// ConversationTurnAcquire takes the turn lease if it is free, expired, or already ResponseID's,
// in one transaction; when it cannot, whether the conversation exists tells ErrNotFound from
// ErrConflict. With Items, the same transaction refuses an id the conversation lists with other
// content.
func (s *Store) ConversationTurnAcquire(ctx context.Context, p *store.ConversationTurnAcquireParams) error {
	err := s.inTx(ctx, func(tx *txn) error {
		res, err := tx.ExecContext(ctx, turnAcquireSQL,
			p.Tenant, p.ConversationID, p.ResponseID, p.ExpiresAt.UnixMicro(), time.Now().UnixMicro(),
			store.NullString(store.TurnItems(p.Items)))
		if err != nil {
			return interpretError(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		found := n > 0
		if !found {
			if err := exists(ctx, tx, conversationExistsSQL, p.Tenant, p.ConversationID); err == nil {
				found = true
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		if err := store.TurnAcquireDecision(store.TurnAcquireResult{Exists: found, Taken: n > 0}); err != nil {
			return err
		}
		held, err := heldItems(ctx, tx, p.Tenant, p.ConversationID, store.ItemIDs(p.Items))
		if err != nil {
			return err
		}
		return store.ItemIDConflict(held, p.Items) // rolls the lease back
	})
	if err != nil {
		return fmt.Errorf("acquire conversation turn: %w", err)
	}
	return nil
}
