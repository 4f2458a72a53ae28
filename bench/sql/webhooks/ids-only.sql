-- The notifications' trigger takes the writers' lock, sends the NOTIFY and takes each event's id,
-- and writes nothing: what the trigger costs short of the batch itself (an estimate of a design
-- in which the notification row carries its event's id). Breaks the outbox; a measure only.
CREATE OR REPLACE FUNCTION herald_webhook_notifications_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE status = 'enabled') THEN
        RETURN NULL;
    END IF;
    PERFORM herald_webhook_events_begin();
    PERFORM nextval('webhook_events_id_seq')
    FROM changed c
    WHERE c.status IN ('sent', 'delivered', 'read', 'undelivered', 'bounced', 'complained', 'failed', 'suppressed')
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = c.tenant_id AND e.status = 'enabled');
    RETURN NULL;
END
$$;
