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
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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

-- Fan-out: one message per enabled endpoint of the tenant that wants the event. An endpoint of
-- one application gets that application's events and the tenant's own (domains, suppressions).
-- A message waits behind an earlier pending message about the same subject: it is due no
-- sooner than one that waits for its next attempt (one being sent holds it back through the
-- dispatcher's claim, which takes messages of one subject in order). Every daemon hears
-- `herald_webhooks` at commit and claims what is due.
CREATE FUNCTION herald_webhook_fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                  created_at, updated_at)
    SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
           GREATEST(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                             WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                               AND p.status = 'pending' AND p.lease IS NULL), 0)),
           v.occurred_at, v.occurred_at
    FROM new_events v JOIN webhook_endpoints e ON e.tenant_id = v.tenant_id AND e.status = 'enabled'
      AND ((v.endpoint_id IS NULL
            AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
            AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%'))
           OR e.id = v.endpoint_id)
    ORDER BY v.id, e.id;
    IF FOUND THEN
        PERFORM pg_notify('herald_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_events_fan_out AFTER INSERT ON webhook_events
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_fan_out();

-- The snapshot of a notification or OTP transaction: its activity item's fields.
CREATE FUNCTION herald_webhook_item(
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, BOOLEAN, BIGINT, BIGINT, TEXT
) RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('transaction_id', $1, 'application_id', $2,
        'application_name', (SELECT a.name FROM applications a WHERE a.id = $2),
        'channel', $3, 'recipient_masked', $4, 'status', $5, 'failure_reason', $6, 'retryable', $7,
        'retry_count', $8, 'created_at', $9, 'category', $10)::text
$$;

-- Notifications: every status a webhook reports, on insert (in_app is delivered at once) and on
-- each change. Once per statement, over its transition tables, so a group's write adds one
-- statement whatever its size.
CREATE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_item(c.id, c.application_id, c.channel, c.recipient_masked, c.status, c.failure_reason,
                               c.retryable, c.retry_count, c.created_at, c.category),
           c.updated_at
    FROM changed c
    WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
    ORDER BY c.id;
    RETURN NULL;
END
$$;
CREATE FUNCTION herald_webhook_notifications_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_item(c.id, c.application_id, c.channel, c.recipient_masked, c.status, c.failure_reason,
                               c.retryable, c.retry_count, c.created_at, c.category),
           c.updated_at
    FROM before_rows o JOIN after_rows c ON c.id = o.id
    WHERE o.status IS DISTINCT FROM c.status
      AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled')
    ORDER BY c.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_notifications_inserted AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_notifications_inserted();
CREATE TRIGGER webhook_notifications_updated AFTER UPDATE ON notifications
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_webhook_notifications_updated();

-- OTP transactions: verified, tombstoned.
CREATE FUNCTION herald_webhook_otp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled') THEN
        INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
        VALUES (NEW.tenant_id, NEW.application_id, 'otp.' || NEW.status, NEW.id,
                herald_webhook_item(NEW.id, NEW.application_id, NEW.channel, NEW.recipient_masked, NEW.status,
                                    NEW.failure_reason, FALSE, 0, NEW.created_at, NULL),
                NEW.updated_at);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_otp_changed AFTER UPDATE OF status ON otp_transactions FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('verified', 'tombstoned'))
    EXECUTE FUNCTION herald_webhook_otp();

-- Domains: verified, failed (the domain as the API shows it, without its private key).
CREATE FUNCTION herald_webhook_domain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = NEW.tenant_id AND e.status = 'enabled') THEN
        INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
        VALUES (NEW.tenant_id, NULL, 'domain.' || NEW.status, NEW.id,
                jsonb_build_object('id', NEW.id, 'tenant_id', NEW.tenant_id, 'name', NEW.name,
                    'dkim_selector', NEW.dkim_selector, 'challenge_token', NEW.challenge_token,
                    'dkim_record', NEW.dkim_record, 'status', NEW.status, 'checks', NEW.checks,
                    'created_at', NEW.created_at, 'last_checked_at', NEW.last_checked_at,
                    'verified_at', NEW.verified_at, 'next_check_at', NEW.next_check_at)::text,
                COALESCE(NEW.last_checked_at, NEW.created_at));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_domain_changed AFTER UPDATE OF status ON domains FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('verified', 'failed'))
    EXECUTE FUNCTION herald_webhook_domain();

-- Suppressions: created, deleted.
CREATE FUNCTION herald_webhook_suppression() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s suppressions;
BEGIN
    IF TG_OP = 'DELETE' THEN s := OLD; ELSE s := NEW; END IF;
    IF EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = s.tenant_id AND e.status = 'enabled') THEN
        INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
        VALUES (s.tenant_id, NULL, TG_ARGV[0], s.id,
                jsonb_build_object('id', s.id, 'tenant_id', s.tenant_id, 'channel', s.channel,
                    'recipient_masked', s.recipient_masked, 'category', s.category, 'reason', s.reason,
                    'transaction_id', s.transaction_id, 'created_at', s.created_at)::text,
                CASE TG_OP WHEN 'DELETE' THEN (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT
                           ELSE s.created_at END);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_suppression_created AFTER INSERT ON suppressions FOR EACH ROW
    EXECUTE FUNCTION herald_webhook_suppression('suppression.created');
CREATE TRIGGER webhook_suppression_deleted AFTER DELETE ON suppressions FOR EACH ROW
    EXECUTE FUNCTION herald_webhook_suppression('suppression.deleted');
