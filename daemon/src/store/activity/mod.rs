//! The activity feed: notifications and OTP transactions of a tenant, newest first.
//!
//! Both tables are read directly (no second copy to keep in step). Each half of the union is
//! ordered and cut to `offset + limit` rows on its own index before the two are merged, so a page
//! costs an index range scan per table, and the exact count is a count over the same ranges. An
//! OTP whose time ran out is shown as `expired` without anyone having to write that down.
//!
//! Filters are assembled from fixed SQL fragments with numbered parameters; no caller input is
//! ever part of the SQL text.

use herald_common::{
    api::{activity::ActivityStatus, notifications::Channel},
    ids::{ApplicationId, NotificationId, TenantId, TransactionId},
};

use super::{Conn, Engine, Store, StoreResult, execute, scalar};

/// What to list.
#[derive(Clone, Debug)]
pub struct ActivityFilter {
    pub tenant_id: TenantId,
    pub channel: Option<Channel>,
    pub status: Option<ActivityStatus>,
    pub application_id: Option<ApplicationId>,
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// Notifications of one category (OTPs have none).
    pub category: Option<String>,
}

impl ActivityFilter {
    /// Everything of a tenant.
    pub fn tenant(tenant_id: TenantId) -> Self {
        Self {
            tenant_id,
            channel: None,
            status: None,
            application_id: None,
            from: None,
            to: None,
            category: None,
        }
    }
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ActivityRow {
    pub transaction_id: TransactionId,
    pub application_id: ApplicationId,
    pub application_name: String,
    pub channel: Channel,
    pub recipient_masked: String,
    pub status: ActivityStatus,
    pub failure_reason: Option<String>,
    pub retryable: bool,
    pub retry_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub failed_attempts: i64,
    pub category: Option<String>,
}

crate::store::local::local_row!(ActivityRow {
    transaction_id,
    application_id,
    application_name,
    channel,
    recipient_masked,
    status,
    failure_reason,
    retryable,
    retry_count,
    created_at,
    updated_at,
    failed_attempts,
    category
});

#[derive(Debug, PartialEq, Eq)]
pub enum RetryResult {
    Queued,
    NotRetryable,
    NotFound,
}

enum Arg {
    Text(String),
    Int(i64),
}

/// SQL text with its numbered arguments.
#[derive(Default)]
struct Sql {
    args: Vec<Arg>,
}

impl Sql {
    fn text(&mut self, value: impl AsRef<str>) -> String {
        self.args.push(Arg::Text(value.as_ref().to_owned()));
        format!("${}", self.args.len())
    }

    fn int(&mut self, value: i64) -> String {
        self.args.push(Arg::Int(value));
        format!("${}", self.args.len())
    }
}

/// A feed row as selected from the merged halves (alias `x`) joined with the application (`a`).
const FEED_ROW: &str = "x.transaction_id, x.application_id, a.name AS application_name, x.channel, \
     x.recipient_masked, x.status, x.failure_reason, x.retryable, x.retry_count, x.created_at, x.updated_at, \
     x.failed_attempts, x.category";

/// A notification as a feed row (alias `n`).
const NOTIFICATION_COLUMNS: &str = "n.id AS transaction_id, n.application_id, n.channel, n.recipient_masked, \
     n.status AS status, n.failure_reason, n.retryable, n.retry_count, n.created_at, n.updated_at, \
     CAST(0 AS BIGINT) AS failed_attempts, n.category";

/// An OTP transaction as a feed row (alias `o`), its status as of `now`.
fn otp_columns(now: &str) -> String {
    format!(
        "o.id AS transaction_id, o.application_id, o.channel, o.recipient_masked, {} AS status, \
         o.failure_reason, FALSE AS retryable, CAST(0 AS BIGINT) AS retry_count, o.created_at, o.updated_at, \
         o.failed_attempts, CAST(NULL AS TEXT) AS category",
        otp_status(now)
    )
}
fn otp_status(now: &str) -> String {
    format!(
        "CASE WHEN o.status IN ('sent', 'sending') AND o.expires_at <= {now} THEN 'expired' \
         WHEN o.status = 'sending' THEN 'sent' ELSE o.status END"
    )
}

/// The WHERE clauses of each half, for a filter.
fn conditions(filter: &ActivityFilter, sql: &mut Sql, now: &str) -> (String, String) {
    let tenant = sql.text(&filter.tenant_id);
    let mut n = format!("n.tenant_id = {tenant}");
    let mut o = format!("o.tenant_id = {tenant}");
    if let Some(channel) = &filter.channel {
        let p = sql.text(channel);
        n.push_str(&format!(" AND n.channel = {p}"));
        o.push_str(&format!(" AND o.channel = {p}"));
    }
    if let Some(application) = &filter.application_id {
        let p = sql.text(application);
        n.push_str(&format!(" AND n.application_id = {p}"));
        o.push_str(&format!(" AND o.application_id = {p}"));
    }
    if let Some(from) = filter.from {
        let p = sql.int(from);
        n.push_str(&format!(" AND n.created_at >= {p}"));
        o.push_str(&format!(" AND o.created_at >= {p}"));
    }
    if let Some(to) = filter.to {
        let p = sql.int(to);
        n.push_str(&format!(" AND n.created_at < {p}"));
        o.push_str(&format!(" AND o.created_at < {p}"));
    }
    if let Some(status) = filter.status {
        let p = sql.text(status);
        n.push_str(&format!(" AND n.status = {p}"));
        // The OTP half matches stored and derived statuses.
        match status {
            ActivityStatus::Sent => {
                o.push_str(&format!(" AND o.status IN ('sent', 'sending') AND o.expires_at > {now}"))
            }
            ActivityStatus::Expired => o.push_str(&format!(
                " AND (o.status = 'expired' OR (o.status IN ('sent', 'sending') AND o.expires_at <= {now}))"
            )),
            ActivityStatus::Verified | ActivityStatus::Tombstoned | ActivityStatus::Failed => {
                o.push_str(&format!(" AND o.status = {p}"))
            }
            ActivityStatus::Queued
            | ActivityStatus::Sending
            | ActivityStatus::Delivered
            | ActivityStatus::Read
            | ActivityStatus::Undelivered
            | ActivityStatus::Bounced
            | ActivityStatus::Complained
            | ActivityStatus::Suppressed => o.push_str(" AND 1 = 0"),
        }
    }
    if let Some(category) = &filter.category {
        let p = sql.text(category);
        n.push_str(&format!(" AND n.category = {p}"));
        o.push_str(" AND 1 = 0");
    }
    (n, o)
}

macro_rules! bound {
    ($query:expr, $args:expr) => {{
        let mut query = $query;
        for arg in $args {
            query = match arg {
                Arg::Text(s) => query.bind(s),
                Arg::Int(i) => query.bind(i),
            };
        }
        query
    }};
}

/// The arguments as rusqlite parameters, for the SQLite writer's own connection.
fn local_params(args: &[Arg]) -> Vec<&dyn rusqlite::ToSql> {
    args.iter()
        .map(|arg| match arg {
            Arg::Text(s) => s as &dyn rusqlite::ToSql,
            Arg::Int(i) => i as &dyn rusqlite::ToSql,
        })
        .collect()
}

/// Runs dynamic SQL (built from fixed fragments) with its numbered arguments on either backend:
/// `dynamic!(conn, fetch_all, query_as::<Row>, sql, args)` (or `query_scalar::<T>`); evaluates
/// to a `StoreResult`.
macro_rules! dynamic {
    ($conn:expr, $method:ident, query_as::<$ty:ty>, $sql:expr, $args:expr) => {
        dynamic!(@run $conn, $method, query_as::<$ty>, $sql, $args, crate::store::local::$method::<$ty>)
    };
    ($conn:expr, $method:ident, query_scalar::<$ty:ty>, $sql:expr, $args:expr) => {
        dynamic!(@run $conn, $method, query_scalar::<$ty>, $sql, $args, crate::store::local::scalar::$method::<$ty>)
    };
    (@run $conn:expr, $method:ident, $make:ident::<$ty:ty>, $sql:expr, $args:expr, $local:path) => {
        match $conn {
            Conn::Sqlite(c) => bound!(sqlx::$make::<_, $ty>(sqlx::AssertSqlSafe($sql)), $args)
                .$method(&mut **c)
                .await
                .map_err(crate::store::StoreError::from),
            Conn::Postgres(c) => bound!(sqlx::$make::<_, $ty>(sqlx::AssertSqlSafe($sql)), $args)
                .$method(&mut **c)
                .await
                .map_err(crate::store::StoreError::from),
            Conn::Local(c) => $local(c, &$sql, &crate::store::activity::local_params(&$args)),
        }
    };
}

// After the macros, which it uses.
mod counts;

/// A page of one category's notifications: the counters do not keep categories, so the count
/// is exact over the rows (`notifications_by_category`) and the page an offset into them.
async fn list_category(
    conn: &mut Conn<'_>,
    filter: &ActivityFilter,
    now: i64,
    limit: i64,
    offset: i64,
) -> StoreResult<(Vec<ActivityRow>, u64)> {
    let mut count = Sql::default();
    let now_p = count.int(now);
    let (n_where, _) = conditions(filter, &mut count, &now_p);
    let total = dynamic!(
        &mut *conn,
        fetch_one,
        query_scalar::<i64>,
        format!("SELECT COUNT(*) FROM notifications n WHERE {n_where}"),
        count.args
    )?;
    let mut page = Sql::default();
    let now_p = page.int(now);
    let (n_where, _) = conditions(filter, &mut page, &now_p);
    let (limit_p, offset_p) = (page.int(limit), page.int(offset));
    let text = format!(
        "SELECT {FEED_ROW}
         FROM (SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE {n_where}
               ORDER BY n.created_at DESC, n.id DESC LIMIT {limit_p} OFFSET {offset_p}) x
         JOIN applications a ON a.id = x.application_id
         ORDER BY x.created_at DESC, x.transaction_id DESC"
    );
    let rows = dynamic!(&mut *conn, fetch_all, query_as::<ActivityRow>, text, page.args)?;
    Ok((rows, u64::try_from(total).unwrap_or(0)))
}

/// Moves PostgreSQL's counter changes into the hourly and daily counters, in one statement: the
/// deltas it deletes are exactly the ones it adds (changes committed meanwhile stay for the next
/// fold).
const FOLD_POSTGRES: &str = "WITH moved AS (
         DELETE FROM activity_count_deltas
         RETURNING tenant_id, hour, application_id, kind, channel, status, n),
     summed AS (
         SELECT tenant_id, hour, application_id, kind, channel, status, SUM(n) AS n FROM moved m
         WHERE EXISTS (SELECT 1 FROM tenants t WHERE t.id = m.tenant_id)
         GROUP BY tenant_id, hour, application_id, kind, channel, status),
     hourly AS (
         INSERT INTO activity_counts (tenant_id, hour, application_id, kind, channel, status, n)
         SELECT tenant_id, hour, application_id, kind, channel, status, n FROM summed
         ON CONFLICT (tenant_id, hour, application_id, kind, channel, status)
         DO UPDATE SET n = activity_counts.n + excluded.n)
     INSERT INTO activity_counts_daily (tenant_id, day, application_id, kind, channel, status, n)
     SELECT tenant_id, hour / 24, application_id, kind, channel, status, SUM(n) FROM summed
     GROUP BY tenant_id, hour / 24, application_id, kind, channel, status
     ON CONFLICT (tenant_id, day, application_id, kind, channel, status)
     DO UPDATE SET n = activity_counts_daily.n + excluded.n";

impl Store {
    /// One page of the feed and the number of items the filter matches. The count and the
    /// place where the page starts come from the hourly counters (one snapshot with the rows),
    /// so neither a broad filter nor a deep page walks the rows before it.
    pub async fn list_activity(
        &self,
        filter: &ActivityFilter,
        now: i64,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<ActivityRow>, u64)> {
        let mut read = self.read().await?;
        let mut snapshot = read.snapshot().await?;
        let mut conn = snapshot.conn();
        if filter.category.is_some() {
            return list_category(&mut conn, filter, now, limit, offset).await;
        }
        let buckets = counts::buckets(&mut conn, filter, now).await?;
        let total = u64::try_from(buckets.iter().map(|b| b.n).sum::<i64>()).unwrap_or(0);
        let Some((lower, upper, skip)) = counts::page_span(&mut conn, filter, buckets, offset, limit).await?
        else {
            return Ok((Vec::new(), total));
        };
        let mut page = Sql::default();
        let now_p = page.int(now);
        let (mut n_where, mut o_where) = conditions(filter, &mut page, &now_p);
        let (upper, lower) = (page.int(upper), page.int(lower));
        n_where.push_str(&format!(" AND n.created_at < {upper} AND n.created_at >= {lower}"));
        o_where.push_str(&format!(" AND o.created_at < {upper} AND o.created_at >= {lower}"));
        let window = page.int(limit + skip);
        let limit_p = page.int(limit);
        let skip_p = page.int(skip);
        let otp_columns = otp_columns(&now_p);
        let page_sql = format!(
            "SELECT {FEED_ROW}
             FROM (
                 SELECT * FROM (
                     SELECT {NOTIFICATION_COLUMNS}
                     FROM notifications n WHERE {n_where}
                     ORDER BY n.created_at DESC, n.id DESC LIMIT {window}) notification_page
                 UNION ALL
                 SELECT * FROM (
                     SELECT {otp_columns}
                     FROM otp_transactions o WHERE {o_where}
                     ORDER BY o.created_at DESC, o.id DESC LIMIT {window}) otp_page
                 ORDER BY created_at DESC, transaction_id DESC LIMIT {limit_p} OFFSET {skip_p}
             ) x JOIN applications a ON a.id = x.application_id
             ORDER BY x.created_at DESC, x.transaction_id DESC"
        );
        let rows = dynamic!(&mut conn, fetch_all, query_as::<ActivityRow>, page_sql, page.args)?;
        Ok((rows, total))
    }

    /// Folds the counters' pending changes (PostgreSQL's triggers append them to
    /// `activity_count_deltas`) into `activity_counts`, and drops counters that reached zero.
    /// One daemon at a time does it (an advisory lock); the others skip.
    pub async fn fold_activity_counts(&self) -> StoreResult<()> {
        if self.engine() != Engine::Postgres {
            return Ok(());
        }
        self.write(|conn| {
            Box::pin(async move {
                let locked = scalar!(conn, fetch_one, bool, "SELECT pg_try_advisory_xact_lock(4242001)")?;
                if locked {
                    execute!(conn, FOLD_POSTGRES)?;
                }
                Ok(())
            })
        })
        .await
    }

    /// Vacuums PostgreSQL's table of pending counter changes: every fold deletes all its rows, and
    /// readers scan it, so its dead rows must not wait for autovacuum's next round (a minute).
    /// VACUUM cannot run in a transaction, so this runs on a pooled connection, not the writer.
    pub async fn vacuum_activity_deltas(&self) -> StoreResult<()> {
        if self.engine() == Engine::Postgres {
            let mut conn = self.read().await?;
            execute!(&mut conn.conn(), "VACUUM activity_count_deltas")?;
        }
        Ok(())
    }

    /// Deletes counters that are zero (every item of theirs moved to another status).
    pub async fn prune_activity_counts(&self) -> StoreResult<u64> {
        self.write(|conn| {
            Box::pin(async move {
                Ok(execute!(conn, "DELETE FROM activity_counts WHERE n = 0")?
                    + execute!(conn, "DELETE FROM activity_counts_daily WHERE n = 0")?)
            })
        })
        .await
    }

    /// One item of a tenant's feed.
    pub async fn get_activity(
        &self,
        tenant_id: &TenantId,
        id: &TransactionId,
        now: i64,
    ) -> StoreResult<Option<ActivityRow>> {
        let filter = ActivityFilter::tenant(tenant_id.clone());
        let mut sql = Sql::default();
        let now_p = sql.int(now);
        let (n_where, o_where) = conditions(&filter, &mut sql, &now_p);
        let id_p = sql.text(id);
        let otp_columns = otp_columns(&now_p);
        let text = format!(
            "SELECT {FEED_ROW}
             FROM (
                 SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE {n_where} AND n.id = {id_p}
                 UNION ALL
                 SELECT {otp_columns} FROM otp_transactions o WHERE {o_where} AND o.id = {id_p}
             ) x JOIN applications a ON a.id = x.application_id"
        );
        let mut read = self.read().await?;
        Ok(dynamic!(&mut read.conn(), fetch_optional, query_as::<ActivityRow>, text, sql.args)?)
    }

    /// Items of a tenant whose last change comes after `after` = (updated_at ms, transaction
    /// id) in that order, oldest change first, at most `limit`, each once (its latest state).
    /// Paging on the pair (not on the time alone) moves past any number of changes made in one
    /// millisecond or one reorder window.
    pub async fn activity_changes(
        &self,
        tenant_id: &TenantId,
        after: (i64, &str),
        now: i64,
        limit: i64,
    ) -> StoreResult<Vec<ActivityRow>> {
        let mut sql = Sql::default();
        let tenant = sql.text(tenant_id);
        let at = sql.int(after.0);
        let id = sql.text(after.1);
        let now_p = sql.int(now);
        let limit_p = sql.int(limit);
        let otp_columns = otp_columns(&now_p);
        let text = format!(
            "SELECT {FEED_ROW}
             FROM (
                 SELECT * FROM (
                     SELECT {NOTIFICATION_COLUMNS}
                     FROM notifications n
                     WHERE n.tenant_id = {tenant} AND n.updated_at >= {at}
                       AND (n.updated_at > {at} OR n.id > {id})
                     ORDER BY n.updated_at, n.id LIMIT {limit_p}) notification_changes
                 UNION ALL
                 SELECT * FROM (
                     SELECT {otp_columns}
                     FROM otp_transactions o
                     WHERE o.tenant_id = {tenant} AND o.updated_at >= {at}
                       AND (o.updated_at > {at} OR o.id > {id})
                     ORDER BY o.updated_at, o.id LIMIT {limit_p}) otp_changes
                 ORDER BY updated_at, transaction_id LIMIT {limit_p}
             ) x JOIN applications a ON a.id = x.application_id
             ORDER BY x.updated_at, x.transaction_id"
        );
        let mut read = self.read().await?;
        Ok(dynamic!(&mut read.conn(), fetch_all, query_as::<ActivityRow>, text, sql.args)?)
    }

    /// Queues a failed, retryable notification again. Exactly one of any number of concurrent
    /// retries of one item succeeds (the conditional update is the arbiter).
    pub async fn retry_notification(
        &self,
        tenant_id: &TenantId,
        id: &TransactionId,
        now: i64,
    ) -> StoreResult<RetryResult> {
        let (tenant, id) = (tenant_id.clone(), id.clone());
        self.write(move |conn| {
            Box::pin(async move {
                if requeue(conn, &tenant, &id, now).await? {
                    return Ok(RetryResult::Queued);
                }
                let known = scalar!(
                    conn,
                    fetch_one,
                    i64,
                    "SELECT (SELECT COUNT(*) FROM notifications WHERE id = $1 AND tenant_id = $2)
                          + (SELECT COUNT(*) FROM otp_transactions WHERE id = $1 AND tenant_id = $2)",
                    &id,
                    &tenant
                )?;
                Ok(if known > 0 { RetryResult::NotRetryable } else { RetryResult::NotFound })
            })
        })
        .await
    }

    /// Queues again up to `max` failed, retryable notifications matching `filter` (oldest first).
    pub async fn retry_matching(&self, filter: ActivityFilter, now: i64, max: i64) -> StoreResult<u64> {
        self.write(move |conn| {
            Box::pin(async move {
                let mut sql = Sql::default();
                let now_p = sql.int(now);
                let (n_where, _) = conditions(&filter, &mut sql, &now_p);
                let max_p = sql.int(max);
                let retried = retried_statuses();
                let text = format!(
                    "SELECT n.id FROM notifications n
                     WHERE {n_where} AND n.status IN ({retried}) AND n.retryable
                     ORDER BY n.created_at LIMIT {max_p}"
                );
                let ids: Vec<NotificationId> =
                    dynamic!(conn, fetch_all, query_scalar::<NotificationId>, text, sql.args)?;
                let mut queued = 0;
                for id in ids {
                    if requeue(conn, &filter.tenant_id, &TransactionId::Notification(id), now).await? {
                        queued += 1;
                    }
                }
                Ok(queued)
            })
        })
        .await
    }
}

/// The statuses a retry applies to, as an SQL list (`'failed', 'undelivered', 'bounced'`).
fn retried_statuses() -> String {
    ActivityStatus::RETRIED.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", ")
}

static REQUEUE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "UPDATE notifications SET status = 'queued', retry_count = retry_count + 1, retryable = FALSE,
             failure_reason = NULL, updated_at = $3
         WHERE id = $1 AND tenant_id = $2 AND status IN ({}) AND retryable",
        retried_statuses()
    )
});

/// Sets a retryable notification that failed, or that a receipt said did not arrive
/// (`undelivered`, `bounced`; see `ActivityStatus::RETRIED`), back to `queued` with a new delivery job.
async fn requeue(conn: &mut Conn<'_>, tenant: &TenantId, id: &TransactionId, now: i64) -> StoreResult<bool> {
    let updated = execute!(conn, REQUEUE.as_str(), id, tenant, now)?;
    if updated == 0 {
        return Ok(false);
    }
    execute!(
        conn,
        "INSERT INTO deliveries (notification_id, state, cycle_attempt, next_attempt_at) VALUES ($1, 'pending', 0, $2)",
        id,
        now
    )?;
    Ok(true)
}
