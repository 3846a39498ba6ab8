-- respgate schema v1 (docs/design.md §3). Every table but secrets carries tenant, and every query filters
-- on it.
--
-- JSON columns are `json`, not `jsonb`, on purpose: `json` keeps the exact input text (key order,
-- duplicate keys, number spelling such as 1.0 and 12345678901234567890, escapes, whitespace) while
-- still validating it and allowing ad hoc queries (data->>'type'). `jsonb` would reorder keys, drop
-- duplicates and normalise numbers, breaking the store's contract that items and the request echo
-- come back byte-for-byte. Consequence: the stored text must be valid UTF-8 (server_encoding UTF8).

CREATE TABLE responses (
    tenant               text        NOT NULL,
    id                   text        NOT NULL,
    status               text        NOT NULL
        CHECK (status IN ('queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled')),
    model                text        NOT NULL DEFAULT '',
    previous_response_id text,
    conversation_id      text,
    created_at           timestamptz NOT NULL,
    completed_at         timestamptz,
    echo                 json,
    usage                json,
    error                json,
    incomplete_details   json,
    lease_owner          text,
    lease_expires_at     timestamptz,
    PRIMARY KEY (tenant, id)
);

-- The sweeper scans only unfinished rows.
CREATE INDEX responses_lease_idx ON responses (lease_expires_at)
    WHERE status IN ('queued', 'in_progress');
-- Retention deletes by age.
CREATE INDEX responses_created_idx ON responses (created_at);

-- One row per item per turn that carried it: item ids are not unique (a client may resend an
-- item in a later request), so pk is a surrogate. response_id is NULL for items created directly
-- in a conversation, and for items a conversation kept after their response was deleted.
CREATE TABLE items (
    pk          bigserial PRIMARY KEY,
    tenant      text    NOT NULL,
    response_id text,
    role        text CHECK (role IN ('input', 'output')),
    position    integer,
    id          text    NOT NULL,
    type        text    NOT NULL,
    data        json    NOT NULL,
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id)
);

CREATE INDEX items_response_idx ON items (tenant, response_id, role, position);
CREATE INDEX items_id_idx ON items (tenant, id, pk);

CREATE TABLE conversations (
    tenant           text        NOT NULL,
    id               text        NOT NULL,
    metadata         json        NOT NULL,
    created_at       timestamptz NOT NULL,
    -- The active-turn lease: at most one in-flight response per conversation.
    turn_response_id text,
    turn_expires_at  timestamptz,
    PRIMARY KEY (tenant, id)
);

-- seq is assigned max(seq)+1 under the conversation's row lock, so it is dense and unique except
-- for the gaps ConversationItemDelete leaves.
CREATE TABLE conversation_items (
    tenant          text   NOT NULL,
    conversation_id text   NOT NULL,
    seq             bigint NOT NULL,
    item_pk         bigint NOT NULL UNIQUE REFERENCES items (pk) ON DELETE CASCADE,
    PRIMARY KEY (tenant, conversation_id, seq),
    FOREIGN KEY (tenant, conversation_id) REFERENCES conversations (tenant, id) ON DELETE CASCADE
);

-- Server-wide secrets (e.g. the tenant HMAC key, docs/design.md §6); not tenant data.
CREATE TABLE secrets (
    name       text        PRIMARY KEY,
    value      bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
