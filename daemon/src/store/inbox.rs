//! Users' inboxes. Items are numbered per user (`seq`, from the user's sequence row, allocated
//! inside the inserting transaction), which is also the stream's event id.

use herald_common::ids::{ApplicationId, InAppId, UserId};

use super::{Engine, InboxChange, JsonObject, Store, StoreResult, execute, fetch, scalar};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct InboxRecord {
    pub id: InAppId,
    pub application_id: ApplicationId,
    pub user_id: UserId,
    pub seq: i64,
    pub title: String,
    pub body: String,
    pub data: Option<JsonObject>,
    pub is_read: bool,
    pub archived: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

super::local::local_row!(InboxRecord {
    id,
    application_id,
    user_id,
    seq,
    title,
    body,
    data,
    is_read,
    archived,
    created_at,
    updated_at
});

/// What to change of an item (`None`: leave as it is).
#[derive(Clone, Copy, Debug, Default)]
pub struct InboxItemChange {
    pub is_read: Option<bool>,
    pub archived: Option<bool>,
}

/// Which items a page shows.
#[derive(Clone, Debug)]
pub struct InboxPage {
    pub unread_only: bool,
    pub archived: bool,
    /// Items with a sequence below this (the cursor).
    pub before_seq: Option<i64>,
    pub limit: i64,
}

/// The columns of an [`InboxRecord`], for `concat!` into static SQL.
macro_rules! inbox_columns {
    () => {
        "id, application_id, user_id, seq, title, body, data, is_read, archived, created_at, updated_at"
    };
}

/// The channel PostgreSQL notifications about inboxes travel on.
pub const INBOX_CHANNEL: &str = "herald_inbox";

impl Store {
    pub async fn inbox_page(
        &self,
        app: &ApplicationId,
        user: &UserId,
        page: &InboxPage,
    ) -> StoreResult<Vec<InboxRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_all,
            InboxRecord,
            concat!("SELECT ", inbox_columns!(), "
             FROM inbox_items
             WHERE application_id = $1 AND user_id = $2 AND archived = $3 AND (NOT $4 OR NOT is_read) AND seq < $5
             ORDER BY seq DESC LIMIT $6"),
            app,
            user,
            page.archived,
            page.unread_only,
            page.before_seq.unwrap_or(i64::MAX),
            page.limit
        )?)
    }

    pub async fn unread_count(&self, app: &ApplicationId, user: &UserId) -> StoreResult<u64> {
        let mut read = self.read().await?;
        let count = scalar!(
            &mut read.conn(),
            fetch_one,
            i64,
            "SELECT COUNT(*) FROM inbox_items
             WHERE application_id = $1 AND user_id = $2 AND NOT archived AND NOT is_read",
            app,
            user
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Items after `after_seq`, oldest first (stream replay and catch-up).
    pub async fn inbox_after(
        &self,
        app: &ApplicationId,
        user: &UserId,
        after_seq: i64,
        limit: i64,
    ) -> StoreResult<Vec<InboxRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_all,
            InboxRecord,
            concat!(
                "SELECT ",
                inbox_columns!(),
                "
             FROM inbox_items WHERE application_id = $1 AND user_id = $2 AND seq > $3 ORDER BY seq LIMIT $4"
            ),
            app,
            user,
            after_seq,
            limit
        )?)
    }

    /// The user's latest sequence number (0 before the first item).
    /// The user's newest item id (sequence) and unread count, from one snapshot (one statement),
    /// as a stream's `connection.ready` needs them: read apart, an item committed in between
    /// is in the count but not at or below the id, and a reader counting the items above the id
    /// counts it twice.
    pub async fn inbox_position(&self, app: &ApplicationId, user: &UserId) -> StoreResult<(i64, u64)> {
        let mut read = self.read().await?;
        let (last_seq, unread): (i64, i64) = fetch!(
            &mut read.conn(),
            fetch_one,
            (i64, i64),
            "SELECT COALESCE((SELECT last_seq FROM inbox_sequences WHERE application_id = $1 AND user_id = $2), 0),
                    (SELECT COUNT(*) FROM inbox_items
                     WHERE application_id = $1 AND user_id = $2 AND NOT archived AND NOT is_read)",
            app,
            user
        )?;
        Ok((last_seq, u64::try_from(unread).unwrap_or(0)))
    }

    pub async fn inbox_item(&self, app: &ApplicationId, id: &InAppId) -> StoreResult<Option<InboxRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            InboxRecord,
            concat!(
                "SELECT ",
                inbox_columns!(),
                "
             FROM inbox_items WHERE application_id = $1 AND id = $2"
            ),
            app,
            id
        )?)
    }

    /// Changes an item of `user`; `None` if the user has no such item. The user's open streams,
    /// on every daemon, hear of it once it has committed.
    pub async fn update_inbox_item(
        &self,
        app: &ApplicationId,
        user: &UserId,
        id: &InAppId,
        change: InboxItemChange,
        now: i64,
    ) -> StoreResult<Option<InboxRecord>> {
        let (app_id, user_id, id) = (app.clone(), user.clone(), id.clone());
        let updated = self
            .write(move |conn| {
                Box::pin(async move {
                    let updated = fetch!(
                        conn,
                        fetch_optional,
                        InboxRecord,
                        concat!("UPDATE inbox_items SET is_read = COALESCE($4, is_read), archived = COALESCE($5, archived),
                             updated_at = $6
                         WHERE application_id = $1 AND user_id = $2 AND id = $3
                         RETURNING ", inbox_columns!()),
                        &app_id,
                        &user_id,
                        &id,
                        change.is_read,
                        change.archived,
                        now
                    )?;
                    if let Some(item) = &updated {
                        notify(conn, &app_id, &user_id, &item.id).await?;
                    }
                    Ok(updated)
                })
            })
            .await?;
        if let Some(item) = &updated {
            self.announce(InboxChange::Updated { app, user, item: &item.id });
        }
        Ok(updated)
    }

    /// Marks every unread, unarchived item of `user` read; returns the items changed. The
    /// user's open streams hear of each once it has committed.
    pub async fn mark_all_read(
        &self,
        app: &ApplicationId,
        user: &UserId,
        now: i64,
    ) -> StoreResult<Vec<InboxRecord>> {
        let (app_id, user_id) = (app.clone(), user.clone());
        let updated = self
            .write(move |conn| {
                Box::pin(async move {
                    let updated = fetch!(
                        conn,
                        fetch_all,
                        InboxRecord,
                        concat!(
                            "UPDATE inbox_items SET is_read = TRUE, updated_at = $3
                         WHERE application_id = $1 AND user_id = $2 AND NOT is_read AND NOT archived
                         RETURNING ",
                            inbox_columns!()
                        ),
                        &app_id,
                        &user_id,
                        now
                    )?;
                    for item in &updated {
                        notify(conn, &app_id, &user_id, &item.id).await?;
                    }
                    Ok(updated)
                })
            })
            .await?;
        for item in &updated {
            self.announce(InboxChange::Updated { app, user, item: &item.id });
        }
        Ok(updated)
    }
}

/// On PostgreSQL, tells every daemon (LISTEN `herald_inbox`) that an item of `user`'s inbox
/// changed. NOTIFY is transactional: it is sent at commit, or never. (A new item's NOTIFY is sent
/// by the statement that inserts it, `INBOX_POSTGRES` in store/notifications.rs.)
async fn notify(
    conn: &mut super::Conn<'_>,
    app: &ApplicationId,
    user: &UserId,
    item: &InAppId,
) -> StoreResult<()> {
    if conn.engine() == Engine::Postgres {
        execute!(
            conn,
            "SELECT pg_notify('herald_inbox', $1)",
            notify_payload(app, user.as_str(), Some(item))
        )?;
    }
    Ok(())
}

/// The `herald_inbox` NOTIFY payload: application, user and, for a changed item, its id (none
/// for a new item).
pub(super) fn notify_payload(app: &ApplicationId, user: &str, item: Option<&InAppId>) -> String {
    serde_json::json!({"a": app, "u": user, "i": item}).to_string()
}

/// The `herald_inbox` NOTIFY payload for a batch of new items: every (application, user) whose
/// inbox grew.
pub(super) fn notify_created_payload(users: &[[&str; 2]]) -> String {
    serde_json::json!({ "c": users }).to_string()
}
