-- A dead endpoint's events are owed, not queued. Once the dispatcher's breaker trips on an
-- endpoint (five failed attempts in a row) it pauses it: `paused_after` holds the last event
-- fanned out to it, and the fan-out makes it no message for any later event. Those events are
-- owed: one at a time while it is probed, all of them (in event order, in groups) once it
-- answers (`Store::catch_up_webhook_endpoint`). A message for every event costs a row and five
-- index entries in the change's own transaction: with one dead endpoint subscribed an in-app
-- dispatch lost 15-20 %, and a healthy endpoint's p99 rose by a median of 32 % while a dead one
-- took its messages (docs/PERFORMANCE.md).
ALTER TABLE webhook_endpoints ADD COLUMN paused_after BIGINT;

-- What the pause and the catch-up rely on: when they hold `herald_webhook_fan_out_lock()`
-- exclusively, no transaction that has written an event is in flight, so every event up to
-- `MAX(id)` is committed (or gone), and every later event's fan-out sees the endpoint as they
-- left it. An event's statement takes the lock shared before its rows get their ids (a shared
-- advisory lock is an entry in the lock table: nothing is written).
CREATE FUNCTION herald_webhook_fan_out_lock() RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT 5279738116203578411::BIGINT
$$;
CREATE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(herald_webhook_fan_out_lock());
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_events_writing BEFORE INSERT ON webhook_events
    FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_events_writing();

CREATE OR REPLACE FUNCTION herald_webhook_fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                  created_at, updated_at)
    SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
           GREATEST(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                             WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                               AND p.status = 'pending' AND p.lease IS NULL), 0)),
           v.occurred_at, v.occurred_at
    FROM new_events v JOIN webhook_endpoints e ON e.tenant_id = v.tenant_id AND e.status = 'enabled'
      AND e.paused_after IS NULL
      AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
      AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%')
    WHERE v.endpoint_id IS NULL
    ORDER BY v.id, e.id;
    IF FOUND THEN
        PERFORM pg_notify('herald_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;
