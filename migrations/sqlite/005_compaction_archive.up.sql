-- The compaction archive, mirroring migrations/postgres/005. replaced is TEXT holding a JSON
-- array of {"item_id","sha256"}; created_at is INTEGER microseconds since the Unix epoch.
CREATE TABLE compactions (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    response_id TEXT    NOT NULL DEFAULT '',
    model       TEXT    NOT NULL,
    replaced    TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX compactions_created ON compactions (created_at);
