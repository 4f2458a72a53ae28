-- The notifications' webhook triggers (0024's) doing the same with fewer instructions: counted,
-- not timed (bench/sql/webhooks/statement-instructions.sh runs the writer's statement of 15 in-app
-- dispatches in a backend under valgrind, where counts repeat to the instruction; this machine's
-- timings move ±15 %). With one endpoint subscribed to their events, 0024's insert trigger added
-- 647,000 instructions to the statement's 8,937,000 (+7.2 %), this one 454,000 (+5.1 %); with one
-- endpoint subscribed to other events alone (`otp.verified`), 0024's added 117,000, this one none
-- (docs/PERFORMANCE.md, twenty-seventh session). What changed:
--
-- * The first test asks whether an enabled endpoint anywhere wants a notification event at all,
--   not merely whether one is enabled: an endpoint subscribed to OTP events alone no longer makes
--   the trigger test each row.
-- * No separate test of the rows before the batch: the rows an endpoint wants are found once
--   (`wanted`), and the writers' lock and the `NOTIFY` (0023's `herald_webhook_events_begin`,
--   inlined: a nested plpgsql call is two statements more) are taken by a part of the same
--   statement that yields a row only if `wanted` has one (`begun`), joined with every wanted row
--   before its id is taken: no id before the lock, and no lock when nothing is wanted.
-- * Plain aggregates: a batch's arrays are aligned (element i of each is one event) but not
--   sorted by id (0023 sorted each of the four; no reader needs it: the expansion unnests them
--   together, retention takes the largest time).
--
-- The batches, their readers and every other trigger are unchanged.

CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wide BIGINT[];
BEGIN
    -- No endpoint anywhere wants a notification event: nothing to test the rows against.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE status = 'enabled' AND (event_types IS NULL OR event_types LIKE '%,notification.%')) THEN
        RETURN NULL;
    END IF;
    WITH wanted AS MATERIALIZED (
        SELECT c.id, c.tenant_id, c.application_id, c.updated_at, 'notification.' || c.status AS event_type,
               herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count) AS data
        FROM changed c
        WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
          AND EXISTS (SELECT 1 FROM webhook_endpoints e
                      WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                        AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                        AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id))),
    -- The writers' lock keyed on the last id issued, and the fan-out's wake-up at commit: one row
    -- if anything is wanted, which every wanted row is joined with before it takes its id.
    begun AS MATERIALIZED (
        SELECT pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                            | (herald_webhook_events_issued() & 17592186044415)),
               pg_notify('herald_webhook_events', '')
        FROM (SELECT FROM wanted LIMIT 1) one),
    written AS (
        INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                           subject_ids, datas, occurred_ats)
        SELECT max(w.event_id), min(w.event_id), w.tenant_id, w.application_id, w.event_type,
               array_agg(w.event_id), array_agg(w.id), array_agg(w.data), array_agg(w.updated_at)
        FROM (SELECT wanted.*, nextval('webhook_events_id_seq') AS event_id FROM wanted, begun) w
        GROUP BY w.tenant_id, w.application_id, w.event_type
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

-- Notifications changed (0024's): the same first test.
CREATE OR REPLACE FUNCTION herald_webhook_notifications_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE status = 'enabled' AND (event_types IS NULL OR event_types LIKE '%,notification.%')) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM before_rows o JOIN after_rows c ON c.id = o.id
        WHERE o.status IS DISTINCT FROM c.status
          AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
          AND EXISTS (SELECT 1 FROM webhook_endpoints e
                      WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                        AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                        AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id)))
    THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count), c.updated_at
    FROM before_rows o JOIN after_rows c ON c.id = o.id
    WHERE o.status IS DISTINCT FROM c.status
      AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e
                  WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                    AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                    AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id))
    ORDER BY c.id;
    RETURN NULL;
END
$$;
