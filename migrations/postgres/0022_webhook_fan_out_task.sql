-- The fan-out leaves the change's statement on PostgreSQL too, as it left SQLite's transaction in
-- its migration 0017. The event a change reports is still written with it (the outbox), but its
-- messages, one per endpoint that wants it, are made afterwards by a task of the daemons
-- (`Store::fan_out_webhook_events`), in groups, and not while a daemon's writer is saturated:
-- made by the trigger this drops, each message (a row, five index entries, its subject's order,
-- a second trigger level) cost a saturated in-app dispatch 15-25 % with one endpoint subscribed
-- (docs/PERFORMANCE.md, seventeenth session).
--
-- Where the fan-out has come is a cursor, as on SQLite: every event up to `last_event_id` has
-- been fanned out. Event ids are not in commit order here (a transaction takes its ids, then
-- commits later), so the fan-out goes only as far as no event writer in flight can still add
-- to: each event statement, before its rows get their ids, reads the last id the sequence has
-- issued and holds an advisory lock keyed on it (shared, until its transaction ends; every id it
-- then takes is above it). The fan-out reads the sequence, then those locks: it may pass every
-- event up to the lower of the two, and the events it reads afterwards are all there is. No
-- writer waits for it and it waits for no writer. (The first build of this migration took one
-- lock, every writer's shared and the fan-out's exclusive: a writer whose commit stalled made
-- the fan-out wait, and every new writer behind it.) One daemon fans out at a time: the cursor's
-- row is locked while it does, and a pause or a catch-up locks it to read where the fan-out has
-- come. Events already in the table were fanned out by the trigger.
DROP TRIGGER webhook_events_fan_out ON webhook_events;
DROP FUNCTION herald_webhook_fan_out();
CREATE TABLE webhook_fan_out (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    last_event_id  BIGINT NOT NULL
);
INSERT INTO webhook_fan_out (id, last_event_id) SELECT 1, COALESCE(MAX(id), 0) FROM webhook_events;

-- The schema's own part of the writers' lock keys: several Herald schemas may share a database
-- (as the tests do), and another's writers must not hold this one's fan-out back. 19 bits; the
-- other 44 are the id (17.6 trillion events).
CREATE FUNCTION herald_webhook_events_tag() RETURNS BIGINT LANGUAGE sql STABLE AS $$
    SELECT (hashtext(current_schema()) & 524287)::BIGINT
$$;

-- The last event id the sequence has issued (0 before the first): every id a writer takes later
-- is above it. Read from the sequence itself, which is not transactional: what is issued is
-- seen at once, committed or not. (The sequence must not cache ids, which `CACHE 1`, the
-- default, does not.) `pg_sequence_last_value`, not a `SELECT` from the sequence: in each event
-- statement's trigger the `SELECT` cost a fifth of a one-row insert's throughput (`pgbench`,
-- docs/PERFORMANCE.md, eighteenth session); the function costs about nothing. Also the
-- settling's barrier: once the fan-out's cursor has passed what this returned after an endpoint
-- was disabled, every transaction that had taken one of those ids has ended.
CREATE FUNCTION herald_webhook_events_issued() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT COALESCE(pg_sequence_last_value('webhook_events_id_seq'::regclass), 0)
$$;

-- Every statement that writes events, before its rows get their ids: the lock keyed on the
-- last id issued, held until its transaction ends (shared: writers never wait for each other
-- here, nor for anyone), and a wake-up for the fan-out of every daemon at its commit.
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415));
    PERFORM pg_notify('herald_webhook_events', '');
    RETURN NULL;
END
$$;
-- 0021's one lock, which every writer took shared and a pause exclusively: nothing takes it now.
DROP FUNCTION herald_webhook_fan_out_lock();

-- How far the fan-out may go now: the last id issued, read first, or, below it, the lowest key
-- of a writer in flight. A writer whose lock the second read does not see has either ended
-- (its locks go after its commit is visible) or will take its ids after that read, above the
-- first; one whose lock it sees takes ids above its key. So every event up to the result is
-- committed (or gone) for any statement that starts after this one.
CREATE FUNCTION herald_webhook_events_committed() RETURNS BIGINT LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    issued BIGINT;
    writing BIGINT;
BEGIN
    issued := herald_webhook_events_issued();
    SELECT MIN(((l.classid::BIGINT & 4095) << 32) | l.objid::BIGINT) INTO writing
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.classid::BIGINT >> 12) = herald_webhook_events_tag();
    RETURN LEAST(issued, COALESCE(writing, issued));
END
$$;

-- The fan-out of up to `group_size` events after the cursor, in the calling statement's
-- transaction (one round trip: at a steady 1,000 events a second, the same work as a transaction
-- of eight statements made an event's first attempt wait twice as long). First how far it may
-- go (above). Then, unless another transaction holds the cursor's row (another daemon's
-- fan-out, a pause, a catch-up, a settling: `passed` is NULL, to be called again in a moment),
-- each event's messages, in the order of the events, a message due no sooner than an earlier
-- pending one about the same subject; the cursor moves past the events. Its commit does not
-- wait for the WAL to be flushed: lost in a crash, the fan-out is done again (the cursor did not
-- move either), and any later transaction's commit flushes it first.
CREATE FUNCTION herald_webhook_fan_out_events(group_size BIGINT, OUT passed BIGINT, OUT made BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    committed BIGINT;
    after_id BIGINT;
    last_id BIGINT;
BEGIN
    made := 0;
    committed := herald_webhook_events_committed();
    PERFORM set_config('lock_timeout', '500ms', true);
    SELECT last_event_id INTO after_id FROM webhook_fan_out WHERE id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    passed := 0;
    IF after_id >= committed THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT COUNT(*), MAX(id) INTO passed, last_id
    FROM (SELECT id FROM webhook_events WHERE id > after_id AND id <= committed ORDER BY id LIMIT group_size) g;
    -- A group that is not full ends where the fan-out may go (ids of transactions rolled back too).
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
