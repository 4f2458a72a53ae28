//! Outbound event webhooks (CONTRACT §10): endpoints here, the dispatcher's side of the outbox
//! in [`dispatch`], what `deliveries` lists and recovery in [`deliveries`].
//!
//! Events are not written by this module: the triggers of migration 0015 insert them in the
//! transaction of the change they report (see the migration); [`fan_out`] makes their messages
//! after, a group at a time (SQLite's migration 0017, PostgreSQL's 0022). A
//! `webhook.test` event is inserted here with its one message. `dispatch` leases due messages to
//! a dispatcher (`next_attempt_at` holds the lease's end while a message is being sent, so a
//! crashed daemon's messages come due again by themselves) and records what each attempt found.

use herald_common::{
    api::webhooks::EndpointStatus,
    ids::{ApplicationId, TenantId, WebhookEndpointId},
};

mod deliveries;
mod dispatch;
pub(crate) mod fan_out;
mod pause;
mod statistics;

pub use deliveries::{AttemptRow, MessageRecord};
pub use dispatch::{
    CLAIM_POSTGRES, ClaimedMessage, DueEndpoint, SETTLE_POSTGRES, SIBLINGS_POSTGRES, Verdict,
    WebhookAttemptRecord,
};

use super::{Conn, Engine, Store, StoreResult, execute, fetch, scalar};

/// PostgreSQL's events take their ids in blocks of this many (migration 0027): an event written
/// as a row takes a block, a batch of up to this many a block for all of its events. So a range
/// of ids holds at most one row event per this many ids, and any number of a batch's.
pub(crate) const EVENT_ID_BLOCK: i64 = 1024;

/// How a pause, a catch-up or a settling waits for the fan-out's cursor (PostgreSQL: its row,
/// which a fan-out holds while it makes a group's messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanOutLock {
    /// Only if free: otherwise nothing is done (`None`). The dispatcher's way, at each look,
    /// until a second has gone by.
    Try,
    /// Waits (at most half a second).
    Wait,
}

/// An endpoint as stored. The secret is not: it is derived from the server secret, the id and
/// `secret_generation`.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct WebhookEndpointRecord {
    pub id: WebhookEndpointId,
    pub tenant_id: TenantId,
    pub application_id: Option<ApplicationId>,
    pub url: String,
    pub description: Option<String>,
    /// `,type,type,`; `None`: every type.
    pub event_types: Option<String>,
    pub status: EndpointStatus,
    pub disabled_reason: Option<String>,
    pub secret_generation: i64,
    /// The previous generation also signs until then.
    pub previous_until: Option<i64>,
    pub failing_since: Option<i64>,
    /// Paused (or, disabled, not settled yet): the last event fanned out to it (`pause.rs`).
    pub paused_after: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

super::local::local_row!(WebhookEndpointRecord {
    id,
    tenant_id,
    application_id,
    url,
    description,
    event_types,
    status,
    disabled_reason,
    secret_generation,
    previous_until,
    failing_since,
    paused_after,
    created_at,
    updated_at
});

macro_rules! endpoint_columns {
    () => {
        "id, tenant_id, application_id, url, description, event_types, status, disabled_reason, \
         secret_generation, previous_until, failing_since, paused_after, created_at, updated_at"
    };
}

/// One step of [`Store::purge_removed_webhook_endpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Purged {
    /// Messages deleted (with their attempts).
    pub messages: u64,
    /// Whether the endpoint's row went too: this endpoint is done.
    pub endpoint: bool,
}

/// The changes of a `PATCH`: each `Some` is set.
#[derive(Clone, Debug, Default)]
pub struct EndpointChanges {
    pub url: Option<String>,
    pub description: Option<Option<String>>,
    pub event_types: Option<Option<String>>,
    /// `Disabled` with the reason, or `Enabled` (which clears the reason and the failure clock).
    pub status: Option<(EndpointStatus, Option<String>)>,
}

impl Store {
    pub async fn insert_webhook_endpoint(&self, record: WebhookEndpointRecord) -> StoreResult<()> {
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    concat!(
                        "INSERT INTO webhook_endpoints (",
                        endpoint_columns!(),
                        ")
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
                    ),
                    &record.id,
                    &record.tenant_id,
                    &record.application_id,
                    &record.url,
                    &record.description,
                    &record.event_types,
                    &record.status,
                    &record.disabled_reason,
                    record.secret_generation,
                    record.previous_until,
                    record.failing_since,
                    record.paused_after,
                    record.created_at,
                    record.updated_at
                )?;
                Ok(())
            })
        })
        .await
    }

    pub async fn webhook_endpoints(&self, tenant_id: &TenantId) -> StoreResult<Vec<WebhookEndpointRecord>> {
        let mut conn = self.read().await?;
        fetch!(
            &mut conn.conn(),
            fetch_all,
            WebhookEndpointRecord,
            concat!(
                "SELECT ",
                endpoint_columns!(),
                " FROM webhook_endpoints WHERE tenant_id = $1 AND status <> 'removed' ORDER BY id"
            ),
            tenant_id
        )
    }

    pub async fn webhook_endpoint(
        &self,
        tenant_id: &TenantId,
        id: &WebhookEndpointId,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        let mut conn = self.read().await?;
        fetch!(
            &mut conn.conn(),
            fetch_optional,
            WebhookEndpointRecord,
            concat!(
                "SELECT ",
                endpoint_columns!(),
                " FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 AND status <> 'removed'"
            ),
            tenant_id,
            id
        )
    }

    /// Applies a `PATCH`; `None` if there is no such endpoint in the tenant. Disabling fails the
    /// endpoint's pending messages (`recover` sends them again).
    pub async fn update_webhook_endpoint(
        &self,
        tenant_id: TenantId,
        id: WebhookEndpointId,
        changes: EndpointChanges,
        now: i64,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                let (status, reason) = match changes.status {
                    Some((status, reason)) => (Some(status), reason),
                    None => (None, None),
                };
                let updated = execute!(
                    conn,
                    "UPDATE webhook_endpoints SET
                         url = COALESCE($3, url),
                         description = CASE WHEN $4 THEN $5 ELSE description END,
                         event_types = CASE WHEN $6 THEN $7 ELSE event_types END,
                         disabled_reason = CASE WHEN $8 IS NULL OR status = $8 THEN disabled_reason
                                                WHEN $8 = 'enabled' THEN NULL ELSE $9 END,
                         failing_since = CASE WHEN $8 = 'enabled' AND status <> 'enabled' THEN NULL
                                              ELSE failing_since END,
                         status = COALESCE($8, status),
                         updated_at = $10
                     WHERE tenant_id = $1 AND id = $2 AND status <> 'removed'",
                    &tenant_id,
                    &id,
                    &changes.url,
                    changes.description.is_some(),
                    changes.description.flatten(),
                    changes.event_types.is_some(),
                    changes.event_types.flatten(),
                    status,
                    reason,
                    now
                )?;
                if updated == 0 {
                    return Ok(None);
                }
                if status == Some(EndpointStatus::Disabled) {
                    fail_pending(conn, &id, now).await?;
                }
                fetch!(
                    conn,
                    fetch_optional,
                    WebhookEndpointRecord,
                    concat!("SELECT ", endpoint_columns!(), " FROM webhook_endpoints WHERE id = $1"),
                    &id
                )
            })
        })
        .await
    }

    /// Removes an endpoint from its tenant's API at once; `false` if there is none in the tenant.
    /// It is marked `removed`: no longer listed or found (every read of the API passes it by),
    /// the triggers and the fan-outs write it no more events or messages (they look for enabled
    /// endpoints), the dispatchers drop its lane at their next look, and nothing it was owed
    /// holds retention back (`paused_after` cleared). Its messages, 30 days of deliveries, are
    /// deleted afterwards by [`Store::purge_removed_webhook_endpoint`]: deleted in the API call,
    /// a busy endpoint's removal took seconds (minutes for millions of messages, past any HTTP
    /// client's patience) while the fan-out went on making it messages and the dispatcher went
    /// on sending them (docs/WEBHOOKS.md, "Removing an endpoint").
    pub async fn remove_webhook_endpoint(
        &self,
        tenant_id: TenantId,
        id: WebhookEndpointId,
        now: i64,
    ) -> StoreResult<bool> {
        self.write(move |conn| {
            Box::pin(async move {
                Ok(execute!(
                    conn,
                    "UPDATE webhook_endpoints
                     SET status = 'removed', paused_after = NULL, failing_since = NULL, updated_at = $3
                     WHERE tenant_id = $1 AND id = $2 AND status <> 'removed'",
                    &tenant_id,
                    &id,
                    now
                )? == 1)
            })
        })
        .await
    }

    /// Deletes what is left of one removed endpoint ([`Store::remove_webhook_endpoint`]), a
    /// step at a time: up to `group` of its messages (with their attempts), oldest first, in a
    /// write of their own beside the writer; once a group comes back short, the endpoint's row
    /// (in the writer's transaction, with the few messages a group passed by). What it did, or
    /// `None` when no endpoint is waiting to be purged. A removed endpoint gets no new messages,
    /// so its groups come to an end; run again after a crash, it goes on where it stopped.
    pub async fn purge_removed_webhook_endpoint(&self, group: i64) -> StoreResult<Option<Purged>> {
        let group = group.max(1);
        let removed: Option<(WebhookEndpointId, TenantId)> = {
            let mut conn = self.read().await?;
            fetch!(
                &mut conn.conn(),
                fetch_optional,
                (WebhookEndpointId, TenantId),
                "SELECT id, tenant_id FROM webhook_endpoints WHERE status = 'removed' ORDER BY updated_at, id LIMIT 1"
            )?
        };
        let Some((id, tenant_id)) = removed else { return Ok(None) };
        let messages = loop {
            let (tenant_id, id) = (tenant_id.clone(), id.clone());
            match self
                .write_apart(move |conn| {
                    Box::pin(async move {
                        let sql = match conn.engine() {
                            Engine::Postgres => DELETE_ENDPOINT_MESSAGES,
                            Engine::Sqlite => DELETE_ENDPOINT_MESSAGES_SQLITE,
                        };
                        execute!(conn, sql, &id, &tenant_id, group)
                    })
                })
                .await
            {
                // A group is only ever deleted again: run it again once the other has gone.
                Err(e) if e.is_conflict() => continue,
                other => break other?,
            }
        };
        let endpoint = messages < u64::try_from(group).unwrap_or(u64::MAX)
            && self
                .write(move |conn| {
                    Box::pin(async move {
                        Ok(execute!(
                            conn,
                            "DELETE FROM webhook_endpoints WHERE id = $1 AND status = 'removed'",
                            &id
                        )? == 1)
                    })
                })
                .await?;
        Ok(Some(Purged { messages, endpoint }))
    }

    /// Moves the secret to its next generation; the current one keeps signing until
    /// `previous_until`. The endpoint after the change, if there is one in the tenant.
    pub async fn rotate_webhook_secret(
        &self,
        tenant_id: TenantId,
        id: WebhookEndpointId,
        previous_until: i64,
        now: i64,
    ) -> StoreResult<Option<WebhookEndpointRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                fetch!(
                    conn,
                    fetch_optional,
                    WebhookEndpointRecord,
                    concat!(
                        "UPDATE webhook_endpoints
                         SET secret_generation = secret_generation + 1, previous_until = $3, updated_at = $4
                         WHERE tenant_id = $1 AND id = $2 AND status <> 'removed' RETURNING ",
                        endpoint_columns!()
                    ),
                    &tenant_id,
                    &id,
                    previous_until,
                    now
                )
            })
        })
        .await
    }

    /// Writes a `webhook.test` event for one endpoint, with its message (the fan-outs pass such
    /// events by); returns the message's row number and creation time.
    pub async fn add_webhook_test_event(
        &self,
        tenant_id: TenantId,
        endpoint_id: WebhookEndpointId,
        now: i64,
    ) -> StoreResult<Option<(i64, i64)>> {
        self.write(move |conn| {
            Box::pin(async move {
                let data = serde_json::json!({ "endpoint_id": endpoint_id }).to_string();
                let event_id = scalar!(
                    conn,
                    fetch_one,
                    i64,
                    "INSERT INTO webhook_events (tenant_id, application_id, endpoint_id, event_type, subject_id, data,
                                                 occurred_at)
                     VALUES ($1, NULL, $2, 'webhook.test', $2, $3, $4) RETURNING id",
                    &tenant_id,
                    &endpoint_id,
                    &data,
                    now
                )?;
                // Due now: the claim still holds it behind an earlier test message still pending.
                let message = fetch!(
                    conn,
                    fetch_optional,
                    (i64, i64),
                    "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status,
                                                   next_attempt_at, created_at, updated_at)
                     SELECT e.id, $2, 'webhook.test', e.id, 'pending', $3, $3, $3
                     FROM webhook_endpoints e WHERE e.id = $1 AND e.status = 'enabled'
                     RETURNING id, created_at",
                    &endpoint_id,
                    event_id,
                    now
                )?;
                if message.is_some() {
                    notify_webhooks(conn).await?;
                }
                Ok(message)
            })
        })
        .await
    }

    /// Wakes this daemon's dispatcher (a message came due without a new insert: a recovery, a
    /// re-enabled endpoint). Other daemons hear the NOTIFY of the writing transaction, if any.
    pub fn wake_webhooks(&self) {
        self.webhook_wake.notify_one();
    }

    /// What the dispatcher waits on between its rounds: inserted messages, once committed
    /// (SQLite: the writer's update hook notes them and the batch's end wakes; PostgreSQL:
    /// `herald_webhooks` NOTIFYs at commit, heard by [`Store::listen_for_changes`]).
    pub fn webhook_wake(&self) -> &std::sync::Arc<tokio::sync::Notify> {
        &self.webhook_wake
    }

    /// What the fan-out waits on: inserted events, once committed (SQLite: the writer's update
    /// hook notes them; PostgreSQL: `herald_webhook_events` NOTIFYs at commit, heard by
    /// [`Store::listen_for_changes`]).
    pub fn webhook_event_wake(&self) -> &std::sync::Arc<tokio::sync::Notify> {
        &self.webhook_event_wake
    }

    /// Deletes the messages settled (succeeded or failed) before `before`, with their attempts,
    /// and the events before then that no message refers to any more, except those a paused
    /// endpoint is owed; how many messages. Each write deletes at most `chunk` rows, so the
    /// writer's other work goes between them: at a steady 1,000 events a second, a run every ten
    /// minutes has 600,000 of each to delete. The events are read in id order up to the first
    /// that occurred at or after `before` (their ids follow their times, to within a commit's
    /// moment), not scanned whole: with no index on their time, each run read every event of the
    /// month kept, in the writer's transaction (123 ms for 3 million on SQLite, growing with the
    /// outbox; docs/PERFORMANCE.md).
    pub async fn delete_settled_webhook_messages(&self, before: i64, chunk: i64) -> StoreResult<u64> {
        let deleted = self.delete_in_chunks(DELETE_SETTLED_MESSAGES, before, chunk).await?;
        self.delete_in_chunks(DELETE_UNNEEDED_EVENTS, before, chunk).await?;
        if self.engine() == Engine::Postgres {
            self.delete_in_chunks(DELETE_UNNEEDED_BATCHES, before, chunk).await?;
        }
        Ok(deleted)
    }

    /// Runs `sql` (bound to `before` and `chunk`) in writes of its own until one deletes fewer
    /// than `chunk` rows; how many in all.
    async fn delete_in_chunks(&self, sql: &'static str, before: i64, chunk: i64) -> StoreResult<u64> {
        let chunk = chunk.max(1);
        let mut deleted = 0;
        loop {
            let n =
                self.write(move |conn| Box::pin(async move { execute!(conn, sql, before, chunk) })).await?;
            deleted += n;
            if n < u64::try_from(chunk).unwrap_or(0) {
                return Ok(deleted);
            }
        }
    }
}

/// How many messages a write deletes while a removed endpoint is purged
/// ([`Store::purge_removed_webhook_endpoint`]): a few milliseconds of either backend's time.
pub const ENDPOINT_REMOVAL_GROUP: i64 = 1_000;

/// PostgreSQL: up to `$3` messages of the endpoint `$1` of the tenant `$2`, oldest first (their
/// attempts go with them), read from `webhook_messages_by_endpoint` in its order so that no
/// statistics make it a walk of the table (the endpoint as a range: with `=`, the order by
/// endpoint and id is the order by id, and a plan may walk the primary key past every other
/// endpoint's messages), then found one by one in the primary key (as `id IN (…)`, the planner
/// hashed the group and read the table whole to find them). Migration 0029 says more. Rows
/// another transaction holds (a group of attempts settling, a claim) are passed by, so the group
/// waits for no one: waiting in id order for rows a settlement locks in its own order, a group
/// deadlocked with it in the bench. What it passes goes in a later group or with the endpoint.
pub const DELETE_ENDPOINT_MESSAGES: &str = "DELETE FROM webhook_messages WHERE id = ANY (ARRAY(
         SELECT m.id FROM webhook_messages m
         WHERE m.endpoint_id >= $1 AND m.endpoint_id <= $1
           AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = $1 AND e.tenant_id = $2)
         ORDER BY m.endpoint_id, m.id LIMIT $3 FOR UPDATE OF m SKIP LOCKED))";

/// [`DELETE_ENDPOINT_MESSAGES`] on SQLite (its foreign keys take the attempts, through their index).
const DELETE_ENDPOINT_MESSAGES_SQLITE: &str = "DELETE FROM webhook_messages WHERE id IN (
         SELECT m.id FROM webhook_messages m
         WHERE m.endpoint_id = $1
           AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.id = $1 AND e.tenant_id = $2)
         ORDER BY m.endpoint_id, m.id LIMIT $3)";

/// Up to `$2` messages settled before `$1` (their attempts go with them).
/// (The conditions again outside: on PostgreSQL a message `recover` queued again since the
/// subquery read it is re-checked against them, not deleted.)
const DELETE_SETTLED_MESSAGES: &str = "DELETE FROM webhook_messages
     WHERE id IN (SELECT id FROM webhook_messages WHERE status <> 'pending' AND updated_at < $1 LIMIT $2)
       AND status <> 'pending' AND updated_at < $1";

/// Up to `$2` events that occurred before `$1`, among those before the first that did not, that
/// the fan-out has passed, that no message refers to and no paused endpoint is owed.
const DELETE_UNNEEDED_EVENTS: &str = "DELETE FROM webhook_events WHERE id IN (
         SELECT v.id FROM webhook_events v
         WHERE v.id < COALESCE((SELECT y.id FROM webhook_events y WHERE y.occurred_at >= $1 ORDER BY y.id LIMIT 1),
                               9223372036854775807)
           AND v.occurred_at < $1
           AND v.id <= (SELECT last_event_id FROM webhook_fan_out WHERE id = 1)
           AND NOT EXISTS (SELECT 1 FROM webhook_messages m WHERE m.event_id = v.id)
           AND NOT EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.paused_after IS NOT NULL AND e.paused_after < v.id)
         ORDER BY v.id LIMIT $2)";

/// PostgreSQL: up to `$2` batches of events (migration 0023) whose every event occurred before
/// `$1`, that the fan-out has passed and no paused endpoint of their tenant is owed: those of
/// tenants whose endpoints were all paused, or disabled and settled, when they were written.
const DELETE_UNNEEDED_BATCHES: &str = "DELETE FROM webhook_event_batches WHERE last_id IN (
         SELECT b.last_id FROM webhook_event_batches b
         WHERE b.last_id <= (SELECT last_event_id FROM webhook_fan_out WHERE id = 1)
           AND (SELECT MAX(o) FROM unnest(b.occurred_ats) o) < $1
           AND NOT EXISTS (SELECT 1 FROM webhook_endpoints e
                           WHERE e.tenant_id = b.tenant_id AND e.paused_after IS NOT NULL AND e.paused_after < b.last_id)
         ORDER BY b.last_id LIMIT $2)";

/// Tells the other daemons sharing PostgreSQL that messages came due (at commit).
async fn notify_webhooks(conn: &mut Conn<'_>) -> StoreResult<()> {
    if conn.engine() == Engine::Postgres {
        execute!(conn, "SELECT pg_notify('herald_webhooks', '')")?;
    }
    Ok(())
}

/// Fails an endpoint's pending messages (it was disabled), and marks it to be settled: what it
/// is owed, and what may be committed for it yet, fails in groups ([`pause::mark_unsettled`]).
async fn fail_pending(conn: &mut Conn<'_>, endpoint_id: &WebhookEndpointId, now: i64) -> StoreResult<()> {
    fail_pending_messages(conn, endpoint_id, now).await?;
    pause::mark_unsettled(conn, endpoint_id).await
}

/// Fails an endpoint's pending messages.
async fn fail_pending_messages(
    conn: &mut Conn<'_>,
    endpoint_id: &WebhookEndpointId,
    now: i64,
) -> StoreResult<()> {
    execute!(
        conn,
        "UPDATE webhook_messages SET status = 'failed', next_attempt_at = NULL, lease = NULL, updated_at = $2
         WHERE endpoint_id = $1 AND status = 'pending'",
        endpoint_id,
        now
    )?;
    Ok(())
}
