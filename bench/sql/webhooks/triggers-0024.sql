-- Since 0025: migration 0024's notification triggers, which 0025 replaced (the same work in more
-- instructions): the build before, for an A/B of the dispatch table in one build
-- (docs/PERFORMANCE.md, twenty-seventh session).
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
