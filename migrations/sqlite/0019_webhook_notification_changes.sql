-- A notification's event keeps only what can change after it: its failure reason, whether it is
-- retryable, its retry count (`{}` when those are still a new notification's: no reason, not
-- retryable, no retry). The rest of its body (the application and its name, the channel, the
-- masked recipient, the category, the creation time) never changes and notifications are never
-- deleted, so the dispatcher's claim reads it from the notification when it renders the body
-- (`store/webhooks/dispatch.rs`); the status is the event type's. The full snapshot made the
-- event row larger than the notification's own (about 460 bytes of JSON, an application lookup
-- and a `json_object` per in-app dispatch). Events written before keep their full snapshot (it
-- has a `transaction_id`), and the claim sends them as they are.
DROP TRIGGER webhook_notification_inserted;
DROP TRIGGER webhook_notification_changed;
CREATE TRIGGER webhook_notification_inserted AFTER INSERT ON notifications
WHEN NEW.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    VALUES (NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
            CASE WHEN NEW.failure_reason IS NULL AND NOT NEW.retryable AND NEW.retry_count = 0 THEN '{}'
                 ELSE json_object('failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                                  'retry_count', NEW.retry_count) END,
            NEW.updated_at);
END;
CREATE TRIGGER webhook_notification_changed AFTER UPDATE OF status ON notifications
WHEN OLD.status <> NEW.status
 AND NEW.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    VALUES (NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
            CASE WHEN NEW.failure_reason IS NULL AND NOT NEW.retryable AND NEW.retry_count = 0 THEN '{}'
                 ELSE json_object('failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                                  'retry_count', NEW.retry_count) END,
            NEW.updated_at);
END;
