-- Since migration 0023: what each event writer does before its events get ids, undone: no
-- writers' lock (the fan-out may then pass a writer's events still in flight) and no NOTIFY
-- (the fan-out finds events by its one-second poll). The lock's and the wake-up's share of the
-- dispatch's outbox cost, batches and all.
CREATE OR REPLACE FUNCTION herald_webhook_events_begin() RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
END
$$;
