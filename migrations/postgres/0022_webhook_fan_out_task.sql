-- The fan-out leaves the change's statement on PostgreSQL too, as it left SQLite's transaction in
-- its migration 0017. The event a change reports is still written with it (the outbox), but its
-- messages, one per endpoint that wants it, are made afterwards by a task of the daemons
-- (`Store::fan_out_webhook_events`), in groups, and not while a daemon's writer is saturated:
-- made by the trigger this drops, each message (a row, five index entries, its subject's order,
-- a second trigger level) cost a saturated in-app dispatch 15-25 % with one endpoint subscribed
-- (docs/PERFORMANCE.md, seventeenth session).
--
-- Where the fan-out has come is a cursor, as on SQLite: every event up to `last_event_id` has
-- been fanned out. Event ids are not in commit order here, so the fan-out only goes as far as
-- the last event committed while no event writer was in flight: each event's statement takes
-- `herald_webhook_fan_out_lock()` shared before its rows get their ids (migration 0021), and
-- `herald_webhook_events_committed` takes it exclusively for one statement, then reads the last
-- event (every event up to it is committed, or gone). One daemon fans out at a time: the cursor's
-- row is locked while it does, and a pause or a catch-up locks it to read where the fan-out has
-- come, which no longer makes event writers wait. Events already in the table were fanned out
-- by the trigger.
DROP TRIGGER webhook_events_fan_out ON webhook_events;
DROP FUNCTION herald_webhook_fan_out();
CREATE TABLE webhook_fan_out (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    last_event_id  BIGINT NOT NULL
);
INSERT INTO webhook_fan_out (id, last_event_id) SELECT 1, COALESCE(MAX(id), 0) FROM webhook_events;

-- The events' statement wakes the fan-out of every daemon at its commit.
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(herald_webhook_fan_out_lock());
    PERFORM pg_notify('herald_webhook_events', '');
    RETURN NULL;
END
$$;

-- The last event committed, read once no event writer is in flight (the lock is held for this
-- one statement: called outside a transaction, it is released at once): every event up to it is
-- committed. `wait`: waits for the writers in flight (new ones wait meanwhile); otherwise NULL
-- if one is in flight; a wait gives up after half a second (an error), rather than hold new
-- writers up, or join a deadlock, for longer. The read is a statement of its own inside the function, so its snapshot
-- is taken once the lock is held.
CREATE FUNCTION herald_webhook_events_committed(wait BOOLEAN) RETURNS BIGINT LANGUAGE plpgsql
SET lock_timeout = '500ms' AS $$
DECLARE
    last BIGINT;
BEGIN
    IF wait THEN
        PERFORM pg_advisory_xact_lock(herald_webhook_fan_out_lock());
    ELSIF NOT pg_try_advisory_xact_lock(herald_webhook_fan_out_lock()) THEN
        RETURN NULL;
    END IF;
    SELECT COALESCE(MAX(id), 0) INTO last FROM webhook_events;
    RETURN last;
END
$$;

-- The fan-out of up to `group_size` events after the cursor, in the calling statement's
-- transaction (one round trip: at a steady 1,000 events a second, the same work as a transaction
-- of eight statements made an event's first attempt wait twice as long). First the last event
-- committed, read while holding the writers' lock (`wait`: waiting for the writers in flight;
-- otherwise `passed` is NULL if one is), which is a session lock here, released as soon as it is
-- read, so that no writer waits for the rest. Then, unless another daemon is fanning out (it
-- holds the cursor's row), each event's messages, in the order of the events, a message due no
-- sooner than an earlier pending one about the same subject; the cursor moves past the events.
-- Its commit does not wait for the WAL to be flushed: lost in a crash, the fan-out is done
-- again (the cursor did not move either), and any later transaction's commit flushes it first.
CREATE FUNCTION herald_webhook_fan_out_events(wait BOOLEAN, group_size BIGINT, OUT passed BIGINT,
                                              OUT made BIGINT) LANGUAGE plpgsql AS $$
DECLARE
    committed BIGINT;
    after_id BIGINT;
    last_id BIGINT;
BEGIN
    made := 0;
    PERFORM set_config('lock_timeout', '500ms', true);
    IF wait THEN
        PERFORM pg_advisory_lock(herald_webhook_fan_out_lock());
    ELSIF NOT pg_try_advisory_lock(herald_webhook_fan_out_lock()) THEN
        RETURN;
    END IF;
    BEGIN
        SELECT COALESCE(MAX(id), 0) INTO committed FROM webhook_events;
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(herald_webhook_fan_out_lock());
        RAISE;
    END;
    PERFORM pg_advisory_unlock(herald_webhook_fan_out_lock());
    passed := 0;
    SELECT last_event_id INTO after_id FROM webhook_fan_out WHERE id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR after_id >= committed THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT COUNT(*), MAX(id) INTO passed, last_id
    FROM (SELECT id FROM webhook_events WHERE id > after_id AND id <= committed ORDER BY id LIMIT group_size) g;
    -- A group that is not full ends at the last committed (ids of transactions rolled back too).
    IF passed < group_size THEN
        last_id := committed;
    END IF;
    INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                  created_at, updated_at)
    SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
           GREATEST(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                             WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                               AND p.status = 'pending' AND p.lease IS NULL), 0)),
           v.occurred_at, v.occurred_at
    FROM webhook_events v JOIN webhook_endpoints e ON e.tenant_id = v.tenant_id AND e.status = 'enabled'
      AND e.paused_after IS NULL AND e.created_at <= v.occurred_at
      AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
      AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%')
    WHERE v.id > after_id AND v.id <= last_id AND v.endpoint_id IS NULL
    ORDER BY v.id, e.id;
    GET DIAGNOSTICS made = ROW_COUNT;
    UPDATE webhook_fan_out SET last_event_id = last_id WHERE id = 1;
    IF made > 0 THEN
        PERFORM pg_notify('herald_webhooks', '');
    END IF;
END
$$;
