-- An estimate of a design in which an in-app notification's row carries its event's id (a column
-- the writer's statement fills when the tenant has an endpoint; here a default, so every row
-- takes one), found by the fan-out through a partial index; the writers' lock and the NOTIFY
-- taken by a BEFORE statement trigger, before the statement's rows take their ids. The AFTER
-- trigger still runs and writes batches only for rows without an id (none here). For the paused
-- case of statement-cpu.sh / statement-work.sh; not a working outbox (no reader knows the column).
ALTER TABLE notifications ADD COLUMN webhook_event_id BIGINT DEFAULT nextval('webhook_events_id_seq');
CREATE INDEX notifications_by_webhook_event ON notifications (webhook_event_id) WHERE webhook_event_id IS NOT NULL;
CREATE FUNCTION herald_webhook_notifications_inserting() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        PERFORM herald_webhook_events_begin();
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_notifications_inserting BEFORE INSERT ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_notifications_inserting();
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                       subject_ids, datas, occurred_ats)
    SELECT max(e.event_id), min(e.event_id), e.tenant_id, e.application_id, e.event_type,
           array_agg(e.event_id ORDER BY e.event_id), array_agg(e.id ORDER BY e.event_id),
           array_agg(e.data ORDER BY e.event_id), array_agg(e.updated_at ORDER BY e.event_id)
    FROM (SELECT c.id, c.tenant_id, c.application_id, c.updated_at, 'notification.' || c.status AS event_type,
                 herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count) AS data,
                 nextval('webhook_events_id_seq') AS event_id
          FROM changed c
          WHERE c.webhook_event_id IS NULL
            AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
            AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
          ORDER BY c.id) e
    GROUP BY e.tenant_id, e.application_id, e.event_type;
    RETURN NULL;
END
$$;
