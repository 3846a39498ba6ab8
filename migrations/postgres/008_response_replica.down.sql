ALTER TABLE responses DROP COLUMN replica;
