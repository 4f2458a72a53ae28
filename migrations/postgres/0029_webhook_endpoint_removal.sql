-- An endpoint's removal reads only its own messages. The trigger of migration 0016 deleted them
-- with a join against the transition table, which the planner made a hash join over the whole of
-- `webhook_messages` (it estimates an endpoint's share from the statistics: a large one while
-- there are few endpoints, and still large once its messages are gone, until the next
-- `ANALYZE`), and the attempts of so many messages by hash over the whole of `webhook_attempts`:
-- removing an endpoint with 100,000 messages in a table of 400,000 read both tables whole
-- (536 ms), in the writer's transaction. The daemon now deletes
-- an endpoint's messages in groups before the endpoint (`store/webhooks/mod.rs`,
-- `delete_webhook_endpoint`); the trigger takes what is left (what the fan-out made meanwhile,
-- or all of them when a tenant's removal takes its endpoints), a group at a time, read from the
-- endpoint's index in its order, which no statistics make a walk of the table. (The endpoint as a
-- range, `>= x AND <= x`: compared with `=`, the order by endpoint and id is the order by id, and
-- the generic plan of the function's statement walked the primary key, filtering on the
-- endpoint, past every other endpoint's messages: 47 ms a group there. The group's ids as an
-- array, probed one by one in the primary key: as `id IN (…)`, the planner hashed the group and
-- read the table whole to find them. Test:
-- `removing_an_endpoint_reads_only_its_messages`.)
--
-- And a message's deletion reads only its attempts: `herald_webhook_messages_deleted` joined the
-- transition table to `webhook_attempts`, which the planner, knowing the group's size, made a
-- hash join over the whole table for a group of 1,000 in a table of 66,500 (the test: seven
-- groups read 444,500 attempts). As an array of ids, the attempts are found by their index, one
-- probe each, whatever the sizes (retention's chunks go through it too).

CREATE OR REPLACE FUNCTION herald_webhook_endpoints_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    endpoint TEXT;
    n BIGINT;
BEGIN
    FOR endpoint IN SELECT r.id FROM removed r LOOP
        LOOP
            DELETE FROM webhook_messages WHERE id = ANY (ARRAY(
                SELECT m.id FROM webhook_messages m WHERE m.endpoint_id >= endpoint AND m.endpoint_id <= endpoint
                ORDER BY m.endpoint_id, m.id LIMIT 1000));
            GET DIAGNOSTICS n = ROW_COUNT;
            EXIT WHEN n < 1000;
        END LOOP;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION herald_webhook_messages_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM webhook_attempts a WHERE a.message_id = ANY (ARRAY(SELECT r.id FROM removed r));
    RETURN NULL;
END
$$;
