//! The dispatcher's side of the outbox: which endpoints have messages due, leasing them in
//! order, and recording each attempt and what it decides (a retry, giving up, disabling the
//! endpoint). What `deliveries` lists and recovery are in [`super::deliveries`].

use herald_common::{
    api::webhooks::{EventType, MessageStatus},
    ids::WebhookEndpointId,
};

use super::fail_pending;
use crate::store::{Conn, Engine, Store, StoreResult, execute, fetch};

/// An enabled endpoint, when its first pending message is due (`None`: nothing pending), and
/// whether it is paused (its events are owed: `pause.rs`).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct DueEndpoint {
    pub id: WebhookEndpointId,
    pub url: String,
    pub secret_generation: i64,
    pub previous_until: Option<i64>,
    pub next_due: Option<i64>,
    pub paused: bool,
    /// Failing since some time (no success since): paused and failing, it is probed; paused and
    /// not failing (it answered, or was enabled again before PostgreSQL settled its disabling),
    /// it is caught up.
    pub failing: bool,
}

crate::store::local::local_row!(DueEndpoint {
    id,
    url,
    secret_generation,
    previous_until,
    next_due,
    paused,
    failing
});

/// A message leased to this daemon, with its event.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ClaimedMessage {
    pub id: i64,
    pub created_at: i64,
    pub attempts: i64,
    pub event_type: EventType,
    pub subject_id: String,
    pub event_id: i64,
    /// The snapshot the triggers took (JSON); for a notification, what can change after it (its
    /// failure reason, retryable, retry count) completed by the claim from the notification
    /// (migration 0019).
    pub data: String,
    /// The body, once a first attempt has rendered it.
    pub body: Option<String>,
    pub occurred_at: i64,
}

crate::store::local::local_row!(ClaimedMessage {
    id,
    created_at,
    attempts,
    event_type,
    subject_id,
    event_id,
    data,
    body,
    occurred_at
});

/// What became of one attempt, and so of its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    /// Failed; tried again at this time.
    RetryAt(i64),
    /// Failed for the last time (the schedule ran out, or the body cannot be made).
    GiveUp,
    /// Failed, and the endpoint is disabled at once (`410 Gone`) for this reason.
    Disable(String),
}

/// One attempt to record.
#[derive(Clone, Debug)]
pub struct WebhookAttemptRecord {
    pub endpoint_id: WebhookEndpointId,
    pub message_id: i64,
    pub subject_id: String,
    pub lease: String,
    pub event_id: i64,
    /// The body sent, frozen on the event by the first attempt.
    pub body: Option<String>,
    pub at: i64,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub verdict: Verdict,
    /// Failing without a success for this long disables the endpoint.
    pub disable_after_ms: i64,
    /// The message had been attempted before: later messages about its subject may wait for it.
    pub retried: bool,
}

/// SQLite: due messages of the endpoint, none while an earlier message about the same subject
/// is pending, returned with their events (in no particular order).
const CLAIM_SQLITE: &str = "UPDATE webhook_messages SET next_attempt_at = $3, lease = $4, updated_at = $2
     WHERE id IN (
         SELECT m.id FROM webhook_messages m
         WHERE m.endpoint_id = $1 AND m.status = 'pending' AND m.next_attempt_at <= $2
           AND NOT EXISTS (SELECT 1 FROM webhook_messages p
                           WHERE p.endpoint_id = m.endpoint_id AND p.subject_id = m.subject_id
                             AND p.status = 'pending' AND p.id < m.id)
         ORDER BY m.next_attempt_at, m.id LIMIT $5)
     RETURNING id, created_at, attempts, event_type, subject_id, event_id,
               (SELECT COALESCE(CASE WHEN v.event_type LIKE 'notification.%'
                                      AND json_extract(v.data, '$.transaction_id') IS NULL THEN (
                         SELECT json_object('transaction_id', n.id, 'application_id', n.application_id,
                                    'application_name', (SELECT a.name FROM applications a WHERE a.id = n.application_id),
                                    'channel', n.channel, 'recipient_masked', n.recipient_masked,
                                    'status', substr(v.event_type, 14),
                                    'failure_reason', json_extract(v.data, '$.failure_reason'),
                                    'retryable', COALESCE(json_extract(v.data, '$.retryable'), 0),
                                    'retry_count', COALESCE(json_extract(v.data, '$.retry_count'), 0),
                                    'created_at', n.created_at, 'category', n.category)
                         FROM notifications n WHERE n.id = v.subject_id) END, v.data)
                FROM webhook_events v WHERE v.id = webhook_messages.event_id) AS data,
               (SELECT v.body FROM webhook_events v WHERE v.id = webhook_messages.event_id) AS body,
               (SELECT v.occurred_at FROM webhook_events v WHERE v.id = webhook_messages.event_id) AS occurred_at";

/// PostgreSQL: the same rule, skipping rows another daemon is claiming (a message whose earlier
/// sibling another daemon holds still sees that sibling pending, so it waits), written so the
/// plan cannot go quadratic on a table without statistics yet (a burst into a new table): "the
/// first pending message of its subject" as a scalar subquery (a probe of
/// `webhook_messages_order`), never an anti-join, and ordered by the due index's own column so
/// the scan stops at `LIMIT`. The subquery is ordered by `webhook_messages_order`'s columns: as
/// `MIN(p.id)`, a table without statistics (this server's `autovacuum = off`, or a burst before
/// the next `ANALYZE`) costed both partial indexes alike and probed `webhook_messages_due` by
/// endpoint alone, filtering 7,000 rows per candidate (`auto_explain`: 40–77 ms a claim,
/// 1,000 deliveries/s); an order that index would have to sort for makes it the dearer plan.
/// And `m.id <=`, not `=` (the same test: `m` is one of its subject's pending messages, so the
/// first of them is never after it): an equality with a subquery is estimated to keep 0.5 % of
/// the candidates, so the planner read every due message of the endpoint (a bitmap scan and a
/// sort of 4,850 rows, 32 ms) rather than walk the due index until `LIMIT`; an inequality is
/// estimated at a third. As `NOT EXISTS` with `ORDER BY next_attempt_at, id`, one claim
/// over 20,000 due messages planned a nested loop over every pending message per candidate
/// and ran for minutes. The claimed messages come back with their events in the same statement
/// (a notification's completed from the notification: migration 0019). The item is built here,
/// as `herald_webhook_item` (0015) builds it, not by calling that function: a SQL function with
/// a subquery is never inlined, so each claimed message went through the SQL function executor
/// (and each claim parsed and planned its body), 41-48 µs a message against 24 µs inline
/// (`EXPLAIN ANALYZE` of a claim of 16, the notification's lookup and its item).
///
/// The messages picked are locked (`FOR UPDATE`) and listed with where each row is
/// (`ctid`), and the update goes to those rows (a TID scan); no index is used to find them again.
/// Found again by id, the plan depended on the statistics: once an endpoint's removal took its
/// messages with it, statistics gathered before a vacuum say the outbox is empty while its
/// indexes keep every dead entry, every index path then costs the planner one page, and it took
/// the index keyed on the endpoint and the id for each lookup, reading it whole (40–120 ms a
/// claim after 90,000 removed); by endpoint and id, it read the endpoint's whole range instead
/// (a new endpoint's thousands of delivered messages at each claim, or, as `id IN (…)`, the
/// picking subquery run again for each, `LIMIT` and `SKIP LOCKED` included: 1,500 messages
/// claimed rather than 32). Materialized, the list is picked once (test:
/// `an_emptied_outbox_leaves_claims_and_settlements_cheap`).
pub const CLAIM_POSTGRES: &str = "WITH picked AS MATERIALIZED (
         SELECT m.id, m.ctid AS tid FROM webhook_messages m
         WHERE m.endpoint_id = $1 AND m.status = 'pending' AND m.next_attempt_at <= $2
           AND m.id <= (SELECT p.id FROM webhook_messages p
                       WHERE p.endpoint_id = m.endpoint_id AND p.subject_id = m.subject_id AND p.status = 'pending'
                       ORDER BY p.endpoint_id, p.subject_id, p.id LIMIT 1)
         ORDER BY m.next_attempt_at LIMIT $5 FOR UPDATE SKIP LOCKED),
     claimed AS (
         UPDATE webhook_messages w SET next_attempt_at = $3, lease = $4, updated_at = $2
         FROM picked WHERE w.ctid = picked.tid AND w.id = picked.id
         RETURNING w.id, w.created_at, w.attempts, w.event_type, w.subject_id, w.event_id)
     SELECT c.id, c.created_at, c.attempts, c.event_type, c.subject_id, v.id AS event_id,
            COALESCE(CASE WHEN v.event_type LIKE 'notification.%' AND NOT (v.data::jsonb ? 'transaction_id') THEN (
                SELECT jsonb_build_object('transaction_id', n.id, 'application_id', n.application_id,
                           'application_name', (SELECT a.name FROM applications a WHERE a.id = n.application_id),
                           'channel', n.channel, 'recipient_masked', n.recipient_masked,
                           'status', substr(v.event_type, 14), 'failure_reason', v.data::jsonb ->> 'failure_reason',
                           'retryable', COALESCE((v.data::jsonb ->> 'retryable')::boolean, FALSE),
                           'retry_count', COALESCE((v.data::jsonb ->> 'retry_count')::bigint, 0),
                           'created_at', n.created_at, 'category', n.category)::text
                FROM notifications n WHERE n.id = v.subject_id) END, v.data) AS data,
            v.body, v.occurred_at
     FROM claimed c JOIN webhook_events v ON v.id = c.event_id ORDER BY c.id";

/// Moves due messages that wait behind an earlier pending message about the same subject, which
/// waits for a later retry, to that retry's time.
/// (`+p.next_attempt_at`: see the fan-out, `fan_out.rs`; SQLite would walk the endpoint's whole
/// pending index for a bare column's `MAX`.)
const DEFER_BLOCKED: &str = "UPDATE webhook_messages SET next_attempt_at = (
         SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
         WHERE p.endpoint_id = webhook_messages.endpoint_id AND p.subject_id = webhook_messages.subject_id
           AND p.status = 'pending' AND p.id < webhook_messages.id AND p.lease IS NULL)
     WHERE endpoint_id = $1 AND status = 'pending' AND next_attempt_at <= $2
       AND EXISTS (SELECT 1 FROM webhook_messages p
                   WHERE p.endpoint_id = webhook_messages.endpoint_id AND p.subject_id = webhook_messages.subject_id
                     AND p.status = 'pending' AND p.id < webhook_messages.id AND p.lease IS NULL
                     AND p.next_attempt_at > $2)";

impl Store {
    /// The enabled endpoints, each with when its first pending message is due and whether it is
    /// paused.
    pub async fn due_webhook_endpoints(&self) -> StoreResult<Vec<DueEndpoint>> {
        let mut conn = self.read().await?;
        fetch!(
            &mut conn.conn(),
            fetch_all,
            DueEndpoint,
            // `ORDER BY … LIMIT 1`, not `MIN(…)`: SQLite then reads the first entry of the
            // pending index, where `MIN` walked every pending message of the endpoint (and its
            // row), on every turn of the dispatcher.
            "SELECT e.id, e.url, e.secret_generation, e.previous_until,
                    (SELECT m.next_attempt_at FROM webhook_messages m
                     WHERE m.endpoint_id = e.id AND m.status = 'pending'
                     ORDER BY m.next_attempt_at LIMIT 1) AS next_due,
                    e.paused_after IS NOT NULL AS paused, e.failing_since IS NOT NULL AS failing
             FROM webhook_endpoints e WHERE e.status = 'enabled'"
        )
    }

    /// Leases up to `limit` due messages of one endpoint until `lease_until`, in order: none
    /// while an earlier message about the same subject is pending.
    pub async fn claim_webhook_messages(
        &self,
        endpoint_id: WebhookEndpointId,
        now: i64,
        lease_until: i64,
        limit: i64,
        lease: String,
    ) -> StoreResult<Vec<ClaimedMessage>> {
        if self.engine() == Engine::Postgres {
            // One statement, in a transaction of its own (no `BEGIN`/`COMMIT` round trips), and
            // planned at each call (`persistent(false)`: PostgreSQL's unnamed statement), never
            // from a generic plan cached while the table was small: one such plan answered the
            // "first pending message of its subject" from the due index, walking the endpoint's
            // whole backlog per candidate (claims of 30–110 ms with 20,000 pending).
            let claimed: Vec<ClaimedMessage> = {
                let mut conn = self.read().await?;
                let Conn::Postgres(pg) = conn.conn() else { return Ok(Vec::new()) };
                crate::store::count_call();
                sqlx::query_as(CLAIM_POSTGRES)
                    .persistent(false)
                    .bind(&endpoint_id)
                    .bind(now)
                    .bind(lease_until)
                    .bind(&lease)
                    .bind(limit)
                    .fetch_all(pg)
                    .await?
            };
            if claimed.is_empty() {
                self.write_apart(move |conn| {
                    Box::pin(async move {
                        execute!(conn, DEFER_BLOCKED, &endpoint_id, now)?;
                        Ok(())
                    })
                })
                .await?;
            }
            return Ok(claimed);
        }
        self.write(move |conn| {
            Box::pin(async move {
                let mut claimed = fetch!(
                    conn,
                    fetch_all,
                    ClaimedMessage,
                    CLAIM_SQLITE,
                    &endpoint_id,
                    now,
                    lease_until,
                    &lease,
                    limit
                )?;
                if claimed.is_empty() {
                    // Due messages that wait behind an earlier one's retry (written while that
                    // one was being sent) are due no sooner than it, so they are not asked for
                    // again before then.
                    execute!(conn, DEFER_BLOCKED, &endpoint_id, now)?;
                }
                claimed.sort_unstable_by_key(|m| m.id);
                Ok(claimed)
            })
        })
        .await
    }

    /// Records attempts and their verdicts, together (one transaction; on PostgreSQL a few
    /// set-based statements whatever their number): each message's new state (if this daemon
    /// still holds its lease), the order of its siblings, its endpoint's failure clock, and
    /// disabling. Returns the endpoints the attempts disabled, with why.
    pub async fn record_webhook_attempts(
        &self,
        attempts: Vec<WebhookAttemptRecord>,
    ) -> StoreResult<Vec<(WebhookEndpointId, String)>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        self.write_apart(move |conn| Box::pin(async move { record_attempts(conn, &attempts).await })).await
    }
}

/// PostgreSQL: a group's attempts, their events' bodies and their messages' new states in one
/// statement; returns the messages whose lease the group still held. Each message is found by
/// its endpoint and id (see [`CLAIM_POSTGRES`]), and its status is compared with the input's
/// `pending`, a join clause: as the restriction `m.status = 'pending'` it proved the partial
/// indexes' predicate, and on an emptied outbox's statistics the update hashed
/// `webhook_messages_order` whole, dead entries and all (22,000 buffers, 15 ms, for 32 messages).
pub const SETTLE_POSTGRES: &str = "WITH input AS (
         SELECT t.*, 'pending'::text AS pending
         FROM unnest($1::int8[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::text[], $7::int8[],
                     $8::text[], $9::int8[], $10::int8[], $11::text[])
             AS t(message_id, endpoint_id, lease, at, http_status, error, duration_ms, status, next_at, event_id,
                  body)),
     attempts AS (INSERT INTO webhook_attempts (message_id, attempted_at, http_status, error, duration_ms)
         SELECT i.message_id, i.at, i.http_status, i.error, i.duration_ms FROM input i
         WHERE EXISTS (SELECT 1 FROM webhook_messages m WHERE m.endpoint_id = i.endpoint_id AND m.id = i.message_id)),
     bodies AS (UPDATE webhook_events v SET body = i.body FROM input i
         WHERE v.id = i.event_id AND i.body IS NOT NULL AND v.body IS NULL)
     UPDATE webhook_messages m SET status = i.status, next_attempt_at = i.next_at, lease = NULL,
            attempts = m.attempts + 1, updated_at = i.at
     FROM input i
     WHERE m.endpoint_id = i.endpoint_id AND m.id = i.message_id AND m.lease = i.lease AND m.status = i.pending
     RETURNING m.id";

/// PostgreSQL: the siblings of a group's settled messages, in one statement. After a retry the
/// later messages about the same subject wait for it; once a message is done with, the next
/// may go now. (`LATERAL … OFFSET 0`: each settled message's siblings are found by subject in
/// `webhook_messages_order`, whatever the planner thinks of the input's size; without the
/// `OFFSET` the planner may flatten the subquery into a join and, on an emptied outbox's
/// statistics, hashed every pending entry of the index, dead ones included. Each sibling is then
/// updated by its endpoint and id, both from the row found (with the endpoint from the input,
/// the update's lookup was parameterized by the id alone), never by id alone: see
/// [`CLAIM_POSTGRES`]. 62,000 buffers and 100 ms for 32 siblings in
/// `an_emptied_outbox_leaves_claims_and_settlements_cheap` before.)
pub const SIBLINGS_POSTGRES: &str = "UPDATE webhook_messages s SET next_attempt_at = x.at
     FROM (SELECT p.id, p.endpoint_id, i.at
           FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::bool[])
               AS i(endpoint_id, subject_id, message_id, at, retry)
           CROSS JOIN LATERAL (
               SELECT p.id, p.endpoint_id FROM webhook_messages p
               WHERE p.endpoint_id = i.endpoint_id AND p.subject_id = i.subject_id AND p.status = 'pending'
                 AND p.id > i.message_id
                 AND CASE WHEN i.retry THEN +p.next_attempt_at < i.at
                          ELSE +p.next_attempt_at > i.at AND p.lease IS NULL END
               OFFSET 0) p) x
     WHERE s.endpoint_id = x.endpoint_id AND s.id = x.id";

/// The message's new state: its status and when it is next due.
fn settled(verdict: &Verdict) -> (MessageStatus, Option<i64>) {
    match verdict {
        Verdict::Succeeded => (MessageStatus::Succeeded, None),
        Verdict::RetryAt(at) => (MessageStatus::Pending, Some(*at)),
        Verdict::GiveUp | Verdict::Disable(_) => (MessageStatus::Failed, None),
    }
}

/// The statements of [`Store::record_webhook_attempts`].
async fn record_attempts(
    conn: &mut Conn<'_>,
    attempts: &[WebhookAttemptRecord],
) -> StoreResult<Vec<(WebhookEndpointId, String)>> {
    let held: Vec<&WebhookAttemptRecord> = if let Conn::Postgres(pg) = conn {
        let column = |f: &dyn Fn(&WebhookAttemptRecord) -> Option<i64>| -> Vec<Option<i64>> {
            attempts.iter().map(f).collect()
        };
        crate::store::count_call();
        let held: std::collections::HashSet<i64> = sqlx::query_scalar(SETTLE_POSTGRES)
            .bind(column(&|a| Some(a.message_id)))
            .bind(attempts.iter().map(|a| a.endpoint_id.as_str()).collect::<Vec<_>>())
            .bind(attempts.iter().map(|a| a.lease.as_str()).collect::<Vec<_>>())
            .bind(column(&|a| Some(a.at)))
            .bind(column(&|a| a.http_status.map(i64::from)))
            .bind(attempts.iter().map(|a| a.error.as_deref()).collect::<Vec<_>>())
            .bind(column(&|a| Some(a.duration_ms)))
            .bind(attempts.iter().map(|a| settled(&a.verdict).0.as_str()).collect::<Vec<_>>())
            .bind(column(&|a| settled(&a.verdict).1))
            .bind(column(&|a| Some(a.event_id)))
            .bind(attempts.iter().map(|a| a.body.as_deref()).collect::<Vec<_>>())
            .fetch_all(&mut **pg)
            .await?
            .into_iter()
            .collect();
        attempts.iter().filter(|a| held.contains(&a.message_id)).collect()
    } else {
        let mut held = Vec::new();
        for a in attempts {
            if settle_one(conn, a).await? {
                held.push(a);
            }
        }
        held
    };
    // Another daemon took over the messages not held (after this lease ran out): its attempts
    // decide for them.
    order_siblings(conn, &held).await?;
    let mut disabled = Vec::new();
    for clock in FailureClock::of(&held) {
        if let Some(reason) = clock.write(conn).await? {
            fail_pending(conn, clock.endpoint_id, clock.last_failure).await?;
            disabled.push((clock.endpoint_id.clone(), reason));
        }
    }
    Ok(disabled)
}

/// SQLite: one attempt, its event's body and its message's new state; whether the lease held.
async fn settle_one(conn: &mut Conn<'_>, a: &WebhookAttemptRecord) -> StoreResult<bool> {
    execute!(
        conn,
        // Nothing to record if the endpoint, and so the message, was removed meanwhile.
        "INSERT INTO webhook_attempts (message_id, attempted_at, http_status, error, duration_ms)
         SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM webhook_messages WHERE id = $1)",
        a.message_id,
        a.at,
        a.http_status.map(i64::from),
        &a.error,
        a.duration_ms
    )?;
    if let Some(body) = &a.body {
        execute!(
            conn,
            "UPDATE webhook_events SET body = $2 WHERE id = $1 AND body IS NULL",
            a.event_id,
            body
        )?;
    }
    let (status, next) = settled(&a.verdict);
    let held = execute!(
        conn,
        "UPDATE webhook_messages SET status = $3, next_attempt_at = $4, lease = NULL, attempts = attempts + 1,
                updated_at = $5
         WHERE id = $1 AND lease = $2 AND status = 'pending'",
        a.message_id,
        &a.lease,
        status,
        next,
        a.at
    )?;
    Ok(held > 0)
}

/// The later messages about the subjects of settled messages: after a retry they wait for it;
/// once a message is done with, the next may go now.
///
/// Only a message that waited for a retry holds siblings back (the fan-out and the claim defer a
/// message behind an earlier one that waits for its next attempt, never behind one not yet
/// tried, which the claim's order keeps it behind instead). So the first attempt of a message,
/// unless it fails for a retry, has no siblings to move, and most groups (first attempts that
/// succeed) skip the statement: on PostgreSQL one planned at each call, per group.
async fn order_siblings(conn: &mut Conn<'_>, held: &[&WebhookAttemptRecord]) -> StoreResult<()> {
    let held: Vec<&WebhookAttemptRecord> =
        held.iter().copied().filter(|a| a.retried || matches!(a.verdict, Verdict::RetryAt(_))).collect();
    if held.is_empty() {
        return Ok(());
    }
    // The time siblings move to, and whether it is a retry's.
    let target = |a: &WebhookAttemptRecord| match settled(&a.verdict).1 {
        Some(retry) => (retry, true),
        None => (a.at, false),
    };
    if let Conn::Postgres(pg) = conn {
        crate::store::count_call();
        // Planned at each call, as the claim (see `Store::claim_webhook_messages`).
        sqlx::query(SIBLINGS_POSTGRES)
            .persistent(false)
            .bind(held.iter().map(|a| a.endpoint_id.as_str()).collect::<Vec<_>>())
            .bind(held.iter().map(|a| a.subject_id.as_str()).collect::<Vec<_>>())
            .bind(held.iter().map(|a| a.message_id).collect::<Vec<_>>())
            .bind(held.iter().map(|a| target(a).0).collect::<Vec<_>>())
            .bind(held.iter().map(|a| target(a).1).collect::<Vec<_>>())
            .execute(&mut **pg)
            .await?;
        return Ok(());
    }
    // (`+next_attempt_at`: the siblings are found by subject in `webhook_messages_order`; a bare
    // column let the planner range over the endpoint's whole due index instead.)
    for a in held {
        match target(a) {
            (at, true) => execute!(
                conn,
                "UPDATE webhook_messages SET next_attempt_at = $4
                 WHERE endpoint_id = $1 AND subject_id = $2 AND status = 'pending' AND id > $3
                   AND +next_attempt_at < $4",
                &a.endpoint_id,
                &a.subject_id,
                a.message_id,
                at
            )?,
            (at, false) => execute!(
                conn,
                "UPDATE webhook_messages SET next_attempt_at = $4
                 WHERE endpoint_id = $1 AND subject_id = $2 AND status = 'pending' AND id > $3
                   AND +next_attempt_at > $4 AND lease IS NULL",
                &a.endpoint_id,
                &a.subject_id,
                a.message_id,
                at
            )?,
        };
    }
    Ok(())
}

/// What a group's settled attempts tell of one endpoint's failure clock (`failing_since`: the
/// first failure with no success after it), taken in the order they were made.
#[derive(Debug)]
struct FailureClock<'a> {
    endpoint_id: &'a WebhookEndpointId,
    /// An attempt succeeded: the clock restarts from the failures after the last success.
    reset: bool,
    /// The first failure after the last success, if any.
    first_failure: Option<i64>,
    last_failure: i64,
    /// A `410 Gone` (whatever came after): the endpoint is disabled at once, for this reason.
    forced: Option<&'a str>,
    disable_after_ms: i64,
}

impl<'a> FailureClock<'a> {
    fn of(held: &[&'a WebhookAttemptRecord]) -> Vec<FailureClock<'a>> {
        let mut in_order = held.to_vec();
        in_order.sort_by_key(|a| a.at);
        let mut clocks: Vec<FailureClock<'a>> = Vec::new();
        for a in in_order {
            let i = match clocks.iter().position(|c| c.endpoint_id == &a.endpoint_id) {
                Some(i) => i,
                None => {
                    clocks.push(FailureClock {
                        endpoint_id: &a.endpoint_id,
                        reset: false,
                        first_failure: None,
                        last_failure: a.at,
                        forced: None,
                        disable_after_ms: a.disable_after_ms,
                    });
                    clocks.len() - 1
                }
            };
            let clock = &mut clocks[i];
            match &a.verdict {
                Verdict::Succeeded => {
                    clock.reset = true;
                    clock.first_failure = None;
                }
                failed => {
                    clock.first_failure.get_or_insert(a.at);
                    clock.last_failure = a.at;
                    if let Verdict::Disable(reason) = failed {
                        clock.forced = Some(reason);
                    }
                }
            }
        }
        clocks
    }

    /// Moves the clock, and disables the endpoint if it has failed long enough (or was told to
    /// go away); the reason if it was disabled here.
    async fn write(&self, conn: &mut Conn<'_>) -> StoreResult<Option<String>> {
        let Some(first_failure) = self.first_failure else {
            execute!(
                conn,
                "UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL",
                self.endpoint_id
            )?;
            if self.forced.is_none() {
                return Ok(None);
            }
            return self.disable(conn).await;
        };
        execute!(
            conn,
            "UPDATE webhook_endpoints SET failing_since = $3
             WHERE id = $1 AND (failing_since IS NULL OR ($2 AND failing_since <> $3))",
            self.endpoint_id,
            self.reset,
            first_failure
        )?;
        self.disable(conn).await
    }

    async fn disable(&self, conn: &mut Conn<'_>) -> StoreResult<Option<String>> {
        let reason = match self.forced {
            Some(reason) => reason.to_owned(),
            None => format!("no successful delivery for {}", describe_millis(self.disable_after_ms)),
        };
        let disabled = execute!(
            conn,
            "UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = $2, updated_at = $3
             WHERE id = $1 AND status = 'enabled' AND ($4 OR failing_since <= $3 - $5)",
            self.endpoint_id,
            &reason,
            self.last_failure,
            self.forced.is_some(),
            self.disable_after_ms
        )?;
        Ok((disabled > 0).then_some(reason))
    }
}

/// `120h` → `5 days`, for a disabled endpoint's reason.
fn describe_millis(ms: i64) -> String {
    let hours = ms / 3_600_000;
    match hours {
        h if h >= 48 && h % 24 == 0 => format!("{} days", h / 24),
        h if h >= 1 => format!("{h} hours"),
        _ => format!("{} seconds", ms / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(endpoint: &WebhookEndpointId, at: i64, verdict: Verdict) -> WebhookAttemptRecord {
        WebhookAttemptRecord {
            endpoint_id: endpoint.clone(),
            message_id: at,
            subject_id: "s".into(),
            lease: "l".into(),
            event_id: 1,
            body: None,
            at,
            http_status: None,
            error: None,
            duration_ms: 1,
            verdict,
            disable_after_ms: 1_000,
            retried: false,
        }
    }

    /// Taken in the order they were made, whatever the order they came in.
    #[test]
    fn a_failure_clock_restarts_after_the_last_success() {
        let (a, b, c) = (WebhookEndpointId::new(), WebhookEndpointId::new(), WebhookEndpointId::new());
        let records = [
            attempt(&a, 30, Verdict::GiveUp),
            attempt(&b, 10, Verdict::RetryAt(99)),
            attempt(&a, 10, Verdict::RetryAt(99)),
            attempt(&c, 5, Verdict::Disable("gone".into())),
            attempt(&a, 20, Verdict::Succeeded),
            attempt(&b, 15, Verdict::GiveUp),
            attempt(&a, 40, Verdict::GiveUp),
            attempt(&c, 6, Verdict::Succeeded),
        ];
        let held: Vec<&WebhookAttemptRecord> = records.iter().collect();
        let clocks = FailureClock::of(&held);
        let of = |id: &WebhookEndpointId| clocks.iter().find(|c| c.endpoint_id == id).unwrap();
        let a_clock = of(&a);
        assert!(a_clock.reset);
        assert_eq!((a_clock.first_failure, a_clock.last_failure, a_clock.forced), (Some(30), 40, None));
        let b_clock = of(&b);
        assert!(!b_clock.reset);
        assert_eq!((b_clock.first_failure, b_clock.last_failure), (Some(10), 15));
        // A 410 disables even if a later attempt succeeded.
        let c_clock = of(&c);
        assert_eq!((c_clock.reset, c_clock.first_failure, c_clock.forced), (true, None, Some("gone")));
        assert_eq!(clocks.len(), 3);
    }

    #[test]
    fn spans_read_in_words() {
        assert_eq!(describe_millis(5 * 24 * 3_600_000), "5 days");
        assert_eq!(describe_millis(3 * 3_600_000), "3 hours");
        assert_eq!(describe_millis(90_000), "90 seconds");
    }
}
