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
    Conn, Engine, InboxChange, Store, StoreError, StoreResult, execute, fetch, idempotency, scalar,
    writer::Work,
};

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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DispatchResult {
    Created,
    /// The key was used before with the same request: answer with the stored response.
    Replay {
        status_code: u16,
        body: String,
    },
    /// The key was used before with a different request.
    KeyReused,
    /// The first request with this key has not finished.
    InFlight,
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
    cycle_attempt
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

/// SQLite: lease due jobs (the single writer serialises claims), then mark their notifications
/// `sending` and take the next attempt number as each lease's token. The writer runs these
/// statements in place, so the round trips cost nothing.
const CLAIM_SQLITE: &str =
    "UPDATE deliveries SET state = 'leased', locked_until = $1, cycle_attempt = cycle_attempt + 1
     WHERE notification_id IN (
         SELECT notification_id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= $2
         ORDER BY next_attempt_at LIMIT $3)
     RETURNING notification_id, cycle_attempt";

const CLAIM_SQLITE_JOB: &str =
    "UPDATE notifications SET status = 'sending', attempt_count = attempt_count + 1, updated_at = $2
     WHERE id = $1
     RETURNING id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, body,
               html_body, attempt_count, $3 AS cycle_attempt;
     UPDATE deliveries SET lease_token = (SELECT attempt_count FROM notifications WHERE id = $1)
     WHERE notification_id = $1";

/// PostgreSQL: the whole claim in one statement. Due jobs are locked with `SKIP LOCKED` (so
/// daemons sharing the database never claim one job twice), their notifications marked
/// `sending` with the next attempt number, and the leases taken with that number as token.
const CLAIM_POSTGRES: &str = "WITH due AS (
         SELECT notification_id FROM deliveries WHERE state = 'pending' AND next_attempt_at <= $2
         ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED),
     n AS (
         UPDATE notifications SET status = 'sending', attempt_count = attempt_count + 1, updated_at = $2
         WHERE id IN (SELECT notification_id FROM due)
         RETURNING id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, body,
                   html_body, attempt_count),
     d AS (
         UPDATE deliveries SET state = 'leased', locked_until = $1, cycle_attempt = cycle_attempt + 1,
                lease_token = n.attempt_count
         FROM n WHERE deliveries.notification_id = n.id
         RETURNING deliveries.notification_id, deliveries.cycle_attempt)
     SELECT n.id, n.tenant_id, n.application_id, n.channel, n.recipient, n.recipient_masked, n.sender,
            n.subject, n.body, n.html_body, n.attempt_count, d.cycle_attempt
     FROM n JOIN d ON d.notification_id = n.id";

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
        let work = Work::Dispatch(Box::new(Dispatch { notification, idempotency }));
        let result: DispatchResult = self.writer.submit_work(work).await?;
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
        self.writer.submit_work(Work::Attempt(Box::new(attempt))).await
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

/// Parameters $1..$16 are the notification; in-app adds $17 (the inbox item id) and $18 (its
/// title).
/// A notification and its delivery job, in one round trip (SQLite runs the statements in turn,
/// binding `$n` by number in each; PostgreSQL runs one statement with a data-modifying CTE).
const QUEUE_SQLITE: &str = "INSERT INTO notifications
         (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
          html_body, data, template_id, status, attempt_count, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16);
     INSERT INTO deliveries (notification_id, state, next_attempt_at) VALUES ($1, 'pending', $16)";

const QUEUE_POSTGRES: &str = "WITH n AS (INSERT INTO notifications
         (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
          html_body, data, template_id, status, attempt_count, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16) RETURNING id)
     INSERT INTO deliveries (notification_id, state, next_attempt_at) SELECT id, 'pending', $16 FROM n";

/// An in-app notification, its inbox item numbered from the user's sequence, and its one
/// `delivered` attempt, in one round trip; on PostgreSQL the same statement also sends the
/// `herald_inbox` NOTIFY (see [`super::inbox::notify_payload`]).
const INBOX_SQLITE: &str = "INSERT INTO notifications
         (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
          html_body, data, template_id, status, attempt_count, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16);
     INSERT INTO inbox_sequences (application_id, user_id, last_seq) VALUES ($3, $5, 1)
         ON CONFLICT (application_id, user_id) DO UPDATE SET last_seq = inbox_sequences.last_seq + 1;
     INSERT INTO inbox_items (id, application_id, user_id, seq, notification_id, title, body, data, created_at, updated_at)
         SELECT $17, $3, $5, last_seq, $1, $18, $10, $12, $16, $16 FROM inbox_sequences
         WHERE application_id = $3 AND user_id = $5;
     INSERT INTO delivery_attempts (notification_id, attempt, started_at, finished_at, outcome, provider_message_id)
         VALUES ($1, 1, $16, $16, 'delivered', $17)";

const INBOX_POSTGRES: &str = "WITH n AS (INSERT INTO notifications
         (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
          html_body, data, template_id, status, attempt_count, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16) RETURNING id),
     s AS (INSERT INTO inbox_sequences (application_id, user_id, last_seq) VALUES ($3, $5, 1)
         ON CONFLICT (application_id, user_id) DO UPDATE SET last_seq = inbox_sequences.last_seq + 1
         RETURNING last_seq),
     i AS (INSERT INTO inbox_items (id, application_id, user_id, seq, notification_id, title, body, data, created_at, updated_at)
         SELECT $17, $3, $5, s.last_seq, n.id, $18, $10, $12, $16, $16 FROM s, n RETURNING id),
     d AS (INSERT INTO delivery_attempts (notification_id, attempt, started_at, finished_at, outcome, provider_message_id)
         SELECT n.id, 1, $16, $16, 'delivered', i.id FROM n, i RETURNING 1)
     SELECT pg_notify('herald_inbox', $19) FROM d";

async fn insert_notification(conn: &mut Conn<'_>, n: &NewNotification) -> StoreResult<()> {
    let in_app = n.channel == Channel::InApp;
    let status = if in_app { DeliveryStatus::Delivered } else { DeliveryStatus::Queued };
    let attempt_count: i64 = if in_app { 1 } else { 0 };
    let sql = match (conn.engine(), in_app) {
        (Engine::Sqlite, true) => INBOX_SQLITE,
        (Engine::Postgres, true) => INBOX_POSTGRES,
        (Engine::Sqlite, false) => QUEUE_SQLITE,
        (Engine::Postgres, false) => QUEUE_POSTGRES,
    };
    let inbox_id = InAppId::new();
    let title = n.title.as_deref().or(n.subject.as_deref()).unwrap_or_default();
    macro_rules! insert {
        ($($extra:expr),*) => {
            execute!(
                conn, sql, &n.id, &n.tenant_id, &n.application_id, n.channel, &n.recipient,
                &n.recipient_masked, &n.sender, &n.subject, &n.title, &n.body, &n.html_body, &n.data,
                &n.template_id, status, attempt_count, n.created_at $(, $extra)*
            )
        };
    }
    if in_app && conn.engine() == Engine::Postgres {
        insert!(&inbox_id, title, super::inbox::notify_payload(&n.application_id, &n.recipient, None))?;
    } else if in_app {
        insert!(&inbox_id, title)?;
    } else {
        insert!()?;
    }
    Ok(())
}

/// A dispatch for the writer: the notification and its idempotency record.
pub(crate) struct Dispatch {
    notification: NewNotification,
    idempotency: Option<IdempotentResponse>,
}

impl Dispatch {
    /// Its idempotency key: two dispatches with one key are never written in one group.
    pub(super) fn conflict_key(&self) -> Option<String> {
        let key = &self.idempotency.as_ref()?.key.key;
        Some(format!("{}\n{key}", self.notification.application_id))
    }
}

/// Writes one dispatch: claims its idempotency key, then inserts the notification.
pub(super) async fn dispatch_one(conn: &mut Conn<'_>, dispatch: &Dispatch) -> StoreResult<DispatchResult> {
    let Dispatch { notification, idempotency } = dispatch;
    if let Some(idem) = idempotency {
        let result = idempotency::claim(
            conn,
            &notification.application_id,
            &idem.key,
            Some((idem.status_code, idem.body.as_str())),
            notification.created_at,
            idem.ttl_ms,
        )
        .await?;
        if result != DispatchResult::Created {
            return Ok(result);
        }
    }
    insert_notification(conn, notification).await?;
    Ok(DispatchResult::Created)
}

/// Writes many dispatches (no idempotency key twice). On PostgreSQL: one statement claims
/// every key (one more reads the keys held already), one inserts every notification with its
/// delivery job or inbox item and sends the inbox NOTIFY. On SQLite, where a statement costs no
/// round trip, each runs in turn (the writer holds one savepoint for all of them).
pub(super) async fn dispatch_all(
    conn: &mut Conn<'_>,
    dispatches: &[&Dispatch],
) -> StoreResult<Vec<DispatchResult>> {
    let Conn::Postgres(pg) = conn else {
        let mut results = Vec::with_capacity(dispatches.len());
        for dispatch in dispatches {
            results.push(dispatch_one(conn, dispatch).await?);
        }
        return Ok(results);
    };
    let keyed: Vec<usize> = (0..dispatches.len()).filter(|&i| dispatches[i].idempotency.is_some()).collect();
    let mut results = vec![DispatchResult::Created; dispatches.len()];
    if !keyed.is_empty() {
        let claims: Vec<idempotency::Claim<'_>> = keyed
            .iter()
            .filter_map(|&i| {
                let Dispatch { notification, idempotency } = dispatches[i];
                let idem = idempotency.as_ref()?;
                Some(idempotency::Claim {
                    application_id: &notification.application_id,
                    idempotency: &idem.key,
                    status_code: idem.status_code,
                    body: &idem.body,
                    now: notification.created_at,
                    ttl_ms: idem.ttl_ms,
                })
            })
            .collect();
        for (i, result) in keyed.iter().zip(idempotency::claim_all(pg, &claims).await?) {
            results[*i] = result;
        }
    }
    let created: Vec<&NewNotification> = dispatches
        .iter()
        .zip(&results)
        .filter(|(_, r)| **r == DispatchResult::Created)
        .map(|(d, _)| &d.notification)
        .collect();
    if !created.is_empty() {
        insert_notifications(pg, &created).await?;
    }
    Ok(results)
}

/// The largest `herald_inbox` payload (PostgreSQL refuses 8,000 bytes and more).
const NOTIFY_LIMIT: usize = 7_000;

/// Inserts notifications with their delivery jobs or (in-app) inbox items, numbered from each
/// user's sequence, and their `delivered` attempts, in one statement that also sends the
/// `herald_inbox` NOTIFYs: one per batch, naming every user whose inbox grew (more only if the
/// names pass [`NOTIFY_LIMIT`]). Users' sequences are taken in one order by every writer, so
/// two batches never wait on each other in a cycle.
async fn insert_notifications(
    conn: &mut sqlx::PgConnection,
    notifications: &[&NewNotification],
) -> StoreResult<()> {
    let text = |f: &dyn Fn(&NewNotification) -> Option<&str>| -> Vec<Option<String>> {
        notifications.iter().map(|n| f(n).map(str::to_owned)).collect()
    };
    let in_app = |n: &NewNotification| n.channel == Channel::InApp;
    let status = |n: &NewNotification| {
        if in_app(n) { DeliveryStatus::Delivered } else { DeliveryStatus::Queued }.as_str()
    };
    let item_ids: Vec<Option<String>> =
        notifications.iter().map(|n| in_app(n).then(|| InAppId::new().to_string())).collect();
    let mut users: Vec<(&str, &str)> = notifications
        .iter()
        .filter(|n| in_app(n))
        .map(|n| (n.application_id.as_str(), n.recipient.as_str()))
        .collect();
    users.sort_unstable();
    users.dedup();
    let mut payloads = Vec::new();
    let mut users = users.into_iter().peekable();
    while users.peek().is_some() {
        let mut created = Vec::new();
        let mut size = 0;
        while let Some((app, user)) =
            users.next_if(|(a, u)| created.is_empty() || size + a.len() + u.len() + 8 < NOTIFY_LIMIT)
        {
            size += app.len() + user.len() + 8;
            created.push([app, user]);
        }
        payloads.push(super::inbox::notify_created_payload(&created));
    }
    super::count_call();
    sqlx::query(INSERT_NOTIFICATIONS)
        .bind(text(&|n| Some(n.id.as_str())))
        .bind(text(&|n| Some(n.tenant_id.as_str())))
        .bind(text(&|n| Some(n.application_id.as_str())))
        .bind(text(&|n| Some(n.channel.as_str())))
        .bind(text(&|n| Some(n.recipient.as_str())))
        .bind(text(&|n| Some(n.recipient_masked.as_str())))
        .bind(text(&|n| n.sender.as_deref()))
        .bind(text(&|n| n.subject.as_deref()))
        .bind(text(&|n| n.title.as_deref()))
        .bind(text(&|n| Some(n.body.as_str())))
        .bind(text(&|n| n.html_body.as_deref()))
        .bind(text(&|n| n.data.as_deref()))
        .bind(text(&|n| n.template_id.as_ref().map(|t| t.as_str())))
        .bind(text(&|n| Some(status(n))))
        .bind(notifications.iter().map(|n| i64::from(in_app(n))).collect::<Vec<i64>>())
        .bind(notifications.iter().map(|n| n.created_at).collect::<Vec<i64>>())
        .bind(item_ids)
        .bind(text(&|n| Some(n.title.as_deref().or(n.subject.as_deref()).unwrap_or_default())))
        .bind(payloads)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// See [`insert_notifications`]. `input.ord` keeps the order the dispatches arrived in, which
/// numbers one user's new items.
const INSERT_NOTIFICATIONS: &str = "WITH input AS (
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                              $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                              $15::int8[], $16::int8[], $17::text[], $18::text[])
             WITH ORDINALITY AS t(id, tenant_id, application_id, channel, recipient, recipient_masked, sender,
                                  subject, title, body, html_body, data, template_id, status, attempt_count,
                                  created_at, item_id, item_title, ord)),
     n AS (INSERT INTO notifications
             (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
              html_body, data, template_id, status, attempt_count, created_at, updated_at)
         SELECT id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
                html_body, data, template_id, status, attempt_count, created_at, created_at
         FROM input),
     q AS (INSERT INTO deliveries (notification_id, state, next_attempt_at)
         SELECT id, 'pending', created_at FROM input WHERE item_id IS NULL),
     inbox AS (
         SELECT input.*,
                row_number() OVER (PARTITION BY application_id, recipient ORDER BY ord) AS k,
                count(*) OVER (PARTITION BY application_id, recipient) AS c
         FROM input WHERE item_id IS NOT NULL),
     s AS (INSERT INTO inbox_sequences (application_id, user_id, last_seq)
         SELECT application_id, recipient, count(*) FROM inbox GROUP BY application_id, recipient
         ORDER BY application_id, recipient
         ON CONFLICT (application_id, user_id) DO UPDATE SET last_seq = inbox_sequences.last_seq + excluded.last_seq
         RETURNING application_id, user_id, last_seq),
     i AS (INSERT INTO inbox_items
             (id, application_id, user_id, seq, notification_id, title, body, data, created_at, updated_at)
         SELECT inbox.item_id, inbox.application_id, inbox.recipient, s.last_seq - inbox.c + inbox.k, inbox.id,
                inbox.item_title, inbox.body, inbox.data, inbox.created_at, inbox.created_at
         FROM inbox JOIN s ON s.application_id = inbox.application_id AND s.user_id = inbox.recipient),
     d AS (INSERT INTO delivery_attempts (notification_id, attempt, started_at, finished_at, outcome, provider_message_id)
         SELECT id, 1, created_at, created_at, 'delivered', item_id FROM inbox)
     SELECT count(pg_notify('herald_inbox', p)) FROM unnest($19::text[]) AS p";

/// A delivery attempt's outcome for the writer.
pub(crate) struct Attempt {
    id: NotificationId,
    lease_token: i64,
    span: AttemptSpan,
    result: AttemptResult,
}

impl Attempt {
    /// Its notification: two outcomes for one notification are never written in one group.
    pub(super) fn conflict_key(&self) -> String {
        self.id.to_string()
    }

    /// How the attempt is logged: its outcome, provider message id and error.
    fn logged(&self) -> (AttemptOutcome, Option<&str>, Option<&str>) {
        match &self.result {
            AttemptResult::Sent { provider_message_id } => {
                (AttemptOutcome::Sent, provider_message_id.as_deref(), None)
            }
            AttemptResult::Retry { error, .. } | AttemptResult::Failed { error, transient: true, .. } => {
                (AttemptOutcome::TransientFailure, None, Some(error))
            }
            AttemptResult::Failed { error, .. } => (AttemptOutcome::PermanentFailure, None, Some(error)),
        }
    }

    /// The notification's status after the attempt, and the retry's time if there is one.
    fn status(&self) -> (DeliveryStatus, Option<i64>) {
        match &self.result {
            AttemptResult::Sent { .. } => (DeliveryStatus::Sent, None),
            AttemptResult::Retry { next_attempt_at, .. } => (DeliveryStatus::Queued, Some(*next_attempt_at)),
            AttemptResult::Failed { .. } => (DeliveryStatus::Failed, None),
        }
    }
}

/// Records one attempt's outcome: `false` (and only the attempt logged) if the lease was lost.
pub(super) async fn record_one(conn: &mut Conn<'_>, attempt: &Attempt) -> StoreResult<bool> {
    let Attempt { id, lease_token, span, result } = attempt;
    let now = super::now_millis();
    let held = match result {
        AttemptResult::Retry { next_attempt_at, .. } => execute!(
            conn,
            "UPDATE deliveries SET state = 'pending', next_attempt_at = $3, locked_until = NULL
             WHERE notification_id = $1 AND lease_token = $2 AND state = 'leased'",
            id,
            *lease_token,
            *next_attempt_at
        )?,
        _ => execute!(
            conn,
            "DELETE FROM deliveries WHERE notification_id = $1 AND lease_token = $2 AND state = 'leased'",
            id,
            *lease_token
        )?,
    } == 1;
    let (outcome, provider_message_id, error) = attempt.logged();
    execute!(
        conn,
        "INSERT INTO delivery_attempts
             (notification_id, attempt, started_at, finished_at, outcome, provider_message_id, error)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (notification_id, attempt) DO NOTHING",
        id,
        *lease_token,
        span.started_at,
        span.finished_at,
        outcome,
        provider_message_id,
        error
    )?;
    if !held {
        return Ok(false);
    }
    match result {
        AttemptResult::Sent { .. } => execute!(
            conn,
            "UPDATE notifications SET status = 'sent', failure_reason = NULL, retryable = FALSE,
                 updated_at = $2 WHERE id = $1",
            id,
            now
        )?,
        AttemptResult::Retry { .. } => execute!(
            conn,
            "UPDATE notifications SET status = 'queued', updated_at = $2 WHERE id = $1",
            id,
            now
        )?,
        AttemptResult::Failed { error, retryable, .. } => execute!(
            conn,
            "UPDATE notifications SET status = 'failed', failure_reason = $2, retryable = $3,
                 updated_at = $4 WHERE id = $1",
            id,
            error,
            *retryable,
            now
        )?,
    };
    Ok(true)
}

/// Records many attempts' outcomes (no notification twice): on PostgreSQL in one statement, on
/// SQLite each in turn (the writer holds one savepoint for all of them).
pub(super) async fn record_all(conn: &mut Conn<'_>, attempts: &[&Attempt]) -> StoreResult<Vec<bool>> {
    let Conn::Postgres(pg) = conn else {
        let mut held = Vec::with_capacity(attempts.len());
        for attempt in attempts {
            held.push(record_one(conn, attempt).await?);
        }
        return Ok(held);
    };
    let logged: Vec<_> = attempts.iter().map(|a| a.logged()).collect();
    let statuses: Vec<_> = attempts.iter().map(|a| a.status()).collect();
    super::count_call();
    let held: Vec<String> = sqlx::query_scalar(RECORD_ATTEMPTS)
        .bind(attempts.iter().map(|a| a.id.as_str()).collect::<Vec<_>>())
        .bind(attempts.iter().map(|a| a.lease_token).collect::<Vec<_>>())
        .bind(statuses.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>())
        .bind(statuses.iter().map(|(_, next)| *next).collect::<Vec<_>>())
        .bind(attempts.iter().map(|a| a.span.started_at).collect::<Vec<_>>())
        .bind(attempts.iter().map(|a| a.span.finished_at).collect::<Vec<_>>())
        .bind(logged.iter().map(|(o, ..)| o.as_str()).collect::<Vec<_>>())
        .bind(logged.iter().map(|(_, p, _)| *p).collect::<Vec<_>>())
        .bind(logged.iter().map(|(.., e)| *e).collect::<Vec<_>>())
        .bind(
            attempts
                .iter()
                .map(|a| matches!(a.result, AttemptResult::Failed { retryable: true, .. }))
                .collect::<Vec<_>>(),
        )
        .bind(super::now_millis())
        .fetch_all(&mut **pg)
        .await?;
    let held: std::collections::HashSet<String> = held.into_iter().collect();
    Ok(attempts.iter().map(|a| held.contains(a.id.as_str())).collect())
}

/// See [`record_all`]: the leases still held end (or, for a retry, go back to the queue), every
/// attempt is logged, and the notifications of held leases take their new status.
const RECORD_ATTEMPTS: &str = "WITH input AS (
         SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[], $6::int8[], $7::text[],
                              $8::text[], $9::text[], $10::bool[])
             AS t(id, token, status, next_attempt_at, started_at, finished_at, outcome, provider_message_id,
                  error, retryable)),
     ended AS (DELETE FROM deliveries USING input
         WHERE deliveries.notification_id = input.id AND deliveries.lease_token = input.token
           AND deliveries.state = 'leased' AND input.status <> 'queued'
         RETURNING deliveries.notification_id),
     again AS (UPDATE deliveries SET state = 'pending', next_attempt_at = input.next_attempt_at, locked_until = NULL
         FROM input
         WHERE deliveries.notification_id = input.id AND deliveries.lease_token = input.token
           AND deliveries.state = 'leased' AND input.status = 'queued'
         RETURNING deliveries.notification_id),
     held AS (SELECT notification_id FROM ended UNION ALL SELECT notification_id FROM again),
     logged AS (INSERT INTO delivery_attempts
             (notification_id, attempt, started_at, finished_at, outcome, provider_message_id, error)
         SELECT id, token, started_at, finished_at, outcome, provider_message_id, error FROM input
         ON CONFLICT (notification_id, attempt) DO NOTHING),
     changed AS (UPDATE notifications SET
             status = input.status,
             failure_reason = CASE input.status WHEN 'sent' THEN NULL WHEN 'queued' THEN notifications.failure_reason
                                                ELSE input.error END,
             retryable = CASE input.status WHEN 'queued' THEN notifications.retryable ELSE input.retryable END,
             updated_at = $11
         FROM input JOIN held ON held.notification_id = input.id
         WHERE notifications.id = input.id)
     SELECT notification_id FROM held";
