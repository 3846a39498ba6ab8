-- Placeholder so the versions stay gapless on the compaction branch: version 4 belongs to the
-- background-jobs migration (issue 16). Drop this file (and its .down) when merging that branch.
SELECT 1;
