//! Storage. One [`Store`] runs the same queries on SQLite (the embedded default) and on
//! PostgreSQL (several daemons sharing one database). Each query is written once against
//! [`Conn`], which is either backend's connection; the few places where the dialects differ
//! branch on [`Conn::engine`].
//!
//! Writes go through [`writer`]: a task that owns a connection and runs many callers' writes in
//! one transaction (group commit, each caller's work isolated by a savepoint), answering each caller
//! only after the commit. SQLite has one such writer (it has one write lock anyway); PostgreSQL
//! has several. Reads use a separate pool.

mod activity;
mod credentials;
mod domains;
mod idempotency;
mod inbox;
pub(crate) mod local;
mod notifications;
mod otp;
mod streams;
mod templates;
mod writer;

use std::{str::FromStr, sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use sqlx::{
    PgConnection, SqliteConnection,
    pool::PoolConnection,
    postgres::{PgConnectOptions, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

pub use activity::{ActivityFilter, ActivityRow, RetryResult};
pub use credentials::{ApiKeyRecord, ApplicationRecord, TenantRecord};
pub use domains::{DomainCheck, DomainRecord};
pub use inbox::{INBOX_CHANNEL, InboxPage, InboxRecord};
pub use notifications::{
    AttemptRecord, AttemptResult, ClaimedDelivery, DispatchResult, IdempotentResponse, NewNotification,
    NotificationRecord,
};
pub use otp::{Limit, NewOtp, OTP_MAX_TTL_SECONDS, OtpMessages, OtpSendStart, VerifyOutcome};
pub use templates::TemplateRecord;

use crate::config::{Config, DatabaseUrl};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database error: {0}")]
    Local(#[from] rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("the database writer has stopped")]
    WriterGone,
    #[error("cannot open the database: {0}")]
    Open(String),
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

/// Runs a statement; evaluates to `StoreResult<u64>` (rows affected).
macro_rules! execute {
    ($conn:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
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
    };
}

/// Fetches rows as `$row` (a `sqlx::FromRow` type that is also a `local::FromLocalRow`) with
/// `fetch_one`, `fetch_optional` or `fetch_all`.
macro_rules! fetch {
    ($conn:expr, $method:ident, $row:ty, $sql:expr $(, $bind:expr)* $(,)?) => {
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
    };
}

/// Fetches one column as `$ty` with `fetch_one`, `fetch_optional` or `fetch_all`.
macro_rules! scalar {
    ($conn:expr, $method:ident, $ty:ty, $sql:expr $(, $bind:expr)* $(,)?) => {
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
    };
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

/// The database: a read pool and a handle to the writer.
#[derive(Clone)]
pub struct Store {
    readers: Readers,
    writer: writer::WriterHandle,
    keys: Arc<credentials::KeyCache>,
    otp_messages: Arc<otp::MessageCache>,
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
                Self::open_postgres(options, config.database_max_connections).await
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
        let pool = SqlitePoolOptions::new()
            .max_connections(readers)
            .min_connections(1)
            .connect_with(options.clone().read_only(true))
            .await?;
        let writer = writer::spawn_sqlite(write_conn, local::open(path, synchronous_full)?)?;
        Ok(Store {
            readers: Readers::Sqlite(pool),
            writer,
            keys: Arc::default(),
            otp_messages: Arc::default(),
        })
    }

    async fn open_postgres(options: PgConnectOptions, max_connections: u32) -> StoreResult<Store> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        POSTGRES_MIGRATIONS.run(&pool).await?;
        // Writers take connections from the same pool; leave at least one for readers.
        let writers = (max_connections / 2).clamp(1, 4) as usize;
        let writer = writer::spawn_postgres(pool.clone(), writers);
        Ok(Store {
            readers: Readers::Postgres(pool),
            writer,
            keys: Arc::default(),
            otp_messages: Arc::default(),
        })
    }

    pub fn engine(&self) -> Engine {
        match self.readers {
            Readers::Sqlite(_) => Engine::Sqlite,
            Readers::Postgres(_) => Engine::Postgres,
        }
    }

    /// The PostgreSQL pool (for LISTEN), when that is the engine.
    pub fn postgres_pool(&self) -> Option<sqlx::PgPool> {
        match &self.readers {
            Readers::Postgres(pool) => Some(pool.clone()),
            Readers::Sqlite(_) => None,
        }
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
        self.writer.submit(op).await
    }

    /// Whether the database answers (for `/readyz`).
    pub async fn ping(&self) -> StoreResult<()> {
        let mut conn = self.read().await?;
        scalar!(&mut conn.conn(), fetch_one, i32, "SELECT 1")?;
        Ok(())
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

/// Milliseconds since the Unix epoch: how the store keeps every time it compares or sorts.
pub fn now_millis() -> i64 {
    herald_common::Timestamp::now().millis()
}
