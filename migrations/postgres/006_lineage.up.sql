-- respgate schema v6: lineage, so a previous_response_id chain loads with a bounded number of
-- index range scans instead of one lookup per ancestor (docs/scaling.md, "Chains").
--
-- A branch is a run of responses in which each continues the one before. Every response carries
-- (branch, depth): depth is its distance from the root of its chain. Continuing the head of a
-- branch (a response no other response continues yet: continued is false) extends that branch at
-- depth+1; continuing any other response (a fork) starts a new branch whose first response
-- records the branch it forked from (fork_branch; the fork point is at depth-1 there). A response
-- whose previous response does not exist starts a branch of its own at depth 0. So the ancestors
-- of the response at (b, d) are the rows of branch b with depth <= d, then those of fork_branch
-- with depth <= the fork depth, and so on: one range scan per branch on the path. Items carry
-- their response's (branch, depth) so they come back in order from the same kind of scan; items a
-- conversation keeps after their response is deleted have branch NULL.
--
-- lineage_generations counts, per tenant, the deletions of responses (ResponseDelete,
-- ResponsePurge): a replica that cached a chain reuses it while the generation is unchanged
-- (store.Store ChainGeneration). Every key leads with the tenant.

ALTER TABLE responses
    ADD COLUMN branch      bigint,
    ADD COLUMN depth       integer,
    ADD COLUMN fork_branch bigint,
    ADD COLUMN continued   boolean NOT NULL DEFAULT false;
ALTER TABLE items
    ADD COLUMN branch bigint,
    ADD COLUMN depth  integer;

CREATE SEQUENCE response_branch_seq AS bigint;

-- Backfill: the first child (by created_at, id) of a response continues its branch; every other
-- child, every root and every response whose previous response is gone starts a branch.
CREATE TEMPORARY TABLE lineage_kids AS
SELECT c.tenant, c.id, p.id AS parent,
       row_number() OVER (PARTITION BY c.tenant, c.previous_response_id ORDER BY c.created_at, c.id) AS rn
FROM responses c LEFT JOIN responses p ON p.tenant = c.tenant AND p.id = c.previous_response_id;
CREATE INDEX ON lineage_kids (tenant, parent);

CREATE TEMPORARY TABLE lineage_starts AS
SELECT tenant, id, row_number() OVER (ORDER BY tenant, id) AS b
FROM lineage_kids WHERE parent IS NULL OR rn > 1;
CREATE UNIQUE INDEX ON lineage_starts (tenant, id);

CREATE TEMPORARY TABLE lineage_walk AS
WITH RECURSIVE walk (tenant, id, branch, depth, fork_branch) AS (
    SELECT k.tenant, k.id, s.b, 0, NULL::bigint
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

UPDATE responses r SET branch = w.branch, depth = w.depth, fork_branch = w.fork_branch
FROM lineage_walk w WHERE r.tenant = w.tenant AND r.id = w.id;
SELECT setval('response_branch_seq', (SELECT coalesce(max(branch), 0) + 1 FROM responses), false);
-- A previous_response_id cycle (which no write path makes) is not reached from a root: each of
-- its members becomes a branch of its own.
UPDATE responses SET branch = nextval('response_branch_seq'), depth = 0 WHERE branch IS NULL;
UPDATE responses p SET continued = true
WHERE EXISTS (SELECT 1 FROM responses c WHERE c.tenant = p.tenant AND c.previous_response_id = p.id);
UPDATE items i SET branch = r.branch, depth = r.depth
FROM responses r WHERE i.tenant = r.tenant AND i.response_id = r.id;

DROP TABLE lineage_walk;
DROP TABLE lineage_starts;
DROP TABLE lineage_kids;

ALTER TABLE responses ALTER COLUMN branch SET NOT NULL, ALTER COLUMN depth SET NOT NULL;
CREATE UNIQUE INDEX responses_lineage_idx ON responses (tenant, branch, depth);
CREATE INDEX items_lineage_idx ON items (tenant, branch, depth, role, position);

CREATE TABLE lineage_generations (
    tenant     text   PRIMARY KEY,
    generation bigint NOT NULL
);

-- respgate_no_row raises no_data_found (P0002) with message: a statement of a pipelined batch
-- uses it to abort the batch's implicit transaction when a row it needs is not there, so
-- ResponseCommit is one round trip and still writes nothing in that case (store/postgres).
CREATE FUNCTION respgate_no_row(message text) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'P0002', MESSAGE = message;
END
$$;
