ALTER TABLE responses DROP COLUMN replica_away;
