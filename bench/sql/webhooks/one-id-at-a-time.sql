-- Since 0027, for any of them: 0026's shape put back in the bench's schema (the control for
-- 0027; twenty-ninth session): ids one at a time from the events' sequence, each batch with its
-- array of ids, and 0025's one-statement trigger. The expansion stays 0027's (it reads either).
ALTER TABLE webhook_events ALTER COLUMN id SET INCREMENT BY 1;
CREATE OR REPLACE FUNCTION herald_webhook_events_issued() RETURNS BIGINT LANGUAGE sql VOLATILE AS $$
    SELECT COALESCE(pg_sequence_last_value('webhook_events_id_seq'::regclass), 0)
$$;
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
