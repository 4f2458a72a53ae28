-- The writer's statement that inserts notifications (`INSERT_NOTIFICATIONS`, daemon/src/store/
-- notifications/writes.rs) writes its in-app notifications' events itself, as migration 0023's
-- batches, by calling `herald_webhook_notification_events` below with the rows of the tenants
-- that have an endpoint enabled (only then: no call at all otherwise). It marks its transaction
-- (`herald.notification_events`) before its first notification is inserted, and the statement
-- trigger of 0023 no longer fires for it. What an endpoint subscribed cost that statement was
-- mostly the trigger's own machinery (its call, its `IF NOT EXISTS`, the writers' lock through
-- a second function, a statement over the transition table with a subquery per row): a writer
-- statement of 15 in-app dispatches, the server's CPU over 8,000 of them, two clients, four
-- passes in turn (docs/PERFORMANCE.md, twenty-fourth session): with no endpoint as before (no
-- call), with one +70 µs against the trigger's +101.
--
-- Any other insert (none in the daemon; tests, an operator's SQL) still gets its events from the
-- trigger. The mark lasts until the transaction ends: the writer's transactions insert
-- notifications only with that statement.
DROP TRIGGER webhook_notifications_inserted ON notifications;
CREATE TRIGGER webhook_notifications_inserted AFTER INSERT ON notifications
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT
    WHEN (current_setting('herald.notification_events', true) IS DISTINCT FROM 'written')
    EXECUTE FUNCTION herald_webhook_notifications_inserted();

-- The `notification.delivered` events of in-app notifications just inserted (`ids`, each with
-- its tenant, application and time), for tenants with an endpoint enabled: the writers' lock
-- and the fan-out's wake-up first (as `herald_webhook_events_begin`, inline: a call fewer), then
-- the ids, in a batch per tenant and application. No batch spans a multiple of
-- `herald_webhook_batch_span()`, so none is wider than a reader looks back (0023's trigger wrote
-- a wider one as rows instead). A new notification's changes are `{}` (0019). Returns how many.
CREATE FUNCTION herald_webhook_notification_events(ids TEXT[], tenants TEXT[], applications TEXT[],
                                                   occurred BIGINT[])
RETURNS BIGINT LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415)),
            pg_notify('herald_webhook_events', '');
    INSERT INTO webhook_event_batches (last_id, first_id, tenant_id, application_id, event_type, event_ids,
                                       subject_ids, datas, occurred_ats)
    SELECT max(e.event_id), min(e.event_id), e.tenant_id, e.application_id, 'notification.delivered',
           array_agg(e.event_id ORDER BY e.event_id), array_agg(e.id ORDER BY e.event_id),
           array_agg(herald_webhook_changes(NULL, FALSE, 0) ORDER BY e.event_id),
           array_agg(e.occurred_at ORDER BY e.event_id)
    FROM (SELECT u.id, u.tenant_id, u.application_id, u.occurred_at, nextval('webhook_events_id_seq') AS event_id
          FROM unnest(ids, tenants, applications, occurred) AS u(id, tenant_id, application_id, occurred_at)) e
    GROUP BY e.tenant_id, e.application_id, e.event_id / GREATEST(herald_webhook_batch_span(), 1);
    RETURN cardinality(ids);
END
$$;
