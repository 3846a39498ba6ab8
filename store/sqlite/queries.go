package sqlite

import "github.com/respgate/respgate/store"

// The backend's SQL where the dialects differ: what store.Base runs, in queries, and what this
// backend's own transactions run, in named constants. What both dialects run as written is in
// store/sql.go; everything else that differs from store/postgres is the driver calls. Row shapes
// are store's (store/rows.go, store/chain.go); ?n are the arguments in the order store.Queries
// documents.

// queries is the SQL store.Base runs for this backend.
var queries = store.Queries{
	// ResponseEventList: a limit of NULL is none (-1 to SQLite).
	ResponseEventList: `
SELECT 0 AS kind, 0 AS seq, '' AS type, NULL AS data FROM responses WHERE tenant = ?1 AND id = ?2
UNION ALL
SELECT 1, seq, type, data FROM (
    SELECT seq, type, data FROM response_events
    WHERE tenant = ?1 AND response_id = ?2 AND seq > ?3 ORDER BY seq LIMIT coalesce(?4, -1)
)
ORDER BY kind, seq`,

	// ResponseChain loads the chain ending at ?2 by lineage, as store/postgres's ResponseChain
	// does (read its comment): seg walks the branches on the path (one index probe each, at most ?3), then
	// each segment's responses and items come from one range scan of responses_branch_depth_idx and
	// items_branch_depth_idx. CROSS JOIN keeps seg the outer loop.
	ResponseChain: `
WITH RECURSIVE seg (branch, top, n) AS (
    SELECT branch, depth, 0 FROM responses WHERE tenant = ?1 AND id = ?2
    UNION ALL
    SELECT r.fork_branch, r.depth - 1, s.n + 1
    FROM seg s CROSS JOIN responses r
        ON r.tenant = ?1 AND r.branch = s.branch
       AND r.depth = (SELECT min(depth) FROM responses WHERE tenant = ?1 AND branch = s.branch AND depth <= s.top)
    WHERE r.fork_branch IS NOT NULL AND s.n < ?3
)
SELECT -1 AS depth, 3 AS kind, '', '', '', '', '', '', NULL, NULL, NULL, NULL, NULL, NULL, '', '', NULL,
       coalesce((SELECT generation FROM lineage_generations WHERE tenant = ?1), 0) AS position, '' AS replica,
       0 AS replica_away
UNION ALL
SELECT r.depth, 0, r.id, r.tenant, r.status, r.model, coalesce(r.previous_response_id, ''),
       coalesce(r.conversation_id, ''), r.created_at, r.completed_at, r.echo, r.usage, r.error,
       r.incomplete_details, '', '', NULL, -1, coalesce(r.replica, ''), r.replica_away
FROM seg s CROSS JOIN responses r ON r.tenant = ?1 AND r.branch = s.branch AND r.depth <= s.top
UNION ALL
SELECT i.depth, CASE i.role WHEN 'input' THEN 1 ELSE 2 END, '', '', '', '', '', '', NULL, NULL,
       NULL, NULL, NULL, NULL, i.id, i.type, i.data, i.position, '', 0
FROM seg s CROSS JOIN items i ON i.tenant = ?1 AND i.branch = s.branch AND i.depth <= s.top
ORDER BY depth, kind, position`,

	// ResponseContext returns the items response ?2 was generated from, in order (see
	// store.Store.ResponseContextGet), after a marker row (part 0) that proves the response
	// exists:
	//   - part 1: the items of its conversation that precede the first item it appended there
	//     (none when it appended nothing, or the conversation is gone);
	//   - part 2: each ancestor's input then output items, oldest first (the walk is
	//     ResponseChain's, to depth ?3), then its own input items.
	ResponseContext: `
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
ORDER BY part, depth DESC, role, ord`,

	// ItemGetMany takes the ids as one JSON array (json_each), whatever their number.
	ItemGetMany: `SELECT i.id, i.type, i.data FROM items i
WHERE i.tenant = ?1 AND i.id IN (SELECT value FROM json_each(?2))
  AND i.pk = (SELECT max(pk) FROM items WHERE tenant = ?1 AND id = i.id)`,

	// ConversationItemsAll's first row (seq -1) only proves the conversation exists.
	ConversationItemsAll: `
SELECT -1 AS seq, '' AS id, '' AS type, NULL AS data FROM conversations WHERE tenant = ?1 AND id = ?2
UNION ALL
SELECT ci.seq, i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1
ORDER BY seq`,

	BackgroundCancelRead: `
SELECT b.job_id, r.status, coalesce(r.conversation_id, '')
FROM background_turns b JOIN responses r ON r.tenant = b.tenant AND r.id = b.response_id
WHERE b.tenant = ?1 AND b.response_id = ?2`,

	Replay: replayQueries,
}

// Items.
const (
	// insertItemSQL inserts an item with its response's lineage (migrations/sqlite/006).
	insertItemSQL = `INSERT INTO items (tenant, response_id, role, position, id, type, data, branch, depth)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,
        (SELECT branch FROM responses WHERE tenant = ?1 AND id = ?2),
        (SELECT depth FROM responses WHERE tenant = ?1 AND id = ?2))`
	appendItemSQL = `INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk) VALUES (?1, ?2, ?3, ?4)`
	nextSeqSQL    = `SELECT coalesce(max(seq), -1) + 1 FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2`
)

// Responses.
const (
	// responseBeginSQL inserts an in-progress (or queued) record holding a lease (?13, ?14)
	// with the replica and replica_away (?15, ?16, store.BeginArgs). Both inserts take the
	// lineage (branch, depth, fork_branch) after that (lineage chooses it); responseInsertSQL
	// takes the replica columns last.
	responseBeginSQL = `
INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
                       completed_at, echo, usage, error, incomplete_details, lease_owner, lease_expires_at,
                       replica, replica_away, branch, depth, fork_branch)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)`
	responseInsertSQL = `
INSERT INTO responses (tenant, id, status, model, previous_response_id, conversation_id, created_at,
                       completed_at, echo, usage, error, incomplete_details, branch, depth, fork_branch, replica,
                       replica_away)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)`

	// The lineage of a new response continuing ?2 (migrations/postgres/006): continueHeadSQL
	// extends ?2's branch when ?2 is its head (marking it continued), else parentLineageSQL
	// finds the branch to fork from, and nextBranchSQL draws a new branch id.
	continueHeadSQL  = `UPDATE responses SET continued = 1 WHERE tenant = ?1 AND id = ?2 AND continued = 0 RETURNING branch, depth`
	parentLineageSQL = `SELECT branch, depth FROM responses WHERE tenant = ?1 AND id = ?2`
	nextBranchSQL    = `UPDATE lineage_counter SET next_branch = next_branch + 1 RETURNING next_branch - 1`
	// responseFinishSQL finishes the in-progress record, keeping its created_at and dropping its
	// lease; ?12 is the replica and ?13 replica_away (both kept when ?12 is NULL).
	responseFinishSQL = `
UPDATE responses SET status = ?3, model = ?4, previous_response_id = ?5, conversation_id = ?6,
    completed_at = ?7, echo = ?8, usage = ?9, error = ?10, incomplete_details = ?11,
    replica = coalesce(?12, replica),
    replica_away = CASE WHEN ?12 IS NULL THEN replica_away ELSE ?13 END,
    lease_owner = NULL, lease_expires_at = NULL
WHERE tenant = ?1 AND id = ?2`

	// releaseTurnSQL drops conversation ?2's turn lease if ?3 holds it; no row changed means no
	// such conversation.
	releaseTurnSQL = `
UPDATE conversations SET
    turn_response_id = CASE WHEN turn_response_id = ?3 THEN NULL ELSE turn_response_id END,
    turn_expires_at  = CASE WHEN turn_response_id = ?3 THEN NULL ELSE turn_expires_at END,
    turn_items       = CASE WHEN turn_response_id = ?3 THEN NULL ELSE turn_items END
WHERE tenant = ?1 AND id = ?2`

	// appendStoredInputSQL appends response ?2's stored input items to conversation ?3 in
	// position order at ?4, ?4+1….
	appendStoredInputSQL = `
INSERT INTO conversation_items (tenant, conversation_id, seq, item_pk)
SELECT ?1, ?3, ?4 + row_number() OVER (ORDER BY position) - 1, pk
FROM items WHERE tenant = ?1 AND response_id = ?2 AND role = 'input'`

	insertEventSQL = `INSERT INTO response_events (tenant, response_id, seq, type, data)
VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (tenant, response_id, seq) DO NOTHING`

	// responseDeleteGuardSQL is true when response ?2 is unfinished and its lease is live at ?3:
	// ResponseDelete then deletes nothing. The statements after it detach (response_id NULL) the
	// items a conversation still lists, delete the others, then the response (its event log by
	// cascade).
	responseDeleteGuardSQL = `SELECT coalesce(status IN ('queued', 'in_progress') AND lease_expires_at > ?3, 0)
FROM responses WHERE tenant = ?1 AND id = ?2`
	responseDetachItemsSQL = `
UPDATE items SET response_id = NULL, branch = NULL, depth = NULL
WHERE tenant = ?1 AND response_id = ?2
  AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = ?1 AND ci.item_pk = items.pk)`
	responseDeleteItemsSQL = `DELETE FROM items WHERE tenant = ?1 AND response_id = ?2`
	responseDeleteSQL      = `DELETE FROM responses WHERE tenant = ?1 AND id = ?2`
	// responseReleaseTurnSQL releases the conversation turn lease the deleted response holds: a
	// queued background turn holds it until its worker stores it (docs/background.md), and a
	// deleted one never will. It runs before responseDeleteSQL.
	responseReleaseTurnSQL = `
UPDATE conversations SET turn_response_id = NULL, turn_expires_at = NULL, turn_items = NULL
WHERE tenant = ?1 AND turn_response_id = ?2
  AND id = (SELECT conversation_id FROM responses WHERE tenant = ?1 AND id = ?2)`
	// responseBumpGenerationSQL counts a deletion in the tenant's lineage generation (store.Store
	// ChainGeneration), in the deleting transaction.
	responseBumpGenerationSQL = `INSERT INTO lineage_generations (tenant, generation) VALUES (?1, 1)
ON CONFLICT (tenant) DO UPDATE SET generation = generation + 1`

	// purgeVictims selects the responses ResponsePurge deletes: up to ?2 terminal ones created
	// before ?1, oldest first (ties broken by key, so every statement of the purge picks the
	// same ones). The three statements detach the items a conversation lists, delete the others,
	// and delete the responses (their events go by cascade).
	purgeVictims = `
SELECT tenant, id FROM responses
WHERE status IN ('completed', 'incomplete', 'failed', 'cancelled') AND created_at < ?1
ORDER BY created_at, tenant, id LIMIT ?2`
	purgeBumpSQL = `
INSERT INTO lineage_generations (tenant, generation)
SELECT DISTINCT tenant, 1 FROM (` + purgeVictims + `) WHERE true
ON CONFLICT (tenant) DO UPDATE SET generation = generation + 1`
	purgeDetachSQL = `
UPDATE items SET response_id = NULL, branch = NULL, depth = NULL
WHERE (tenant, response_id) IN (` + purgeVictims + `)
  AND EXISTS (SELECT 1 FROM conversation_items ci WHERE ci.tenant = items.tenant AND ci.item_pk = items.pk)`
	purgeItemsSQL     = `DELETE FROM items WHERE (tenant, response_id) IN (` + purgeVictims + `)`
	purgeResponsesSQL = `DELETE FROM responses WHERE (tenant, id) IN (` + purgeVictims + `)`
)

// Conversations.
const (
	conversationExistsSQL = `SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2`
	// conversationTurnItemsSQL reads what conversation ?2's live turn (at ?3) keeps of its input
	// (store.TurnItems; '' when no turn holds it).
	conversationTurnItemsSQL = `SELECT CASE WHEN turn_response_id IS NOT NULL AND turn_expires_at > ?3 THEN coalesce(turn_items, '') ELSE '' END
FROM conversations WHERE tenant = ?1 AND id = ?2`

	// conversationItemsByIDSQL lists every item conversation ?2 holds under one of the ids ?3 (a
	// JSON array): ConversationItemAppend's conflict check.
	conversationItemsByIDSQL = `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = ?1 AND ci.conversation_id = ?2 AND i.tenant = ?1 AND i.id IN (SELECT value FROM json_each(?3))`

	// conversationDeleteGuardSQL is true while a turn holds conversation ?2's lease (live at ?3):
	// ConversationDelete then deletes nothing. The statements after it delete the items created
	// directly in the conversation, then the conversation (its list by cascade).
	conversationDeleteGuardSQL = `SELECT coalesce(turn_response_id IS NOT NULL AND turn_expires_at > ?3, 0)
FROM conversations WHERE tenant = ?1 AND id = ?2`
	conversationDeleteItemsSQL = `
DELETE FROM items WHERE tenant = ?1 AND response_id IS NULL
  AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2)`
	conversationDeleteSQL = `DELETE FROM conversations WHERE tenant = ?1 AND id = ?2`

	// Deleting item ?3 from a conversation: the items created directly in it go with their list
	// entries (by cascade); a response's items only leave the list.
	conversationItemDeleteDirectSQL = `
DELETE FROM items WHERE tenant = ?1 AND response_id IS NULL AND id = ?3
  AND pk IN (SELECT item_pk FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2)`
	changesSQL                      = `SELECT changes()`
	conversationItemDeleteListedSQL = `
DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2
  AND item_pk IN (SELECT pk FROM items WHERE tenant = ?1 AND id = ?3)`

	// turnAcquireSQL takes the lease if it is free, expired at ?5, or already ?3's, keeping the
	// turn's input digests ?6 (store.TurnItems).
	turnAcquireSQL = `
UPDATE conversations SET turn_response_id = ?3, turn_expires_at = ?4, turn_items = ?6
WHERE tenant = ?1 AND id = ?2
  AND (turn_response_id IS NULL OR turn_response_id = ?3 OR turn_expires_at <= ?5)`
)
