-- The compaction archive (docs/compaction.md): what each compaction item's summary replaced.
-- replaced is a JSON array of {"item_id","sha256"} (SHA-256 of the item's stored JSON bytes).
CREATE TABLE compactions (
    tenant      text        NOT NULL,
    id          text        NOT NULL,
    response_id text        NOT NULL DEFAULT '',
    model       text        NOT NULL,
    replaced    jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX compactions_created ON compactions (created_at);
