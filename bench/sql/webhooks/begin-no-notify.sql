-- Since migration 0023: each event writer still takes the writers' lock before its ids, but
-- sends no NOTIFY (the fan-out finds events by its one-second poll). PostgreSQL serializes the
-- commits of transactions that notified (a lock held until after the commit's flush), so two
-- writers' commits that both notify no longer overlap: this measures that share of the cost.
CREATE OR REPLACE FUNCTION herald_webhook_events_begin() RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415));
END
$$;
