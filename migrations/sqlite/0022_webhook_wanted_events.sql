-- An event is written only when an enabled endpoint of its tenant wants it: one subscribed to its
-- type (or to every type) and to its application (or to every application; an event with no
-- application, a domain's or a suppression's, is every application's), as the fan-out chooses
-- (`store/webhooks/fan_out.rs`). Before, every event of a tenant with any enabled endpoint was
-- written and the fan-out passed those no endpoint wanted: an endpoint subscribed to
-- `otp.verified` alone cost each in-app dispatch an event row. An endpoint that is paused (down)
-- still wants its events: they are owed to it. An endpoint added, or given more types, gets the
-- events that happen after (docs/WEBHOOKS.md). The triggers of 0015 and 0021 otherwise unchanged.
DROP TRIGGER webhook_notification_inserted;
DROP TRIGGER webhook_notification_changed;
DROP TRIGGER webhook_otp_changed;
DROP TRIGGER webhook_domain_changed;
DROP TRIGGER webhook_suppression_created;
DROP TRIGGER webhook_suppression_deleted;

CREATE TRIGGER webhook_notification_inserted AFTER INSERT ON notifications
WHEN (NEW.status = 'sent' OR NEW.status = 'delivered' OR NEW.status = 'read' OR NEW.status = 'undelivered'
      OR NEW.status = 'bounced' OR NEW.status = 'complained' OR NEW.status = 'failed' OR NEW.status = 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || NEW.status || ',%')
             AND (e.application_id IS NULL OR NEW.application_id IS NULL OR e.application_id = NEW.application_id))
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
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || NEW.status || ',%')
             AND (e.application_id IS NULL OR NEW.application_id IS NULL OR e.application_id = NEW.application_id))
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    VALUES (NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
            CASE WHEN NEW.failure_reason IS NULL AND NOT NEW.retryable AND NEW.retry_count = 0 THEN '{}'
                 ELSE json_object('failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                                  'retry_count', NEW.retry_count) END,
            NEW.updated_at);
END;

CREATE TRIGGER webhook_otp_changed AFTER UPDATE OF status ON otp_transactions
WHEN OLD.status <> NEW.status AND NEW.status IN ('verified', 'tombstoned')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,otp.' || NEW.status || ',%')
             AND (e.application_id IS NULL OR NEW.application_id IS NULL OR e.application_id = NEW.application_id))
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NEW.application_id, 'otp.' || NEW.status, NEW.id,
           json_object('transaction_id', NEW.id, 'application_id', NEW.application_id,
                       'application_name', (SELECT a.name FROM applications a WHERE a.id = NEW.application_id),
                       'channel', NEW.channel, 'recipient_masked', NEW.recipient_masked, 'status', NEW.status,
                       'failure_reason', NEW.failure_reason, 'retryable', 0,
                       'retry_count', 0, 'created_at', NEW.created_at, 'category', NULL),
           NEW.updated_at;
END;

CREATE TRIGGER webhook_domain_changed AFTER UPDATE OF status ON domains
WHEN OLD.status <> NEW.status AND NEW.status IN ('verified', 'failed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,domain.' || NEW.status || ',%'))
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NULL, 'domain.' || NEW.status, NEW.id,
           json_object('id', NEW.id, 'tenant_id', NEW.tenant_id, 'name', NEW.name, 'dkim_selector', NEW.dkim_selector,
                       'challenge_token', NEW.challenge_token, 'dkim_record', NEW.dkim_record, 'status', NEW.status,
                       'checks', NEW.checks, 'created_at', NEW.created_at, 'last_checked_at', NEW.last_checked_at,
                       'verified_at', NEW.verified_at, 'next_check_at', NEW.next_check_at),
           COALESCE(NEW.last_checked_at, NEW.created_at);
END;

CREATE TRIGGER webhook_suppression_created AFTER INSERT ON suppressions
WHEN EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,suppression.created,%'))
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NULL, 'suppression.created', NEW.id,
           json_object('id', NEW.id, 'tenant_id', NEW.tenant_id, 'channel', NEW.channel,
                       'recipient_masked', NEW.recipient_masked, 'category', NEW.category, 'reason', NEW.reason,
                       'transaction_id', NEW.transaction_id, 'created_at', NEW.created_at),
           NEW.created_at;
END;
CREATE TRIGGER webhook_suppression_deleted AFTER DELETE ON suppressions
WHEN EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = OLD.tenant_id AND e.status = 'enabled'
             AND (e.event_types IS NULL OR e.event_types LIKE '%,suppression.deleted,%'))
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT OLD.tenant_id, NULL, 'suppression.deleted', OLD.id,
           json_object('id', OLD.id, 'tenant_id', OLD.tenant_id, 'channel', OLD.channel,
                       'recipient_masked', OLD.recipient_masked, 'category', OLD.category, 'reason', OLD.reason,
                       'transaction_id', OLD.transaction_id, 'created_at', OLD.created_at),
           CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
END;
