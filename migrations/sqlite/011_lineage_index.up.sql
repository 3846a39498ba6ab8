-- The lineage indexes lead with the branch instead of the tenant, mirroring
-- migrations/postgres/011 (read its comment). Branches are numbered from one counter for every
-- tenant (lineage_counter), so a chain read scans the same rows.
CREATE UNIQUE INDEX responses_branch_depth_idx ON responses (branch, tenant, depth);
DROP INDEX responses_lineage_idx;
CREATE INDEX items_branch_depth_idx ON items (branch, tenant, depth, role, position);
DROP INDEX items_lineage_idx;
