//! Delivery receipts (CONTRACT §8): each kept in the notification's history, and the
//! notification's status moved up the receipts' precedence in the same statement, so receipts
//! that arrive at once, late, twice or out of order can never move a status down.
//!
//! A receipt is a write kind of the writer (`Receipt`): the receipts of a batch are written
//! together, in two statements whatever their number (PostgreSQL's `unnest`, SQLite's multi-row
//! `VALUES`). Two receipts for one notification are never in one group: the second runs after
//! the first, and sees its status.

use std::sync::LazyLock;

use herald_common::{
    api::notifications::{DeliveryStatus, ReceiptProvider},
    ids::NotificationId,
};

use super::{
    Conn, Store, StoreResult, fetch,
    local::{local_row, rows_of},
    scalar,
    writer::{WriteKind, not_set_based},
};

/// A receipt to record for a known notification.
#[derive(Clone, Debug)]
pub struct NewReceipt {
    pub notification_id: NotificationId,
    pub provider: ReceiptProvider,
    pub provider_status: String,
    /// What it means; a receipt that means no change (a delayed DSN) says `sent`.
    pub status: DeliveryStatus,
    pub error_code: Option<String>,
    /// The provider's text, the recipient already masked out of it.
    pub detail: Option<String>,
    /// Whether the notification may be retried if this receipt sets its status.
    pub retryable: bool,
    pub received_at: i64,
}

/// What recording a receipt did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptOutcome {
    /// Kept in the history; `changed` if it also moved the notification's status.
    Recorded { changed: bool },
    /// No such notification: nothing was written.
    Unknown,
}

/// One receipt of an item's history, as stored.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ReceiptRecord {
    pub provider: ReceiptProvider,
    pub provider_status: String,
    pub status: DeliveryStatus,
    pub error_code: Option<String>,
    pub detail: Option<String>,
    pub received_at: i64,
}

local_row!(ReceiptRecord { provider, provider_status, status, error_code, detail, received_at });

/// A notification's current status's place in the precedence, as SQL over `column`: the
/// `CASE` is made from [`DeliveryStatus::receipt_rank`], so the rule has one home.
pub(super) fn rank_sql(column: &str) -> String {
    let arms: String = DeliveryStatus::ALL
        .iter()
        .filter(|s| s.receipt_rank() > 0)
        .map(|s| format!(" WHEN '{}' THEN {}", s.as_str(), s.receipt_rank()))
        .collect();
    format!("(CASE {column}{arms} ELSE 0 END)")
}

/// Receipts of a group on PostgreSQL: those of known notifications are kept; the statuses they
/// outrank move, each only from `sent` or a status a receipt set. Returns each kept receipt's
/// notification, with whether its status moved.
static RECORD_POSTGRES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                  $7::int8[], $8::bool[], $9::int8[])
                 AS t(notification_id, provider, provider_status, status, error_code, detail, received_at,
                      retryable, rank)),
         kept AS (INSERT INTO receipts
                 (notification_id, provider, provider_status, status, error_code, detail, received_at, retryable)
             SELECT i.notification_id, i.provider, i.provider_status, i.status, i.error_code, i.detail, i.received_at,
                    i.retryable
             FROM input i JOIN notifications n ON n.id = i.notification_id
             RETURNING notification_id),
         moved AS (UPDATE notifications n SET status = i.status,
                 failure_reason = CASE WHEN i.status IN ('undelivered', 'bounced', 'complained') THEN i.detail END,
                 retryable = i.retryable, updated_at = $10
             FROM input i
             WHERE n.id = i.notification_id AND {rank} > 0 AND i.rank > {rank}
             RETURNING n.id)
         SELECT notification_id, FALSE FROM kept WHERE notification_id NOT IN (SELECT id FROM moved)
         UNION ALL SELECT id, TRUE FROM moved",
        rank = rank_sql("n.status")
    )
});

/// SQLite's two multi-row statements of a group: `(head, row, tail)`, the rows in a `VALUES`
/// list named `v` (`column1`, `column2`, …).
const KEEP_LOCAL: (&str, &str, &str) = (
    "INSERT INTO receipts (notification_id, provider, provider_status, status, error_code, detail, received_at,
                           retryable)
     SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column8 FROM (",
    "(?, ?, ?, ?, ?, ?, ?, ?)",
    ") AS v JOIN notifications n ON n.id = v.column1 RETURNING notification_id",
);
static MOVE_LOCAL: LazyLock<(String, String, String)> = LazyLock::new(|| {
    (
        "UPDATE notifications SET status = v.column2,
             failure_reason = CASE WHEN v.column2 IN ('undelivered', 'bounced', 'complained') THEN v.column3 END,
             retryable = v.column4, updated_at = v.column5
         FROM ("
            .to_owned(),
        "(?, ?, ?, ?, ?, ?)".to_owned(),
        format!(
            ") AS v WHERE notifications.id = v.column1 AND {rank} > 0 AND v.column6 > {rank} RETURNING id",
            rank = rank_sql("notifications.status")
        ),
    )
});

/// The best receipt kept for the notification `notification` since `since` (the attempt's
/// start: not a receipt of an earlier attempt), as a query of `columns` of it (`r`), asked only
/// `when` (SQL over the caller's columns; PostgreSQL makes it a one-time filter, so the receipts
/// are not read for other rows): the highest in the precedence above `sent`, the first kept of
/// equals (as receipts applied one by one would leave it).
pub(super) fn best_kept_sql(when: &str, notification: &str, since: &str, columns: &str) -> String {
    format!(
        "SELECT {columns} FROM receipts r
         WHERE {when} AND r.notification_id = {notification} AND r.received_at >= {since} AND {rank} > {sent}
         ORDER BY {rank} DESC, r.id LIMIT 1",
        rank = rank_sql("r.status"),
        sent = DeliveryStatus::Sent.receipt_rank()
    )
}

/// A receipt for the writer.
pub(crate) struct Receipt(NewReceipt);

impl WriteKind for Receipt {
    type Answer = ReceiptOutcome;
    /// Its notification: a second receipt for it runs after the first, and sees its status.
    type Key = NotificationId;

    fn conflict_keys(&self) -> Vec<NotificationId> {
        vec![self.0.notification_id.clone()]
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<ReceiptOutcome>> {
        let now = super::now_millis();
        let rank = |r: &NewReceipt| i64::from(r.status.receipt_rank());
        let written: Vec<(String, bool)> = match conn {
            Conn::Postgres(pg) => {
                let receipts: Vec<&NewReceipt> = group.iter().map(|r| &r.0).collect();
                let texts = |f: &dyn Fn(&NewReceipt) -> Option<&str>| -> Vec<Option<String>> {
                    receipts.iter().map(|r| f(r).map(str::to_owned)).collect()
                };
                super::count_call();
                sqlx::query_as(RECORD_POSTGRES.as_str())
                    .bind(texts(&|r| Some(r.notification_id.as_str())))
                    .bind(texts(&|r| Some(r.provider.as_str())))
                    .bind(texts(&|r| Some(r.provider_status.as_str())))
                    .bind(texts(&|r| Some(r.status.as_str())))
                    .bind(texts(&|r| r.error_code.as_deref()))
                    .bind(texts(&|r| r.detail.as_deref()))
                    .bind(receipts.iter().map(|r| r.received_at).collect::<Vec<_>>())
                    .bind(receipts.iter().map(|r| r.retryable).collect::<Vec<_>>())
                    .bind(receipts.iter().map(|r| rank(r)).collect::<Vec<_>>())
                    .bind(now)
                    .fetch_all(&mut **pg)
                    .await?
            }
            Conn::Local(local) => {
                let kept: Vec<String> = rows_of(
                    local,
                    KEEP_LOCAL,
                    group,
                    |receipt| {
                        let r = &receipt.0;
                        vec![
                            &r.notification_id,
                            &r.provider,
                            &r.provider_status,
                            &r.status,
                            &r.error_code,
                            &r.detail,
                            &r.received_at,
                            &r.retryable,
                        ]
                    },
                    |row| row.get(0),
                )?;
                let ranks: Vec<(&NewReceipt, i64)> =
                    group.iter().map(|receipt| (&receipt.0, rank(&receipt.0))).collect();
                let (head, row, tail) = &*MOVE_LOCAL;
                let moved: Vec<String> = rows_of(
                    local,
                    (head.as_str(), row.as_str(), tail.as_str()),
                    &ranks,
                    |(r, rank)| vec![&r.notification_id, &r.status, &r.detail, &r.retryable, &now, rank],
                    |row| row.get(0),
                )?;
                kept.into_iter()
                    .map(|id| {
                        let changed = moved.contains(&id);
                        (id, changed)
                    })
                    .collect()
            }
            Conn::Sqlite(_) => return Err(not_set_based()),
        };
        Ok(group
            .iter()
            .map(|receipt| match written.iter().find(|(id, _)| id == receipt.0.notification_id.as_str()) {
                Some((_, changed)) => ReceiptOutcome::Recorded { changed: *changed },
                None => ReceiptOutcome::Unknown,
            })
            .collect())
    }
}

impl Store {
    /// Keeps a receipt in its notification's history and moves the notification's status if
    /// the receipt outranks it (see [`DeliveryStatus::receipt_rank`]).
    pub async fn record_receipt(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
        let outcome = self.writer.submit(Receipt(receipt)).await?;
        if outcome == (ReceiptOutcome::Recorded { changed: true }) {
            self.activity_changed();
        }
        Ok(outcome)
    }

    /// The notification whose accepted send got `provider_message_id` (Twilio's `MessageSid`,
    /// WhatsApp's `wamid`), if any: a read, so receipts for unknown messages cost no write.
    pub async fn notification_of_provider_message(
        &self,
        provider_message_id: &str,
    ) -> StoreResult<Option<NotificationId>> {
        let mut read = self.read().await?;
        scalar!(
            &mut read.conn(),
            fetch_optional,
            NotificationId,
            "SELECT notification_id FROM delivery_attempts
             WHERE provider_message_id = $1 AND outcome = 'sent' AND provider_message_id IS NOT NULL LIMIT 1",
            provider_message_id
        )
    }

    /// A notification's receipts, oldest first.
    pub async fn receipts_of(&self, notification_id: &NotificationId) -> StoreResult<Vec<ReceiptRecord>> {
        let mut read = self.read().await?;
        fetch!(
            &mut read.conn(),
            fetch_all,
            ReceiptRecord,
            "SELECT provider, provider_status, status, error_code, detail, received_at
             FROM receipts WHERE notification_id = $1 ORDER BY id",
            notification_id
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_sql_follows_the_precedence() {
        let sql = rank_sql("s");
        assert!(sql.starts_with("(CASE s WHEN 'sent' THEN 1"), "{sql}");
        for status in DeliveryStatus::ALL {
            let arm = format!("WHEN '{}' THEN {}", status.as_str(), status.receipt_rank());
            assert_eq!(sql.contains(&arm), status.receipt_rank() > 0, "{sql}");
        }
    }
}
