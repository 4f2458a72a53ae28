-- The fan-out leaves the change's transaction. The event a change reports is still written with
-- it (the outbox), but its messages, one per endpoint that wants it, are made afterwards by the
-- dispatcher in groups (`Store::fan_out_webhook_events`). Made by a trigger on each event, a
-- message (a row and four index entries, and its subject's order) doubled what an in-app
-- dispatch wrote: one event cost 38–62 µs without an endpoint and 71–117 µs with one.
--
-- SQLite has one writer, so event ids are in commit order and a cursor says which events have
-- been fanned out: every event up to `last_event_id`. Events already in the table were fanned out
-- by the trigger this drops. `webhook.test` events are for one endpoint and get their message
-- when they are written; the fan-out passes them by.
DROP TRIGGER webhook_events_fan_out;
CREATE TABLE webhook_fan_out (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    last_event_id  BIGINT NOT NULL
);
INSERT INTO webhook_fan_out (id, last_event_id) SELECT 1, COALESCE(MAX(id), 0) FROM webhook_events;

-- Nothing looks messages up by lease any more (a claim returns what it leased, and a settlement
-- finds its message by id): the index only cost two writes per attempt.
DROP INDEX webhook_messages_leased;
