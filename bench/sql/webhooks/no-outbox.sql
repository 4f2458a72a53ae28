-- Migration 0019's insert trigger, doing nothing unless some enabled endpoint is not paused: in
-- the down case (its one endpoint paused) the dispatch's transaction does no outbox work at all,
-- as with no endpoint. Breaks the outbox (a paused endpoint's events are owed); a control for
-- what else the down case does (its endpoint's probes, the dispatcher, the case's place in the
-- round).
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled' AND paused_after IS NULL) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count), c.updated_at
    FROM changed c
    WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
    ORDER BY c.id;
    RETURN NULL;
END
$$;
