//! An endpoint's messages as `deliveries` lists them, and recovery of its failed messages.

use herald_common::{
    api::webhooks::{EventType, MessageStatus},
    ids::WebhookEndpointId,
};

use super::notify_webhooks;
use crate::store::{Store, StoreResult, execute, fetch, scalar};

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

impl Store {
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
