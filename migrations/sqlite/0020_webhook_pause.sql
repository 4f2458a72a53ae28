-- A dead endpoint's events are owed, not queued (PostgreSQL's migration 0021 says why).
-- `paused_after` holds the fan-out's cursor when the endpoint was paused: the fan-out
-- (`store/webhooks/fan_out.rs`) makes it no message for a later event, and the catch-up makes
-- them, in event order, up to the cursor. SQLite has one writer: no lock is needed.
ALTER TABLE webhook_endpoints ADD COLUMN paused_after BIGINT;
