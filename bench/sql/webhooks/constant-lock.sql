-- The events' statement trigger with its lock on a constant key: no read of the sequence.
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(12345);
    RETURN NULL;
END
$$;
