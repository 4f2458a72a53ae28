-- The events' statement trigger runs and does nothing: no lock, no NOTIFY.
CREATE OR REPLACE FUNCTION herald_webhook_events_writing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
