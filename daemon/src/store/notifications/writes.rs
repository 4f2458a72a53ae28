//! The writer's kinds of work for notifications (see `store/writer`): dispatches and delivery
//! attempt outcomes, a group's worth in set-based statements (PostgreSQL's here; SQLite's
//! multi-row ones in `local.rs`). One written alone is a group of one.

use std::sync::LazyLock;

use super::*;
use crate::store::writer::{WriteKind, not_set_based};

/// A dispatch for the writer: the notification and its idempotency record.
pub(crate) struct Dispatch {
    pub(super) notification: NewNotification,
    pub(super) idempotency: Option<IdempotentResponse>,
}

impl WriteKind for Dispatch {
    type Answer = DispatchResult;
    /// Its idempotency key: two dispatches with one key are never written in one group.
    type Key = (ApplicationId, String);

    fn conflict_keys(&self) -> Vec<Self::Key> {
        let app = &self.notification.application_id;
        self.idempotency.iter().map(|idem| (app.clone(), idem.key.key.clone())).collect()
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<DispatchResult>> {
        dispatch_all(conn, group).await
    }

    /// On PostgreSQL, dispatches without idempotency keys are one statement
    /// ([`insert_notifications`]).
    fn is_one_statement(group: &[&Self], engine: Engine) -> bool {
        engine == Engine::Postgres && group.iter().all(|d| d.idempotency.is_none())
    }
}

/// The idempotency keys of `dispatches[keyed]` to claim, each with its response.
fn claims_of<'a>(dispatches: &[&'a Dispatch], keyed: &[usize]) -> Vec<idempotency::Claim<'a>> {
    keyed
        .iter()
        .filter_map(|&i| {
            let Dispatch { notification, idempotency } = dispatches[i];
            let idem = idempotency.as_ref()?;
            Some(idempotency::Claim {
                application_id: &notification.application_id,
                idempotency: &idem.key,
                response: Some((idem.status_code, idem.body.as_str())),
                now: notification.created_at,
                ttl_ms: idem.ttl_ms,
            })
        })
        .collect()
}

/// Writes many dispatches (no idempotency key twice): one statement claims every key (one more
/// reads the keys held already), then the notifications are inserted with their delivery jobs
/// or inbox items: on PostgreSQL in one statement that also sends the inbox NOTIFY
/// ([`insert_notifications`]), on SQLite in one multi-row statement per table
/// (`insert_notifications_local`).
pub(super) async fn dispatch_all(
    conn: &mut Conn<'_>,
    dispatches: &[&Dispatch],
) -> StoreResult<Vec<DispatchResult>> {
    let keyed: Vec<usize> = (0..dispatches.len()).filter(|&i| dispatches[i].idempotency.is_some()).collect();
    let mut results = vec![DispatchResult::Created; dispatches.len()];
    if !keyed.is_empty() {
        let claims = claims_of(dispatches, &keyed);
        let claimed = match conn {
            Conn::Postgres(pg) => idempotency::claim_all(pg, &claims).await?,
            Conn::Local(local) => idempotency::claim_all_local(local, &claims)?,
            Conn::Sqlite(_) => return Err(not_set_based()),
        };
        for (i, result) in keyed.iter().zip(claimed) {
            results[*i] = result;
        }
    }
    let created: Vec<&NewNotification> = dispatches
        .iter()
        .zip(&results)
        .filter(|(_, r)| **r == DispatchResult::Created)
        .map(|(d, _)| &d.notification)
        .collect();
    match conn {
        _ if created.is_empty() => {}
        Conn::Postgres(pg) => insert_notifications(pg, &created).await?,
        Conn::Local(local) => super::local::insert_notifications_local(local, &created)?,
        Conn::Sqlite(_) => return Err(not_set_based()),
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
        payloads.push(crate::store::inbox::notify_created_payload(&created));
    }
    crate::store::count_call();
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
        .bind(text(&|n| n.category.as_deref()))
        .bind(text(&|n| Some(n.recipient_key.as_str())))
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
                              $15::int8[], $16::int8[], $17::text[], $18::text[], $19::text[], $20::text[])
             WITH ORDINALITY AS t(id, tenant_id, application_id, channel, recipient, recipient_masked, sender,
                                  subject, title, body, html_body, data, template_id, status, attempt_count,
                                  created_at, item_id, item_title, category, recipient_key, ord)),
     n AS (INSERT INTO notifications
             (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
              html_body, data, template_id, status, attempt_count, created_at, updated_at, category, recipient_key)
         SELECT id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
                html_body, data, template_id, status, attempt_count, created_at, created_at, category, recipient_key
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
     SELECT count(pg_notify('herald_inbox', p)) FROM unnest($21::text[]) AS p";

/// A delivery attempt's outcome for the writer.
pub(crate) struct Attempt {
    pub(super) id: NotificationId,
    pub(super) lease_token: i64,
    pub(super) span: AttemptSpan,
    pub(super) result: AttemptResult,
}

impl WriteKind for Attempt {
    /// Whether the lease was still held.
    type Answer = bool;
    /// Its notification: two outcomes for one notification are never written in one group.
    type Key = NotificationId;

    fn conflict_keys(&self) -> Vec<NotificationId> {
        vec![self.id.clone()]
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<bool>> {
        match conn {
            Conn::Postgres(pg) => record_all(pg, group).await,
            Conn::Local(local) => super::local::record_all_local(local, group),
            Conn::Sqlite(_) => Err(not_set_based()),
        }
    }

    /// On PostgreSQL every group of outcomes is one statement ([`struct@RECORD_ATTEMPTS`]).
    fn is_one_statement(_: &[&Self], engine: Engine) -> bool {
        engine == Engine::Postgres
    }
}

impl Attempt {
    /// How the attempt is logged: its outcome, provider message id and error.
    pub(super) fn logged(&self) -> (AttemptOutcome, Option<&str>, Option<&str>) {
        match &self.result {
            AttemptResult::Sent { provider_message_id } => {
                (AttemptOutcome::Sent, provider_message_id.as_deref(), None)
            }
            AttemptResult::Retry { error, .. } | AttemptResult::Failed { error, transient: true, .. } => {
                (AttemptOutcome::TransientFailure, None, Some(error))
            }
            AttemptResult::Failed { error, .. } => (AttemptOutcome::PermanentFailure, None, Some(error)),
            AttemptResult::Suppressed { reason } => (AttemptOutcome::Suppressed, None, Some(reason)),
        }
    }

    /// The notification's status after the attempt, and the retry's time if there is one.
    pub(super) fn status(&self) -> (DeliveryStatus, Option<i64>) {
        match &self.result {
            AttemptResult::Sent { .. } => (DeliveryStatus::Sent, None),
            AttemptResult::Retry { next_attempt_at, .. } => (DeliveryStatus::Queued, Some(*next_attempt_at)),
            AttemptResult::Failed { .. } => (DeliveryStatus::Failed, None),
            AttemptResult::Suppressed { .. } => (DeliveryStatus::Suppressed, None),
        }
    }
}

/// Records many attempts' outcomes (no notification twice) on PostgreSQL, in one statement.
/// (SQLite's counterpart is `record_all_local`.)
async fn record_all(pg: &mut sqlx::PgConnection, attempts: &[&Attempt]) -> StoreResult<Vec<bool>> {
    let logged: Vec<_> = attempts.iter().map(|a| a.logged()).collect();
    let statuses: Vec<_> = attempts.iter().map(|a| a.status()).collect();
    crate::store::count_call();
    let held: Vec<String> = sqlx::query_scalar(RECORD_ATTEMPTS.as_str())
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
        .bind(crate::store::now_millis())
        .fetch_all(&mut *pg)
        .await?;
    let held: std::collections::HashSet<String> = held.into_iter().collect();
    Ok(attempts.iter().map(|a| held.contains(a.id.as_str())).collect())
}

/// See [`record_all`]: the leases still held end (or, for a retry, go back to the queue), every
/// attempt is logged, and the notifications of held leases take their new status
/// ([`super::new_status_sql`]; the receipt that may have overtaken a sent attempt, by a lateral look-up).
static RECORD_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    let set = new_status_sql("input.status", "input.error", "input.retryable");
    let best = crate::store::receipts::best_kept_sql(
        "input.status = 'sent'",
        "input.id",
        "input.started_at",
        "r.status, r.detail, r.retryable",
    );
    format!(
        "WITH input AS (
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
     changed AS (UPDATE notifications SET {set}, updated_at = $11
         FROM input JOIN held ON held.notification_id = input.id
             LEFT JOIN LATERAL ({best}) best ON TRUE
         WHERE notifications.id = input.id)
     SELECT notification_id FROM held"
    )
});
