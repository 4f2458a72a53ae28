-- The notification triggers of 0019, with the statuses that make an event tested by a chain of
-- `=` instead of `IN (…)`: in a trigger's `WHEN`, SQLite builds the list's ephemeral table again at
-- each row, and that cost an in-app dispatch about 2 µs of the one writer's time on a trigger of
-- about 4 (a Python `sqlite3` test of a 28-row insert, SQLite 3.40: 8.7 µs a row with the list,
-- 6.5 µs with the chain, 4.6–5.2 µs with no trigger; docs/PERFORMANCE.md). Same statuses, same
-- events.
DROP TRIGGER webhook_notification_inserted;
DROP TRIGGER webhook_notification_changed;
CREATE TRIGGER webhook_notification_inserted AFTER INSERT ON notifications
WHEN (NEW.status = 'sent' OR NEW.status = 'delivered' OR NEW.status = 'read' OR NEW.status = 'undelivered'
      OR NEW.status = 'bounced' OR NEW.status = 'complained' OR NEW.status = 'failed' OR NEW.status = 'suppressed')
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
 AND (NEW.status = 'sent' OR NEW.status = 'delivered' OR NEW.status = 'read' OR NEW.status = 'undelivered'
      OR NEW.status = 'bounced' OR NEW.status = 'complained' OR NEW.status = 'failed' OR NEW.status = 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    VALUES (NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
            CASE WHEN NEW.failure_reason IS NULL AND NOT NEW.retryable AND NEW.retry_count = 0 THEN '{}'
                 ELSE json_object('failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                                  'retry_count', NEW.retry_count) END,
            NEW.updated_at);
END;
