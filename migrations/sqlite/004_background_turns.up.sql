-- respgate schema v4 for SQLite, mirroring migrations/postgres/004: background turns. body is the
-- vLLM-bound request as a BLOB (byte-exact), state the turn's settings as JSON text, job_id the
-- River job's id (River's tables are created by rivermigrate in the same migrate step). The
-- foreign key cascades, so deleting a response deletes its row. created_at is microseconds since
-- the Unix epoch, like every time here.
CREATE TABLE background_turns (
    tenant      TEXT    NOT NULL,
    response_id TEXT    NOT NULL,
    job_id      INTEGER NOT NULL,
    body        BLOB    NOT NULL,
    state       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, response_id),
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id) ON DELETE CASCADE
) STRICT;
CREATE INDEX background_turns_tenant_idx ON background_turns (tenant);
