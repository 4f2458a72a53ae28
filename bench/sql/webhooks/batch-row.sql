-- A design measured, not adopted (docs/PERFORMANCE.md, twenty-first session): a writer's
-- statement of notifications writes its events as one row of `webhook_event_batches` (per
-- tenant, application and status; the events as arrays, each with the id it takes from the
-- events' sequence after the writers' lock, as migration 0022's writers do), instead of one
-- `webhook_events` row each. The fan-out expands those rows into `webhook_events`, each event
-- with its own id, before it reads the events, and goes no further than the first row it left,
-- so every reader past its cursor (a paused endpoint's catch-up, a disabled one's settling,
-- retention) finds the events as before. The dispatch's transaction writes 4 % more WAL with one
-- endpoint paused instead of 10 % (`statement-work.sh`), but the fan-out then writes the rows
-- it did not, during the same burst: the down row's rate did not move. Replaces migration
-- 0022's fan-out function: never run it against a database you keep.
CREATE TABLE webhook_event_batches (
    -- Its first event's id.
    id              BIGINT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    application_id  TEXT,
    event_type      TEXT NOT NULL,
    -- One element per event, in the order of its ids.
    event_ids       BIGINT[] NOT NULL,
    subject_ids     TEXT[] NOT NULL,
    datas           TEXT[] NOT NULL,
    occurred_ats    BIGINT[] NOT NULL
);
-- Its writers take the events' writers' lock (migration 0022) before their events get ids. The
-- fan-out's own expansion into `webhook_events` does not (`herald.expanding`): it writes no new
-- id, and its commit need not wake the fan-out.
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('herald.expanding', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415));
    PERFORM pg_notify('herald_webhook_events', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_event_batches_writing BEFORE INSERT ON webhook_event_batches
    FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_events_writing();

-- Notifications inserted: their events, one row per tenant, application and status of the
-- statement (ids taken after the statement trigger above, in the notifications' id order).
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_event_batches (id, tenant_id, application_id, event_type, event_ids, subject_ids, datas,
                                       occurred_ats)
    SELECT min(e.event_id), e.tenant_id, e.application_id, e.event_type, array_agg(e.event_id ORDER BY e.event_id),
           array_agg(e.id ORDER BY e.event_id), array_agg(e.data ORDER BY e.event_id),
           array_agg(e.updated_at ORDER BY e.event_id)
    FROM (SELECT c.id, c.tenant_id, c.application_id, c.updated_at, 'notification.' || c.status AS event_type,
                 herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count) AS data,
                 nextval('webhook_events_id_seq') AS event_id
          FROM changed c
          WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
            AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
          ORDER BY c.id) e
    GROUP BY e.tenant_id, e.application_id, e.event_type;
    RETURN NULL;
END
$$;

-- Migration 0022's fan-out, which first expands up to `group_size` batch rows, oldest first, into
-- `webhook_events`, and goes no further than the first row it left.
CREATE OR REPLACE FUNCTION herald_webhook_fan_out_events(group_size BIGINT, OUT passed BIGINT, OUT made BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    committed BIGINT;
    after_id BIGINT;
    last_id BIGINT;
    left_at BIGINT;
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
    PERFORM set_config('herald.expanding', 'on', true);
    WITH b AS (DELETE FROM webhook_event_batches
               WHERE id IN (SELECT id FROM webhook_event_batches WHERE id <= committed ORDER BY id LIMIT group_size)
               RETURNING *)
    INSERT INTO webhook_events (id, tenant_id, application_id, event_type, subject_id, data, occurred_at)
    OVERRIDING SYSTEM VALUE
    SELECT u.event_id, b.tenant_id, b.application_id, b.event_type, u.subject_id, u.data, u.occurred_at
    FROM b CROSS JOIN LATERAL unnest(b.event_ids, b.subject_ids, b.datas, b.occurred_ats)
        AS u(event_id, subject_id, data, occurred_at);
    PERFORM set_config('herald.expanding', 'off', true);
    SELECT min(id) INTO left_at FROM webhook_event_batches WHERE id <= committed;
    IF left_at IS NOT NULL THEN
        committed := left_at - 1;
        IF after_id >= committed THEN
            RETURN;
        END IF;
    END IF;
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
