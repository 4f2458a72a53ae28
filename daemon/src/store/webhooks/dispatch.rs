//! The dispatcher's side of the outbox: which endpoints have messages due, leasing them in
//! order, recording each attempt and what it decides (a retry, giving up, disabling the
//! endpoint), the list `deliveries` shows, and recovery.

use herald_common::{
    api::webhooks::{EventType, MessageStatus},
    ids::WebhookEndpointId,
};

use super::{fail_pending, notify_webhooks};
use crate::store::{Conn, Engine, Store, StoreResult, execute, fetch, scalar};

/// An enabled endpoint and when its first pending message is due (`None`: nothing pending).
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct DueEndpoint {
    pub id: WebhookEndpointId,
    pub url: String,
    pub secret_generation: i64,
    pub previous_until: Option<i64>,
    pub next_due: Option<i64>,
}

crate::store::local::local_row!(DueEndpoint { id, url, secret_generation, previous_until, next_due });

/// A message leased to this daemon, with its event.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ClaimedMessage {
    pub id: i64,
    pub created_at: i64,
    pub attempts: i64,
    pub event_type: EventType,
    pub subject_id: String,
    pub event_id: i64,
    /// The snapshot the triggers took (JSON).
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
}

/// Whether the endpoint was disabled by an attempt, and why.
pub type Disabled = Option<String>;

/// A message as `deliveries` lists it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct MessageRecord {
    pub id: i64,
    pub event_type: EventType,
    pub status: MessageStatus,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
}

crate::store::local::local_row!(MessageRecord { id, event_type, status, next_attempt_at, created_at });

/// An attempt as `deliveries` lists it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AttemptRow {
    pub message_id: i64,
    pub attempted_at: i64,
    pub http_status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

crate::store::local::local_row!(AttemptRow { message_id, attempted_at, http_status, error, duration_ms });

const CLAIM_SQLITE: &str = "UPDATE webhook_messages SET next_attempt_at = $3, lease = $4, updated_at = $2
     WHERE id IN (
         SELECT m.id FROM webhook_messages m
         WHERE m.endpoint_id = $1 AND m.status = 'pending' AND m.next_attempt_at <= $2
           AND NOT EXISTS (SELECT 1 FROM webhook_messages p
                           WHERE p.endpoint_id = m.endpoint_id AND p.subject_id = m.subject_id
                             AND p.status = 'pending' AND p.id < m.id)
         ORDER BY m.next_attempt_at, m.id LIMIT $5)";

/// PostgreSQL: the same rule, skipping rows another daemon is claiming (a message whose earlier
/// sibling another daemon holds still sees that sibling pending, so it waits), written so the
/// plan cannot go quadratic on a table without statistics yet (a burst into a new table): "the
/// first pending message of its subject" as a scalar `MIN(id)` (an index-only probe of
/// `webhook_messages_order`), never an anti-join, and ordered by the due index's own column so
/// the scan stops at `LIMIT`. As `NOT EXISTS` with `ORDER BY next_attempt_at, id`, one claim
/// over 20,000 due messages planned a nested loop over every pending message per candidate
/// and ran for minutes.
const CLAIM_POSTGRES: &str = "UPDATE webhook_messages SET next_attempt_at = $3, lease = $4, updated_at = $2
     WHERE id IN (
         SELECT m.id FROM webhook_messages m
         WHERE m.endpoint_id = $1 AND m.status = 'pending' AND m.next_attempt_at <= $2
           AND m.id = (SELECT MIN(p.id) FROM webhook_messages p
                       WHERE p.endpoint_id = m.endpoint_id AND p.subject_id = m.subject_id AND p.status = 'pending')
         ORDER BY m.next_attempt_at LIMIT $5 FOR UPDATE SKIP LOCKED)";

/// Moves due messages that wait behind an earlier pending message about the same subject, which
/// waits for a later retry, to that retry's time.
/// (`+p.next_attempt_at`: see the fan-out trigger in migration 0015; SQLite would walk the
/// endpoint's whole pending index for a bare column's `MAX`.)
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
    /// The enabled endpoints, each with when its first pending message is due.
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
                     ORDER BY m.next_attempt_at LIMIT 1) AS next_due
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
        self.write_apart(move |conn| {
            Box::pin(async move {
                let claim = if conn.engine() == Engine::Postgres { CLAIM_POSTGRES } else { CLAIM_SQLITE };
                let claimed = execute!(conn, claim, &endpoint_id, now, lease_until, &lease, limit)?;
                if claimed == 0 {
                    // Due messages that wait behind an earlier one's retry (written while that
                    // one was being sent) are due no sooner than it, so they are not asked for
                    // again before then.
                    execute!(conn, DEFER_BLOCKED, &endpoint_id, now)?;
                    return Ok(Vec::new());
                }
                fetch!(
                    conn,
                    fetch_all,
                    ClaimedMessage,
                    "SELECT m.id, m.created_at, m.attempts, m.event_type, m.subject_id, v.id AS event_id, v.data,
                            v.body, v.occurred_at
                     FROM webhook_messages m JOIN webhook_events v ON v.id = m.event_id
                     WHERE m.lease = $1 ORDER BY m.id",
                    &lease
                )
            })
        })
        .await
    }

    /// Records an attempt and its verdict: the message's new state (if this daemon still holds
    /// its lease), the order of its siblings, the endpoint's failure clock, and disabling. Returns
    /// the reason if the endpoint was disabled by it.
    pub async fn record_webhook_attempt(&self, attempt: WebhookAttemptRecord) -> StoreResult<Disabled> {
        self.write_apart(move |conn| Box::pin(async move { record_attempt(conn, attempt).await })).await
    }

    /// One page of an endpoint's messages, newest first, with their attempts (oldest first), and
    /// how many there are.
    pub async fn webhook_messages(
        &self,
        endpoint_id: &WebhookEndpointId,
        status: Option<MessageStatus>,
        limit: u32,
        page: u32,
    ) -> StoreResult<(Vec<(MessageRecord, Vec<AttemptRow>)>, u64)> {
        let mut read = self.read().await?;
        let conn = &mut read.conn();
        let total = scalar!(
            conn,
            fetch_one,
            i64,
            "SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = $1 AND ($2 IS NULL OR status = $2)",
            endpoint_id,
            status
        )?;
        let offset = i64::from(page.saturating_sub(1)) * i64::from(limit);
        let messages = fetch!(
            conn,
            fetch_all,
            MessageRecord,
            "SELECT id, event_type, status, next_attempt_at, created_at FROM webhook_messages
             WHERE endpoint_id = $1 AND ($2 IS NULL OR status = $2)
             ORDER BY id DESC LIMIT $3 OFFSET $4",
            endpoint_id,
            status,
            i64::from(limit),
            offset
        )?;
        let (Some(last), Some(first)) = (messages.first(), messages.last()) else {
            return Ok((Vec::new(), u64::try_from(total).unwrap_or(0)));
        };
        let attempts = fetch!(
            conn,
            fetch_all,
            AttemptRow,
            "SELECT a.message_id, a.attempted_at, a.http_status, a.error, a.duration_ms
             FROM webhook_attempts a JOIN webhook_messages m ON m.id = a.message_id
             WHERE m.endpoint_id = $1 AND a.message_id BETWEEN $2 AND $3
             ORDER BY a.message_id, a.attempted_at",
            endpoint_id,
            first.id,
            last.id
        )?;
        let mut by_message: std::collections::HashMap<i64, Vec<AttemptRow>> =
            std::collections::HashMap::new();
        for attempt in attempts {
            by_message.entry(attempt.message_id).or_default().push(attempt);
        }
        let page = messages
            .into_iter()
            .map(|m| {
                let attempts = by_message.remove(&m.id).unwrap_or_default();
                (m, attempts)
            })
            .collect();
        Ok((page, u64::try_from(total).unwrap_or(0)))
    }

    /// Queues again every failed message to the endpoint created at or after `since`, with its
    /// original id; how many.
    pub async fn recover_webhook_messages(
        &self,
        endpoint_id: WebhookEndpointId,
        since: i64,
        now: i64,
    ) -> StoreResult<u64> {
        self.write(move |conn| {
            Box::pin(async move {
                let queued = execute!(
                    conn,
                    "UPDATE webhook_messages SET status = 'pending', next_attempt_at = $3, lease = NULL, updated_at = $3
                     WHERE endpoint_id = $1 AND status = 'failed' AND created_at >= $2",
                    &endpoint_id,
                    since,
                    now
                )?;
                notify_webhooks(conn).await?;
                Ok(queued)
            })
        })
        .await
    }
}

/// The statements of [`Store::record_webhook_attempt`].
async fn record_attempt(conn: &mut Conn<'_>, a: WebhookAttemptRecord) -> StoreResult<Disabled> {
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
    let (status, next) = match a.verdict {
        Verdict::Succeeded => (MessageStatus::Succeeded, None),
        Verdict::RetryAt(at) => (MessageStatus::Pending, Some(at)),
        Verdict::GiveUp | Verdict::Disable(_) => (MessageStatus::Failed, None),
    };
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
    if held == 0 {
        // Another daemon took the message over after this lease ran out: its attempt decides.
        return Ok(None);
    }
    // (`+next_attempt_at`: the siblings are found by subject in `webhook_messages_order`; a bare
    // column let the planner range over the endpoint's whole due index instead, once per attempt.)
    match next {
        // Later messages about the same subject wait for this one.
        Some(at) => execute!(
            conn,
            "UPDATE webhook_messages SET next_attempt_at = $4
             WHERE endpoint_id = $1 AND subject_id = $2 AND status = 'pending' AND id > $3 AND +next_attempt_at < $4",
            &a.endpoint_id,
            &a.subject_id,
            a.message_id,
            at
        )?,
        // Done with: the next one about the same subject may go now.
        None => execute!(
            conn,
            "UPDATE webhook_messages SET next_attempt_at = $4
             WHERE endpoint_id = $1 AND subject_id = $2 AND status = 'pending' AND id > $3 AND +next_attempt_at > $4
               AND lease IS NULL",
            &a.endpoint_id,
            &a.subject_id,
            a.message_id,
            a.at
        )?,
    };
    if a.verdict == Verdict::Succeeded {
        execute!(
            conn,
            "UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL",
            &a.endpoint_id
        )?;
        return Ok(None);
    }
    execute!(
        conn,
        "UPDATE webhook_endpoints SET failing_since = $2 WHERE id = $1 AND failing_since IS NULL",
        &a.endpoint_id,
        a.at
    )?;
    let reason = match &a.verdict {
        Verdict::Disable(reason) => reason.clone(),
        _ => format!("no successful delivery for {}", describe_millis(a.disable_after_ms)),
    };
    let forced = matches!(a.verdict, Verdict::Disable(_));
    let disabled = execute!(
        conn,
        "UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = $2, updated_at = $3
         WHERE id = $1 AND status = 'enabled' AND ($4 OR failing_since <= $3 - $5)",
        &a.endpoint_id,
        &reason,
        a.at,
        forced,
        a.disable_after_ms
    )?;
    if disabled == 0 {
        return Ok(None);
    }
    fail_pending(conn, &a.endpoint_id, a.at).await?;
    Ok(Some(reason))
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
