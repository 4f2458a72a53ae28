//! Notifications, the delivery queue, attempts and idempotency keys.
//!
//! The queue is the `deliveries` table (an outbox written in the same transaction as the
//! notification). Workers claim due rows with a lease (`FOR UPDATE SKIP LOCKED` on PostgreSQL;
//! on SQLite the single writer serialises claims), and a claim's `lease_token` (the
//! notification's attempt number) must still match when the outcome is recorded, so a worker
//! whose lease expired and was reclaimed cannot overwrite the newer attempt's result.

use herald_common::{
    api::notifications::{AttemptOutcome, Channel, DeliveryStatus},
    ids::{ApplicationId, InAppId, NotificationId, TemplateId, TenantId, UserId},
};

use super::{
    Conn, DispatchResult, Engine, InboxChange, Store, StoreError, StoreResult, execute, fetch, idempotency,
    scalar,
};

mod local;
mod writes;
pub(super) use writes::{Attempt, Dispatch};

/// The `SET` list of a recorded attempt's notification, over the attempt's `status`, `error` and
/// `retryable` and `best`, the best receipt kept since the attempt began if it was `sent` (its
/// columns `NULL` when there is none; [`crate::store::receipts::best_kept_sql`]). Such a receipt
/// overtook this record (the provider called back in the milliseconds between accepting the
/// message and Herald committing the attempt), found the notification still `sending` and moved
/// nothing: it applies now, with its reason and retryability. A retry (`queued`) keeps the reason
/// and retryability of the failure before it. Both backends' statements use it.
fn new_status_sql(status: &str, error: &str, retryable: &str) -> String {
    format!(
        "status = COALESCE(best.status, {status}),
         failure_reason = CASE WHEN best.status IS NOT NULL
                               THEN (CASE WHEN best.status IN ('undelivered', 'bounced', 'complained') THEN best.detail END)
                               WHEN {status} = 'sent' THEN NULL
                               WHEN {status} = 'queued' THEN notifications.failure_reason
                               ELSE {error} END,
         retryable = CASE WHEN best.status IS NOT NULL THEN best.retryable
                          WHEN {status} = 'queued' THEN notifications.retryable
                          ELSE {retryable} END"
    )
}

/// A notification to insert.
#[derive(Clone, Debug)]
pub struct NewNotification {
    pub id: NotificationId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub channel: Channel,
    pub recipient: String,
    pub recipient_masked: String,
    pub sender: Option<String>,
    pub subject: Option<String>,
    pub title: Option<String>,
    pub body: String,
    pub html_body: Option<String>,
    /// JSON text.
    pub data: Option<String>,
    pub template_id: Option<TemplateId>,
    /// `None`: transactional (CONTRACT §9).
    pub category: Option<String>,
    /// The recipient's key on the suppression list (`service::suppressions::recipient_key`).
    pub recipient_key: String,
    pub created_at: i64,
}

/// The idempotency record to write with a dispatch: the response that later requests with the
/// same key replay.
#[derive(Clone, Debug)]
pub struct IdempotentResponse {
    pub key: super::IdempotencyKey,
    pub status_code: u16,
    pub body: String,
    pub ttl_ms: i64,
}

/// A claimed delivery, with what the provider needs.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ClaimedDelivery {
    pub id: NotificationId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub channel: Channel,
    pub recipient: String,
    pub recipient_masked: String,
    pub sender: Option<String>,
    pub subject: Option<String>,
    pub body: String,
    pub html_body: Option<String>,
    /// The notification's attempt number: also the lease token.
    pub attempt_count: i64,
    /// Attempts in the current cycle (since acceptance or the last manual retry).
    pub cycle_attempt: i64,
    pub category: Option<String>,
    /// The recipient's key on the suppression list (`None` for notifications accepted before
    /// the list existed: the worker computes it).
    pub recipient_key: Option<String>,
    /// The suppression that stops this send, if one does: its reason and since when.
    pub suppressed_reason: Option<herald_common::api::suppressions::SuppressionReason>,
    pub suppressed_since: Option<i64>,
}

super::local::local_row!(ClaimedDelivery {
    id,
    tenant_id,
    application_id,
    channel,
    recipient,
    recipient_masked,
    sender,
    subject,
    body,
    html_body,
    attempt_count,
    cycle_attempt,
    category,
    recipient_key,
    suppressed_reason,
    suppressed_since
});

/// When one attempt ran, as the worker saw it: `finished_at` is when the provider answered (a
/// retry is scheduled from that instant), not when the writer got round to recording it.
#[derive(Clone, Copy, Debug)]
pub struct AttemptSpan {
    pub started_at: i64,
    pub finished_at: i64,
}

/// What happened to one attempt.
#[derive(Clone, Debug)]
pub enum AttemptResult {
    Sent {
        provider_message_id: Option<String>,
    },
    /// A transient failure with attempts left: try again at `next_attempt_at`.
    Retry {
        error: String,
        next_attempt_at: i64,
    },
    /// Given up: permanent, or transient with no attempts left (`retryable`).
    Failed {
        error: String,
        retryable: bool,
        transient: bool,
    },
    /// Not tried: the recipient is on the suppression list (`reason` says which entry).
    Suppressed {
        reason: String,
    },
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct NotificationRecord {
    pub id: NotificationId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub channel: Channel,
    pub recipient_masked: String,
    pub status: DeliveryStatus,
    pub failure_reason: Option<String>,
    pub retryable: bool,
    pub retry_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

super::local::local_row!(NotificationRecord {
    id,
    tenant_id,
    application_id,
    channel,
    recipient_masked,
    status,
    failure_reason,
    retryable,
    retry_count,
    created_at,
    updated_at
});

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct AttemptRecord {
    pub attempt: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub outcome: AttemptOutcome,
    pub provider_message_id: Option<String>,
    pub error: Option<String>,
}

super::local::local_row!(AttemptRecord {
    attempt,
    started_at,
    finished_at,
    outcome,
    provider_message_id,
    error
});

/// The suppression that stops the claimed notification `$n` (its reason and since when; NULL if
/// none does), as two columns of the claim's result: an entry for the recipient on the channel,
/// for every category or the notification's own (CONTRACT §9). Matched by the unique index's
/// prefix, so the check is a lookup, not a scan, however long the list.
macro_rules! suppressed_by {
    ($n:literal) => {
        concat!(
            "(SELECT s.reason FROM suppressions s
              WHERE s.tenant_id = ",
            $n,
            ".tenant_id AND s.recipient_key = ",
            $n,
            ".recipient_key
                AND s.channel = ",
            $n,
            ".channel AND (s.category = '' OR s.category = ",
            $n,
            ".category)
              ORDER BY s.created_at, s.id LIMIT 1) AS suppressed_reason,
             (SELECT MIN(s.created_at) FROM suppressions s
              WHERE s.tenant_id = ",
            $n,
            ".tenant_id AND s.recipient_key = ",
            $n,
            ".recipient_key
                AND s.channel = ",
            $n,
            ".channel AND (s.category = '' OR s.category = ",
            $n,
            ".category))
                 AS suppressed_since"
        )
    };
}

/// SQLite: lease due jobs (the single writer serialises claims), then mark their notifications
/// `sending` and take the next attempt number as each lease's token. The writer runs these
/// statements in place, so the round trips cost nothing.
const CLAIM_SQLITE: &str =
    "UPDATE deliveries SET state = 'leased', locked_until = $1, cycle_attempt = cycle_attempt + 1
     WHERE notification_id IN (
         SELECT notification_id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= $2
         ORDER BY next_attempt_at LIMIT $3)
     RETURNING notification_id, cycle_attempt";

const CLAIM_SQLITE_JOB: &str = concat!(
    "UPDATE notifications SET status = 'sending', attempt_count = attempt_count + 1, updated_at = $2
     WHERE id = $1
     RETURNING id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, body,
               html_body, attempt_count, $3 AS cycle_attempt, category, recipient_key, ",
    suppressed_by!("notifications"),
    ";
     UPDATE deliveries SET lease_token = (SELECT attempt_count FROM notifications WHERE id = $1)
     WHERE notification_id = $1"
);

/// PostgreSQL: the whole claim in one statement. Due jobs are locked with `SKIP LOCKED` (so
/// daemons sharing the database never claim one job twice), their notifications marked
/// `sending` with the next attempt number, and the leases taken with that number as token.
const CLAIM_POSTGRES: &str = concat!(
    "WITH due AS (
         SELECT notification_id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= $2
         ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED),
     n AS (
         UPDATE notifications SET status = 'sending', attempt_count = attempt_count + 1, updated_at = $2
         WHERE id IN (SELECT notification_id FROM due)
         RETURNING id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, body,
                   html_body, attempt_count, category, recipient_key),
     d AS (
         UPDATE deliveries SET state = 'leased', locked_until = $1, cycle_attempt = cycle_attempt + 1,
                lease_token = n.attempt_count
         FROM n WHERE deliveries.notification_id = n.id
         RETURNING deliveries.notification_id, deliveries.cycle_attempt)
     SELECT n.id, n.tenant_id, n.application_id, n.channel, n.recipient, n.recipient_masked, n.sender,
            n.subject, n.body, n.html_body, n.attempt_count, d.cycle_attempt, n.category, n.recipient_key, ",
    suppressed_by!("n"),
    "
     FROM n JOIN d ON d.notification_id = n.id"
);

impl Store {
    /// Inserts a notification with its delivery job (or, for in_app, its inbox item) and the
    /// idempotency record, all in one transaction. With an idempotency key already used, nothing
    /// is inserted and the result says why.
    pub async fn dispatch(
        &self,
        notification: NewNotification,
        idempotency: Option<IdempotentResponse>,
    ) -> StoreResult<DispatchResult> {
        let inbox = match notification.channel {
            Channel::InApp => Some((
                notification.application_id.clone(),
                UserId::parse(&notification.recipient).map_err(|e| StoreError::Statement(e.to_string()))?,
            )),
            _ => None,
        };
        let result = self.writer.submit(Dispatch { notification, idempotency }).await?;
        if result == DispatchResult::Created {
            self.activity_changed();
        }
        if let (DispatchResult::Created, Some((app, user))) = (&result, &inbox) {
            self.announce(InboxChange::Created { app, user });
        }
        Ok(result)
    }

    /// Leases up to `limit` due deliveries until `now + lease_ms` and marks them `sending`.
    pub async fn claim_due_deliveries(&self, limit: i64, lease_ms: i64) -> StoreResult<Vec<ClaimedDelivery>> {
        self.write(move |conn| {
            Box::pin(async move {
                let now = super::now_millis();
                if conn.engine() == Engine::Postgres {
                    return fetch!(
                        conn,
                        fetch_all,
                        ClaimedDelivery,
                        CLAIM_POSTGRES,
                        now + lease_ms,
                        now,
                        limit
                    );
                }
                let claimed: Vec<(NotificationId, i64)> =
                    fetch!(conn, fetch_all, (NotificationId, i64), CLAIM_SQLITE, now + lease_ms, now, limit)?;
                let mut jobs = Vec::with_capacity(claimed.len());
                for (id, cycle_attempt) in claimed {
                    jobs.push(fetch!(
                        conn,
                        fetch_one,
                        ClaimedDelivery,
                        CLAIM_SQLITE_JOB,
                        &id,
                        now,
                        cycle_attempt
                    )?);
                }
                Ok(jobs)
            })
        })
        .await
    }

    /// Records the outcome of attempt `lease_token` of a notification. Returns `false` (and
    /// changes nothing but the attempt log) if the lease was lost to a reclaim meanwhile.
    pub async fn record_attempt(
        &self,
        notification_id: &NotificationId,
        lease_token: i64,
        span: AttemptSpan,
        result: AttemptResult,
    ) -> StoreResult<bool> {
        let attempt = Attempt { id: notification_id.clone(), lease_token, span, result };
        let held = self.writer.submit(attempt).await?;
        if held {
            self.activity_changed();
        }
        Ok(held)
    }

    /// Puts deliveries whose lease ran out (their worker died) back in the queue.
    pub async fn reclaim_expired_leases(&self) -> StoreResult<u64> {
        self.write(|conn| {
            Box::pin(async move {
                let now = super::now_millis();
                Ok(execute!(
                    conn,
                    "UPDATE deliveries SET state = 'pending', next_attempt_at = $1, locked_until = NULL
                     WHERE state = 'leased' AND locked_until <= $1",
                    now
                )?)
            })
        })
        .await
    }

    /// When the next delivery is due (for the workers' sleep), if any is pending.
    pub async fn next_delivery_due(&self) -> StoreResult<Option<i64>> {
        let mut read = self.read().await?;
        Ok(scalar!(
            &mut read.conn(),
            fetch_one,
            Option<i64>,
            "SELECT MIN(next_attempt_at) FROM deliveries WHERE state = 'pending'"
        )?)
    }

    /// Deletes idempotency keys past their lifetime.
    pub async fn delete_expired_idempotency_keys(&self) -> StoreResult<u64> {
        self.write(|conn| {
            Box::pin(async move {
                Ok(execute!(
                    conn,
                    "DELETE FROM idempotency_keys WHERE expires_at <= $1",
                    super::now_millis()
                )?)
            })
        })
        .await
    }

    pub async fn get_notification(
        &self,
        id: &NotificationId,
    ) -> StoreResult<Option<(NotificationRecord, Vec<AttemptRecord>)>> {
        let mut read = self.read().await?;
        let mut conn = read.conn();
        let Some(record) = fetch!(
            &mut conn,
            fetch_optional,
            NotificationRecord,
            "SELECT id, tenant_id, application_id, channel, recipient_masked, status, failure_reason, retryable,
                    retry_count, created_at, updated_at
             FROM notifications WHERE id = $1",
            id
        )?
        else {
            return Ok(None);
        };
        let attempts = fetch!(
            &mut conn,
            fetch_all,
            AttemptRecord,
            "SELECT attempt, started_at, finished_at, outcome, provider_message_id, error
             FROM delivery_attempts WHERE notification_id = $1 ORDER BY attempt",
            id
        )?;
        Ok(Some((record, attempts)))
    }
}
