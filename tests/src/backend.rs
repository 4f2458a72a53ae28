//! The two storage backends every store behaviour is tested on. SQLite always; PostgreSQL when
//! `HERALD_TEST_DATABASE_URL` is set, each test in a schema of its own. With
//! `HERALD_REQUIRE_POSTGRES=1` (as `.ci/run` sets it) a PostgreSQL test without a database fails
//! instead of skipping.

use std::path::Path;

use sqlx::Connection;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The marker a skipped PostgreSQL test prints (`.ci/run` fails if it sees one).
pub const SKIP_MARKER: &str = "HERALD-POSTGRES-SKIPPED";

impl Backend {
    /// The base PostgreSQL URL, or `None` if PostgreSQL tests should be skipped (after printing
    /// the skip marker). Panics when PostgreSQL is required but not configured.
    pub fn postgres_url() -> Option<String> {
        match std::env::var("HERALD_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ if std::env::var("HERALD_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") => {
                panic!("HERALD_REQUIRE_POSTGRES=1 but HERALD_TEST_DATABASE_URL is not set")
            }
            _ => {
                eprintln!("{SKIP_MARKER}: set HERALD_TEST_DATABASE_URL to run the PostgreSQL tests");
                None
            }
        }
    }

    /// Whether this backend can run here (PostgreSQL needs a URL).
    pub fn available(self) -> bool {
        self == Backend::Sqlite || Self::postgres_url().is_some()
    }

    /// Runs raw SQL statements on the database at `url`, behind the daemon's back (tests use it
    /// to make states the API cannot, such as a change that commits late).
    pub async fn execute(self, url: &str, statements: &[String]) {
        match self {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                for s in statements {
                    sqlx::query(sqlx::AssertSqlSafe(s.clone())).execute(&mut conn).await.unwrap();
                }
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                for s in statements {
                    sqlx::query(sqlx::AssertSqlSafe(s.clone())).execute(&mut conn).await.unwrap();
                }
            }
        }
    }

    /// The number `sql` (a `SELECT COUNT(*) …`) gives on the database at `url`, read behind the
    /// daemon's back (tests use it to check that nothing was written).
    pub async fn count(self, url: &str, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self {
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
            }
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
            }
        }
    }

    /// A database URL for a fresh, empty database of this backend: a file under `dir`, or a new
    /// schema in the PostgreSQL test database.
    pub async fn fresh_database_url(self, dir: &Path) -> String {
        match self {
            Backend::Sqlite => format!("sqlite://{}", dir.join("herald.db").display()),
            Backend::Postgres => {
                let base = Self::postgres_url().expect("PostgreSQL tests run only when available");
                let schema = format!("herald_it_{}", herald_common::ids::new_body());
                let mut conn = sqlx::PgConnection::connect(&base)
                    .await
                    .unwrap_or_else(|e| panic!("cannot connect to HERALD_TEST_DATABASE_URL: {e}"));
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                    .execute(&mut conn)
                    .await
                    .expect("create a test schema");
                sweep_old_schemas(&mut conn).await;
                let _ = conn.close().await;
                let separator = if base.contains('?') { '&' } else { '?' };
                format!("{base}{separator}options=-c%20search_path%3D{schema}")
            }
        }
    }
}

/// Drops test schemas made more than an hour ago (their names sort by time), once per process,
/// so that running the tests again and again against one database does not fill it up.
async fn sweep_old_schemas(conn: &mut sqlx::PgConnection) {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SWEPT.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let cutoff =
        format!("herald_it_{}", herald_common::ids::body_at_millis(now.as_millis() as u64 - 3_600_000));
    let old: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::TEXT FROM pg_namespace WHERE nspname LIKE 'herald\\_it\\_%' AND nspname < $1",
    )
    .bind(&cutoff)
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    for schema in old {
        // Another run may be dropping the same schema: ignore failures.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
            .execute(&mut *conn)
            .await;
    }
}

/// Defines a test that runs `$body` (an async fn taking a [`Backend`]) once per backend, as
/// `$name::sqlite` and `$name::postgres`.
#[macro_export]
macro_rules! both_backends {
    ($(#[$meta:meta])* $name:ident, $body:ident) => {
        $(#[$meta])*
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$body($crate::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if $crate::Backend::Postgres.available() {
                    super::$body($crate::Backend::Postgres).await;
                }
            }
        }
    };
}
