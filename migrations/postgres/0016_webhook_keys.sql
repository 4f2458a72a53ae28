-- The outbox's foreign keys cost more than the rows they guard. Each message inserted checked
-- its endpoint and its event (and each attempt its message) with a `FOR KEY SHARE` lock on the
-- parent row: every dispatch's fan-out locked the same few endpoint rows, in every writer's
-- transaction at once. A group of 64 events to two endpoints took 12–20 ms with the checks and
-- 6 ms without (and in-app dispatch with one endpoint subscribed fell to a third). Nothing
-- inserts a message but the fan-out trigger (from an event and an enabled endpoint, in one
-- statement) and nothing an attempt but the dispatcher (for a message it holds), so the checks
-- guarded nothing those do not; what the keys did on delete, triggers on the rare deletes do.
ALTER TABLE webhook_messages
    DROP CONSTRAINT webhook_messages_endpoint_id_fkey,
    DROP CONSTRAINT webhook_messages_event_id_fkey;
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_message_id_fkey;

-- ON DELETE CASCADE, as statement triggers: a removed endpoint's messages go (a tenant's
-- removal reaches them through its endpoints), and a removed message's attempts.
CREATE FUNCTION herald_webhook_endpoints_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_messages m USING removed r WHERE m.endpoint_id = r.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_endpoints_deleted AFTER DELETE ON webhook_endpoints
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_endpoints_deleted();

CREATE FUNCTION herald_webhook_messages_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_attempts a USING removed r WHERE a.message_id = r.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_messages_deleted AFTER DELETE ON webhook_messages
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_messages_deleted();

-- A queue's tables churn: every message is inserted, leased and settled within seconds. The
-- default thresholds (20 % of the table) let dead rows and stale statistics pile up between
-- runs; these ask autovacuum in sooner (the dispatcher also analyzes as the table grows).
ALTER TABLE webhook_messages SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE webhook_attempts SET (autovacuum_analyze_scale_factor = 0.05);
