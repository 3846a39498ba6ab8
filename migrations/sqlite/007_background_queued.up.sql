-- The queued background responses (docs/background.md): counted by the enqueue's bound
-- (--background-max-queued) and by the queue-depth gauge on every /metrics scrape. The partial
-- index holds only queued rows, so a count costs the queue's depth, not the table's size.
CREATE INDEX responses_queued_idx ON responses (created_at) WHERE status = 'queued';
