//! Storage. One [`Store`] runs the same queries on SQLite (the embedded default) and on
//! PostgreSQL (several daemons sharing one database). Each query is written once against
//! [`Conn`], which is either backend's connection; the few places where the dialects differ
//! branch on [`Conn::engine`].
//!
//! Writes go through [`writer`]: a task that owns a connection and runs many callers' writes in
//! one transaction (group commit, each caller's work isolated by a savepoint), answering each caller
//! only after the commit. SQLite has one such writer (it has one write lock anyway); PostgreSQL
//! has several. Reads use a separate pool.
//!
//! Rows are typed: ids and enums are parsed when a row is read (a corrupt value fails the read
//! with [`StoreError::Corrupt`]), so nothing above the store compares status strings.
//!
//! What differs between the engines stays here. In particular, changes to inboxes are announced
//! to the daemon's [`Hub`] by the store: on SQLite after the commit, on PostgreSQL by a NOTIFY
//! inside the transaction that [`Store::listen_for_changes`] hears on every daemon.

mod activity;
mod credentials;
mod domains;
mod idempotency;
mod inbox;
mod kinds;
mod listen;
pub(crate) mod local;
mod notifications;
mod otp;
mod receipts;
mod streams;
mod suppressions;
mod templates;
mod webhooks;
pub(crate) mod writer;

use std::{
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures_util::future::BoxFuture;
use herald_common::ids::{ApplicationId, InAppId, UserId};
use sqlx::{
    PgConnection, SqliteConnection,
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

pub use activity::{ActivityFilter, ActivityRow, RetryResult};
pub use credentials::{ApiKeyRecord, ApplicationRecord, TenantRecord};
pub use domains::{DomainCheck, DomainRecord};
pub use idempotency::{DispatchResult, IdempotencyKey};
pub use inbox::{InboxItemChange, InboxPage, InboxRecord};
pub use notifications::{
    AttemptRecord, AttemptResult, AttemptSpan, ClaimedDelivery, IdempotentResponse, NewNotification,
    NotificationRecord,
};
pub use otp::{Limit, NewOtp, OTP_MAX_TTL_SECONDS, OtpMessages, OtpSendStart, OtpSnapshot, OtpVerdict};
pub use receipts::{NewReceipt, ReceiptOutcome, ReceiptRecord};
pub use streams::OpenStream;
pub use suppressions::{NewSuppression, NotificationRecipient, SuppressionFilter, SuppressionRecord};
pub use templates::TemplateRecord;
pub use webhooks::{
    AttemptRow, ClaimedMessage, DueEndpoint, ENDPOINT_REMOVAL_GROUP, EndpointChanges, FanOutLock,
    MessageRecord, Purged, Verdict, WebhookAttemptRecord, WebhookEndpointRecord,
};
pub use writer::runtime::CRASH_LOOP as WRITER_CRASH_LOOP;

/// The dispatcher's PostgreSQL statements, for the tests that check their plans.
#[doc(hidden)]
pub mod webhook_statements {
    pub use super::webhooks::{CLAIM_POSTGRES, DELETE_ENDPOINT_MESSAGES, SETTLE_POSTGRES, SIBLINGS_POSTGRES};
}

use crate::{
    config::{Config, DatabaseUrl},
    hub::Hub,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database error: {0}")]
    Local(rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("the database writer has stopped")]
    WriterGone,
    #[error("cannot open the database: {0}")]
    Open(String),
    /// No connection to the database could be had (the pool timed out or the server refused).
    #[error("the database is not available: {0}")]
    Unavailable(String),
    /// The transaction this write was batched into failed to begin or commit (the write itself
    /// was fine, but did not happen).
    #[error("the write's transaction failed: {0}")]
    Batch(String),
    /// A stored value is not one the schema allows: a corrupt row.
    #[error("a stored row is corrupt: {0}")]
    Corrupt(String),
    /// A statement the store itself builds is malformed (a bug, not bad input).
    #[error("invalid statement: {0}")]
    Statement(String),
}

impl StoreError {
    /// Whether the database refused the write only because of another transaction at the same
    /// moment (a deadlock it broke, a serialization failure): the same write, run again once the
    /// other has gone, succeeds.
    pub fn is_conflict(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(e)) => {
                matches!(e.code().as_deref(), Some("40P01" | "40001"))
            }
            _ => false,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::ColumnDecode { index, source } => {
                StoreError::Corrupt(format!("column {index}: {source}"))
            }
            sqlx::Error::Decode(source) => StoreError::Corrupt(source.to_string()),
            sqlx::Error::PoolTimedOut => StoreError::Unavailable("the connection pool timed out".to_owned()),
            other => StoreError::Database(other),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        match error {
            rusqlite::Error::FromSqlConversionFailure(index, _, source) => {
                StoreError::Corrupt(format!("column {index}: {source}"))
            }
            other => StoreError::Local(other),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Which engine a connection belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A connection of either backend. Queries take `&mut Conn` and run through the macros below,
/// which expand to the same `sqlx` call on whichever connection it is, or, on the SQLite
/// writer's own connection (`Local`), to the same statement run in place ([`local`]).
pub enum Conn<'c> {
    Sqlite(&'c mut SqliteConnection),
    Postgres(&'c mut PgConnection),
    Local(&'c mut rusqlite::Connection),
}

impl Conn<'_> {
    pub fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite(_) | Conn::Local(_) => Engine::Sqlite,
            Conn::Postgres(_) => Engine::Postgres,
        }
    }
}

/// Calls into the database since the process started: every statement run through the macros
/// below or the writer's transaction control. On PostgreSQL each is one round trip; on SQLite a
/// call may hold several statements, run in place. `/metrics` shows it as
/// `herald_store_calls_total`, and `herald-bench` divides it by what was dispatched.
/// How many group-commit writers a daemon runs on PostgreSQL: those configured, leaving two of
/// the pool's connections to readers and the listener (so one with a pool of three or fewer).
/// Two by default: one batch commits while the next is written; more only split the queue into
/// smaller batches. With several daemons on one database, each daemon's writers split the load
/// further, so one each keeps the batches large (docs/PERFORMANCE.md, "Writers").
fn postgres_writers(configured: usize, max_connections: u32) -> usize {
    let spare = usize::try_from(max_connections.saturating_sub(2)).unwrap_or(usize::MAX);
    configured.min(spare).max(1)
}

static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn count_call() {
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

pub fn calls() -> u64 {
    CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Write operations written in a group with others of their kind so far (see [`writer`]).
pub fn grouped_operations() -> u64 {
    writer::batch_counts().2
}

/// Runs a statement; evaluates to `StoreResult<u64>` (rows affected).
macro_rules! execute {
    ($conn:expr, $sql:expr $(, $bind:expr)* $(,)?) => {{
        $crate::store::count_call();
        match $conn {
            $crate::store::Conn::Sqlite(c) => sqlx::query($sql)$(.bind($bind))*
                .execute(&mut **c)
                .await
                .map(|r| r.rows_affected())
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Postgres(c) => sqlx::query($sql)$(.bind($bind))*
                .execute(&mut **c)
                .await
                .map(|r| r.rows_affected())
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Local(c) => {
                $crate::store::local::execute(c, $sql, &[$(&$bind as &dyn rusqlite::ToSql),*])
            }
        }
    }};
}

/// Fetches rows as `$row` (a `sqlx::FromRow` type that is also a `local::FromLocalRow`) with
/// `fetch_one`, `fetch_optional` or `fetch_all`.
macro_rules! fetch {
    ($conn:expr, $method:ident, $row:ty, $sql:expr $(, $bind:expr)* $(,)?) => {{
        $crate::store::count_call();
        match $conn {
            $crate::store::Conn::Sqlite(c) => sqlx::query_as::<_, $row>($sql)$(.bind($bind))*
                .$method(&mut **c)
                .await
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Postgres(c) => sqlx::query_as::<_, $row>($sql)$(.bind($bind))*
                .$method(&mut **c)
                .await
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Local(c) => {
                $crate::store::local::$method::<$row>(c, $sql, &[$(&$bind as &dyn rusqlite::ToSql),*])
            }
        }
    }};
}

/// Fetches one column as `$ty` with `fetch_one`, `fetch_optional` or `fetch_all`.
macro_rules! scalar {
    ($conn:expr, $method:ident, $ty:ty, $sql:expr $(, $bind:expr)* $(,)?) => {{
        $crate::store::count_call();
        match $conn {
            $crate::store::Conn::Sqlite(c) => sqlx::query_scalar::<_, $ty>($sql)$(.bind($bind))*
                .$method(&mut **c)
                .await
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Postgres(c) => sqlx::query_scalar::<_, $ty>($sql)$(.bind($bind))*
                .$method(&mut **c)
                .await
                .map_err($crate::store::StoreError::from),
            $crate::store::Conn::Local(c) => {
                $crate::store::local::scalar::$method::<$ty>(c, $sql, &[$(&$bind as &dyn rusqlite::ToSql),*])
            }
        }
    }};
}

pub(crate) use {execute, fetch, scalar};

/// A pooled read connection of either backend.
pub enum ReadConn {
    Sqlite(PoolConnection<sqlx::Sqlite>),
    Postgres(PoolConnection<sqlx::Postgres>),
}

impl ReadConn {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            ReadConn::Sqlite(c) => Conn::Sqlite(c),
            ReadConn::Postgres(c) => Conn::Postgres(c),
        }
    }

    /// A read-only transaction: every query in it sees the same snapshot of the database
    /// (PostgreSQL: repeatable read). Rolled back when dropped.
    pub async fn snapshot(&mut self) -> StoreResult<Snapshot<'_>> {
        use sqlx::Connection;
        Ok(match self {
            ReadConn::Sqlite(c) => Snapshot::Sqlite(c.begin().await?),
            ReadConn::Postgres(c) => {
                Snapshot::Postgres(c.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?)
            }
        })
    }
}

/// See [`ReadConn::snapshot`].
pub enum Snapshot<'c> {
    Sqlite(sqlx::Transaction<'c, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'c, sqlx::Postgres>),
}

impl Snapshot<'_> {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Snapshot::Sqlite(tx) => Conn::Sqlite(tx),
            Snapshot::Postgres(tx) => Conn::Postgres(tx),
        }
    }
}

#[derive(Clone)]
enum Readers {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

/// How many [`Store::write_apart`] transactions run at once on PostgreSQL (of the pool's
/// `HERALD_DATABASE_MAX_CONNECTIONS`, 8 by default, which reads and the writers share).
const APART: usize = 3;

/// The database: a read pool, a handle to the writer, and the hub its inbox changes are
/// announced to.
#[derive(Clone)]
pub struct Store {
    readers: Readers,
    writer: writer::WriterHandle<kinds::Lanes>,
    keys: Arc<credentials::KeyCache>,
    otp_messages: Arc<otp::MessageCache>,
    hub: Arc<Hub>,
    /// Counts this daemon's committed changes of activity items, for the operators' streams to
    /// wake on (see [`Store::activity_changes_here`]).
    activity: Arc<tokio::sync::watch::Sender<u64>>,
    /// Wakes the webhook dispatcher when messages are inserted (see [`Store::webhook_wake`]).
    webhook_wake: Arc<tokio::sync::Notify>,
    /// Wakes the fan-out when events are inserted (see [`Store::webhook_event_wake`]).
    webhook_event_wake: Arc<tokio::sync::Notify>,
    /// The transactions of [`Store::write_apart`] that may run at once.
    apart: Arc<tokio::sync::Semaphore>,
}

/// A JSON object stored as text (an in-app notification's `data`), parsed when the row is read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JsonObject(pub serde_json::Map<String, serde_json::Value>);

impl std::str::FromStr for JsonObject {
    type Err = serde_json::Error;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        serde_json::from_str(text).map(JsonObject)
    }
}

impl<DB: sqlx::Database> sqlx::Type<DB> for JsonObject
where
    str: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <str as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <str as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for JsonObject
where
    &'r str: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        Ok(<&'r str as sqlx::Decode<'r, DB>>::decode(value)?.parse()?)
    }
}

impl rusqlite::types::FromSql for JsonObject {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        value.as_str()?.parse().map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({:?})", self.engine())
    }
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

impl Store {
    /// Opens the database named in the configuration, creating a SQLite file (and its folder) on
    /// first use, and applies pending migrations.
    pub async fn open(config: &Config) -> StoreResult<Store> {
        match &config.database {
            DatabaseUrl::Sqlite { url, path } => {
                Self::open_sqlite(url, path, config.database_max_connections, config.sqlite_synchronous_full)
                    .await
            }
            DatabaseUrl::Postgres(url) => {
                let options =
                    PgConnectOptions::from_str(url.expose()).map_err(|e| StoreError::Open(e.to_string()))?;
                Self::open_postgres(options, config.database_max_connections, config.database_writers).await
            }
        }
    }

    async fn open_sqlite(
        url: &str,
        path: &std::path::Path,
        readers: u32,
        synchronous_full: bool,
    ) -> StoreResult<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Open(format!("cannot create {}: {e}", dir.display())))?;
        }
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Open(e.to_string()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if synchronous_full { SqliteSynchronous::Full } else { SqliteSynchronous::Normal })
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .pragma("temp_store", "memory")
            .pragma("cache_size", "-16384");
        let mut migrating: SqliteConnection = sqlx::ConnectOptions::connect(&options).await?;
        SQLITE_MIGRATIONS.run(&mut migrating).await?;
        sqlx::Connection::close(migrating).await?;
        let write_conn = local::open(path, synchronous_full)?;
        // The outbox's triggers insert webhook events inside the writer's transactions, and the
        // fan-out their messages: the update hook notes each. A transaction that wrote events
        // fans them out just before its commit, unless the writer is saturated (see
        // `fan_out::defers`) or was until lately (`fan_out::CATCH_UP_IN_COMMIT`); the
        // dispatcher (and, for events left to it, the fan-out task) is woken once the batch has
        // committed, when its reads can see them.
        let webhook_wake = Arc::new(tokio::sync::Notify::new());
        let webhook_event_wake = Arc::new(tokio::sync::Notify::new());
        let inserted = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let noted = inserted.clone();
        write_conn.update_hook(Some(move |action, _: &str, table: &str, _| {
            if action == rusqlite::hooks::Action::SQLITE_INSERT {
                match table {
                    "webhook_events" => noted[0].store(true, Ordering::Relaxed),
                    "webhook_messages" => noted[1].store(true, Ordering::Relaxed),
                    _ => {}
                }
            }
        }))?;
        let events = inserted.clone();
        let before_commit = Box::new(move |conn: &rusqlite::Connection, works: usize| {
            if events[0].load(Ordering::Relaxed)
                && !webhooks::fan_out::defers(works)
                && webhooks::fan_out::fan_out_before_commit(conn)
            {
                events[0].store(false, Ordering::Relaxed);
            }
        });
        let wakes = [webhook_event_wake.clone(), webhook_wake.clone()];
        let after_batch = Box::new(move || {
            for (inserted, wake) in inserted.iter().zip(&wakes) {
                if inserted.swap(false, Ordering::Relaxed) {
                    wake.notify_one();
                }
            }
        });
        let pool = SqlitePoolOptions::new()
            .max_connections(readers)
            .min_connections(1)
            .connect_with(options.clone().read_only(true))
            .await?;
        let writer = writer::runtime::spawn_sqlite(
            write_conn,
            local::open(path, synchronous_full)?,
            before_commit,
            after_batch,
        )?;
        Ok(Store {
            readers: Readers::Sqlite(pool),
            writer,
            keys: Arc::default(),
            otp_messages: Arc::default(),
            hub: Arc::default(),
            activity: Arc::new(tokio::sync::watch::Sender::new(0)),
            webhook_wake,
            webhook_event_wake,
            apart: Arc::new(tokio::sync::Semaphore::new(APART)),
        })
    }

    async fn open_postgres(
        options: PgConnectOptions,
        max_connections: u32,
        writers: usize,
    ) -> StoreResult<Store> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        POSTGRES_MIGRATIONS.run(&pool).await?;
        let writer =
            writer::runtime::spawn_postgres(pool.clone(), postgres_writers(writers, max_connections));
        Ok(Store {
            readers: Readers::Postgres(pool),
            writer,
            keys: Arc::default(),
            otp_messages: Arc::default(),
            hub: Arc::default(),
            activity: Arc::new(tokio::sync::watch::Sender::new(0)),
            webhook_wake: Arc::new(tokio::sync::Notify::new()),
            webhook_event_wake: Arc::new(tokio::sync::Notify::new()),
            apart: Arc::new(tokio::sync::Semaphore::new(APART)),
        })
    }

    pub fn engine(&self) -> Engine {
        match self.readers {
            Readers::Sqlite(_) => Engine::Sqlite,
            Readers::Postgres(_) => Engine::Postgres,
        }
    }

    /// The in-process registry of open inbox streams that this store announces changes to.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Announces an inbox change that has committed. On SQLite (one process owns the database)
    /// the hub hears it now; on PostgreSQL the writing transaction's NOTIFY reaches every
    /// daemon's [`Store::listen_for_changes`], this one's included, so nothing is done here.
    fn announce(&self, change: InboxChange<'_>) {
        if self.engine() == Engine::Postgres {
            return;
        }
        match change {
            InboxChange::Created { app, user } => self.hub.wake_created(app, user),
            InboxChange::Updated { app, user, item } => self.hub.push_update(app, user, item),
        }
    }

    /// Wakes the operators' activity streams of this daemon: an item changed and committed
    /// (they read the change from the database; one on another daemon finds it by polling).
    pub(crate) fn activity_changed(&self) {
        if self.activity.receiver_count() > 0 {
            self.activity.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Changes to activity items committed by this daemon, as a counter that moves: what an
    /// operators' stream waits on between its polls.
    pub fn activity_changes_here(&self) -> tokio::sync::watch::Receiver<u64> {
        self.activity.subscribe()
    }

    /// A read connection.
    pub async fn read(&self) -> StoreResult<ReadConn> {
        Ok(match &self.readers {
            Readers::Sqlite(pool) => ReadConn::Sqlite(pool.acquire().await?),
            Readers::Postgres(pool) => ReadConn::Postgres(pool.acquire().await?),
        })
    }

    /// Runs `op` inside a write transaction (shared with other callers' writes, isolated from
    /// them by a savepoint or, for a batch's first operation, by restarting the transaction) and returns its result once the transaction has committed. If `op`
    /// fails, its own changes are rolled back and the others' are not affected.
    pub async fn write<R, F>(&self, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<R>> + Send + 'static,
    {
        self.writer.write(op).await
    }

    /// Runs `op` in a transaction of its own, beside the writer rather than in its queue: on
    /// PostgreSQL on a pooled connection ([`APART`] at most at once), on SQLite through the
    /// writer (there is one writer there; its in-process writes are cheap). For work that comes
    /// in a steady stream beside the dispatches (the webhook dispatcher's groups of attempts and
    /// its deferrals; its claims are single statements on a pooled connection): queued in the
    /// writer on PostgreSQL, each costing its round trips there in turn, they held dispatches up
    /// behind them (in-app dispatch fell from 8.3k/s to 0.2k/s with one endpoint subscribed; see
    /// docs/PERFORMANCE.md).
    pub async fn write_apart<R, F>(&self, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<R>> + Send + 'static,
    {
        let Readers::Postgres(pool) = &self.readers else { return self.write(op).await };
        let _permit = self.apart.acquire().await.map_err(|_| StoreError::WriterGone)?;
        let mut tx = pool.begin().await?;
        let result = {
            let mut conn = Conn::Postgres(&mut tx);
            op(&mut conn).await
        };
        match result {
            Ok(answer) => {
                tx.commit().await?;
                Ok(answer)
            }
            Err(e) => {
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.read().await?;
        scalar!(&mut conn.conn(), fetch_one, i32, "SELECT 1")?;
        Ok(())
    }

    /// Whether a write commits (for `/readyz`): an empty write through the writer's queue, in a
    /// transaction of its own or of a batch (on SQLite it takes the write lock).
    pub async fn ping_writer(&self) -> StoreResult<()> {
        self.write(|_| Box::pin(async { Ok(()) })).await
    }

    /// Resolves, with the reason, once the writers can take no more writes (for the daemon's
    /// supervisor: see `store/writer/runtime.rs`).
    pub async fn writer_failed(&self) -> String {
        self.writer.failed().await
    }

    /// Stops the writers after the writes already submitted.
    pub async fn close(&self) {
        self.writer.close().await;
        match &self.readers {
            Readers::Sqlite(pool) => pool.close().await,
            Readers::Postgres(pool) => pool.close().await,
        }
    }
}

/// A committed change to a user's inbox that open streams must hear of.
#[derive(Clone, Copy, Debug)]
enum InboxChange<'a> {
    Created { app: &'a ApplicationId, user: &'a UserId },
    Updated { app: &'a ApplicationId, user: &'a UserId, item: &'a InAppId },
}

/// Milliseconds since the Unix epoch: how the store keeps every time it compares or sorts.
pub fn now_millis() -> i64 {
    herald_common::Timestamp::now().millis()
}

#[cfg(test)]
mod tests {
    #[test]
    fn postgres_writers_leave_two_connections_to_the_rest() {
        let writers = |configured, max_connections| super::postgres_writers(configured, max_connections);
        // The default, 2, as before the setting: two with a pool of four or more, else one.
        assert_eq!([8, 4, 3, 2, 1].map(|pool| writers(2, pool)), [2, 2, 1, 1, 1]);
        assert_eq!(writers(1, 8), 1);
        assert_eq!(writers(4, 5), 3);
        assert_eq!(writers(16, 256), 16);
    }
}
