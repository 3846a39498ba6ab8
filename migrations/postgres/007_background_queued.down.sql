DROP INDEX responses_queued_idx;
