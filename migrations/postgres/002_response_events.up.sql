-- respgate schema v2: the per-response event log (store.Store ResponseEventAppend / List), so a
-- GET ?stream=true replays exactly the normalised events the live stream sent.
--
-- data is bytea, not json: it holds the SSE data line's bytes exactly as the client received
-- them, and must come back byte-identical whatever they contain. The foreign key cascades, so
-- deleting a response (ResponseDelete, ResponsePurge) deletes its log. tenant is part of the key
-- because response ids are only unique per tenant (responses' primary key is (tenant, id)).

CREATE TABLE response_events (
    tenant      text   NOT NULL,
    response_id text   NOT NULL,
    seq         bigint NOT NULL,
    type        text   NOT NULL,
    data        bytea  NOT NULL,
    PRIMARY KEY (tenant, response_id, seq),
    FOREIGN KEY (tenant, response_id) REFERENCES responses (tenant, id) ON DELETE CASCADE
);
