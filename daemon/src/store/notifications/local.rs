//! The writer's groups on SQLite (see `store/writer.rs`), on its own connection: dispatches and
//! delivery outcomes in multi-row `VALUES` statements, up to 64 rows each, a fixed number of
//! statements for a group of up to 64 whatever its size. (A statement here is a call in place,
//! not a round trip; what a group saves is each statement's setup, binding and reset.)

use std::sync::LazyLock;

use super::*;
use crate::store::local::{ignore, rows_of};

/// Inserts notifications on SQLite with multi-row `VALUES` statements, up to 64 rows each (so
/// one of each for a group of up to 64; see [`crate::store::local::row_chunks`]): the
/// notifications; the delivery jobs; for in-app, each user's sequence advanced once by the
/// user's count (`RETURNING` its new end), then the inbox items numbered from it in arrival
/// order, and their `delivered` attempts.
pub(super) fn insert_notifications_local(
    conn: &rusqlite::Connection,
    notifications: &[&NewNotification],
) -> StoreResult<()> {
    use std::collections::HashMap;

    let in_app = |n: &NewNotification| n.channel == Channel::InApp;
    let rows: Vec<(&NewNotification, DeliveryStatus, i64)> = notifications
        .iter()
        .map(|n| if in_app(n) { (*n, DeliveryStatus::Delivered, 1) } else { (*n, DeliveryStatus::Queued, 0) })
        .collect();
    rows_of(
        conn,
        NOTIFICATION_ROWS,
        &rows,
        |(n, status, attempts)| {
            vec![
                &n.id,
                &n.tenant_id,
                &n.application_id,
                &n.channel,
                &n.recipient,
                &n.recipient_masked,
                &n.sender,
                &n.subject,
                &n.title,
                &n.body,
                &n.html_body,
                &n.data,
                &n.template_id,
                status,
                attempts,
                &n.created_at,
                &n.created_at,
                &n.category,
                &n.recipient_key,
            ]
        },
        ignore,
    )?;
    let queued: Vec<&NewNotification> = notifications.iter().copied().filter(|n| !in_app(n)).collect();
    rows_of(conn, DELIVERY_ROWS, &queued, |n| vec![&n.id, &n.created_at], ignore)?;
    let inbox: Vec<&NewNotification> = notifications.iter().copied().filter(|n| in_app(n)).collect();
    if inbox.is_empty() {
        return Ok(());
    }
    // Each user's count, and the sequence's end after it.
    let mut counts: Vec<((&str, &str), i64)> = Vec::new();
    for n in &inbox {
        let user = (n.application_id.as_str(), n.recipient.as_str());
        match counts.iter_mut().find(|(u, _)| *u == user) {
            Some((_, c)) => *c += 1,
            None => counts.push((user, 1)),
        }
    }
    counts.sort_unstable();
    let ends: HashMap<(String, String), i64> = rows_of(
        conn,
        SEQUENCE_ROWS,
        &counts,
        |((a, u), c)| vec![a, u, c],
        |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)),
    )?
    .into_iter()
    .collect();
    // Number each user's new items after the sequence's previous end, in arrival order.
    let mut next: HashMap<(&str, &str), i64> = HashMap::with_capacity(counts.len());
    for ((app, user), count) in &counts {
        let end = ends.get(&((*app).to_owned(), (*user).to_owned())).copied().ok_or_else(|| {
            StoreError::Statement("the inbox sequences' upsert did not return every user".to_owned())
        })?;
        next.insert((*app, *user), end - count + 1);
    }
    let items: Vec<(&NewNotification, String, i64, &str)> = inbox
        .iter()
        .map(|n| {
            let seq = next.entry((n.application_id.as_str(), n.recipient.as_str())).or_default();
            *seq += 1;
            let title = n.title.as_deref().or(n.subject.as_deref()).unwrap_or_default();
            (*n, InAppId::new().to_string(), *seq - 1, title)
        })
        .collect();
    rows_of(
        conn,
        INBOX_ITEM_ROWS,
        &items,
        |(n, item, seq, title)| {
            vec![
                item,
                &n.application_id,
                &n.recipient,
                seq,
                &n.id,
                title,
                &n.body,
                &n.data,
                &n.created_at,
                &n.created_at,
            ]
        },
        ignore,
    )?;
    rows_of(
        conn,
        ATTEMPT_ROWS,
        &items,
        |(n, item, ..)| vec![&n.id, &n.created_at, &n.created_at, item],
        ignore,
    )?;
    Ok(())
}

/// The multi-row statements of [`insert_notifications_local`]: `(head, row, tail)`.
const NOTIFICATION_ROWS: (&str, &str, &str) = (
    "INSERT INTO notifications
         (id, tenant_id, application_id, channel, recipient, recipient_masked, sender, subject, title, body,
          html_body, data, template_id, status, attempt_count, created_at, updated_at, category, recipient_key)",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "",
);
const DELIVERY_ROWS: (&str, &str, &str) =
    ("INSERT INTO deliveries (notification_id, state, next_attempt_at)", "(?, 'pending', ?)", "");
const SEQUENCE_ROWS: (&str, &str, &str) = (
    "INSERT INTO inbox_sequences (application_id, user_id, last_seq)",
    "(?, ?, ?)",
    "ON CONFLICT (application_id, user_id) DO UPDATE SET last_seq = inbox_sequences.last_seq + excluded.last_seq
     RETURNING application_id, user_id, last_seq",
);
const INBOX_ITEM_ROWS: (&str, &str, &str) = (
    "INSERT INTO inbox_items (id, application_id, user_id, seq, notification_id, title, body, data, created_at, updated_at)",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "",
);
const ATTEMPT_ROWS: (&str, &str, &str) = (
    "INSERT INTO delivery_attempts (notification_id, attempt, started_at, finished_at, outcome, provider_message_id)",
    "(?, 1, ?, ?, 'delivered', ?)",
    "",
);

/// SQLite's counterpart of [`record_all`], on the writer's own connection, in multi-row
/// statements (up to 64 rows each): the held leases that end are deleted and those retried go
/// back to the queue (each matched by notification and lease token, `RETURNING` which were
/// held), every attempt is logged, and the notifications of held leases take their new status.
pub(super) fn record_all_local(conn: &rusqlite::Connection, attempts: &[&Attempt]) -> StoreResult<Vec<bool>> {
    use std::collections::HashSet;

    let now = crate::store::now_millis();
    /// An attempt with what it logs, the status it sets, and whether it may be retried.
    type Outcome<'a> = (
        &'a Attempt,
        (AttemptOutcome, Option<&'a str>, Option<&'a str>),
        (DeliveryStatus, Option<i64>),
        bool,
    );
    let rows: Vec<Outcome<'_>> = attempts
        .iter()
        .map(|a| {
            let retryable = matches!(a.result, AttemptResult::Failed { retryable: true, .. });
            (*a, a.logged(), a.status(), retryable)
        })
        .collect();
    let (retried, ended): (Vec<&Outcome<'_>>, Vec<&Outcome<'_>>) =
        rows.iter().partition(|(_, _, (_, next), _)| next.is_some());
    let mut held: HashSet<String> =
        rows_of(conn, END_LEASES, &ended, |(a, ..)| vec![&a.id, &a.lease_token], |r| r.get(0))?
            .into_iter()
            .collect();
    held.extend(rows_of(
        conn,
        RETRY_LEASES,
        &retried,
        |(a, _, (_, next), _)| vec![&a.id, &a.lease_token, next],
        |r| r.get(0),
    )?);
    rows_of(
        conn,
        LOG_ATTEMPTS,
        &rows,
        |(a, (outcome, provider_message_id, error), ..)| {
            vec![
                &a.id,
                &a.lease_token,
                &a.span.started_at,
                &a.span.finished_at,
                outcome,
                provider_message_id,
                error,
            ]
        },
        ignore,
    )?;
    let changed: Vec<_> = rows.iter().filter(|(a, ..)| held.contains(a.id.as_str())).collect();
    let (head, row, tail) = &*SET_STATUSES;
    rows_of(
        conn,
        (head.as_str(), row.as_str(), tail.as_str()),
        &changed,
        |(a, (_, _, error), (status, _), retryable)| {
            vec![&a.id, status, error, retryable, &now, &a.span.started_at]
        },
        ignore,
    )?;
    Ok(attempts.iter().map(|a| held.contains(a.id.as_str())).collect())
}

/// The multi-row statements of [`record_all_local`]: `(head, row, tail)`, the rows in a
/// `VALUES` list named `v` (`column1`, `column2`, …).
const END_LEASES: (&str, &str, &str) = (
    "DELETE FROM deliveries WHERE rowid IN (SELECT d.rowid FROM (",
    "(?, ?)",
    ") AS v JOIN deliveries d ON d.notification_id = v.column1 AND d.lease_token = v.column2
       WHERE d.state = 'leased')
     RETURNING notification_id",
);
const RETRY_LEASES: (&str, &str, &str) = (
    "UPDATE deliveries SET state = 'pending', next_attempt_at = v.column3, locked_until = NULL FROM (",
    "(?, ?, ?)",
    ") AS v WHERE deliveries.notification_id = v.column1 AND deliveries.lease_token = v.column2
       AND deliveries.state = 'leased'
     RETURNING notification_id",
);
const LOG_ATTEMPTS: (&str, &str, &str) = (
    "INSERT INTO delivery_attempts
         (notification_id, attempt, started_at, finished_at, outcome, provider_message_id, error)",
    "(?, ?, ?, ?, ?, ?, ?)",
    "ON CONFLICT (notification_id, attempt) DO NOTHING",
);
/// The notifications' new statuses: with the best receipt that overtook a `sent` attempt's record,
/// if any (see [`super::new_status_sql`]; SQLite has no lateral join, so `best` is joined
/// by the id its query finds).
static SET_STATUSES: LazyLock<(String, String, String)> = LazyLock::new(|| {
    let set = super::new_status_sql("v.column2", "v.column3", "v.column4");
    let best = crate::store::receipts::best_kept_sql("v.column2 = 'sent'", "v.column1", "v.column6", "r.id");
    (
        format!("UPDATE notifications SET {set}, updated_at = v.column5 FROM ("),
        "(?, ?, ?, ?, ?, ?)".to_owned(),
        format!(") AS v LEFT JOIN receipts best ON best.id = ({best}) WHERE notifications.id = v.column1"),
    )
});

#[cfg(test)]
mod tests {
    use super::{super::writes::dispatch_all, *};
    use crate::store::local::testing::sqlite;

    /// Notification `n`: in-app to user `n % 3`, or an email.
    fn notification(tenant: &TenantId, app: &ApplicationId, n: usize, in_app: bool) -> NewNotification {
        NewNotification {
            id: NotificationId::new(),
            tenant_id: tenant.clone(),
            application_id: app.clone(),
            channel: if in_app { Channel::InApp } else { Channel::Email },
            recipient: if in_app { format!("user-{}", n % 3) } else { format!("a{n}@example.com") },
            recipient_masked: "u***".into(),
            sender: None,
            subject: Some("s".into()),
            title: None,
            body: format!("body {n}"),
            html_body: None,
            data: None,
            template_id: None,
            category: None,
            recipient_key: format!("key-{n}"),
            created_at: 1_000 + n as i64,
        }
    }

    /// A group of dispatches on SQLite is written by its multi-row statements themselves (the
    /// group must not fail: the writer would then run it one by one, and the tests above the
    /// store would still pass), numbering each user's items in arrival order, and the next group
    /// continues each user's numbers.
    #[tokio::test]
    async fn a_sqlite_dispatch_group_is_written_by_its_multi_row_statements() {
        let dir = tempfile::tempdir().unwrap();
        let (store, tenant, app, mut conn) = sqlite(dir.path()).await;
        // 70 dispatches (more than one statement's 64 rows), then 10 more; every fifth an email.
        for range in [0..70, 70..80] {
            let group: Vec<Dispatch> = range
                .map(|n| Dispatch {
                    notification: notification(&tenant, &app, n, n % 5 != 4),
                    idempotency: None,
                })
                .collect();
            let refs: Vec<&Dispatch> = group.iter().collect();
            let results = dispatch_all(&mut Conn::Local(&mut conn), &refs)
                .await
                .expect("the group is written as a group");
            assert!(results.iter().all(|r| *r == DispatchResult::Created));
        }
        for user in 0..3 {
            let mut items = conn
                .prepare(
                    "SELECT i.seq, n.body FROM inbox_items i JOIN notifications n ON n.id = i.notification_id
                     WHERE i.user_id = ?1 ORDER BY i.seq",
                )
                .unwrap();
            let rows: Vec<(i64, String)> = items
                .query_map([format!("user-{user}")], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let expected: Vec<(i64, String)> = (0..80usize)
                .filter(|n| n % 5 != 4 && n % 3 == user)
                .enumerate()
                .map(|(k, n)| (k as i64 + 1, format!("body {n}")))
                .collect();
            assert_eq!(rows, expected, "user-{user}'s items, numbered in arrival order");
        }
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            (count("SELECT COUNT(*) FROM deliveries"), count("SELECT COUNT(*) FROM delivery_attempts")),
            (16, 64),
            "a job per email, a delivered attempt per in-app item"
        );
        drop(conn);
        store.close().await;
    }

    /// Outcomes of every kind recorded as one SQLite group by its multi-row statements: a lease
    /// held ends (sent, failed) or goes back to the queue (retry); a stale token changes nothing
    /// but the attempt log.
    #[tokio::test]
    async fn a_sqlite_outcome_group_is_written_by_its_multi_row_statements() {
        let dir = tempfile::tempdir().unwrap();
        let (store, tenant, app, conn) = sqlite(dir.path()).await;
        for n in 0..70 {
            store.dispatch(notification(&tenant, &app, n, false), None).await.unwrap();
        }
        let claimed = store.claim_due_deliveries(100, 60_000).await.unwrap();
        assert_eq!(claimed.len(), 70);
        let span = AttemptSpan { started_at: 5, finished_at: 6 };
        let attempts: Vec<Attempt> = claimed
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let result = match i % 4 {
                    0 => AttemptResult::Sent { provider_message_id: Some(format!("m{i}")) },
                    1 => AttemptResult::Retry { error: "451 later".into(), next_attempt_at: 9_000 },
                    _ => AttemptResult::Failed { error: "550 no".into(), transient: false, retryable: false },
                };
                // Every fourth lease was lost to a reclaim meanwhile: its token is stale.
                let lease_token = if i % 4 == 3 { c.attempt_count + 1 } else { c.attempt_count };
                Attempt { id: c.id.clone(), lease_token, span, result }
            })
            .collect();
        let refs: Vec<&Attempt> = attempts.iter().collect();
        let held = record_all_local(&conn, &refs).expect("the group is written as a group");
        assert_eq!(held, (0..70).map(|i| i % 4 != 3).collect::<Vec<_>>());
        for (i, attempt) in attempts.iter().enumerate() {
            let id = attempt.id.as_str();
            let row = |sql: &str| -> Option<(String, Option<String>)> {
                conn.query_row(sql, [id], |r| Ok((r.get(0)?, r.get(1)?))).ok()
            };
            let notification = row("SELECT status, failure_reason FROM notifications WHERE id = ?1");
            let lease =
                row("SELECT state, CAST(next_attempt_at AS TEXT) FROM deliveries WHERE notification_id = ?1");
            let logged = row("SELECT outcome, error FROM delivery_attempts WHERE notification_id = ?1");
            let text = |a: &str, b: Option<&str>| Some((a.to_owned(), b.map(str::to_owned)));
            let expected = match i % 4 {
                0 => (text("sent", None), None, text("sent", None)),
                1 => (
                    text("queued", None),
                    text("pending", Some("9000")),
                    text("transient_failure", Some("451 later")),
                ),
                2 => (text("failed", Some("550 no")), None, text("permanent_failure", Some("550 no"))),
                // Still leased, due when it was created.
                _ => {
                    let created: String = conn
                        .query_row(
                            "SELECT CAST(created_at AS TEXT) FROM notifications WHERE id = ?1",
                            [id],
                            |r| r.get(0),
                        )
                        .unwrap();
                    (
                        text("sending", None),
                        text("leased", Some(&created)),
                        text("permanent_failure", Some("550 no")),
                    )
                }
            };
            assert_eq!((notification, lease, logged), expected, "attempt {i}");
        }
        drop(conn);
        store.close().await;
    }
}
