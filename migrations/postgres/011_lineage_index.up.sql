-- The lineage indexes lead with the branch instead of the tenant: (branch, tenant, depth).
-- Branches are numbered from one sequence for every tenant, so a chain read, which filters on the
-- branch, the tenant and a range of depths, scans the same rows as before, and the unique index
-- still holds the key a sharded or partitioned table needs in every unique constraint
-- (docs/scaling.md).
--
-- Why: an index that leads with tenant can serve any query on "tenant = $1", and a statement's
-- generic plan made while a table is young and not yet analyzed costs such an index scan the same
-- as the primary key's lookup. Postgres then picked responses_lineage_idx for the lookups by
-- (tenant, id) of every turn (its in-progress record, commit, event log and lease), reading every
-- response of the tenant, until autovacuum's first ANALYZE replanned them: the turn's store
-- round trips grew with the table (ResponseBegin 150 µs at 500 responses, 1 ms at 3,750).
-- Now no other index competes with the primary key for those lookups.
CREATE UNIQUE INDEX responses_branch_depth_idx ON responses (branch, tenant, depth);
DROP INDEX responses_lineage_idx;
CREATE INDEX items_branch_depth_idx ON items (branch, tenant, depth, role, position);
DROP INDEX items_lineage_idx;
