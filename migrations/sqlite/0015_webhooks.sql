-- Outbound event webhooks (CONTRACT §10).
--
-- `webhook_endpoints`: where a tenant's events go. The signing secret is not stored: it is
-- derived from the server secret, the endpoint id and `secret_generation` (rotation moves the
-- generation on; the previous one still signs until `previous_until`).
--
-- The outbox: triggers on the tables whose changes are events (notifications, OTP transactions,
-- domains, suppressions) insert a `webhook_events` row in the same transaction as the change,
-- when some enabled endpoint of the tenant wants it, with a snapshot of what the event's body
-- shows (`data`, JSON); a trigger on `webhook_events` then inserts one `webhook_messages` row per
-- endpoint that wants it. So an event is born with the change it reports, on every write path,
-- and never without it. `body` is the rendered body, frozen by the first attempt so every
-- attempt of one message sends the same bytes.
CREATE TABLE webhook_endpoints (
    id                 TEXT PRIMARY KEY,
    tenant_id          TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    application_id     TEXT REFERENCES applications (id) ON DELETE CASCADE,
    url                TEXT NOT NULL,
    description        TEXT,
    -- ',type,type,' (so a type matches with LIKE); NULL: every type.
    event_types        TEXT,
    status             TEXT NOT NULL,
    disabled_reason    TEXT,
    secret_generation  BIGINT NOT NULL DEFAULT 1,
    previous_until     BIGINT,
    -- The first failure since the last success: five days of that disables the endpoint.
    failing_since      BIGINT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_by_tenant ON webhook_endpoints (tenant_id, status);

CREATE TABLE webhook_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT NOT NULL,
    application_id  TEXT,
    -- Set for `webhook.test`: only this endpoint gets it.
    endpoint_id     TEXT,
    event_type      TEXT NOT NULL,
    -- What the event is about (a notification, OTP, domain or suppression id): messages about
    -- one subject reach an endpoint in order.
    subject_id      TEXT NOT NULL,
    data            TEXT NOT NULL,
    body            TEXT,
    occurred_at     BIGINT NOT NULL
);

-- One event on its way to one endpoint. `next_attempt_at` is when it is due; while a daemon sends
-- it, the end of that daemon's lease (`lease` names the claim), so a crashed daemon's messages come
-- due again by themselves. The `webhook-id` is derived from `id` and `created_at`.
CREATE TABLE webhook_messages (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint_id      TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id         BIGINT NOT NULL REFERENCES webhook_events (id),
    event_type       TEXT NOT NULL,
    subject_id       TEXT NOT NULL,
    status           TEXT NOT NULL,
    next_attempt_at  BIGINT,
    lease            TEXT,
    attempts         BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX webhook_messages_due ON webhook_messages (endpoint_id, next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_messages_order ON webhook_messages (endpoint_id, subject_id, id) WHERE status = 'pending';
CREATE INDEX webhook_messages_by_endpoint ON webhook_messages (endpoint_id, id);
CREATE INDEX webhook_messages_leased ON webhook_messages (lease) WHERE lease IS NOT NULL;
CREATE INDEX webhook_messages_by_event ON webhook_messages (event_id);
-- Housekeeping deletes settled messages after 30 days.
CREATE INDEX webhook_messages_settled ON webhook_messages (updated_at) WHERE status <> 'pending';

CREATE TABLE webhook_attempts (
    message_id    BIGINT NOT NULL REFERENCES webhook_messages (id) ON DELETE CASCADE,
    attempted_at  BIGINT NOT NULL,
    http_status   BIGINT,
    error         TEXT,
    duration_ms   BIGINT NOT NULL
);
CREATE INDEX webhook_attempts_by_message ON webhook_attempts (message_id, attempted_at);

-- Fan-out: one message per enabled endpoint of the tenant that wants the event. (`+p.next_attempt_at`:
-- a bare column would let SQLite answer the MAX from `webhook_messages_due`, walking every pending
-- message of the endpoint for the one subject; the `+` keeps it on `webhook_messages_order`.) An endpoint of
-- one application gets that application's events and the tenant's own (domains, suppressions).
-- A message waits behind an earlier pending message about the same subject: it is due no
-- sooner than one that waits for its next attempt (one being sent holds it back through the
-- dispatcher's claim, which takes messages of one subject in order).
CREATE TRIGGER webhook_events_fan_out AFTER INSERT ON webhook_events BEGIN
    INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                  created_at, updated_at)
    SELECT e.id, NEW.id, NEW.event_type, NEW.subject_id, 'pending',
           MAX(NEW.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                          WHERE p.endpoint_id = e.id AND p.subject_id = NEW.subject_id
                                            AND p.status = 'pending' AND p.lease IS NULL), 0)),
           NEW.occurred_at, NEW.occurred_at
    FROM webhook_endpoints e
    WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled'
      AND ((NEW.endpoint_id IS NULL
            AND (e.application_id IS NULL OR NEW.application_id IS NULL OR e.application_id = NEW.application_id)
            AND (e.event_types IS NULL OR e.event_types LIKE '%,' || NEW.event_type || ',%'))
           OR e.id = NEW.endpoint_id)
    ORDER BY e.id;
END;

-- Notifications: every status a webhook reports, on insert (in_app is delivered at once) and on
-- each change.
CREATE TRIGGER webhook_notification_inserted AFTER INSERT ON notifications
WHEN NEW.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
           json_object('transaction_id', NEW.id, 'application_id', NEW.application_id,
                       'application_name', (SELECT a.name FROM applications a WHERE a.id = NEW.application_id),
                       'channel', NEW.channel, 'recipient_masked', NEW.recipient_masked, 'status', NEW.status,
                       'failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                       'retry_count', NEW.retry_count, 'created_at', NEW.created_at, 'category', NEW.category),
           NEW.updated_at;
END;
CREATE TRIGGER webhook_notification_changed AFTER UPDATE OF status ON notifications
WHEN OLD.status <> NEW.status
 AND NEW.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NEW.application_id, 'notification.' || NEW.status, NEW.id,
           json_object('transaction_id', NEW.id, 'application_id', NEW.application_id,
                       'application_name', (SELECT a.name FROM applications a WHERE a.id = NEW.application_id),
                       'channel', NEW.channel, 'recipient_masked', NEW.recipient_masked, 'status', NEW.status,
                       'failure_reason', NEW.failure_reason, 'retryable', NEW.retryable,
                       'retry_count', NEW.retry_count, 'created_at', NEW.created_at, 'category', NEW.category),
           NEW.updated_at;
END;

-- OTP transactions: verified, tombstoned.
CREATE TRIGGER webhook_otp_changed AFTER UPDATE OF status ON otp_transactions
WHEN OLD.status <> NEW.status AND NEW.status IN ('verified', 'tombstoned')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
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

-- Domains: verified, failed (the domain as the API shows it, without its private key).
CREATE TRIGGER webhook_domain_changed AFTER UPDATE OF status ON domains
WHEN OLD.status <> NEW.status AND NEW.status IN ('verified', 'failed')
 AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NULL, 'domain.' || NEW.status, NEW.id,
           json_object('id', NEW.id, 'tenant_id', NEW.tenant_id, 'name', NEW.name, 'dkim_selector', NEW.dkim_selector,
                       'challenge_token', NEW.challenge_token, 'dkim_record', NEW.dkim_record, 'status', NEW.status,
                       'checks', NEW.checks, 'created_at', NEW.created_at, 'last_checked_at', NEW.last_checked_at,
                       'verified_at', NEW.verified_at, 'next_check_at', NEW.next_check_at),
           COALESCE(NEW.last_checked_at, NEW.created_at);
END;

-- Suppressions: created, deleted.
CREATE TRIGGER webhook_suppression_created AFTER INSERT ON suppressions
WHEN EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT NEW.tenant_id, NULL, 'suppression.created', NEW.id,
           json_object('id', NEW.id, 'tenant_id', NEW.tenant_id, 'channel', NEW.channel,
                       'recipient_masked', NEW.recipient_masked, 'category', NEW.category, 'reason', NEW.reason,
                       'transaction_id', NEW.transaction_id, 'created_at', NEW.created_at),
           NEW.created_at;
END;
CREATE TRIGGER webhook_suppression_deleted AFTER DELETE ON suppressions
WHEN EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = OLD.tenant_id AND e.status = 'enabled')
BEGIN
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT OLD.tenant_id, NULL, 'suppression.deleted', OLD.id,
           json_object('id', OLD.id, 'tenant_id', OLD.tenant_id, 'channel', OLD.channel,
                       'recipient_masked', OLD.recipient_masked, 'category', OLD.category, 'reason', OLD.reason,
                       'transaction_id', OLD.transaction_id, 'created_at', OLD.created_at),
           CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
END;
