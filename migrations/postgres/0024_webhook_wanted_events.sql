-- An event is written only when an enabled endpoint of its tenant wants it: one subscribed to its
-- type (or to every type) and to its application (or to every application; an event with no
-- application, a domain's or a suppression's, is every application's), as the fan-out chooses
-- (`herald_webhook_fan_out_events`). Before, every event of a tenant with any enabled endpoint was
-- written and the fan-out passed those no endpoint wanted: an endpoint subscribed to
-- `otp.verified` alone cost each writer statement of in-app dispatches the writers' lock, a
-- `NOTIFY` and a batch (about 4 % of the server's work per dispatch; docs/PERFORMANCE.md). Now
-- such a statement takes none of them. An endpoint that is paused (down) still wants its events:
-- they are owed to it. An endpoint added, or given more types, gets the events that happen after
-- (docs/WEBHOOKS.md). The functions of 0015, 0019 and 0023 otherwise unchanged.

-- Whether an enabled endpoint of `tenant` wants an event of `event_type` about `application`: for
-- the triggers of one row (an OTP's, a domain's, a suppression's). The notifications' statement
-- triggers state the same test inline (a function with a subquery is not inlined, and they test
-- each of a statement's rows).
CREATE FUNCTION herald_webhook_wanted(tenant TEXT, application TEXT, event_type TEXT)
RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM webhook_endpoints e
                   WHERE e.tenant_id = tenant AND e.status = 'enabled'
                     AND (e.event_types IS NULL OR e.event_types LIKE '%,' || event_type || ',%')
                     AND (e.application_id IS NULL OR application IS NULL OR e.application_id = application))
$$;

-- Notifications inserted (0023's): nothing at all, not the writers' lock, when no row of the
-- statement is wanted.
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wide BIGINT[];
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM changed c
        WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
          AND EXISTS (SELECT 1 FROM webhook_endpoints e
                      WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                        AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                        AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id)))
    THEN
        RETURN NULL;
    END IF;
    -- Before any id is taken (as migration 0022's statement trigger did for the rows).
    PERFORM herald_webhook_events_begin();
    WITH written AS (
        INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                           subject_ids, datas, occurred_ats)
        SELECT max(e.event_id), min(e.event_id), e.tenant_id, e.application_id, e.event_type,
               array_agg(e.event_id ORDER BY e.event_id), array_agg(e.id ORDER BY e.event_id),
               array_agg(e.data ORDER BY e.event_id), array_agg(e.updated_at ORDER BY e.event_id)
        FROM (SELECT c.id, c.tenant_id, c.application_id, c.updated_at, 'notification.' || c.status AS event_type,
                     herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count) AS data,
                     nextval('webhook_events_id_seq') AS event_id
              FROM changed c
              WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
                AND EXISTS (SELECT 1 FROM webhook_endpoints e
                            WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                              AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                              AND (e.application_id IS NULL OR c.application_id IS NULL
                                   OR e.application_id = c.application_id))
              ORDER BY c.id) e
        GROUP BY e.tenant_id, e.application_id, e.event_type
        RETURNING last_id, first_id)
    SELECT array_agg(last_id) INTO wide FROM written WHERE last_id - first_id > herald_webhook_batch_span();
    -- A batch wider than a reader looks back (writers' ids interleaved with its own for that
    -- long): rows at once.
    IF wide IS NOT NULL THEN
        PERFORM herald_webhook_expand(wide);
    END IF;
    RETURN NULL;
END
$$;

-- Notifications changed (0019's): nothing at all when no change of the statement is wanted (an
-- insert of no rows into `webhook_events` would still take the writers' lock and wake the
-- fan-out, by that table's statement trigger).
CREATE OR REPLACE FUNCTION herald_webhook_notifications_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- No endpoint anywhere: nothing to join the statement's rows with.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM before_rows o JOIN after_rows c ON c.id = o.id
        WHERE o.status IS DISTINCT FROM c.status
          AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
          AND EXISTS (SELECT 1 FROM webhook_endpoints e
                      WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                        AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                        AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id)))
    THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
    SELECT c.tenant_id, c.application_id, 'notification.' || c.status, c.id,
           herald_webhook_changes(c.failure_reason, c.retryable, c.retry_count), c.updated_at
    FROM before_rows o JOIN after_rows c ON c.id = o.id
    WHERE o.status IS DISTINCT FROM c.status
      AND c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e
                  WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled'
                    AND (e.event_types IS NULL OR e.event_types LIKE '%,notification.' || c.status || ',%')
                    AND (e.application_id IS NULL OR c.application_id IS NULL OR e.application_id = c.application_id))
    ORDER BY c.id;
    RETURN NULL;
END
$$;

-- OTP transactions (0015's).
CREATE OR REPLACE FUNCTION herald_webhook_otp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF herald_webhook_wanted(NEW.tenant_id, NEW.application_id, 'otp.' || NEW.status) THEN
        INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
        VALUES (NEW.tenant_id, NEW.application_id, 'otp.' || NEW.status, NEW.id,
                herald_webhook_item(NEW.id, NEW.application_id, NEW.channel, NEW.recipient_masked, NEW.status,
                                    NEW.failure_reason, FALSE, 0, NEW.created_at, NULL),
                NEW.updated_at);
    END IF;
    RETURN NULL;
END
$$;

-- Domains (0015's).
CREATE OR REPLACE FUNCTION herald_webhook_domain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF herald_webhook_wanted(NEW.tenant_id, NULL, 'domain.' || NEW.status) THEN
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

-- Suppressions (0015's).
CREATE OR REPLACE FUNCTION herald_webhook_suppression() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s suppressions;
BEGIN
    IF TG_OP = 'DELETE' THEN s := OLD; ELSE s := NEW; END IF;
    IF herald_webhook_wanted(s.tenant_id, NULL, TG_ARGV[0]) THEN
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
