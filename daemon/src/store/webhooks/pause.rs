//! A dead endpoint's events are owed, not queued (migrations: PostgreSQL 0021, SQLite 0020).
//!
//! Once the dispatcher's breaker trips on an endpoint it pauses it ([`Store::pause_webhook_endpoint`]):
//! `paused_after` holds the last event fanned out to it, and the fan-out makes it no message for
//! a later event. Those events are owed. [`Store::catch_up_webhook_endpoint`] makes the messages
//! of the oldest of them, in event order: one at a time to probe the endpoint while it fails,
//! then in groups once it answers, and the last group resumes it. A disabled endpoint's owed
//! events become failed messages, as its pending ones do ([`mark_unsettled`],
//! [`Store::settle_disabled_webhook_endpoints`]), so `recover` finds them.
//!
//! A message for each event cost a row and five index entries in the change's own transaction
//! (PostgreSQL) or the writer's (SQLite): with one dead endpoint subscribed, an in-app dispatch
//! lost 15–20 % on PostgreSQL, and a healthy endpoint's p99 rose by a median of 32 % while a
//! dead one took its messages (docs/PERFORMANCE.md).
//!
//! Where the fan-out has come is its cursor (`fan_out.rs`), read in the transaction that pauses
//! or catches up: every later event is fanned out later and sees the endpoint as that
//! transaction leaves it. On SQLite the one writer keeps the fan-out away meanwhile; on
//! PostgreSQL the cursor's row is locked (as the fan-out locks it), which no event writer waits
//! for.

use std::sync::LazyLock;

use herald_common::ids::WebhookEndpointId;

use super::{FanOutLock as Lock, fail_pending_messages, fan_out::endpoint_wants_event, notify_webhooks};
use crate::store::{Conn, Engine, Store, StoreResult, execute, fetch, scalar};

/// How long a pause, a catch-up or a settling that waits for the cursor ([`Lock::Wait`]) waits
/// on PostgreSQL for the fan-out that holds it: it gives up (and tries again later) rather than
/// join a deadlock.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '500ms'";
/// How long the settling of disabled endpoints waits for a row lock once it holds the cursor:
/// it gives up, and tries again a second later.
const ROW_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '100ms'";

/// Where the fan-out has come: every event after it is fanned out later and sees the endpoints
/// as the transaction open on `conn` leaves them (PostgreSQL: the cursor's row is locked until
/// that transaction ends). `None`: a fan-out held it ([`Lock::Try`]).
async fn fanned_out(conn: &mut Conn<'_>, lock: Lock) -> StoreResult<Option<i64>> {
    if conn.engine() == Engine::Sqlite {
        return scalar!(conn, fetch_one, i64, "SELECT last_event_id FROM webhook_fan_out WHERE id = 1")
            .map(Some);
    }
    if lock == Lock::Try {
        return scalar!(
            conn,
            fetch_optional,
            i64,
            "SELECT last_event_id FROM webhook_fan_out WHERE id = 1 FOR UPDATE SKIP LOCKED"
        );
    }
    execute!(conn, LOCK_TIMEOUT)?;
    scalar!(conn, fetch_one, i64, "SELECT last_event_id FROM webhook_fan_out WHERE id = 1 FOR UPDATE")
        .map(Some)
}

/// PostgreSQL: turns into rows the batches of events (migration 0023) that hold an event of
/// `endpoint`'s tenant after `after` up to `last`, oldest first, until at least `want` events
/// are rows; returns how far every such event is a row (`last`, or short of the first batch
/// left: the caller reads no further, and comes back for the rest). SQLite writes every event
/// as a row: `last`.
async fn owed_as_rows(
    conn: &mut Conn<'_>,
    endpoint: &WebhookEndpointId,
    after: i64,
    last: i64,
    want: i64,
) -> StoreResult<i64> {
    if conn.engine() == Engine::Sqlite {
        return Ok(last);
    }
    scalar!(
        conn,
        fetch_one,
        i64,
        "SELECT herald_webhook_expand_owed($1, $2, $3, $4)",
        endpoint,
        after,
        last,
        want
    )
}

/// The messages of the endpoint `$1`'s events after `$2` up to `$3` that it wants (the fan-out's
/// rule), at most `$4`, oldest first, written at `$5`, pending or failed; returns their events.
/// A pending one waits behind an earlier pending message about the same subject, as the
/// fan-out's do.
fn owed_messages_sql(engine: Engine, pending: bool) -> String {
    // PostgreSQL: only the messages due after the event occurred, as the fan-out's probe
    // (migration 0028): on statistics that count no pending message, the planner may take
    // `webhook_messages_due` for the probe, which then reads only those, not every pending
    // message of the endpoint.
    let (greatest, later) = if engine == Engine::Postgres {
        ("GREATEST", "AND p.next_attempt_at > v.occurred_at")
    } else {
        ("MAX", "")
    };
    let (status, due) = if pending {
        (
            "pending",
            format!(
                "{greatest}(v.occurred_at, COALESCE((
                    SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                    WHERE p.endpoint_id = e.id AND p.subject_id = v.subject_id
                      AND p.status = 'pending' AND p.lease IS NULL {later}), 0))"
            ),
        )
    } else {
        ("failed", "NULL".to_owned())
    };
    // The settling's failed messages are for the events that occurred by the time the endpoint
    // was disabled (its `updated_at`, and a second more for the clocks of other daemons whose
    // transactions were in flight): the later ones, which occurred while it was disabled, get
    // none, as the fan-out gives them none.
    let occurred = if pending { "" } else { "AND v.occurred_at <= e.updated_at + 1000" };
    // Only the events that have no message yet: a disabled endpoint's owed events are failed
    // twice on PostgreSQL (at once, then by [`Store::settle_disabled_webhook_endpoints`]), and
    // one enabled again before it was settled is caught up from its mark, past events that got
    // a message (failed, or pending from a transaction in flight as it was disabled).
    let unmade =
        "AND NOT EXISTS (SELECT 1 FROM webhook_messages m WHERE m.event_id = v.id AND m.endpoint_id = e.id)";
    let wants = endpoint_wants_event!();
    format!(
        "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status,
                                       next_attempt_at, created_at, updated_at)
         SELECT e.id, v.id, v.event_type, v.subject_id, '{status}', {due}, v.occurred_at, $5
         FROM webhook_events v JOIN webhook_endpoints e ON e.id = $1 AND {wants}
         WHERE v.id > $2 AND v.id <= $3 AND v.endpoint_id IS NULL {unmade} {occurred}
         ORDER BY v.id LIMIT $4
         RETURNING event_id"
    )
}

/// [`owed_messages_sql`] made once: pending and failed, for PostgreSQL and for SQLite.
static OWED: LazyLock<[String; 4]> = LazyLock::new(|| {
    [(Engine::Postgres, true), (Engine::Postgres, false), (Engine::Sqlite, true), (Engine::Sqlite, false)]
        .map(|(engine, pending)| owed_messages_sql(engine, pending))
});

fn owed_messages(engine: Engine, pending: bool) -> &'static str {
    &OWED[usize::from(engine != Engine::Postgres) * 2 + usize::from(!pending)]
}

impl Store {
    /// Pauses an enabled endpoint: the fan-out makes it no message for a later event; whether
    /// it was paused now (not already, not disabled or gone), or `None` if the lock was not free.
    /// It is marked failing since `now` if its failures are not recorded yet (a send's answer
    /// reaches the dispatcher before its attempt is recorded): paused and not failing reads as
    /// an endpoint that answered, which is caught up.
    pub async fn pause_webhook_endpoint(
        &self,
        id: WebhookEndpointId,
        now: i64,
        lock: Lock,
    ) -> StoreResult<Option<bool>> {
        self.write_apart(move |conn| {
            Box::pin(async move {
                let Some(last) = fanned_out(conn, lock).await? else { return Ok(None) };
                Ok(Some(
                    execute!(
                        conn,
                        "UPDATE webhook_endpoints SET paused_after = $2, failing_since = COALESCE(failing_since, $3)
                     WHERE id = $1 AND status = 'enabled' AND paused_after IS NULL",
                        &id,
                        last,
                        now
                    )? == 1,
                ))
            })
        })
        .await
    }

    /// Makes the messages of up to `limit` of a paused endpoint's owed events, oldest first, due
    /// now (or behind an earlier message about the same subject), and, if `resume` (the endpoint
    /// answers again), resumes the endpoint once none is left. A probe's (`resume` false) never
    /// resumes it: a dead endpoint probed through a quiet spell, when nothing was owed, was
    /// resumed by the first probe, and every event after it made a message again. Returns how
    /// many it made and whether the endpoint is still paused, or `None` if the lock was not free.
    pub async fn catch_up_webhook_endpoint(
        &self,
        id: WebhookEndpointId,
        limit: i64,
        now: i64,
        lock: Lock,
        resume: bool,
    ) -> StoreResult<Option<(usize, bool)>> {
        self.write_apart(move |conn| {
            Box::pin(async move {
                // Where the fan-out has come first: on PostgreSQL that takes the lock, and another
                // daemon's catch-up of the same endpoint, which held it, has committed by then.
                let Some(last) = fanned_out(conn, lock).await? else { return Ok(None) };
                let sql = if conn.engine() == Engine::Postgres {
                    "SELECT paused_after FROM webhook_endpoints WHERE id = $1 AND status = 'enabled' FOR UPDATE"
                } else {
                    "SELECT paused_after FROM webhook_endpoints WHERE id = $1 AND status = 'enabled'"
                };
                let paused: Option<Option<i64>> = scalar!(conn, fetch_optional, Option<i64>, sql, &id)?;
                let Some(after) = paused.flatten() else { return Ok(Some((0, false))) };
                let to = owed_as_rows(conn, &id, after, last, limit).await?;
                let sql = owed_messages(conn.engine(), true);
                let made: Vec<i64> = scalar!(conn, fetch_all, i64, sql, &id, after, to, limit, now)?;
                let resumed = resume && i64::try_from(made.len()).unwrap_or(i64::MAX) < limit && to >= last;
                let after = if resumed { None } else { made.iter().copied().max().or(Some(after)) };
                execute!(conn, "UPDATE webhook_endpoints SET paused_after = $2 WHERE id = $1", &id, after)?;
                if !made.is_empty() {
                    notify_webhooks(conn).await?;
                }
                Ok(Some((made.len(), !resumed)))
            })
        })
        .await
    }
}

/// Marks a disabled endpoint as not settled yet: its owed events, and the events the fan-out
/// has not reached yet, become failed messages (as its pending messages do, so that `recover`
/// finds them) in [`Store::settle_disabled_webhook_endpoints`]'s groups, not here. This runs in
/// the writer's transaction (the disabling's), and an endpoint that failed for five days before
/// it was disabled is owed five days of events: made here, millions of messages held every other
/// write up. The mark is `paused_after`, kept if it was paused, else where the fan-out has come
/// (later events are not fanned out yet, and the fan-out passes a disabled endpoint by).
pub(super) async fn mark_unsettled(conn: &mut Conn<'_>, endpoint_id: &WebhookEndpointId) -> StoreResult<()> {
    execute!(
        conn,
        "UPDATE webhook_endpoints SET paused_after =
             COALESCE(paused_after, (SELECT last_event_id FROM webhook_fan_out WHERE id = 1))
         WHERE id = $1",
        endpoint_id
    )?;
    Ok(())
}

impl Store {
    /// Settles the endpoints disabled since ([`mark_unsettled`] says why), a group of about
    /// `range` events each at a time (event ids on SQLite, where they are dense; on PostgreSQL
    /// `range` blocks of ids, [`super::EVENT_ID_BLOCK`]): every event in it that the endpoint wants and has no
    /// message for becomes a failed message, and its mark moves past the group; at the last
    /// event, its pending messages fail and the mark is cleared. The last event is where the
    /// fan-out has come (PostgreSQL: its cursor's row locked, so that no fan-out runs meanwhile;
    /// every event up to it is committed), or on SQLite the last written (one writer: every
    /// event is committed). On PostgreSQL an endpoint is settled only once the fan-out has
    /// passed every event id issued by a moment after it was disabled: those of transactions in
    /// flight as it was disabled included. Until then its
    /// mark waits at the cursor. How many endpoints it settled and how many are left (a call each group),
    /// or `None` if the cursor was held ([`Lock::Try`]). Nothing to do (the usual case) takes no
    /// lock.
    ///
    /// Only the events that occurred by the time it was disabled (its `updated_at`, and a second
    /// of grace for other daemons' clocks) become messages: those that occurred while it was
    /// disabled get none, as the fan-out gives them none. (A change to the endpoint while it
    /// is disabled moves its `updated_at`, and so the bound, later.)
    pub async fn settle_disabled_webhook_endpoints(
        &self,
        now: i64,
        range: i64,
        lock: Lock,
    ) -> StoreResult<Option<(usize, usize)>> {
        const UNSETTLED: &str = "SELECT id, paused_after FROM webhook_endpoints
                                 WHERE status <> 'enabled' AND paused_after IS NOT NULL";
        // An endpoint whose row another transaction holds (a writer's batch changing it) is left
        // for the next look.
        const UNSETTLED_LOCKED: &str = "SELECT id, paused_after FROM webhook_endpoints
                                        WHERE status <> 'enabled' AND paused_after IS NOT NULL
                                        FOR UPDATE SKIP LOCKED";
        let mut conn = self.read().await?;
        let unsettled: Vec<(WebhookEndpointId, i64)> =
            fetch!(&mut conn.conn(), fetch_all, (WebhookEndpointId, i64), UNSETTLED)?;
        drop(conn);
        if unsettled.is_empty() {
            return Ok(Some((0, 0)));
        }
        let range = range.max(1);
        // PostgreSQL: once the cursor has passed `issued`, every transaction in flight as the
        // endpoints were disabled that had taken an event id has ended.
        let issued = match self.engine() {
            Engine::Postgres => self.events_issued().await?,
            Engine::Sqlite => 0,
        };
        self.write_apart(move |conn| {
            Box::pin(async move {
                let postgres = conn.engine() == Engine::Postgres;
                let (last, unsettled) = if postgres {
                    let Some(last) = fanned_out(conn, lock).await? else { return Ok(None) };
                    execute!(conn, ROW_LOCK_TIMEOUT)?;
                    (last, fetch!(conn, fetch_all, (WebhookEndpointId, i64), UNSETTLED_LOCKED)?)
                } else {
                    // The one writer: every event is committed, and none is being written.
                    let last =
                        scalar!(conn, fetch_one, i64, "SELECT COALESCE(MAX(id), 0) FROM webhook_events")?;
                    (last, fetch!(conn, fetch_all, (WebhookEndpointId, i64), UNSETTLED)?)
                };
                // A group of about `range` events: on PostgreSQL a row event takes a block of
                // ids, so `range` blocks hold at most `range` rows, and of the batches among
                // them about `range` events are made rows (the first left ends the group).
                let ids = if postgres { range.saturating_mul(super::EVENT_ID_BLOCK) } else { range };
                let mut settled = 0;
                for (id, after) in &unsettled {
                    let to = last.min(after.saturating_add(ids));
                    let to = owed_as_rows(conn, id, *after, to, range).await?;
                    let sql = owed_messages(conn.engine(), false);
                    let _: Vec<i64> = scalar!(conn, fetch_all, i64, sql, id, *after, to, i64::MAX, now)?;
                    // PostgreSQL: until the fan-out has passed every event id issued once the
                    // disabling had committed, the mark waits at the cursor.
                    let waits = to < last || last < issued;
                    if waits {
                        execute!(
                            conn,
                            "UPDATE webhook_endpoints SET paused_after = $2 WHERE id = $1",
                            id,
                            to
                        )?;
                        continue;
                    }
                    fail_pending_messages(conn, id, now).await?;
                    execute!(conn, "UPDATE webhook_endpoints SET paused_after = NULL WHERE id = $1", id)?;
                    settled += 1;
                }
                Ok(Some((settled, unsettled.len() - settled)))
            })
        })
        .await
    }
}
