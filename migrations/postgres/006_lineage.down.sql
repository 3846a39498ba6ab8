DROP FUNCTION respgate_no_row(text);
DROP TABLE lineage_generations;
DROP INDEX items_lineage_idx;
DROP INDEX responses_lineage_idx;
ALTER TABLE items DROP COLUMN depth, DROP COLUMN branch;
ALTER TABLE responses DROP COLUMN continued, DROP COLUMN fork_branch, DROP COLUMN depth, DROP COLUMN branch;
DROP SEQUENCE response_branch_seq;
