DROP TABLE IF EXISTS chat_replay_records;
