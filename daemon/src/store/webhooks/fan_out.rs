//! SQLite's fan-out: an event's messages, one per enabled endpoint that wants it, made after the
//! change's transaction has written the event (migration 0017), a group of events at a time.
//!
//! Made by a trigger inside the change's transaction, each message (a row, four index entries and
//! its subject's order) doubled what an in-app dispatch wrote, on SQLite's one writer; made here,
//! a group of events costs one statement. What stays in the change's transaction is the event
//! itself, so nothing committed is lost: events not yet fanned out when the daemon dies are
//! fanned out when it starts again. SQLite has one writer, so event ids are in commit order, and a
//! cursor (`webhook_fan_out.last_event_id`) says how far the fan-out has come.
//!
//! PostgreSQL fans out in the change's statement still (its migration 0017 says why).

use crate::store::{Engine, Store, StoreResult, execute, fetch};

/// One message per enabled endpoint of the event's tenant that wants it (an endpoint of one
/// application gets that application's events and the tenant's own: domains, suppressions), for
/// the events after the cursor up to `$1`, in the order of the events; `webhook.test` events
/// have theirs already. A message waits behind an earlier pending message about the same
/// subject: it is due no sooner than one that waits for its next attempt (one being sent holds it
/// back through the claim, which takes messages of one subject in order). `+p.next_attempt_at`:
/// a bare column would let SQLite answer the `MAX` from `webhook_messages_due`, walking every
/// pending message of the endpoint for the one subject; the `+` keeps it on
/// `webhook_messages_order`.
const FAN_OUT: &str = "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status,
                                                     next_attempt_at, created_at, updated_at)
     SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
            MAX(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                         WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                           AND p.status = 'pending' AND p.lease IS NULL), 0)),
            v.occurred_at, v.occurred_at
     FROM webhook_events v JOIN webhook_endpoints e ON e.tenant_id = v.tenant_id AND e.status = 'enabled'
       AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
       AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%')
     WHERE v.id > (SELECT last_event_id FROM webhook_fan_out WHERE id = 1) AND v.id <= $1
       AND v.endpoint_id IS NULL
     ORDER BY v.id, e.id";

impl Store {
    /// Fans out up to `limit` events, oldest first, in one transaction; how many it passed (the
    /// `webhook.test` events among them included; fewer than `limit`: no other is committed).
    /// PostgreSQL fans out with the change: nothing to do, `0`.
    pub async fn fan_out_webhook_events(&self, limit: i64) -> StoreResult<i64> {
        if self.engine() == Engine::Postgres {
            return Ok(0);
        }
        self.write(move |conn| {
            Box::pin(async move {
                let (passed, last) = fetch!(
                    conn,
                    fetch_one,
                    (i64, Option<i64>),
                    "SELECT COUNT(*), MAX(id) FROM (
                         SELECT id FROM webhook_events
                         WHERE id > (SELECT last_event_id FROM webhook_fan_out WHERE id = 1)
                         ORDER BY id LIMIT $1)",
                    limit
                )?;
                let Some(last) = last else { return Ok(0) };
                execute!(conn, FAN_OUT, last)?;
                execute!(conn, "UPDATE webhook_fan_out SET last_event_id = $1 WHERE id = 1", last)?;
                Ok(passed)
            })
        })
        .await
    }
}
