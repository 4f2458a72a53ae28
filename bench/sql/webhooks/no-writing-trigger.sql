-- No statement trigger on the events at all. Unsafe: the fan-out no longer sees writers in
-- flight and may pass their events.
DROP TRIGGER webhook_events_writing ON webhook_events;
