-- Migration 0019's insert trigger, writing each event twice while some endpoint is paused (the
-- down case): what the rows themselves cost, against the statement that writes them.
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count), c.updated_at
    FROM changed c,
         generate_series(1, CASE WHEN EXISTS (SELECT 1 FROM webhook_endpoints WHERE paused_after IS NOT NULL)
                                 THEN 2 ELSE 1 END)
    WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
    ORDER BY c.id;
    RETURN NULL;
END
$$;
