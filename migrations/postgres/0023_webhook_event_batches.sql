-- A writer's statement of notifications writes their events as one row per tenant, application
-- and event type (`webhook_event_batches`: the events as arrays, each with the id it takes from
-- the events' sequence after the writers' lock, as migration 0022's writers do), not one
-- `webhook_events` row each: still in the change's transaction (the outbox), at a fifth of the
-- work (one writer statement of 15 in-app dispatches with an endpoint subscribed: 4 % more WAL
-- than with none, against 10 % with a row and an index entry per event; docs/PERFORMANCE.md,
-- twenty-second session).
--
-- A batch becomes rows of `webhook_events` (its events keep their ids; the batch is deleted)
-- only when something reads its events: the fan-out, for a batch whose tenant has an endpoint
-- enabled and not paused; a paused endpoint's catch-up and a disabled one's settling, for the
-- batches of its tenant after its mark (`herald_webhook_expand_owed`). Events no endpoint is
-- fanned out to (its only endpoint is paused: dead) stay batches; the fan-out passes them, and
-- retention deletes them once no paused endpoint is owed them. Every other event (a receipt's
-- status, an OTP's, a domain's, a suppression's, `webhook.test`) is written as a row, as before.
CREATE TABLE webhook_event_batches (
    -- Its last (highest) event id: the fan-out reads the batches after its cursor by it.
    last_id         BIGINT PRIMARY KEY,
    -- Its first (lowest): a batch never spans more than `herald_webhook_batch_span()` ids (a
    -- wider one is written as rows at once), so a reader after a mark looks no further back.
    first_id        BIGINT NOT NULL,
    tenant_id       TEXT NOT NULL,
    application_id  TEXT,
    event_type      TEXT NOT NULL,
    -- One element per event, in the order of its ids.
    event_ids       BIGINT[] NOT NULL,
    subject_ids     TEXT[] NOT NULL,
    datas           TEXT[] NOT NULL,
    occurred_ats    BIGINT[] NOT NULL
);
-- A catch-up's and a settling's way in (`herald_webhook_expand_owed`). Partial on a predicate
-- every batch meets (ids start at 1) and only their statements state: the planner may not use it
-- for the fan-out's, which must read the primary key from its cursor on. (Given this index, the
-- fan-out's generic plan went to each tenant with an endpoint and read its batches by first id:
-- every batch the table had held since its last vacuum, dead or not, 6,000 index entries a call,
-- and the first attempts at a steady 1,000 events a second waited 344 ms at the median.)
CREATE INDEX webhook_event_batches_by_tenant ON webhook_event_batches (tenant_id, first_id) WHERE first_id > 0;
-- A queue's table: with an endpoint answering, each batch is deleted within moments (as
-- `webhook_messages`, migration 0016, asks autovacuum in sooner).
ALTER TABLE webhook_event_batches SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- The widest a batch may be, in ids (its writer's statement took its ids while other writers
-- took theirs): a catch-up after a mark reads the batches whose first id is at most this far
-- below it.
CREATE FUNCTION herald_webhook_batch_span() RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT 100000::BIGINT
$$;

-- What every event writer does before its events get ids (migration 0022's statement trigger):
-- the writers' lock keyed on the last id issued, and a wake-up for the fan-out at commit.
-- An expansion of batches into rows (`herald.expanding`) does neither: it takes no new id.
CREATE FUNCTION herald_webhook_events_begin() RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415));
    PERFORM pg_notify('herald_webhook_events', '');
END
$$;
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('herald.expanding', true) IS DISTINCT FROM 'on' THEN
        PERFORM herald_webhook_events_begin();
    END IF;
    RETURN NULL;
END
$$;

-- Batches into rows: those `chosen` (the ids of their last events), each event with its id.
CREATE FUNCTION herald_webhook_expand(chosen BIGINT[]) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    expanded BIGINT;
BEGIN
    PERFORM set_config('herald.expanding', 'on', true);
    WITH b AS (DELETE FROM webhook_event_batches WHERE last_id = ANY (chosen) RETURNING *)
    INSERT INTO webhook_events (id, tenant_id, application_id, event_type, subject_id, data, occurred_at)
    OVERRIDING SYSTEM VALUE
    SELECT u.event_id, b.tenant_id, b.application_id, b.event_type, u.subject_id, u.data, u.occurred_at
    FROM b CROSS JOIN LATERAL unnest(b.event_ids, b.subject_ids, b.datas, b.occurred_ats)
        AS u(event_id, subject_id, data, occurred_at);
    GET DIAGNOSTICS expanded = ROW_COUNT;
    PERFORM set_config('herald.expanding', 'off', true);
    RETURN expanded;
END
$$;

-- Notifications inserted: their events, a batch per tenant, application and event type of the
-- statement, ids taken (in the notifications' id order) after the writers' lock.
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wide BIGINT[];
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    -- Before any id is taken (as migration 0022's statement trigger did for the rows).
    PERFORM herald_webhook_events_begin();
    WITH written AS (
        INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                           subject_ids, datas, occurred_ats)
        SELECT max(e.event_id), min(e.event_id), e.tenant_id, e.application_id, e.event_type,
               array_agg(e.event_id ORDER BY e.event_id), array_agg(e.id ORDER BY e.event_id),
               array_agg(e.data ORDER BY e.event_id), array_agg(e.updated_at ORDER BY e.event_id)
        FROM (SELECT c.id, c.tenant_id, c.application_id, c.updated_at, 'notification.' || c.status AS event_type,
                     herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count) AS data,
                     nextval('webhook_events_id_seq') AS event_id
              FROM changed c
              WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
                AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
              ORDER BY c.id) e
        GROUP BY e.tenant_id, e.application_id, e.event_type
        RETURNING last_id, first_id)
    SELECT array_agg(last_id) INTO wide FROM written WHERE last_id - first_id > herald_webhook_batch_span();
    -- A batch wider than a reader looks back (writers' ids interleaved with its own for that
    -- long): rows at once.
    IF wide IS NOT NULL THEN
        PERFORM herald_webhook_expand(wide);
    END IF;
    RETURN NULL;
END
$$;

-- The batches of `endpoint`'s tenant that hold an event after `after_id`, with their first id up
-- to `up_to`, into rows, oldest first, until at least `want` events are rows (a batch holds at
-- least one: a probe's one event makes one batch rows, not a group of them); returns how far
-- every such event is a row: `up_to`, or just below the first batch left. A catch-up (or a
-- settling) then reads the events up to that.
CREATE FUNCTION herald_webhook_expand_owed(endpoint TEXT, after_id BIGINT, up_to BIGINT, want BIGINT)
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    tenant TEXT;
    expanded BIGINT := 0;
    chosen BIGINT[];
    left_at BIGINT;
BEGIN
    SELECT w.tenant_id INTO tenant FROM webhook_endpoints w WHERE w.id = endpoint;
    IF NOT FOUND THEN
        RETURN up_to;
    END IF;
    LOOP
        SELECT array_agg(x.last_id) INTO chosen
        FROM (SELECT b.last_id FROM webhook_event_batches b
              WHERE b.tenant_id = tenant AND b.first_id > 0 AND b.first_id > after_id - herald_webhook_batch_span()
                AND b.first_id <= up_to AND b.last_id > after_id
              ORDER BY b.first_id LIMIT LEAST(64, GREATEST(want - expanded, 1))) x;
        EXIT WHEN chosen IS NULL;
        expanded := expanded + herald_webhook_expand(chosen);
        EXIT WHEN expanded >= want;
    END LOOP;
    SELECT MIN(b.first_id) INTO left_at FROM webhook_event_batches b
    WHERE b.tenant_id = tenant AND b.first_id > 0 AND b.first_id > after_id - herald_webhook_batch_span()
      AND b.first_id <= up_to AND b.last_id > after_id;
    RETURN COALESCE(left_at - 1, up_to);
END
$$;

-- Migration 0022's fan-out, which first turns into rows the batches after its cursor whose
-- tenant has an endpoint it fans out to (up to `group_size` of them), and goes no further than
-- the first such batch it left.
-- The others it passes: their events are owed to paused endpoints, or to none.
CREATE OR REPLACE FUNCTION herald_webhook_fan_out_events(group_size BIGINT, OUT passed BIGINT, OUT made BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    committed BIGINT;
    after_id BIGINT;
    last_id BIGINT;
    chosen BIGINT[];
    left_at BIGINT;
BEGIN
    made := 0;
    committed := herald_webhook_events_committed();
    PERFORM set_config('lock_timeout', '500ms', true);
    SELECT f.last_event_id INTO after_id FROM webhook_fan_out f WHERE f.id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    passed := 0;
    IF after_id >= committed THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(x.last_id) INTO chosen
    FROM (SELECT b.last_id FROM webhook_event_batches b
          WHERE b.last_id > after_id AND b.first_id <= committed
            AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = b.tenant_id AND w.status = 'enabled'
                          AND w.paused_after IS NULL)
          ORDER BY b.last_id LIMIT group_size) x;
    IF chosen IS NOT NULL THEN
        PERFORM herald_webhook_expand(chosen);
    END IF;
    -- A full group may have left some (in order of their last ids, so the primary key is read
    -- from the cursor on): none of their events is passed.
    IF cardinality(chosen) >= group_size THEN
        SELECT MIN(b.first_id) INTO left_at FROM webhook_event_batches b
        WHERE b.last_id > after_id AND b.first_id <= committed
          AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = b.tenant_id AND w.status = 'enabled'
                        AND w.paused_after IS NULL);
        IF left_at IS NOT NULL THEN
            committed := left_at - 1;
            IF after_id >= committed THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    SELECT COUNT(*), MAX(g.id) INTO passed, last_id
    FROM (SELECT v.id FROM webhook_events v WHERE v.id > after_id AND v.id <= committed ORDER BY v.id LIMIT group_size) g;
    -- A group that is not full ends where the fan-out may go (ids of transactions rolled back,
    -- and events left as batches, too).
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
