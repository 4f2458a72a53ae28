-- The index of leased deliveries (for reclaiming expired leases) is keyed on `locked_until`
-- alone: only a leased delivery has one (a pending delivery's is NULL, whether new, retried or
-- reclaimed). With `state = 'leased'` as its predicate, PostgreSQL chose it for the statement
-- that records a group of delivery outcomes (store/notifications/writes.rs, RECORD_ATTEMPTS)
-- and read every leased delivery, and every dead index entry not yet vacuumed, through a
-- bitmap scan, once per group, instead of looking up each delivery by its key.
DROP INDEX deliveries_leased;
CREATE INDEX deliveries_leased ON deliveries (locked_until) WHERE locked_until IS NOT NULL;
