-- A notification's event keeps only what can change after it: its failure reason, whether it is
-- retryable, its retry count (`{}` when those are still a new notification's: no reason, not
-- retryable, no retry). The rest of its body (the application and its name, the channel, the
-- masked recipient, the category, the creation time) never changes and notifications are never
-- deleted, so the dispatcher's claim reads it from the notification when it renders the body
-- (`store/webhooks/dispatch.rs`); the status is the event type's. The full snapshot made the
-- event row larger than the notification's own (about 460 bytes of JSON, an application lookup
-- and a `jsonb_build_object` per in-app dispatch). Events written before keep their full
-- snapshot (it has a `transaction_id`), and the claim sends them as they are.
CREATE FUNCTION herald_webhook_changes(failure_reason TEXT, retryable BOOLEAN, retry_count BIGINT)
RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN failure_reason IS NULL AND NOT retryable AND retry_count = 0 THEN '{}'
                ELSE json_build_object('failure_reason', failure_reason, 'retryable', retryable,
                                       'retry_count', retry_count)::text END
$$;

CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
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
CREATE OR REPLACE FUNCTION herald_webhook_notifications_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count), c.updated_at
    FROM before_rows o JOIN after_rows c ON c.id = o.id
    WHERE o.status IS DISTINCT FROM c.status
      AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
    ORDER BY c.id;
    RETURN NULL;
END
$$;
