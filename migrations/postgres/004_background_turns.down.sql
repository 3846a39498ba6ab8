DROP TABLE IF EXISTS background_turns;
