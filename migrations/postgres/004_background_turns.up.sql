-- respgate schema v4: background turns (docs/background.md; store.Store ResponseEnqueueBackground,
-- BackgroundTurnGet, ResponseBackgroundClaim, ResponseCancelBackground).
--
-- One row per background response: what its worker sends upstream (body: the vLLM-bound request,
-- rehydrated and validated when the response was created, kept byte-exact as bytea), the turn's
-- settings the worker needs (state: JSON), and the id of its River job (river_job.id, in River's
-- own tables, which respgate's migrate step creates with rivermigrate). It is written in the same
-- transaction as the queued response and the River job, and cascades with the response, so
-- deleting a response (or retention) removes it. River's job row is left to River's own cleaner.
CREATE TABLE background_turns (
    tenant      text        NOT NULL,
    response_id text        NOT NULL,
    job_id      bigint      NOT NULL,
    body        bytea       NOT NULL,
    state       json        NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, response_id),
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id) ON DELETE CASCADE
);
-- The per-tenant bound counts a tenant's unfinished background responses.
CREATE INDEX background_turns_tenant_idx ON background_turns (tenant);
