package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/respgate/respgate/store"
	"github.com/respgate/respgate/wire"
)

// ResponseBegin inserts an in-progress (or queued) response holding a lease, with its input
// items, in one transaction.
func (s *Store) ResponseBegin(ctx context.Context, p *store.ResponseBeginParams) error {
	r := &p.Response
	status := r.Status
	if status == "" {
		status = wire.StatusInProgress
	}
	if status != wire.StatusInProgress && status != wire.StatusQueued {
		return fmt.Errorf("begin response: status %q is not in_progress or queued", status)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
			                       completed_at, echo, usage, error, incomplete_details, lease_owner, lease_expires_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)`,
			r.Tenant, r.ID, status, r.Model, nullString(r.PreviousResponseID), nullString(r.ConversationID), micros(r.CreatedAt),
			nullMicros(r.CompletedAt), nullJSON(r.Echo), nullJSON(r.Usage), nullJSON(r.Error), nullJSON(r.IncompleteDetails),
			p.LeaseOwner, p.LeaseExpiresAt.UnixMicro())
		if err != nil {
			return interpretError(err)
		}
		return insertItems(ctx, tx, r.Tenant, r.ID, store.RoleInput, p.Input, "", nil)
	})
	if err != nil {
		return fmt.Errorf("begin response: %w", interpretError(err))
	}
	return nil
}

// ResponseLeaseExtend moves an unfinished response's lease forward if LeaseOwner holds it.
func (s *Store) ResponseLeaseExtend(ctx context.Context, p *store.ResponseLeaseExtendParams) error {
	res, err := s.db.ExecContext(ctx, `
		UPDATE responses SET lease_expires_at = ?4
		WHERE tenant = ?1 AND id = ?2 AND lease_owner = ?3 AND status IN ('queued', 'in_progress')`,
		p.Tenant, p.ID, p.LeaseOwner, p.LeaseExpiresAt.UnixMicro())
	if err != nil {
		return fmt.Errorf("extend response lease: %w", interpretError(err))
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return fmt.Errorf("extend response lease: %w", store.ErrNotFound)
	}
	return nil
}

// ResponseCommit stores a finished turn in one transaction; see store.Store.
func (s *Store) ResponseCommit(ctx context.Context, p *store.ResponseCommitParams) error {
	r := &p.Response
	if !r.Status.Terminal() {
		return fmt.Errorf("commit response: status %q is not terminal", r.Status)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var status wire.Status
		err := tx.QueryRowContext(ctx, `SELECT status FROM responses WHERE tenant = ?1 AND id = ?2`, r.Tenant, r.ID).Scan(&status)
		switch {
		case p.Begun && errors.Is(err, sql.ErrNoRows):
			// Deleted since ResponseBegin: a commit never resurrects it.
			return store.ErrNotFound
		case err == nil && status.Terminal() && status != r.Status:
			return fmt.Errorf("stored as %s: %w", status, store.ErrConflict)
		case err == nil && status.Terminal():
			return errNoop
		case err == nil:
			_, err = tx.ExecContext(ctx, `
				UPDATE responses SET status = ?3, model = ?4, previous_response_id = ?5, conversation_id = ?6,
				    completed_at = ?7, echo = ?8, usage = ?9, error = ?10, incomplete_details = ?11,
				    lease_owner = NULL, lease_expires_at = NULL
				WHERE tenant = ?1 AND id = ?2`,
				r.Tenant, r.ID, r.Status, r.Model, nullString(r.PreviousResponseID), nullString(r.ConversationID),
				nullMicros(r.CompletedAt), nullJSON(r.Echo), nullJSON(r.Usage), nullJSON(r.Error), nullJSON(r.IncompleteDetails))
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `
				INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
				                       completed_at, echo, usage, error, incomplete_details)
				VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)`,
				r.Tenant, r.ID, r.Status, r.Model, nullString(r.PreviousResponseID), nullString(r.ConversationID), micros(r.CreatedAt),
				nullMicros(r.CompletedAt), nullJSON(r.Echo), nullJSON(r.Usage), nullJSON(r.Error), nullJSON(r.IncompleteDetails))
		}
		if err != nil {
			return fmt.Errorf("upsert: %w", interpretError(err))
		}
		var seq int64
		if p.ConversationID != "" {
			// Release the turn if this response holds it; no row means no such conversation.
			res, err := tx.ExecContext(ctx, `
				UPDATE conversations SET
				    turn_response_id = CASE WHEN turn_response_id = ?3 THEN NULL ELSE turn_response_id END,
				    turn_expires_at  = CASE WHEN turn_response_id = ?3 THEN NULL ELSE turn_expires_at END
				WHERE tenant = ?1 AND id = ?2`, r.Tenant, p.ConversationID, r.ID)
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
	})
	if err != nil && !errors.Is(err, errNoop) {
		return fmt.Errorf("commit response: %w", err)
	}
	return nil
}

// appendStoredInput appends the response's stored input items to conv (if set) in position
// order at *seq, *seq+1…, advancing *seq. The caller runs it inside a transaction.
func appendStoredInput(ctx context.Context, tx *sql.Tx, tenant, responseID, conv string, seq *int64) error {
	if conv == "" {
		return nil
	}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
		SELECT ?1, ?3, ?4 + row_number() OVER (ORDER BY position) - 1, pk
		FROM items WHERE tenant = ?1 AND response_id = ?2 AND role = 'input'`, tenant, responseID, conv, *seq)
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
func insertEvents(ctx context.Context, tx *sql.Tx, tenant, responseID string, events []store.Event) error {
	if len(events) == 0 {
		return nil
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO response_events (tenant, response_id, seq, type, data)
		VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant, response_id, seq) DO NOTHING`)
	if err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	defer ins.Close()
	for _, e := range events {
		data := e.Data
		if data == nil {
			data = []byte{} // NOT NULL: an empty event is empty bytes
		}
		if _, err := ins.ExecContext(ctx, tenant, responseID, e.Seq, e.Type, data); err != nil {
			return fmt.Errorf("insert events: %w", interpretError(err))
		}
	}
	return nil
}

// responseExists checks the response inside a transaction.
func responseExists(ctx context.Context, tx *sql.Tx, tenant, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM responses WHERE tenant = ?1 AND id = ?2`, tenant, id).Scan(&one)
	return interpretError(err)
}

// ResponseEventAppend logs events of an existing response, idempotently by seq, in one
// transaction.
func (s *Store) ResponseEventAppend(ctx context.Context, p *store.ResponseEventAppendParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := responseExists(ctx, tx, p.Tenant, p.ResponseID); err != nil {
			return err
		}
		return insertEvents(ctx, tx, p.Tenant, p.ResponseID, p.Events)
	})
	if err != nil {
		return fmt.Errorf("append response events: %w", err)
	}
	return nil
}

// ResponseEventList reads a response's events after a seq in one query; its first row (kind 0)
// only proves the response exists, so an empty log is told from an unknown response.
func (s *Store) ResponseEventList(ctx context.Context, p *store.ResponseEventListParams) ([]store.Event, error) {
	limit := -1 // SQLite: no limit
	if p.Limit > 0 {
		limit = p.Limit
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT 0 AS kind, 0 AS seq, '' AS type, NULL AS data FROM responses WHERE tenant = ?1 AND id = ?2
		UNION ALL
		SELECT 1, seq, type, data FROM (
		    SELECT seq, type, data FROM response_events
		    WHERE tenant = ?1 AND response_id = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4
		)
		ORDER BY kind, seq`, p.Tenant, p.ResponseID, p.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list response events: %w", interpretError(err))
	}
	defer rows.Close()
	found := false
	events := []store.Event{}
	for rows.Next() {
		var kind int
		var e store.Event
		if err := rows.Scan(&kind, &e.Seq, &e.Type, &e.Data); err != nil {
			return nil, fmt.Errorf("list response events: %w", err)
		}
		if kind == 0 {
			found = true
			continue
		}
		if e.Data == nil {
			e.Data = []byte{}
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list response events: %w", interpretError(err))
	}
	if !found {
		return nil, fmt.Errorf("list response events: %w", store.ErrNotFound)
	}
	return events, nil
}

// errNoop rolls back ResponseCommit's transaction when the response is already terminal.
var errNoop = errors.New("already terminal")

// responseCols are a response row's columns in the order recordRow reads them.
const responseCols = `id, tenant, status, model, coalesce(previous_response_id, ''), coalesce(conversation_id, ''),
    created_at, completed_at, echo, usage, error, incomplete_details`

// recordRow is one row of a query mixing response records (kind 0) and their items (kind 1:
// input, 2: output): the columns of the other kind are NULL.
type recordRow struct {
	kind                                  int
	id, tenant, status, model, prev, conv sql.NullString
	created, completed                    sql.NullInt64
	echo, usage, errJSON, incomplete      []byte
	itemID, itemType                      sql.NullString
	data                                  []byte
}

func (rr *recordRow) dest() []any {
	return []any{&rr.kind, &rr.id, &rr.tenant, &rr.status, &rr.model, &rr.prev, &rr.conv, &rr.created, &rr.completed,
		&rr.echo, &rr.usage, &rr.errJSON, &rr.incomplete, &rr.itemID, &rr.itemType, &rr.data}
}

func (rr *recordRow) response() store.Response {
	r := store.Response{
		ID: rr.id.String, Tenant: rr.tenant.String, Status: wire.Status(rr.status.String), Model: rr.model.String,
		PreviousResponseID: rr.prev.String, ConversationID: rr.conv.String,
		CreatedAt: fromMicros(rr.created.Int64),
		Echo:      json.RawMessage(rr.echo), Usage: json.RawMessage(rr.usage),
		Error: json.RawMessage(rr.errJSON), IncompleteDetails: json.RawMessage(rr.incomplete),
	}
	if rr.completed.Valid {
		c := fromMicros(rr.completed.Int64)
		r.CompletedAt = &c
	}
	return r
}

func (rr *recordRow) item() wire.Item {
	return wire.Item{ID: rr.itemID.String, Type: rr.itemType.String, JSON: rr.data}
}

// ResponseGet returns a response and its output items in one query.
func (s *Store) ResponseGet(ctx context.Context, p *store.ResponseGetParams) (*store.Response, []wire.Item, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT 0 AS kind, `+responseCols+`, NULL, NULL, NULL, NULL AS position
		FROM responses WHERE tenant = ?1 AND id = ?2
		UNION ALL
		SELECT 2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, id, type, data, position
		FROM items WHERE tenant = ?1 AND response_id = ?2 AND role = 'output'
		ORDER BY kind, position`, p.Tenant, p.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("get response: %w", interpretError(err))
	}
	defer rows.Close()
	var resp *store.Response
	var out []wire.Item
	for rows.Next() {
		var rr recordRow
		var pos sql.NullInt64
		if err := rows.Scan(append(rr.dest(), &pos)...); err != nil {
			return nil, nil, fmt.Errorf("get response: %w", err)
		}
		if rr.kind == 0 {
			r := rr.response()
			resp = &r
		} else {
			out = append(out, rr.item())
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("get response: %w", interpretError(err))
	}
	if resp == nil {
		return nil, nil, fmt.Errorf("get response: %w", store.ErrNotFound)
	}
	return resp, out, nil
}

// ResponseDelete deletes a response, its items and (by cascade) its event log, detaching
// (response_id NULL) the items a conversation still lists. An unfinished response whose lease is
// live at Now is left alone: ErrConflict.
func (s *Store) ResponseDelete(ctx context.Context, p *store.ResponseDeleteParams) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var held bool
		err := tx.QueryRowContext(ctx, `SELECT coalesce(status IN ('queued', 'in_progress') AND lease_expires_at > ?3, 0)
			FROM responses WHERE tenant = ?1 AND id = ?2`, p.Tenant, p.ID, micros(p.Now)).Scan(&held)
		if err != nil {
			return interpretError(err)
		}
		if held {
			return fmt.Errorf("in progress with a live lease: %w", store.ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE items SET response_id = NULL
			WHERE tenant = ?1 AND response_id = ?2
			  AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = ?1 AND ci.item_pk = items.pk)`, p.Tenant, p.ID); err != nil {
			return interpretError(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM items WHERE tenant = ?1 AND response_id = ?2`, p.Tenant, p.ID); err != nil {
			return interpretError(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM responses WHERE tenant = ?1 AND id = ?2`, p.Tenant, p.ID); err != nil {
			return interpretError(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete response: %w", err)
	}
	return nil
}

// purgeVictims selects the responses ResponsePurge deletes: up to ?2 terminal ones created before
// ?1, oldest first (ties broken by key, so every statement of the purge picks the same ones).
const purgeVictims = `
SELECT tenant, id FROM responses
WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled') AND created_at < ?1
ORDER BY created_at, tenant, id LIMIT ?2`

// ResponsePurge deletes the oldest terminal responses created before Before (retention), as
// ResponseDelete does, in one transaction of three statements for the whole batch: detach the
// items a conversation lists, delete the others, delete the responses (their events go by
// cascade). The victims are the same in each statement: the transaction holds the only write
// lock, and the first two statements change no response.
func (s *Store) ResponsePurge(ctx context.Context, p *store.ResponsePurgeParams) (int, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		before := micros(p.Before)
		if _, err := tx.ExecContext(ctx, `UPDATE items SET response_id = NULL
			WHERE (tenant, response_id) IN (`+purgeVictims+`)
			  AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = items.tenant AND ci.item_pk = items.pk)`,
			before, p.Limit); err != nil {
			return interpretError(err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM items WHERE (tenant, response_id) IN (`+purgeVictims+`)`, before, p.Limit); err != nil {
			return interpretError(err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM responses WHERE (tenant, id) IN (`+purgeVictims+`)`, before, p.Limit)
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

// chainSQL walks previous_response_id from ?2 back to the root (or to the first id that does not
// exist for tenant ?1), then returns each chain member's record and items, oldest first: record,
// input items, output items, by position. One statement, any depth up to ?3. CROSS JOIN makes
// SQLite walk the chain and look each member's items up by index, instead of scanning all the
// tenant's items (which it otherwise may, lacking statistics).
const chainSQL = `
WITH RECURSIVE chain (id, tenant, status, model, prev, conv, created_at, completed_at,
                      echo, usage, error, incomplete_details, depth) AS (
    SELECT id, tenant, status, model, previous_response_id, conversation_id, created_at, completed_at,
           echo, usage, error, incomplete_details, 0
    FROM responses WHERE tenant = ?1 AND id = ?2
    UNION ALL
    SELECT r.id, r.tenant, r.status, r.model, r.previous_response_id, r.conversation_id, r.created_at,
           r.completed_at, r.echo, r.usage, r.error, r.incomplete_details, c.depth + 1
    FROM chain c JOIN responses r ON r.tenant = ?1 AND r.id = c.prev
    WHERE c.depth < ?3
)
SELECT depth, 0 AS kind, id, tenant, status, model, coalesce(prev, ''), coalesce(conv, ''), created_at,
       completed_at, echo, usage, error, incomplete_details, NULL, NULL, NULL, NULL AS position
FROM chain
UNION ALL
SELECT c.depth, CASE i.role WHEN 'input' THEN 1 ELSE 2 END, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, i.id, i.type, i.data, i.position
FROM chain c CROSS JOIN items i ON i.tenant = ?1 AND i.response_id = c.id
ORDER BY depth DESC, kind, position`

// ResponseChainGet loads a previous_response_id chain in one query (a recursive CTE).
func (s *Store) ResponseChainGet(ctx context.Context, p *store.ResponseChainGetParams) (*store.Chain, error) {
	rows, err := s.db.QueryContext(ctx, chainSQL, p.Tenant, p.ID, maxChainDepth)
	if err != nil {
		return nil, fmt.Errorf("get response chain: %w", interpretError(err))
	}
	defer rows.Close()
	chain := &store.Chain{}
	for rows.Next() {
		var rr recordRow
		var depth int
		var pos sql.NullInt64
		if err := rows.Scan(append([]any{&depth}, append(rr.dest(), &pos)...)...); err != nil {
			return nil, fmt.Errorf("get response chain: %w", err)
		}
		// Rows come record first, then its input, then its output items.
		switch n := len(chain.Turns); {
		case rr.kind == 0:
			chain.Turns = append(chain.Turns, store.ChainTurn{Response: rr.response()})
		case n == 0:
			return nil, fmt.Errorf("get response chain: an item row before any response row")
		case rr.kind == 1:
			chain.Turns[n-1].Input = append(chain.Turns[n-1].Input, rr.item())
		default:
			chain.Turns[n-1].Output = append(chain.Turns[n-1].Output, rr.item())
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get response chain: %w", interpretError(err))
	}
	if len(chain.Turns) == 0 {
		return nil, fmt.Errorf("get response chain: %w", store.ErrNotFound)
	}
	if len(chain.Turns) > maxChainDepth {
		return nil, fmt.Errorf("get response chain: deeper than %d responses (cyclic?)", maxChainDepth)
	}
	// The recursion stopped at the oldest member found; if that one names a previous response,
	// the previous response does not exist (for this tenant).
	chain.Missing = chain.Turns[0].Response.PreviousResponseID
	return chain, nil
}

// contextSQL returns the items response ?2 was generated from, in order (see
// store.Store.ResponseContextGet), after a marker row (part 0) that proves the response exists:
//   - part 1: the items of its conversation that precede the first item it appended there (none
//     when it appended nothing, or the conversation is gone);
//   - part 2: each ancestor's input then output items, oldest first (the walk is chainSQL's, to
//     depth ?3), then its own input items.
const contextSQL = `
WITH RECURSIVE chain (id, prev, depth) AS (
    SELECT id, previous_response_id, 0 FROM responses WHERE tenant = ?1 AND id = ?2
    UNION ALL
    SELECT r.id, r.previous_response_id, c.depth + 1
    FROM chain c JOIN responses r ON r.tenant = ?1 AND r.id = c.prev
    WHERE c.depth < ?3
), target AS (
    SELECT conversation_id AS conv FROM responses WHERE tenant = ?1 AND id = ?2
), own AS (
    SELECT min(ci.seq) AS first FROM items i JOIN conversation_items ci ON ci.item_pk = i.pk
    WHERE i.tenant = ?1 AND i.response_id = ?2 AND ci.tenant = ?1 AND ci.conversation_id = (SELECT conv FROM target)
)
SELECT 0 AS part, 0 AS depth, 0 AS role, 0 AS ord, '' AS id, '' AS type, NULL AS data FROM target
UNION ALL
SELECT 1, 0, 0, ci.seq, i.id, i.type, i.data
FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = ?1 AND ci.conversation_id = (SELECT conv FROM target) AND i.tenant = ?1
  AND ci.seq < (SELECT first FROM own)
UNION ALL
SELECT 2, c.depth, CASE i.role WHEN 'input' THEN 0 ELSE 1 END, i.position, i.id, i.type, i.data
FROM chain c CROSS JOIN items i ON i.tenant = ?1 AND i.response_id = c.id
WHERE c.depth > 0 OR i.role = 'input'
ORDER BY part, depth DESC, role, ord`

// ResponseContextGet loads the items a response was generated from in one query (contextSQL).
func (s *Store) ResponseContextGet(ctx context.Context, p *store.ResponseContextGetParams) ([]wire.Item, error) {
	rows, err := s.db.QueryContext(ctx, contextSQL, p.Tenant, p.ID, maxChainDepth)
	if err != nil {
		return nil, fmt.Errorf("get response context: %w", interpretError(err))
	}
	defer rows.Close()
	found := false
	items := []wire.Item{}
	for rows.Next() {
		var part, depth, role int
		var ord int64
		var it wire.Item
		var data []byte
		if err := rows.Scan(&part, &depth, &role, &ord, &it.ID, &it.Type, &data); err != nil {
			return nil, fmt.Errorf("get response context: %w", err)
		}
		if part == 0 {
			found = true
			continue
		}
		it.JSON = data
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get response context: %w", interpretError(err))
	}
	if !found {
		return nil, fmt.Errorf("get response context: %w", store.ErrNotFound)
	}
	return items, nil
}

// ResponseSweep fails every unfinished response whose lease expired before Now.
func (s *Store) ResponseSweep(ctx context.Context, p *store.ResponseSweepParams) (int, error) {
	errJSON, err := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{"server_error", p.Message})
	if err != nil {
		return 0, fmt.Errorf("sweep responses: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `
		UPDATE responses SET status = 'failed', error = ?2, lease_owner = NULL, lease_expires_at = NULL
		WHERE status IN ('queued', 'in_progress') AND lease_expires_at < ?1`, p.Now.UnixMicro(), string(errJSON))
	if err != nil {
		return 0, fmt.Errorf("sweep responses: %w", interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sweep responses: %w", err)
	}
	return int(n), nil
}

// ItemListByResponse pages through a response's items of one role by position. After names the
// last item of the previous page; if that id occurs more than once in the list, the occurrence
// farthest in the direction of travel counts, so paging always ends. An unknown response or
// cursor is ErrNotFound.
func (s *Store) ItemListByResponse(ctx context.Context, p *store.ItemListByResponseParams) (*store.ItemPage, error) {
	if p.Role != store.RoleInput && p.Role != store.RoleOutput {
		return nil, fmt.Errorf("list response items: unknown role %q", p.Role)
	}
	desc, err := p.Order.Descending()
	if err != nil {
		return nil, err
	}
	limit := store.PageLimit(p.Limit)
	q := `SELECT id, type, data FROM items
		WHERE tenant = ?1 AND response_id = ?2 AND role = ?3
		  AND (?4 = '' OR position > (SELECT max(position) FROM items
		                              WHERE tenant = ?1 AND response_id = ?2 AND role = ?3 AND id = ?4))
		ORDER BY position LIMIT ?5`
	if desc {
		q = `SELECT id, type, data FROM items
		WHERE tenant = ?1 AND response_id = ?2 AND role = ?3
		  AND (?4 = '' OR position < (SELECT min(position) FROM items
		                              WHERE tenant = ?1 AND response_id = ?2 AND role = ?3 AND id = ?4))
		ORDER BY position DESC LIMIT ?5`
	}
	rows, err := s.db.QueryContext(ctx, q, p.Tenant, p.ResponseID, p.Role, p.After, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list response items: %w", interpretError(err))
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("list response items: %w", interpretError(err))
	}
	if len(items) == 0 {
		// Empty: tell an empty list from an unknown response or cursor.
		var found, cursor bool
		err := s.db.QueryRowContext(ctx, `SELECT
			EXISTS (SELECT 1 FROM responses WHERE tenant = ?1 AND id = ?2),
			?4 = '' OR EXISTS (SELECT 1 FROM items WHERE tenant = ?1 AND response_id = ?2 AND role = ?3 AND id = ?4)`,
			p.Tenant, p.ResponseID, p.Role, p.After).Scan(&found, &cursor)
		if err != nil {
			return nil, fmt.Errorf("list response items: %w", interpretError(err))
		}
		if !found || !cursor {
			return nil, fmt.Errorf("list response items: %w", store.ErrNotFound)
		}
	}
	return store.PageOf(items, limit), nil
}

// ItemGet returns the tenant's most recently stored item with this id.
func (s *Store) ItemGet(ctx context.Context, p *store.ItemGetParams) (wire.Item, error) {
	var it wire.Item
	var data []byte
	err := s.db.QueryRowContext(ctx, `SELECT id, type, data FROM items WHERE tenant = ?1 AND id = ?2 ORDER BY pk DESC LIMIT 1`,
		p.Tenant, p.ID).Scan(&it.ID, &it.Type, &data)
	if err != nil {
		return wire.Item{}, fmt.Errorf("get item: %w", interpretError(err))
	}
	it.JSON = data
	return it, nil
}

// ItemGetMany returns the tenant's most recently stored item for each id, in one query; the ids
// travel as one JSON array parameter (json_each), whatever their number.
func (s *Store) ItemGetMany(ctx context.Context, p *store.ItemGetManyParams) (map[string]wire.Item, error) {
	out := map[string]wire.Item{}
	if len(p.IDs) == 0 {
		return out, nil
	}
	idList, err := json.Marshal(p.IDs)
	if err != nil {
		return nil, fmt.Errorf("get items: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT i.id, i.type, i.data FROM items i
		WHERE i.tenant = ?1 AND i.id IN (SELECT value FROM json_each(?2))
		  AND i.pk = (SELECT max(pk) FROM items WHERE tenant = ?1 AND id = i.id)`, p.Tenant, string(idList))
	if err != nil {
		return nil, fmt.Errorf("get items: %w", interpretError(err))
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("get items: %w", interpretError(err))
	}
	for _, it := range items {
		out[it.ID] = it
	}
	return out, nil
}
