-- respgate schema v2 for SQLite, mirroring migrations/postgres/002: the per-response event log.
-- data is a BLOB holding the event's exact bytes; the foreign key (enforced: the store opens
-- every connection with _foreign_keys=1) cascades, so deleting a response deletes its log.

CREATE TABLE response_events (
    tenant      TEXT    NOT NULL,
    response_id TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT    NOT NULL,
    data        BLOB    NOT NULL,
    PRIMARY KEY (tenant, response_id, seq),
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id) ON DELETE CASCADE
) STRICT;
