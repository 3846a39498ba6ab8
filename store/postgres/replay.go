package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/respgate/respgate/store"
)

// The replay records of the Chat Completions front door (migrations/postgres/003).

var replayQueries = store.ReplayQueries{
	List: `SELECT start_digest, end_digest, envelope, parent, payload, items, blocked, created_at, used_at
FROM chat_replay_records WHERE tenant = $1 AND scope = $2 AND end_digest = ANY($3)`,
	// A second payload for one identity is a conflict: the row is blocked and forgets its items.
	Insert: `INSERT INTO chat_replay_records AS r
    (tenant, scope, end_digest, start_digest, envelope, parent, payload, items, bytes, created_at, used_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)
ON CONFLICT (tenant, scope, end_digest) DO UPDATE SET
    blocked = r.blocked OR r.payload <> EXCLUDED.payload,
    items   = CASE WHEN r.blocked OR r.payload <> EXCLUDED.payload THEN '[]'::json ELSE r.items END,
    bytes   = CASE WHEN r.blocked OR r.payload <> EXCLUDED.payload THEN 0 ELSE r.bytes END,
    used_at = greatest(r.used_at, EXCLUDED.used_at)`,
	Block: `UPDATE chat_replay_records SET blocked = true, items = '[]'::json, bytes = 0
WHERE tenant = $1 AND scope = $2 AND start_digest = $3 AND created_at <= $4`,
	Touch: `UPDATE chat_replay_records SET used_at = greatest(used_at, $4)
WHERE tenant = $1 AND scope = $2 AND end_digest = ANY($3)`,
	Bound: `DELETE FROM chat_replay_records WHERE tenant = $1 AND scope = $2 AND end_digest IN (
    SELECT end_digest FROM chat_replay_records WHERE tenant = $1 AND scope = $2
    ORDER BY used_at DESC, created_at DESC, end_digest OFFSET $3)`,
	Purge: `DELETE FROM chat_replay_records r USING (
    SELECT tenant, scope, end_digest FROM chat_replay_records WHERE used_at < $1 ORDER BY used_at LIMIT $2) v
WHERE r.tenant = v.tenant AND r.scope = v.scope AND r.end_digest = v.end_digest`,
}

// ReplayRecordSave runs store.ReplaySaveStatements as one pipelined batch: one implicit
// transaction, one round trip.
func (s *Store) ReplayRecordSave(ctx context.Context, p *store.ReplayRecordSaveParams) error {
	stmts, err := store.ReplaySaveStatements(s.Driver, &replayQueries, p)
	if err != nil {
		return fmt.Errorf("save replay record: %w", err)
	}
	b := &pgx.Batch{}
	for _, st := range stmts {
		b.Queue(st.SQL, st.Args...)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("save replay record: %w", interpretError(err))
	}
	return nil
}
