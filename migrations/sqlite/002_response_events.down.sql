DROP TABLE IF EXISTS response_events;
