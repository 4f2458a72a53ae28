//! The SQLite writer's own connection: rusqlite, driven on the writer's thread.
//!
//! sqlx runs each SQLite connection on a worker thread and every statement is a message to it
//! and an answer back; profiles of dispatch under load showed about 40 % of the daemon's CPU in
//! those thread hand-offs. The writer runs whole batches of writes, so it holds a rusqlite
//! connection on a thread of its own and executes every statement of a batch in place, with
//! cached prepared statements. Reads keep sqlx's pool. Both use the same SQLite library
//! (libsqlite3-sys), and the store's queries are written once: the `execute!`, `fetch!` and
//! `scalar!` macros have an arm for this connection that calls the functions below.
//!
//! Conventions the store's SQL keeps for this arm: parameters are `$1`, `$2`, … (bound by
//! name, so a statement may use any subset), and a `;` only ever separates statements.

use rusqlite::{CachedStatement, Connection, Row, Statement, ToSql, config::DbConfig, types::FromSql};

use super::{StoreError, StoreResult};

/// A row type the writer can read: the rusqlite counterpart of `sqlx::FromRow`.
pub trait FromLocalRow: Sized {
    fn from_local_row(row: &Row<'_>) -> rusqlite::Result<Self>;
}

/// Implements [`FromLocalRow`] for a struct whose fields are its columns, by name.
macro_rules! local_row {
    ($ty:ty { $($field:ident),* $(,)? }) => {
        impl $crate::store::local::FromLocalRow for $ty {
            fn from_local_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                Ok(Self { $($field: row.get(stringify!($field))?),* })
            }
        }
    };
}
pub(crate) use local_row;

impl<A: FromSql, B: FromSql> FromLocalRow for (A, B) {
    fn from_local_row(row: &Row<'_>) -> rusqlite::Result<Self> {
        Ok((row.get(0)?, row.get(1)?))
    }
}

/// The names of positional parameters, so binding never formats one.
const NAMES: [&str; 32] = [
    "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12", "$13", "$14", "$15", "$16",
    "$17", "$18", "$19", "$20", "$21", "$22", "$23", "$24", "$25", "$26", "$27", "$28", "$29", "$30", "$31",
    "$32",
];

/// The statements of `sql`, in order.
fn statements(sql: &str) -> impl Iterator<Item = &str> {
    sql.split(';').map(str::trim).filter(|s| !s.is_empty())
}

fn prepare<'c>(conn: &'c Connection, sql: &str, params: &[&dyn ToSql]) -> StoreResult<CachedStatement<'c>> {
    let mut statement = conn.prepare_cached(sql)?;
    bind(&mut statement, params)?;
    Ok(statement)
}

fn bind(statement: &mut Statement<'_>, params: &[&dyn ToSql]) -> StoreResult<()> {
    if params.len() > NAMES.len() {
        return Err(StoreError::Statement(format!("a statement takes at most {} parameters", NAMES.len())));
    }
    for (name, value) in NAMES.iter().zip(params) {
        if let Some(index) = statement.parameter_index(name)? {
            statement.raw_bind_parameter(index, value)?;
        }
    }
    Ok(())
}

/// Runs `sql` (one or more statements, any rows they return ignored); the rows changed by its
/// INSERT, UPDATE and DELETE statements themselves (not by triggers), as sqlx counts them.
pub fn execute(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> StoreResult<u64> {
    let mut changed = 0;
    for part in statements(sql) {
        let mut statement = prepare(conn, part, params)?;
        let writes = !statement.readonly();
        let mut rows = statement.raw_query();
        while rows.next()?.is_some() {}
        if writes {
            changed += conn.changes();
        }
    }
    Ok(changed)
}

/// The most rows in one multi-row statement. A group of `n` rows is written in statements of
/// 64 rows and one of the rest, so each kind of multi-row statement has at most 64 texts, each
/// prepared once (the writer's statement cache holds them all: see [`open`]).
pub const MAX_ROWS: usize = 64;

/// `n` rows split into statements of at most [`MAX_ROWS`], in order.
pub fn row_chunks(n: usize) -> Vec<usize> {
    let mut chunks = vec![MAX_ROWS; n / MAX_ROWS];
    chunks.extend(Some(n % MAX_ROWS).filter(|&rest| rest > 0));
    chunks
}

/// Runs `{head} VALUES {row}, {row}, … {tail}` with `rows` copies of `row` (a parenthesised
/// list whose `?`s are the parameters; literals may stand between them), binding `values` in
/// order; the rows its `RETURNING` clause gives, if `tail` has one, through `read`.
pub fn multi_row<T>(
    conn: &Connection,
    (head, row, tail): (&str, &str, &str),
    rows: usize,
    values: &[&dyn ToSql],
    read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let mut sql = String::with_capacity(head.len() + (row.len() + 2) * rows + tail.len() + 10);
    sql.push_str(head);
    sql.push_str(" VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql.push(' ');
    sql.push_str(tail);
    let mut statement = conn.prepare_cached(&sql)?;
    for (i, value) in values.iter().enumerate() {
        statement.raw_bind_parameter(i + 1, value)?;
    }
    let mut out = Vec::new();
    let mut result = statement.raw_query();
    while let Some(r) = result.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}

/// Runs the multi-row statement `sql` (see [`multi_row`]) over `rows`,
/// up to 64 rows per statement ([`row_chunks`]), each row's values given
/// by `values`; the rows its `RETURNING` clause gives, through `read`.
pub fn rows_of<R, T>(
    conn: &Connection,
    sql: (&str, &str, &str),
    rows: &[R],
    values: impl Fn(&R) -> Vec<&dyn ToSql>,
    read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let (mut start, mut returned) = (0, Vec::new());
    for size in row_chunks(rows.len()) {
        let bound: Vec<&dyn ToSql> = rows[start..start + size].iter().flat_map(&values).collect();
        super::count_call();
        returned.extend(multi_row(conn, sql, size, &bound, &read)?);
        start += size;
    }
    Ok(returned)
}

/// For [`rows_of`] over a statement that returns nothing.
pub fn ignore(_: &Row<'_>) -> rusqlite::Result<()> {
    Ok(())
}

/// Runs statements without parameters (transaction control).
pub fn execute_batch(conn: &Connection, sql: &str) -> StoreResult<()> {
    Ok(conn.execute_batch(sql)?)
}

fn rows<T>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
    read: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let mut out = Vec::new();
    for part in statements(sql) {
        let mut statement = prepare(conn, part, params)?;
        let mut rows = statement.raw_query();
        while let Some(row) = rows.next()? {
            out.push(read(row)?);
        }
    }
    Ok(out)
}

fn not_found() -> StoreError {
    StoreError::Database(sqlx::Error::RowNotFound)
}

pub fn fetch_all<T: FromLocalRow>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
) -> StoreResult<Vec<T>> {
    rows(conn, sql, params, T::from_local_row)
}

pub fn fetch_optional<T: FromLocalRow>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
) -> StoreResult<Option<T>> {
    Ok(fetch_all(conn, sql, params)?.into_iter().next())
}

pub fn fetch_one<T: FromLocalRow>(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> StoreResult<T> {
    fetch_optional(conn, sql, params)?.ok_or_else(not_found)
}

/// The first column of each row, for `scalar!`.
pub mod scalar {
    use rusqlite::{Connection, ToSql, types::FromSql};

    use super::{StoreResult, not_found, rows};

    pub fn fetch_all<T: FromSql>(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> StoreResult<Vec<T>> {
        rows(conn, sql, params, |row| row.get(0))
    }

    pub fn fetch_optional<T: FromSql>(
        conn: &Connection,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> StoreResult<Option<T>> {
        Ok(fetch_all(conn, sql, params)?.into_iter().next())
    }

    pub fn fetch_one<T: FromSql>(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> StoreResult<T> {
        fetch_optional(conn, sql, params)?.ok_or_else(not_found)
    }
}

/// Opens the writer's connection with the same settings as the read pool's.
pub fn open(path: &std::path::Path, synchronous_full: bool) -> StoreResult<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", if synchronous_full { "FULL" } else { "NORMAL" })?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // 16 MiB of page cache (the default is 2 MiB): the writer touches every table's indexes,
    // and a miss is a read from the file inside the one serialized transaction. Not more: when a
    // b-tree split reorders its new pages, SQLite (3.51, `balance_nonroot`) renumbers one through
    // the lock-byte page's number (262,145 with 4 KiB pages) for a moment, and the page cache
    // remembers that as its largest key; at commit, truncating the cache to the database's size
    // then walks the whole cache (`pcache1TruncateUnsafe`'s general case) rather than the few
    // slots past its end. With 64 MiB that walk was 8 % of the daemon's CPU under webhook load,
    // and the writer's thread used 20 % more CPU for the same work than with 16 MiB (which read
    // no more from the file); see docs/PERFORMANCE.md.
    conn.pragma_update(None, "cache_size", -16_384)?;
    // The query planner's stability guarantee: a statement's plan never depends on the values
    // bound to it, so a cached statement is never planned again. Without it SQLite (3.51) reads a
    // bound `LIMIT $n` while planning (`sqlite3ExprIsInteger`) and marks the statement to be
    // re-prepared whenever `$n` is bound again, that is at every run: every claim and every
    // fan-out was parsed and planned anew, 5 % of the daemon's CPU under webhook load. No
    // statement of the store needs a bound value to be planned (its partial indexes are matched
    // by literals).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // The store's statements, and the 16 multi-row ones in each of their 64 sizes.
    conn.set_prepared_statement_cache_capacity(1_200);
    Ok(conn)
}

/// For in-crate tests of the writer's SQLite groups.
#[cfg(test)]
pub(crate) mod testing {
    use herald_common::ids::{ApplicationId, TenantId};
    use rusqlite::Connection;

    use crate::store::Store;

    /// A store on a fresh SQLite file, with a tenant and an application, and the writer's kind
    /// of connection to the same file.
    pub async fn sqlite(dir: &std::path::Path) -> (Store, TenantId, ApplicationId, Connection) {
        let path = dir.join("herald.db");
        let config = crate::config::Layers::new()
            .env([("HERALD_DATABASE_URL".to_owned(), format!("sqlite://{}", path.display()))])
            .build(false)
            .unwrap();
        let store = Store::open(&config).await.unwrap();
        let tenant = store.create_tenant("T".into()).await.unwrap();
        let app = store.create_application(&tenant.id, "A".into()).await.unwrap().unwrap();
        (store, tenant.id, app.id, super::open(&path, false).unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_split_into_statements_of_at_most_64() {
        assert_eq!(row_chunks(0), Vec::<usize>::new());
        assert_eq!(row_chunks(1), [1]);
        assert_eq!(row_chunks(64), [64]);
        assert_eq!(row_chunks(65), [64, 1]);
        assert_eq!(row_chunks(200), [64, 64, 64, 8]);
    }

    /// A statement with a bound `LIMIT` runs from the cache as prepared, whatever is bound.
    #[test]
    fn a_bound_limit_does_not_re_prepare_a_cached_statement() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("limit.db"), false).unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        let sql = "SELECT id FROM t ORDER BY id LIMIT $1";
        for limit in 1..=3_i64 {
            let ids: Vec<i64> = scalar::fetch_all(&conn, sql, &[&limit]).unwrap();
            assert_eq!(ids.len() as i64, limit);
        }
        let statement = conn.prepare_cached(sql).unwrap();
        assert_eq!(statement.get_status(rusqlite::StatementStatus::Run), 3);
        assert_eq!(statement.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    #[test]
    fn a_multi_row_statement_binds_its_rows_in_order() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER, b TEXT, c TEXT)").unwrap();
        let values: Vec<&dyn ToSql> = vec![&1, &"x", &2, &"y"];
        let rows = multi_row(
            &conn,
            ("INSERT INTO t (a, b, c)", "(?, ?, 'k')", "RETURNING a, b, c"),
            2,
            &values,
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)),
        )
        .unwrap();
        assert_eq!(rows, [(1, "x".into(), "k".into()), (2, "y".into(), "k".into())]);
    }
}
