package postgres

import "github.com/respgate/respgate/store"

// The backend's SQL where the dialects differ: what store.Base runs, in queries, and what this
// backend's own transactions run, in named constants. What both dialects run as written is in
// store/sql.go; everything else that differs from store/sqlite is the driver calls. Row shapes
// are store's (store/rows.go, store/chain.go); $n are the arguments in the order store.Queries
// documents.

// queries is the SQL store.Base runs for this backend.
var queries = store.Queries{
	ResponseEventList: `
SELECT 0 AS kind, 0::bigint AS seq, '' AS type, NULL::bytea AS data FROM responses WHERE tenant = $1 AND id = $2
UNION ALL
SELECT 1, seq, type, data FROM (
    SELECT seq, type, data FROM response_events
    WHERE tenant = $1 AND response_id = $2 AND seq > $3 ORDER BY seq LIMIT $4
) e
ORDER BY kind, seq`,

	// ResponseChain loads the chain ending at $2 (store.Store ResponseChainGet) by lineage
	// (migrations/postgres/006): seg walks the branches on the path, one index probe each (the
	// lowest row of the branch at or below the depth reached; if it starts a fork, the next
	// segment is its parent branch up to the fork depth), at most $3 of them; then each segment's
	// responses and items come from one range scan each of responses_branch_depth_idx and
	// items_branch_depth_idx. Record rows, oldest first: record, input items, output items, by
	// position; the first row (kind 3) carries the tenant's lineage generation in position.
	// store.AssembleChain cuts the chain at a deleted ancestor (the rows below a gap).
	//
	// LATERAL with OFFSET 0 pins the plan to index scans per segment whatever the statistics.
	ResponseChain: `
WITH RECURSIVE seg (branch, top, n) AS (
    SELECT branch, depth, 0 FROM responses WHERE tenant = $1 AND id = $2
    UNION ALL
    SELECT f.fork_branch, f.depth - 1, s.n + 1
    FROM seg s CROSS JOIN LATERAL (
        SELECT r.fork_branch, r.depth FROM responses r
        WHERE r.tenant = $1 AND r.branch = s.branch AND r.depth <= s.top
        ORDER BY r.depth LIMIT 1
    ) f
    WHERE f.fork_branch IS NOT NULL AND s.n < $3
)
SELECT -1 AS depth, 3 AS kind, '', '', '', '', '', '', NULL::timestamptz, NULL::timestamptz,
       NULL::json, NULL::json, NULL::json, NULL::json, '', '', NULL::json,
       coalesce((SELECT generation FROM lineage_generations WHERE tenant = $1), 0) AS position, '' AS replica,
       false AS replica_away
UNION ALL
SELECT r.depth, 0, r.id, r.tenant, r.status, r.model, coalesce(r.previous_response_id, ''),
       coalesce(r.conversation_id, ''), r.created_at, r.completed_at, r.echo, r.usage, r.error,
       r.incomplete_details, '', '', NULL, -1, coalesce(r.replica, ''), r.replica_away
FROM seg s CROSS JOIN LATERAL (
    SELECT * FROM responses r WHERE r.tenant = $1 AND r.branch = s.branch AND r.depth <= s.top OFFSET 0
) r
UNION ALL
SELECT i.depth, CASE i.role WHEN 'input' THEN 1 ELSE 2 END, '', '', '', '', '', '', NULL, NULL,
       NULL, NULL, NULL, NULL, i.id, i.type, i.data, i.position, '', false
FROM seg s CROSS JOIN LATERAL (
    SELECT * FROM items i WHERE i.tenant = $1 AND i.branch = s.branch AND i.depth <= s.top OFFSET 0
) i
ORDER BY depth, kind, position`,

	// ResponseContext returns the items response $2 was generated from, in order (see
	// store.Store.ResponseContextGet), after a marker row (part 0) that proves the response
	// exists:
	//   - part 1: the items of its conversation that precede the first item it appended there
	//     (none when it appended nothing, or the conversation is gone);
	//   - part 2: each ancestor's input then output items, oldest first (the walk is
	//     ResponseChain's, to depth $3), then its own input items.
	ResponseContext: `
WITH RECURSIVE chain (id, prev, depth) AS (
    SELECT id, previous_response_id, 0 FROM responses WHERE tenant = $1 AND id = $2
    UNION ALL
    SELECT r.id, r.previous_response_id, c.depth + 1
    FROM chain c CROSS JOIN LATERAL (
        SELECT id, previous_response_id FROM responses r WHERE r.tenant = $1 AND r.id = c.prev LIMIT 1
    ) r
    WHERE c.depth < $3
), target AS (
    SELECT conversation_id AS conv FROM responses WHERE tenant = $1 AND id = $2
), own AS (
    SELECT min(ci.seq) AS first FROM items i JOIN conversation_items ci ON ci.item_pk = i.pk
    WHERE i.tenant = $1 AND i.response_id = $2 AND ci.tenant = $1 AND ci.conversation_id = (SELECT conv FROM target)
)
SELECT 0 AS part, 0 AS depth, 0 AS role, 0::bigint AS ord, '' AS id, '' AS type, NULL::json AS data FROM target
UNION ALL
SELECT 1, 0, 0, ci.seq, i.id, i.type, i.data
FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = (SELECT conv FROM target) AND i.tenant = $1
  AND ci.seq < (SELECT first FROM own)
UNION ALL
SELECT 2, c.depth, CASE i.role WHEN 'input' THEN 0 ELSE 1 END, i.position, i.id, i.type, i.data
FROM chain c CROSS JOIN LATERAL (
    SELECT * FROM items i WHERE i.tenant = $1 AND i.response_id = c.id OFFSET 0
) i
WHERE c.depth > 0 OR i.role = 'input'
ORDER BY part, depth DESC, role, ord`,

	ItemGetMany: `SELECT DISTINCT ON (id) id, type, data FROM items
WHERE tenant = $1 AND id = ANY($2::text[]) ORDER BY id, pk DESC`,

	// ConversationItemsAll's first row (seq -1) only proves the conversation exists.
	ConversationItemsAll: `
SELECT -1 AS seq, '' AS id, '' AS type, NULL::json AS data FROM conversations WHERE tenant = $1 AND id = $2
UNION ALL
SELECT ci.seq, i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
ORDER BY seq`,

	// BackgroundCancelRead locks the response row, so a commit or a second cancel waits for this one.
	BackgroundCancelRead: `
SELECT b.job_id, r.status, coalesce(r.conversation_id, '')
FROM background_turns b JOIN responses r ON r.tenant = b.tenant AND r.id = b.response_id
WHERE b.tenant = $1 AND b.response_id = $2 FOR UPDATE OF r`,

	Replay: replayQueries,
}

// Items.
const (
	// insertItemsSQL inserts items ($3..$7, in order) for tenant $1 and response $2 (NULL:
	// created directly in a conversation), with the response's lineage (branch, depth: an earlier
	// statement of the same transaction wrote the response), and when $8 is a conversation id appends them to it in
	// the same order at max(seq)+1…. The caller must hold the conversation's row lock (taken by
	// an earlier statement, so this statement's snapshot sees every earlier append). Item pks are
	// drawn in order before inserting so conversation_items can reference them in the same
	// statement.
	insertItemsSQL = `
WITH u AS MATERIALIZED (
    SELECT nextval('items_pk_seq'::regclass) AS pk, u.role, u.position, u.id, u.type, u.data, u.ord
    FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS u(role, position, id, type, data, ord)
), ins AS (
    INSERT INTO items (pk, tenant, response_id, role, position, id, type, data, branch, depth)
    SELECT pk, $1, $2, NULLIF(role, ''), NULLIF(position, -1), id, type, data::json, l.branch, l.depth
    FROM u LEFT JOIN (SELECT branch, depth FROM responses WHERE tenant = $1 AND id = $2) l ON true
)
INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
SELECT $1, $8, base.next + u.ord - 1, u.pk
FROM u, (SELECT coalesce(max(seq), -1) + 1 AS next FROM conversation_items
         WHERE tenant = $1 AND conversation_id = $8) AS base
WHERE $8::text IS NOT NULL`
)

// Responses.
const (
	// lineageCTE places a new response of tenant $1 continuing $5 (migrations/postgres/006): if
	// $5 is the head of its branch (no response continues it yet), the new one extends that
	// branch, marking $5 continued under its row lock, so of two concurrent continuations one
	// extends and the other forks; otherwise it starts a new branch, recording the branch it
	// forked from. A response whose previous one does not exist starts a branch at depth 0.
	lineageCTE = `
WITH parent AS (
    SELECT branch, depth FROM responses WHERE tenant = $1 AND id = $5
), head AS (
    UPDATE responses SET continued = true
    WHERE tenant = $1 AND id = $5 AND NOT continued
    RETURNING branch
)`
	// lineageValues are the (branch, depth, fork_branch) lineageCTE chose.
	lineageValues = `coalesce((SELECT branch FROM head), nextval('response_branch_seq')),
        coalesce((SELECT depth + 1 FROM parent), 0),
        CASE WHEN EXISTS (SELECT 1 FROM head) THEN NULL ELSE (SELECT branch FROM parent) END`

	// responseBeginSQL inserts an in-progress (or queued) record holding a lease ($13, $14),
	// with the replica $15 and replica_away $16.
	responseBeginSQL = lineageCTE + `
INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
                       completed_at, echo, usage, error, incomplete_details, lease_owner, lease_expires_at,
                       replica, replica_away, branch, depth, fork_branch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, ` + lineageValues + `)`

	// upsertResponseInsertSQL (after lineageCTE) inserts the final record, or finishes the in-progress one (keeping its
	// created_at, dropping its lease). It returns no row when the stored response is already
	// terminal: the commit is then a no-op. $13 is the replica and $14 replica_away (both kept
	// when $13 is NULL).
	upsertResponseInsertSQL = `
INSERT INTO responses AS r (tenant, id, status, model, previous_response_id, conversation_id, created_at,
                            completed_at, echo, usage, error, incomplete_details, replica, replica_away,
                            branch, depth, fork_branch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, ` + lineageValues + `)
ON CONFLICT (tenant, id) DO UPDATE SET
    status = excluded.status, model = excluded.model,
    previous_response_id = excluded.previous_response_id, conversation_id = excluded.conversation_id,
    completed_at = excluded.completed_at, echo = excluded.echo, usage = excluded.usage,
    error = excluded.error, incomplete_details = excluded.incomplete_details,
    replica = coalesce(excluded.replica, r.replica),
    replica_away = CASE WHEN excluded.replica IS NULL THEN r.replica_away ELSE excluded.replica_away END,
    lease_owner = NULL, lease_expires_at = NULL
WHERE r.status IN ('queued', 'in_progress')
RETURNING 1`

	// finishResponseSQL finishes the in-progress record ResponseBegin wrote, keeping its
	// created_at and dropping its lease. It never inserts: it returns no row when the response is
	// already terminal or no longer exists. $12 is the replica and $13 replica_away (both kept
	// when $12 is NULL).
	finishResponseSQL = `
UPDATE responses SET
    status = $3, model = $4, previous_response_id = $5, conversation_id = $6,
    completed_at = $7, echo = $8, usage = $9, error = $10, incomplete_details = $11,
    replica = coalesce($12, replica),
    replica_away = CASE WHEN $12::text IS NULL THEN replica_away ELSE $13 END,
    lease_owner = NULL, lease_expires_at = NULL
WHERE tenant = $1 AND id = $2 AND status IN ('queued', 'in_progress')
RETURNING 1`

	// lockConversationReleaseTurnSQL takes the conversation's row lock (serialising appends) and
	// drops its turn lease if $3 holds it.
	lockConversationReleaseTurnSQL = `
UPDATE conversations SET
    turn_response_id = CASE WHEN turn_response_id = $3 THEN NULL ELSE turn_response_id END,
    turn_expires_at  = CASE WHEN turn_response_id = $3 THEN NULL ELSE turn_expires_at END,
    turn_items       = CASE WHEN turn_response_id = $3 THEN NULL ELSE turn_items END
WHERE tenant = $1 AND id = $2
RETURNING 1`

	// appendStoredInputSQL appends response $2's stored input items (ResponseBegin wrote them) to
	// conversation $3 in position order at max(seq)+1…, under the conversation's row lock taken
	// by an earlier statement.
	appendStoredInputSQL = `
INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
SELECT $1, $3, base.next + row_number() OVER (ORDER BY i.position) - 1, i.pk
FROM items i, (SELECT coalesce(max(seq), -1) + 1 AS next FROM conversation_items
               WHERE tenant = $1 AND conversation_id = $3) AS base
WHERE i.tenant = $1 AND i.response_id = $2 AND i.role = 'input'`

	// insertEventsSQL adds events ($3..$5, parallel arrays) to response $2's log; an event whose
	// seq is already logged is left as it is.
	insertEventsSQL = `
INSERT INTO response_events (tenant, response_id, seq, type, data)
SELECT $1, $2, u.seq, u.type, u.data FROM unnest($3::bigint[], $4::text[], $5::bytea[]) AS u(seq, type, data)` + onConflictEvents
	onConflictEvents = `
ON CONFLICT (tenant, response_id, seq) DO NOTHING`
	// appendEventsSQL adds events to the logs of several responses ($1 tenants and $2 ids, one
	// per response; the events in the parallel arrays $3..$6, each naming its response by its
	// 1-based place in $1 and $2) and returns the places of the responses that exist; the events
	// of the others are not logged, and an event whose seq is already logged is left as it is.
	// CTE r's row locks keep the responses from being deleted before the insert's foreign key
	// check; a lookup of each by its primary key (the lateral subquery, which its lock keeps from
	// being flattened), never a join a young table's planner may make a scan of every response. Its transaction commits asynchronously (the set_config of CTE c, local to it), as the
	// in-progress record's does (ResponseBegin): a running stream's log serves followers, so it
	// must not hold a pooled connection through a WAL flush; the final commit, synchronous,
	// flushes the WAL past every append before it.
	appendEventsSQL = `
WITH c AS (SELECT set_config('synchronous_commit', 'off', true)),
k AS (SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(tenant, id, n)),
r AS (SELECT k.n, k.tenant, k.id FROM k, LATERAL (
      SELECT 1 FROM responses WHERE responses.tenant = k.tenant AND responses.id = k.id FOR KEY SHARE) AS l),
ins AS (
INSERT INTO response_events (tenant, response_id, seq, type, data)
SELECT r.tenant, r.id, u.seq, u.type, u.data
FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) AS u(n, seq, type, data) JOIN r ON r.n = u.n` + onConflictEvents + `)
SELECT coalesce((SELECT array_agg(n) FROM r), '{}') FROM c`

	// responseLeaseHeldSQL is true when response $2 is unfinished and its lease is live at $3:
	// the guard under which ResponseDelete deletes nothing. The delete statements run pipelined
	// after responseDeleteLockSQL, which locks the row and reports the guard; they do nothing
	// when it holds (the lock keeps the answer true until the end).
	responseLeaseHeldSQL   = `status IN ('queued', 'in_progress') AND lease_expires_at > $3`
	responseLeaseUnheldSQL = `NOT EXISTS (SELECT 1 FROM responses WHERE tenant = $1 AND id = $2 AND ` + responseLeaseHeldSQL + `)`
	responseDeleteLockSQL  = `SELECT coalesce(` + responseLeaseHeldSQL + `, false) FROM responses WHERE tenant = $1 AND id = $2 FOR UPDATE`
	responseDetachItemsSQL = `
UPDATE items SET response_id = NULL, branch = NULL, depth = NULL
WHERE tenant = $1 AND response_id = $2 AND ` + responseLeaseUnheldSQL + `
  AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = $1 AND ci.item_pk = items.pk)`
	responseDeleteItemsSQL = `DELETE FROM items WHERE tenant = $1 AND response_id = $2 AND ` + responseLeaseUnheldSQL
	responseDeleteSQL      = `DELETE FROM responses WHERE tenant = $1 AND id = $2 AND NOT coalesce(` + responseLeaseHeldSQL + `, false)`
	// responseReleaseTurnSQL releases the conversation turn lease the deleted response holds: a
	// queued background turn holds it until its worker stores it (docs/background.md), and a
	// deleted one never will. It runs before responseDeleteSQL and only when that one deletes.
	responseReleaseTurnSQL = `
UPDATE conversations SET turn_response_id = NULL, turn_expires_at = NULL, turn_items = NULL
WHERE tenant = $1 AND turn_response_id = $2
  AND id = (SELECT conversation_id FROM responses WHERE tenant = $1 AND id = $2 AND NOT coalesce(` + responseLeaseHeldSQL + `, false))`
	// responseBumpGenerationSQL counts the deletion in the tenant's lineage generation (caches of
	// chains check it: store.Store ChainGeneration); it runs before responseDeleteSQL, in the
	// same transaction, and only when that one deletes.
	responseBumpGenerationSQL = `
INSERT INTO lineage_generations AS g (tenant, generation)
SELECT $1, 1 FROM responses WHERE tenant = $1 AND id = $2 AND NOT coalesce(` + responseLeaseHeldSQL + `, false)
ON CONFLICT (tenant) DO UPDATE SET generation = g.generation + 1`

	// purgeSQL deletes up to $2 terminal responses created before $1, oldest first, as
	// ResponseDelete does, in one statement: the items a conversation lists are detached, the
	// others deleted, then the responses (their events go by cascade). The CTEs share one
	// snapshot, so the item delete skips the rows the detach changed rather than seeing them
	// detached; the foreign key from items is checked at the end of the statement, when they
	// are. SKIP LOCKED lets replicas purge at once without waiting on each other's victims.
	purgeSQL = `
WITH victims AS (
    SELECT tenant, id FROM responses
    WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled') AND created_at < $1
    ORDER BY created_at, tenant, id LIMIT $2
    FOR UPDATE SKIP LOCKED
), bumped AS (
    INSERT INTO lineage_generations AS g (tenant, generation)
    SELECT DISTINCT tenant, 1 FROM victims
    ON CONFLICT (tenant) DO UPDATE SET generation = g.generation + 1
), detached AS (
    UPDATE items SET response_id = NULL, branch = NULL, depth = NULL
    FROM victims v
    WHERE items.tenant = v.tenant AND items.response_id = v.id
      AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = items.tenant AND ci.item_pk = items.pk)
    RETURNING items.pk
), dropped AS (
    DELETE FROM items USING victims v
    WHERE items.tenant = v.tenant AND items.response_id = v.id
      AND items.pk NOT IN (SELECT pk FROM detached)
), gone AS (
    DELETE FROM responses r USING victims v
    WHERE r.tenant = v.tenant AND r.id = v.id
    RETURNING 1
)
SELECT count(*) FROM gone`
)

// Conversations.
const (
	// conversationLockSQL locks conversation $2's row and reads what its live turn (at $3) keeps
	// of its input (store.TurnItems; '' when no turn holds it).
	conversationLockSQL = `SELECT CASE WHEN turn_response_id IS NOT NULL AND turn_expires_at > $3 THEN coalesce(turn_items, '') ELSE '' END
FROM conversations WHERE tenant = $1 AND id = $2 FOR UPDATE`

	// conversationItemsByIDSQL lists every item conversation $2 holds under one of the ids $3
	// (ConversationItemAppend's conflict check; json as its text, byte for byte).
	conversationItemsByIDSQL = `SELECT i.id, i.type, i.data::text FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = ANY($3::text[])`

	// turnHeldSQL is true when conversation $2's turn lease is held and live at $3: the guard
	// under which ConversationDelete deletes nothing. The delete statements run pipelined after
	// conversationDeleteLockSQL, which locks the row (so an append committing meanwhile is either
	// seen by the next statement or waits, never leaving behind direct items that nothing lists)
	// and reports the guard; they do nothing when it holds.
	turnHeldSQL                = `turn_response_id IS NOT NULL AND turn_expires_at > $3`
	turnUnheldSQL              = `NOT EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2 AND ` + turnHeldSQL + `)`
	conversationDeleteLockSQL  = `SELECT coalesce(` + turnHeldSQL + `, false) FROM conversations WHERE tenant = $1 AND id = $2 FOR UPDATE`
	conversationDeleteItemsSQL = `
DELETE FROM items WHERE tenant = $1 AND response_id IS NULL AND ` + turnUnheldSQL + `
  AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = $1 AND conversation_id = $2)`
	conversationDeleteSQL = `DELETE FROM conversations WHERE tenant = $1 AND id = $2 AND NOT coalesce(` + turnHeldSQL + `, false)`

	// conversationItemDeleteSQL removes every occurrence of item $3 from the list, deletes the
	// ones created directly in the conversation, and counts the occurrences.
	conversationItemDeleteSQL = `
WITH gone AS (
    DELETE FROM conversation_items ci USING items i
    WHERE i.pk = ci.item_pk AND ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3
    RETURNING ci.item_pk
), dropped AS (
    DELETE FROM items WHERE tenant = $1 AND response_id IS NULL AND pk IN (SELECT item_pk FROM gone)
)
SELECT count(*) FROM gone`

	// turnAcquireSQL takes the lease if it is free, expired at $5, or already $3's, keeping the
	// turn's input digests $6 (store.TurnItems), and reports whether the conversation exists and
	// whether the lease was taken.
	turnAcquireSQL = `
WITH took AS (
    UPDATE conversations SET turn_response_id = $3, turn_expires_at = $4, turn_items = $6
    WHERE tenant = $1 AND id = $2
      AND (turn_response_id IS NULL OR turn_response_id = $3 OR turn_expires_at <= $5)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2), EXISTS (SELECT 1 FROM took)`
)
