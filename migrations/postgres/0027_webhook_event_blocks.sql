-- The notifications' insert trigger (0025's) at some half the instructions: counted under
-- valgrind (bench/sql/webhooks/statement-instructions.sh, docs/PERFORMANCE.md, twenty-ninth
-- session), one endpoint wanting the dispatches' events added 683,000 instructions to the
-- writer's statement of 30 in-app dispatches (16,570,000 with none) and 397,000 with this;
-- 1,107,000 and 566,000 to one of 60; 1,884,000 and 855,000 to one of 120. Counted part by
-- part (the session's variants): an id taken with a `nextval` costs some 4,000 instructions, and
-- 0025's one statement of four parts cost more to start and per row than a grouping query and
-- two small statements. What changed:
--
-- * The events' sequence hands out blocks of 1,024 ids: a batch of up to 1,024 events takes one
--   `nextval` and its events the ids from it on, in the order of its arrays. So a batch needs no
--   array of ids (`event_ids` is NULL; its events' ids are `first_id` up to `last_id`), and is
--   never wider than its own events. A larger batch takes a block per 1,024 events and keeps
--   its array, as before. Every other event (a row) takes a block's first id, and nothing reads
--   ids as a count: 2^63 / 1,024 is still 9 * 10^15 events.
-- * `herald_webhook_events_issued()` is the last id of the last block issued: every id a writer
--   takes later is above it, as before, and so are the ids of a writer whose lock is keyed on it.
-- * The trigger is procedural: the statement's rows grouped by tenant, application and status in
--   one query; for each group that an endpoint wants, the writers' lock and the `NOTIFY` (once),
--   its block and its batch, each a small statement.
--
-- The fan-out, the catch-up, the settling and retention read batches as before; an expansion
-- (`herald_webhook_expand`) gives each event its id from the array or, without one, from the
-- batch's first id and the event's place.

ALTER TABLE webhook_events ALTER COLUMN id SET INCREMENT BY 1024;
ALTER TABLE webhook_event_batches ALTER COLUMN event_ids DROP NOT NULL;

CREATE OR REPLACE FUNCTION herald_webhook_events_issued() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT COALESCE(pg_sequence_last_value('webhook_events_id_seq'::regclass) + 1023, 0)
$$;

CREATE OR REPLACE FUNCTION herald_webhook_expand(chosen BIGINT[]) RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    expanded BIGINT;
BEGIN
    PERFORM set_config('herald.expanding', 'on', true);
    WITH b AS (DELETE FROM webhook_event_batches WHERE last_id = ANY (chosen) RETURNING *)
    INSERT INTO webhook_events (id, tenant_id, application_id, event_type, subject_id, data, occurred_at)
    OVERRIDING SYSTEM VALUE
    SELECT COALESCE(u.event_id, b.first_id + u.place - 1), b.tenant_id, b.application_id, b.event_type,
           u.subject_id, u.data, u.occurred_at
    FROM b CROSS JOIN LATERAL unnest(b.event_ids, b.subject_ids, b.datas, b.occurred_ats) WITH ORDINALITY
        AS u(event_id, subject_id, data, occurred_at, place);
    GET DIAGNOSTICS expanded = ROW_COUNT;
    PERFORM set_config('herald.expanding', 'off', true);
    RETURN expanded;
END
$$;

CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g RECORD;
    begun BOOLEAN := false;
    n INT;
    first BIGINT;
    ids BIGINT[];
BEGIN
    -- No endpoint anywhere wants a notification event: nothing to test the rows against.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE status = 'enabled' AND (event_types IS NULL OR event_types LIKE '%,notification.%')) THEN
        RETURN NULL;
    END IF;
    FOR g IN SELECT c.tenant_id, c.application_id, c.status, array_agg(c.id) AS subjects,
                    array_agg(herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count)) AS datas,
                    array_agg(c.updated_at) AS ats
             FROM changed c
             WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
             GROUP BY c.tenant_id, c.application_id, c.status
    LOOP
        CONTINUE WHEN NOT EXISTS (
            SELECT 1 FROM webhook_endpoints e
            WHERE e.tenant_id = g.tenant_id AND e.status = 'enabled'
              AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || g.status || ',%')
              AND (e.application_id IS NULL OR g.application_id IS NULL OR e.application_id = g.application_id));
        -- The writers' lock keyed on the last id issued, before any id is taken, and the
        -- fan-out's wake-up at commit: once, and only if some group is wanted.
        IF NOT begun THEN
            PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                                 | (herald_webhook_events_issued() & 17592186044415)),
                    pg_notify('herald_webhook_events', '');
            begun := true;
        END IF;
        n := cardinality(g.subjects);
        IF n <= 1024 THEN
            first := nextval('webhook_events_id_seq');
            ids := NULL;
        ELSE
            ids := ARRAY[]::BIGINT[];
            FOR i IN 0 .. n - 1 LOOP
                IF i % 1024 = 0 THEN
                    first := nextval('webhook_events_id_seq');
                END IF;
                ids[i + 1] := first + i % 1024;
            END LOOP;
            first := ids[1];
        END IF;
        INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                           subject_ids, datas, occurred_ats)
        VALUES (COALESCE(ids[n], first + n - 1), first, g.tenant_id, g.application_id, 'notification.' || g.status,
                ids, g.subjects, g.datas, g.ats);
        -- A batch wider than a reader looks back (blocks of other writers between its own):
        -- rows at once.
        IF COALESCE(ids[n], first + n - 1) - first > herald_webhook_batch_span() THEN
            PERFORM herald_webhook_expand(ARRAY[COALESCE(ids[n], first + n - 1)]);
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
