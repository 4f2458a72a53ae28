-- For `statement-work.sh`/`statement-cpu.sh` only (no reader knows this shape): a slimmer batch, its
-- ids joined in one text without their common prefix (`notif_`), its event ids, data and times left
-- out when they follow from the rest (contiguous ids, `{}`, one time). Twenty-sixth session.
ALTER TABLE webhook_event_batches ALTER COLUMN event_ids DROP NOT NULL, ALTER COLUMN subject_ids DROP NOT NULL,
    ALTER COLUMN datas DROP NOT NULL, ALTER COLUMN occurred_ats DROP NOT NULL,
    ADD COLUMN subjects TEXT, ADD COLUMN occurred_at BIGINT;
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wide BIGINT[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    PERFORM herald_webhook_events_begin();
    WITH written AS (
        INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                           subjects, datas, occurred_at, occurred_ats)
        SELECT max(e.event_id), min(e.event_id), e.tenant_id, e.application_id, e.event_type,
               CASE WHEN max(e.event_id) - min(e.event_id) + 1 = count(*) THEN NULL
                    ELSE array_agg(e.event_id ORDER BY e.event_id) END,
               string_agg(substr(e.id, 7), ' ' ORDER BY e.event_id),
               CASE WHEN bool_and(e.data = '{}') THEN NULL ELSE array_agg(e.data ORDER BY e.event_id) END,
               min(e.updated_at),
               CASE WHEN min(e.updated_at) = max(e.updated_at) THEN NULL
                    ELSE array_agg(e.updated_at ORDER BY e.event_id) END
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
    RETURN NULL;
END
$$;
