-- respgate schema v6 for SQLite: lineage, mirroring migrations/postgres/006 (read its comment).
-- SQLite has no sequences: lineage_counter holds the next branch id, taken under the single
-- writer's transaction. branch and depth stay nullable here (SQLite cannot add NOT NULL to an
-- existing column without rebuilding the table); every write path sets them.

ALTER TABLE responses ADD COLUMN branch INTEGER;
ALTER TABLE responses ADD COLUMN depth INTEGER;
ALTER TABLE responses ADD COLUMN fork_branch INTEGER;
ALTER TABLE responses ADD COLUMN continued INTEGER NOT NULL DEFAULT 0;
ALTER TABLE items ADD COLUMN branch INTEGER;
ALTER TABLE items ADD COLUMN depth INTEGER;

CREATE TEMPORARY TABLE lineage_kids AS
SELECT c.tenant, c.id, p.id AS parent,
       row_number() OVER (PARTITION BY c.tenant, c.previous_response_id ORDER BY c.created_at, c.id) AS rn
FROM responses c LEFT JOIN responses p ON p.tenant = c.tenant AND p.id = c.previous_response_id;
CREATE INDEX temp.lineage_kids_parent ON lineage_kids (tenant, parent);

CREATE TEMPORARY TABLE lineage_starts AS
SELECT tenant, id, row_number() OVER (ORDER BY tenant, id) AS b
FROM lineage_kids WHERE parent IS NULL OR rn > 1;
CREATE UNIQUE INDEX temp.lineage_starts_id ON lineage_starts (tenant, id);

CREATE TEMPORARY TABLE lineage_walk AS
WITH RECURSIVE walk (tenant, id, branch, depth, fork_branch) AS (
    SELECT k.tenant, k.id, s.b, 0, NULL
    FROM lineage_kids k JOIN lineage_starts s ON s.tenant = k.tenant AND s.id = k.id
    WHERE k.parent IS NULL
    UNION ALL
    SELECT k.tenant, k.id,
           CASE WHEN k.rn = 1 THEN w.branch
                ELSE (SELECT s.b FROM lineage_starts s WHERE s.tenant = k.tenant AND s.id = k.id) END,
           w.depth + 1,
           CASE WHEN k.rn = 1 THEN NULL ELSE w.branch END
    FROM walk w JOIN lineage_kids k ON k.tenant = w.tenant AND k.parent = w.id
    WHERE w.depth < 100000
)
SELECT * FROM walk;
CREATE UNIQUE INDEX temp.lineage_walk_id ON lineage_walk (tenant, id);

UPDATE responses SET branch = w.branch, depth = w.depth, fork_branch = w.fork_branch
FROM lineage_walk w WHERE responses.tenant = w.tenant AND responses.id = w.id;

CREATE TABLE lineage_counter (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    next_branch INTEGER NOT NULL
) STRICT;
INSERT INTO lineage_counter (one, next_branch) SELECT 1, coalesce(max(branch), 0) + 1 FROM responses;
-- A previous_response_id cycle (which no write path makes) is not reached from a root: each of
-- its members becomes a branch of its own.
UPDATE responses SET branch = (SELECT next_branch FROM lineage_counter) + rowid, depth = 0 WHERE branch IS NULL;
UPDATE lineage_counter SET next_branch = (SELECT coalesce(max(branch), 0) + 1 FROM responses);
UPDATE responses SET continued = 1
WHERE (tenant, id) IN (SELECT tenant, previous_response_id FROM responses WHERE previous_response_id IS NOT NULL);
UPDATE items SET branch = r.branch, depth = r.depth
FROM responses r WHERE items.tenant = r.tenant AND items.response_id = r.id;

DROP TABLE lineage_walk;
DROP TABLE lineage_starts;
DROP TABLE lineage_kids;

CREATE UNIQUE INDEX responses_lineage_idx ON responses (tenant, branch, depth);
CREATE INDEX items_lineage_idx ON items (tenant, branch, depth, role, position);

CREATE TABLE lineage_generations (
    tenant     TEXT    PRIMARY KEY,
    generation INTEGER NOT NULL
) STRICT;
