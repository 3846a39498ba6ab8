-- respgate schema v3 for SQLite, mirroring migrations/postgres/003: replay records of the Chat
-- Completions front door. items is TEXT holding the exact JSON array; times are INTEGER
-- microseconds since the Unix epoch; blocked is 0 or 1.
CREATE TABLE chat_replay_records (
    tenant       TEXT    NOT NULL,
    scope        TEXT    NOT NULL,
    end_digest   TEXT    NOT NULL,
    start_digest TEXT    NOT NULL,
    envelope     TEXT    NOT NULL,
    parent       TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    items        TEXT    NOT NULL,
    bytes        INTEGER NOT NULL,
    blocked      INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    used_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant, scope, end_digest)
) STRICT;
CREATE INDEX chat_replay_records_start ON chat_replay_records (tenant, scope, start_digest);
CREATE INDEX chat_replay_records_scope_used ON chat_replay_records (tenant, scope, used_at);
CREATE INDEX chat_replay_records_used ON chat_replay_records (used_at);
