-- The events' statement trigger without its NOTIFY (migration 0022's, less one line).
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared((herald_webhook_events_tag() << 44)
                                         | (herald_webhook_events_issued() & 17592186044415));
    RETURN NULL;
END
$$;
