ALTER TABLE conversations DROP COLUMN turn_items;
