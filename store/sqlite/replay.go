package sqlite

import (
	"context"
	"fmt"

	"github.com/respgate/respgate/store"
)

// The replay records of the Chat Completions front door (migrations/sqlite/003).

var replayQueries = store.ReplayQueries{
	List: `SELECT start_digest, end_digest, envelope, parent, payload, items, blocked, created_at, used_at
FROM chat_replay_records WHERE tenant = ?1 AND scope = ?2 AND end_digest IN (SELECT value FROM json_each(?3))`,
	// A second payload for one identity is a conflict: the row is blocked and forgets its items.
	Insert: `INSERT INTO chat_replay_records
    (tenant, scope, end_digest, start_digest, envelope, parent, payload, items, bytes, created_at, used_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)
ON CONFLICT (tenant, scope, end_digest) DO UPDATE SET
    blocked = blocked OR payload <> excluded.payload,
    items   = CASE WHEN blocked OR payload <> excluded.payload THEN '[]' ELSE items END,
    bytes   = CASE WHEN blocked OR payload <> excluded.payload THEN 0 ELSE bytes END,
    used_at = max(used_at, excluded.used_at)`,
	Block: `UPDATE chat_replay_records SET blocked = 1, items = '[]', bytes = 0
WHERE tenant = ?1 AND scope = ?2 AND start_digest = ?3 AND created_at <= ?4`,
	Touch: `UPDATE chat_replay_records SET used_at = max(used_at, ?4)
WHERE tenant = ?1 AND scope = ?2 AND end_digest IN (SELECT value FROM json_each(?3))`,
	Bound: `DELETE FROM chat_replay_records WHERE tenant = ?1 AND scope = ?2 AND end_digest IN (
    SELECT end_digest FROM chat_replay_records WHERE tenant = ?1 AND scope = ?2
    ORDER BY used_at DESC, created_at DESC, end_digest LIMIT -1 OFFSET ?3)`,
	Purge: `DELETE FROM chat_replay_records WHERE rowid IN (
    SELECT rowid FROM chat_replay_records WHERE used_at < ?1 ORDER BY used_at LIMIT ?2)`,
}

// ReplayRecordSave runs store.ReplaySaveStatements in one transaction.
func (s *Store) ReplayRecordSave(ctx context.Context, p *store.ReplayRecordSaveParams) error {
	stmts, err := store.ReplaySaveStatements(s.Driver, &replayQueries, p)
	if err != nil {
		return fmt.Errorf("save replay record: %w", err)
	}
	err = s.inTx(ctx, func(tx *txn) error {
		for _, st := range stmts {
			if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
				return interpretError(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save replay record: %w", err)
	}
	return nil
}
