CREATE UNIQUE INDEX responses_lineage_idx ON responses (tenant, branch, depth);
DROP INDEX responses_branch_depth_idx;
CREATE INDEX items_lineage_idx ON items (tenant, branch, depth, role, position);
DROP INDEX items_branch_depth_idx;
