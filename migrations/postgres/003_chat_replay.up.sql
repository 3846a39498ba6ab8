-- respgate schema v3: replay records of the Chat Completions front door (docs/chat-completions.md;
-- store.Store ReplayRecordList / ReplayRecordSave / ReplayPurge).
--
-- One row per captured chat turn, keyed by its visible identity within a tenant and scope: the
-- chain digest of the history including the assistant envelope the client sends back
-- (end_digest). start_digest is the digest before that message, envelope the envelope's own
-- fingerprint, parent the end_digest of the record replayed last in the request that produced
-- this one (its ancestry), payload a fingerprint of items. items is the JSON array of the turn's
-- complete output items (reasoning included), kept as exact text like every other item column.
-- blocked marks a row that must never be replayed (two payloads for one identity, or a failed
-- turn at its start); a blocked row keeps no items but stays as the marker. used_at is the idle
-- clock of retention.
CREATE TABLE chat_replay_records (
    tenant       text        NOT NULL,
    scope        text        NOT NULL,
    end_digest   text        NOT NULL,
    start_digest text        NOT NULL,
    envelope     text        NOT NULL,
    parent       text        NOT NULL,
    payload      text        NOT NULL,
    items        json        NOT NULL,
    bytes        bigint      NOT NULL,
    blocked      boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    used_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, scope, end_digest)
);
CREATE INDEX chat_replay_records_start ON chat_replay_records (tenant, scope, start_digest);
CREATE INDEX chat_replay_records_scope_used ON chat_replay_records (tenant, scope, used_at);
CREATE INDEX chat_replay_records_used ON chat_replay_records (used_at);
