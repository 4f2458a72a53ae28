-- The fan-out's probe for the pending messages a new message waits behind asks only for those
-- due after its event occurred (the others cannot make it later than `v.occurred_at`, so the
-- result is the same). Asked for all of them, the probe read every pending message of the
-- endpoint whenever the planner took `webhook_messages_due` for it, keyed on the endpoint
-- alone. It did in a burst that followed statistics gathered while nothing was pending (an
-- idle outbox): those count no row in either pending index, an index scan is then costed by
-- the index's height, and the burst's messages had made `webhook_messages_order` (keyed on
-- the subject too) a level deeper. In the bench, a group of 1,000 events to four endpoints
-- took 1.2-2.6 s instead of 0.15 in the first seconds of every throughput step (`auto_explain`:
-- 4,000 probes of 1,000 entries each), until the statistics task gathered them again
-- (docs/PERFORMANCE.md, thirtieth session; test:
-- `a_bursts_fan_out_reads_only_the_messages_it_waits_behind`, 2.4 million entries read for 201
-- messages before). Bounded by the event's time, that index reads only the endpoint's messages
-- due later (a retry, a lease held, those waiting behind them), and `webhook_messages_order`
-- the subject's: a few entries either way. (The catch-up's probe, `store/webhooks/pause.rs`,
-- is bounded alike.)

CREATE OR REPLACE FUNCTION herald_webhook_fan_out_events(group_size BIGINT, OUT passed BIGINT, OUT made BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    committed BIGINT;
    after_id BIGINT;
    last_id BIGINT;
    chosen BIGINT[];
    left_at BIGINT;
BEGIN
    made := 0;
    committed := herald_webhook_events_committed();
    PERFORM set_config('lock_timeout', '500ms', true);
    SELECT f.last_event_id INTO after_id FROM webhook_fan_out f WHERE f.id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    passed := 0;
    IF after_id >= committed THEN
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(x.last_id) INTO chosen
    FROM (SELECT b.last_id FROM webhook_event_batches b
          WHERE b.last_id > after_id AND b.first_id <= committed
            AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = b.tenant_id AND w.status = 'enabled'
                          AND w.paused_after IS NULL)
          ORDER BY b.last_id LIMIT group_size) x;
    IF chosen IS NOT NULL THEN
        PERFORM herald_webhook_expand(chosen);
    END IF;
    -- A full group may have left some (in order of their last ids, so the primary key is read
    -- from the cursor on): none of their events is passed.
    IF cardinality(chosen) >= group_size THEN
        SELECT MIN(b.first_id) INTO left_at FROM webhook_event_batches b
        WHERE b.last_id > after_id AND b.first_id <= committed
          AND EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = b.tenant_id AND w.status = 'enabled'
                        AND w.paused_after IS NULL);
        IF left_at IS NOT NULL THEN
            committed := left_at - 1;
            IF after_id >= committed THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    SELECT COUNT(*), MAX(g.id) INTO passed, last_id
    FROM (SELECT v.id FROM webhook_events v WHERE v.id > after_id AND v.id <= committed ORDER BY v.id LIMIT group_size) g;
    -- A group that is not full ends where the fan-out may go (ids of transactions rolled back,
    -- and events left as batches, too).
    IF passed < group_size THEN
        last_id := committed;
    END IF;
    INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                  created_at, updated_at)
    SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
           GREATEST(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                             WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                               AND p.status = 'pending' AND p.lease IS NULL
                                               AND p.next_attempt_at > v.occurred_at), 0)),
           v.occurred_at, v.occurred_at
    FROM webhook_events v JOIN webhook_endpoints e ON e.tenant_id = v.tenant_id AND e.status = 'enabled'
      AND e.paused_after IS NULL AND e.created_at <= v.occurred_at
      AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
      AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%')
    WHERE v.id > after_id AND v.id <= last_id AND v.endpoint_id IS NULL
    ORDER BY v.id, e.id;
    GET DIAGNOSTICS made = ROW_COUNT;
    UPDATE webhook_fan_out SET last_event_id = last_id WHERE id = 1;
    IF made > 0 THEN
        PERFORM pg_notify('herald_webhooks', '');
    END IF;
END
$$;
