-- respgate schema v1 for SQLite, mirroring migrations/postgres/001 (docs/design.md §3).
-- STRICT tables enforce the declared types. Times are INTEGER microseconds since the Unix epoch
-- (UTC), the precision Postgres keeps. JSON is TEXT holding the exact bytes the caller gave.

CREATE TABLE responses (
    tenant               TEXT    NOT NULL,
    id                   TEXT    NOT NULL,
    status               TEXT    NOT NULL
        CHECK (status IN ('queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled')),
    model                TEXT    NOT NULL DEFAULT '',
    previous_response_id TEXT,
    conversation_id      TEXT,
    created_at           INTEGER NOT NULL,
    completed_at         INTEGER,
    echo                 TEXT,
    usage                TEXT,
    error                TEXT,
    incomplete_details   TEXT,
    lease_owner          TEXT,
    lease_expires_at     INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX responses_lease_idx ON responses (lease_expires_at)
    WHERE status IN ('queued', 'in_progress');
CREATE INDEX responses_created_idx ON responses (created_at);

CREATE TABLE items (
    pk          INTEGER PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    response_id TEXT,
    role        TEXT CHECK (role IN ('input', 'output')),
    position    INTEGER,
    id          TEXT    NOT NULL,
    type        TEXT    NOT NULL,
    data        TEXT    NOT NULL,
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id)
) STRICT;

CREATE INDEX items_response_idx ON items (tenant, response_id, role, position);
CREATE INDEX items_id_idx ON items (tenant, id, pk);

CREATE TABLE conversations (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    metadata         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    turn_response_id TEXT,
    turn_expires_at  INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE TABLE conversation_items (
    tenant          TEXT    NOT NULL,
    conversation_id TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    item_pk         INTEGER NOT NULL UNIQUE REFERENCES items (pk) ON DELETE CASCADE,
    PRIMARY KEY (tenant, conversation_id, seq),
    FOREIGN KEY (tenant, conversation_id) REFERENCES conversations (tenant, id) ON DELETE CASCADE
) STRICT;

CREATE TABLE secrets (
    name       TEXT    PRIMARY KEY,
    value      BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
