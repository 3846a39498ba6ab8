package store

// The statements both backends run as they are written here: the rest of their SQL is in
// store/postgres/queries.go and store/sqlite/queries.go, where the dialects differ. The
// arguments are $n, in the order the Base method (or the backend's transaction) running them
// passes them; SQLite (modernc.org/sqlite) binds $n by its number as Postgres does, and the
// conformance suite (store/storetest) runs every one of them on both. Values cross as the
// Driver converts them (Driver.Time, Driver.JSON), so one text serves both column types.

// Secrets and counts.
const (
	// queuedCountSQL counts queued responses up to a limit, on the partial index of queued
	// rows (migrations/postgres/007 and migrations/sqlite/007).
	queuedCountSQL  = `SELECT count(*) FROM (SELECT 1 FROM responses WHERE status = 'queued' LIMIT $1) q`
	itemCountSQL    = `SELECT count(*) FROM items WHERE tenant = $1`
	secretGetSQL    = `SELECT value FROM secrets WHERE name = $1`
	secretInsertSQL = `INSERT INTO secrets (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`
)

// Items.
const (
	itemGetSQL = `SELECT id, type, data FROM items WHERE tenant = $1 AND id = $2 ORDER BY pk DESC LIMIT 1`
	// The pages of a response's items of one role ($3) by position, after the item $4 (its
	// occurrence farthest in the direction of travel), at most $5 rows.
	responseItemsAscSQL = `SELECT id, type, data FROM items
WHERE tenant = $1 AND response_id = $2 AND role = $3
  AND ($4 = '' OR position > (SELECT max(position) FROM items
                              WHERE tenant = $1 AND response_id = $2 AND role = $3 AND id = $4))
ORDER BY position LIMIT $5`
	responseItemsDescSQL = `SELECT id, type, data FROM items
WHERE tenant = $1 AND response_id = $2 AND role = $3
  AND ($4 = '' OR position < (SELECT min(position) FROM items
                              WHERE tenant = $1 AND response_id = $2 AND role = $3 AND id = $4))
ORDER BY position DESC LIMIT $5`
	responseItemsCheckSQL = `SELECT
    EXISTS (SELECT 1 FROM responses WHERE tenant = $1 AND id = $2),
    $4 = '' OR EXISTS (SELECT 1 FROM items WHERE tenant = $1 AND response_id = $2 AND role = $3 AND id = $4)`
)

// Responses.
const (
	responseLeaseExtendSQL = `
UPDATE responses SET lease_expires_at = $4
WHERE tenant = $1 AND id = $2 AND lease_owner = $3 AND status IN ('queued', 'in_progress')`
	// ResponseStatusSQL (tenant, id) → status: why a commit changed no row.
	ResponseStatusSQL = `SELECT status FROM responses WHERE tenant = $1 AND id = $2`
	// ResponseExistsSQL (tenant, id) → 1.
	ResponseExistsSQL = `SELECT 1 FROM responses WHERE tenant = $1 AND id = $2`
	// responseGetSQL is the record of response $2 then its output items, as record rows.
	responseGetSQL = `
SELECT 0 AS depth, 0 AS kind, id, tenant, status, model, coalesce(previous_response_id, ''), coalesce(conversation_id, ''),
       created_at, completed_at, echo, usage, error, incomplete_details, '', '', NULL, -1 AS position,
       coalesce(replica, '') AS replica, replica_away
FROM responses WHERE tenant = $1 AND id = $2
UNION ALL
SELECT 0, 2, '', '', '', '', '', '', NULL, NULL, NULL, NULL, NULL, NULL, id, type, data, position, '', false
FROM items WHERE tenant = $1 AND response_id = $2 AND role = 'output'
ORDER BY kind, position`
	// chainGenerationSQL is the tenant's lineage generation (0 before any deletion).
	chainGenerationSQL = `SELECT coalesce((SELECT generation FROM lineage_generations WHERE tenant = $1), 0)`
	sweepSQL           = `
UPDATE responses SET status = 'failed', error = $2, lease_owner = NULL, lease_expires_at = NULL
WHERE status IN ('queued', 'in_progress') AND lease_expires_at < $1`
)

// Conversations.
const (
	// ConversationInsertSQL (tenant, id, metadata, created_at).
	ConversationInsertSQL = `INSERT INTO conversations (tenant, id, metadata, created_at) VALUES ($1, $2, $3, $4)`
	conversationGetSQL    = `SELECT id, tenant, metadata, created_at FROM conversations WHERE tenant = $1 AND id = $2`
	conversationUpdateSQL = `
UPDATE conversations SET metadata = $3 WHERE tenant = $1 AND id = $2
RETURNING id, tenant, metadata, created_at`
	// The pages of a conversation's items by seq, after the item $3 (its occurrence farthest in
	// the direction of travel), at most $4 rows.
	conversationItemsAscSQL = `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
  AND ($3 = '' OR ci.seq > (SELECT max(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
                            WHERE c2.tenant = $1 AND c2.conversation_id = $2 AND i2.tenant = $1 AND i2.id = $3))
ORDER BY ci.seq LIMIT $4`
	conversationItemsDescSQL = `SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1
  AND ($3 = '' OR ci.seq < (SELECT min(c2.seq) FROM conversation_items c2 JOIN items i2 ON i2.pk = c2.item_pk
                            WHERE c2.tenant = $1 AND c2.conversation_id = $2 AND i2.tenant = $1 AND i2.id = $3))
ORDER BY ci.seq DESC LIMIT $4`
	conversationItemsCheckSQL = `SELECT
    EXISTS (SELECT 1 FROM conversations WHERE tenant = $1 AND id = $2),
    $3 = '' OR EXISTS (SELECT 1 FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
                       WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3)`
	conversationItemGetSQL = `
SELECT i.id, i.type, i.data FROM conversation_items ci JOIN items i ON i.pk = ci.item_pk
WHERE ci.tenant = $1 AND ci.conversation_id = $2 AND i.tenant = $1 AND i.id = $3
ORDER BY ci.seq DESC LIMIT 1`
	turnExtendSQL = `
UPDATE conversations SET turn_expires_at = $4
WHERE tenant = $1 AND id = $2 AND turn_response_id = $3`
	turnReleaseSQL = `
UPDATE conversations SET turn_response_id = NULL, turn_expires_at = NULL
WHERE tenant = $1 AND id = $2 AND turn_response_id = $3`
)

// Background turns (docs/background.md).
const (
	// BackgroundBoundsSQL (tenant) counts the tenant's unfinished background responses and
	// every tenant's queued ones (ResponseEnqueueBackgroundParams.Bounds).
	BackgroundBoundsSQL = `
SELECT (SELECT count(*) FROM background_turns b JOIN responses r ON r.tenant = b.tenant AND r.id = b.response_id
        WHERE b.tenant = $1 AND r.status IN ('queued', 'in_progress')),
       (SELECT count(*) FROM responses WHERE status = 'queued')`
	// BackgroundTurnInsertSQL (tenant, response, job_id, body, state, created_at).
	BackgroundTurnInsertSQL = `
INSERT INTO background_turns (tenant, response_id, job_id, body, state, created_at) VALUES ($1, $2, $3, $4, $5, $6)`
	// bgTurnGetSQL (tenant, response) → job_id, body, state.
	bgTurnGetSQL = `SELECT job_id, body, state FROM background_turns WHERE tenant = $1 AND response_id = $2`
	// bgClaimSQL (tenant, id, owner, expires_at, again) moves a queued response to in_progress;
	// with again, also one this owner holds already (its first claim's outcome was unknown).
	bgClaimSQL = `
UPDATE responses SET status = 'in_progress', lease_owner = $3, lease_expires_at = $4
WHERE tenant = $1 AND id = $2 AND (status = 'queued' OR $5 AND status = 'in_progress' AND lease_owner = $3)`
	// bgQueuedJobsSQL (created_before, limit) → tenant, response_id, job_id of the oldest queued
	// background responses created before created_before (ResponseBackgroundRequeue's candidates).
	bgQueuedJobsSQL = `
SELECT b.tenant, b.response_id, b.job_id FROM background_turns b
JOIN responses r ON r.tenant = b.tenant AND r.id = b.response_id
WHERE r.status = 'queued' AND b.created_at < $1 ORDER BY b.created_at LIMIT $2`
	// bgRequeueSQL (tenant, response, new job, old job) names a queued response's new job.
	bgRequeueSQL = `UPDATE background_turns SET job_id = $3 WHERE tenant = $1 AND response_id = $2 AND job_id = $4`
	// bgCancelQueuedSQL (tenant, response) stores a queued response cancelled (CancelBackgroundTx).
	bgCancelQueuedSQL = `
UPDATE responses SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL
WHERE tenant = $1 AND id = $2 AND status = 'queued'`
)

// The paginated lists (page.go).
var (
	responseItemsSQL     = PageSQL{Asc: responseItemsAscSQL, Desc: responseItemsDescSQL, Check: responseItemsCheckSQL}
	conversationItemsSQL = PageSQL{Asc: conversationItemsAscSQL, Desc: conversationItemsDescSQL, Check: conversationItemsCheckSQL}
)
