//! The fan-out: an event's messages, one per enabled endpoint that wants it, made by one
//! statement for a group of events, not by a trigger per event (SQLite's migration 0017,
//! PostgreSQL's 0022). A cursor (`webhook_fan_out.last_event_id`) says how far it has come.
//!
//! Made by a trigger inside the change's statement, each message (a row, four or five index
//! entries and its subject's order) doubled what an in-app dispatch wrote.
//!
//! **SQLite** has one writer, so event ids are in commit order. The writer fans out at the end
//! of each transaction that wrote events, just before its commit ([`fan_out_before_commit`]), so
//! the events and their messages commit together and cost one commit (and, with `synchronous =
//! FULL`, one fsync): a fan-out in a transaction of its own after each batch doubled the commits
//! at a steady load. If that statement fails, the transaction commits without the messages, and
//! the fan-out task ([`Store::fan_out_webhook_events`]) makes them: it also catches up after a
//! restart. Except while the writer is saturated ([`defers`]): then each commit of a batch of
//! dispatches would also rewrite the last pages of the messages' table and of its four indexes
//! for a few dozen messages (23 more WAL pages on 119 for a commit of 28 in-app dispatches, a
//! fifth more written). Those events are left to the fan-out task, which takes them in groups,
//! where the same pages are written once for the group (7 more on 119), once the burst is over.
//! Nor does a short transaction within the burst catch them up: one finds more than
//! [`CATCH_UP_IN_COMMIT`] events after the cursor and leaves them too.
//!
//! **PostgreSQL** fans out in the task only, one daemon at a time. Event ids are not in commit
//! order there: the task goes only as far as no event writer in flight can still add to
//! (`herald_webhook_events_committed`: the last id issued, or below it the lowest key of the
//! locks writers hold while in flight, each keyed on the last id issued before theirs; no writer
//! waits for it, nor it for them), and locks the cursor's row while it fans out.
//! Made in the change's statement by a trigger, a message cost a saturated in-app dispatch
//! 15–25 % with one endpoint subscribed (docs/PERFORMANCE.md): the task makes it in a
//! transaction of its own, whose commit does not wait for the WAL to be flushed (lost in a
//! crash, it is made again from the events: the cursor did not move either), and not while the
//! writer is saturated. A writer's statement of notifications writes its events as batches
//! (migration 0023): the task first makes rows of those whose tenant has an endpoint it fans
//! out to, and passes the others, which a paused endpoint's catch-up or a disabled one's
//! settling makes rows of when it reads them (`pause.rs`).

use crate::store::{Engine, Store, StoreResult, execute, fetch, scalar};

/// Which endpoint `e` wants event `v` (a join condition): its tenant's, created by the time it
/// occurred, of the endpoint's application or of none (the tenant's own: domains,
/// suppressions), of a type it is subscribed to. The fan-out's rule, and the catch-up's
/// (`pause.rs`), which makes a paused endpoint the messages the fan-out did not.
macro_rules! endpoint_wants_event {
    () => {
        "e.tenant_id = v.tenant_id AND e.created_at <= v.occurred_at
       AND (e.application_id IS NULL OR v.application_id IS NULL OR e.application_id = v.application_id)
       AND (e.event_types IS NULL OR e.event_types LIKE '%,' || v.event_type || ',%')"
    };
}
pub(super) use endpoint_wants_event;

/// One message per enabled endpoint of the event's tenant that wants it, unless paused (its
/// events are owed: `pause.rs`; an endpoint of one
/// application gets that application's events and the tenant's own: domains, suppressions) and
/// existed when it occurred, for the events after the cursor up to `$1`, in the order of the
/// events; `webhook.test` events have theirs already. (Fanned out later than their commit, by the
/// task, a saturated writer's events would otherwise reach an endpoint added meanwhile: in the
/// bench, an endpoint added just after a fill of 100,000 events got 10,554 deliveries for its
/// own 10,000.) A message waits behind an earlier pending message about the same
/// subject: it is due no sooner than one that waits for its next attempt (one being sent holds it
/// back through the claim, which takes messages of one subject in order). `+p.next_attempt_at`:
/// a bare column would let SQLite answer the `MAX` from `webhook_messages_due`, walking every
/// pending message of the endpoint for the one subject; the `+` keeps it on
/// `webhook_messages_order`.
const FAN_OUT: &str = concat!(
    "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status,
                                   next_attempt_at, created_at, updated_at)
     SELECT e.id, v.id, v.event_type, v.subject_id, 'pending',
            MAX(v.occurred_at, COALESCE((SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                                         WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                                           AND p.status = 'pending' AND p.lease IS NULL), 0)),
            v.occurred_at, v.occurred_at
     FROM webhook_events v JOIN webhook_endpoints e ON e.status = 'enabled' AND e.paused_after IS NULL
       AND ",
    endpoint_wants_event!(),
    "
     WHERE v.id > (SELECT last_event_id FROM webhook_fan_out WHERE id = 1) AND v.id <= $1
       AND v.endpoint_id IS NULL
     ORDER BY v.id, e.id"
);

/// Moves the cursor past the events just fanned out.
const ADVANCE: &str = "UPDATE webhook_fan_out SET last_event_id = $1 WHERE id = 1";

/// A transaction of this many works or more leaves its events to the fan-out task: the writer's
/// queue held that many when its batch began (at a steady load, batches are of one or two).
const DEFER_FROM: usize = 8;

/// Whether a transaction of `works` leaves its events' fan-out to the fan-out task.
pub(crate) fn defers(works: usize) -> bool {
    works >= DEFER_FROM
}

/// The most events a transaction fans out before its commit: those after the cursor, its own and
/// any that saturated transactions before it left ([`defers`]). More than that, and the writer
/// is in a burst that left its events to the fan-out task: a transaction of a few works within
/// it (the queue runs short between two large batches) would otherwise make the messages of
/// every event the burst had left so far, and the deliveries of a burst's events shared the
/// writer and the two cores with its dispatches (an in-app dispatch lost 11–15 % to them on
/// SQLite with one endpoint delivering, docs/PERFORMANCE.md); the task makes them once it is over.
/// After a short stall at a steady load (a few dozen events in one large batch), the next
/// transaction still fans them out at once.
const CATCH_UP_IN_COMMIT: i64 = 64;

/// Fans out the events after the cursor (those of the transaction open on `conn`, and any a
/// failed or deferred fan-out left), in a savepoint of that transaction, unless they are more
/// than [`CATCH_UP_IN_COMMIT`]: whether it did (then the fan-out task need not be woken). On
/// failure the savepoint is undone and the transaction is as it was: the fan-out task makes the
/// messages.
pub(crate) fn fan_out_before_commit(conn: &rusqlite::Connection) -> bool {
    use crate::store::local;
    let waiting: StoreResult<(i64, Option<i64>)> = local::fetch_one(
        conn,
        "SELECT (SELECT last_event_id FROM webhook_fan_out WHERE id = 1), MAX(id) FROM webhook_events",
        &[],
    );
    // A read needs no savepoint: only a fan-out that runs is undone on failure.
    let last = match waiting {
        Ok((_, None)) => return true,
        Ok((cursor, Some(last))) if last - cursor > CATCH_UP_IN_COMMIT => return false,
        Ok((_, Some(last))) => last,
        Err(e) => return left_to_the_task(&e),
    };
    let fanned = local::execute_batch(conn, "SAVEPOINT fan_out")
        .and_then(|()| local::execute(conn, FAN_OUT, &[&last]))
        .and_then(|_| local::execute(conn, ADVANCE, &[&last]))
        .and_then(|_| local::execute_batch(conn, "RELEASE fan_out"));
    match fanned {
        Ok(()) => true,
        Err(e) => {
            let _ = local::execute_batch(conn, "ROLLBACK TO fan_out; RELEASE fan_out");
            left_to_the_task(&e)
        }
    }
}

/// Logs a fan-out that failed in the change's transaction: the fan-out task makes its messages.
fn left_to_the_task(error: &crate::store::StoreError) -> bool {
    tracing::warn!(error = %error, "cannot fan webhook events out in their transaction; the fan-out task will");
    false
}

impl Store {
    /// Fans out up to `limit` events, oldest first, in one transaction; how many it passed (the
    /// `webhook.test` events among them included; fewer than `limit`: no other is committed, or
    /// on PostgreSQL being written), or `None` if another transaction held PostgreSQL's cursor
    /// (another daemon's fan-out, which may have begun before the latest events committed; a
    /// pause, a catch-up, a settling): call again in a moment.
    pub async fn fan_out_webhook_events(&self, limit: i64) -> StoreResult<Option<i64>> {
        if self.engine() == Engine::Postgres {
            return self.fan_out_on_postgres(limit).await;
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
                let Some(last) = last else { return Ok(Some(0)) };
                execute!(conn, FAN_OUT, last)?;
                execute!(conn, ADVANCE, last)?;
                Ok(Some(passed))
            })
        })
        .await
    }

    /// PostgreSQL: the last event id the sequence has issued (migration 0022's
    /// `herald_webhook_events_issued`): once the fan-out's cursor has passed it, every
    /// transaction that held one of those ids has ended.
    pub(super) async fn events_issued(&self) -> StoreResult<i64> {
        let mut conn = self.read().await?;
        scalar!(&mut conn.conn(), fetch_one, i64, "SELECT herald_webhook_events_issued()")
    }

    /// PostgreSQL's fan-out is one statement, its own transaction: migration 0023's
    /// `herald_webhook_fan_out_events` says what it does.
    async fn fan_out_on_postgres(&self, limit: i64) -> StoreResult<Option<i64>> {
        let mut conn = self.read().await?;
        let (passed, made) = fetch!(
            &mut conn.conn(),
            fetch_one,
            (Option<i64>, i64),
            "SELECT passed, made FROM herald_webhook_fan_out_events($1)",
            limit
        )?;
        if made > 0 {
            self.wake_webhooks();
        }
        Ok(passed)
    }
}
