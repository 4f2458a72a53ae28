//! The one place where errors become HTTP responses: every failure is an RFC 9457 problem with
//! a stable `code`. Server-side failures are logged (inside the request's span, with its request
//! id) and answered with a body that reveals nothing of the cause.

use axum::{
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use herald_common::{ErrorCode, FieldError, Problem, error::PROBLEM_CONTENT_TYPE};

use crate::store::StoreError;

/// An error on its way to becoming a problem response. Boxed: handlers return it by value on
/// every path, and the happy path should not pay for its size.
#[derive(Debug)]
pub struct ApiError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    problem: Problem,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The cause of a 5xx, for the log only.
    source: Option<anyhow::Error>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self(Box::new(Inner { problem: Problem::new(code, detail), headers: Vec::new(), source: None }))
    }

    pub fn problem(&self) -> &Problem {
        &self.0.problem
    }

    pub fn with_header(mut self, name: HeaderName, value: &str) -> Self {
        if let Ok(value) = HeaderValue::from_str(value) {
            self.0.headers.push((name, value));
        }
        self
    }

    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] => format!("`{}` {}", one.field, one.message),
            _ => format!("{} fields are invalid", errors.len()),
        };
        let mut error = Self::new(ErrorCode::ValidationFailed, detail);
        error.0.problem.errors = errors;
        error
    }

    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::validation(vec![FieldError::new(field, message)])
    }

    /// 401 for a request that carried no credential: `WWW-Authenticate: Bearer` without an
    /// error code (RFC 6750 §3.1).
    pub fn missing_credential() -> Self {
        Self::new(ErrorCode::Unauthorized, "Missing `Authorization: Bearer <credential>` header.")
            .with_header(header::WWW_AUTHENTICATE, "Bearer realm=\"herald\"")
    }

    /// 401 with `WWW-Authenticate: Bearer` (RFC 6750).
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        let detail = detail.into();
        let challenge = format!(
            "Bearer realm=\"herald\", error=\"invalid_token\", error_description=\"{}\"",
            detail.replace('"', "'")
        );
        Self::new(ErrorCode::Unauthorized, detail).with_header(header::WWW_AUTHENTICATE, &challenge)
    }

    /// 403 naming the missing scope.
    pub fn insufficient_scope(scope: herald_common::Scope) -> Self {
        let mut error =
            Self::new(ErrorCode::InsufficientScope, format!("This credential lacks the `{scope}` scope."))
                .with_header(
                    header::WWW_AUTHENTICATE,
                    &format!("Bearer realm=\"herald\", error=\"insufficient_scope\", scope=\"{scope}\""),
                );
        error.0.problem.scope = Some(scope.to_string());
        error
    }

    /// Adds `attempts_remaining` (wrong OTP codes).
    pub fn with_attempts_remaining(mut self, remaining: u32) -> Self {
        self.0.problem.attempts_remaining = Some(remaining);
        self
    }

    /// 429 `rate_limited` with `Retry-After` in whole seconds.
    pub fn rate_limited(detail: impl Into<String>, retry_after_ms: i64) -> Self {
        let seconds = (retry_after_ms.max(1) + 999) / 1000;
        Self::new(ErrorCode::RateLimited, detail).with_header(header::RETRY_AFTER, &seconds.to_string())
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("No such {what}."))
    }

    pub fn internal(source: impl Into<anyhow::Error>) -> Self {
        let mut error =
            Self::new(ErrorCode::Internal, "Something went wrong on our side; it has been logged.");
        error.0.source = Some(source.into());
        error
    }
}

/// Storage that cannot be used right now (no connection, the writer gone, the database locked
/// by another process) is 503 with `Retry-After`: the request did nothing and may be sent again.
/// Anything else the store reports is a 500.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        if !is_unavailable(&error) {
            return ApiError::internal(error);
        }
        let mut e = ApiError::new(ErrorCode::Unavailable, "The database is not available; try again.")
            .with_header(header::RETRY_AFTER, "1");
        e.0.source = Some(error.into());
        e
    }
}

/// SQLite's text for SQLITE_BUSY and SQLITE_LOCKED: another connection holds the lock past the
/// busy timeout.
const SQLITE_LOCKED_MESSAGES: [&str; 2] = ["database is locked", "database table is locked"];

/// Whether an SQLite result code (extended or primary) is SQLITE_BUSY or SQLITE_LOCKED.
fn sqlite_locked(code: i32) -> bool {
    matches!(code & 0xff, rusqlite::ffi::SQLITE_BUSY | rusqlite::ffi::SQLITE_LOCKED)
}

/// Whether `error` means the database could not be used at all, so nothing was written.
fn is_unavailable(error: &StoreError) -> bool {
    match error {
        StoreError::Unavailable(_) | StoreError::WriterGone => true,
        // `From<sqlx::Error>` already turns a pool timeout into `Unavailable`; a closed pool is
        // a daemon shutting down.
        StoreError::Database(sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) => true,
        StoreError::Database(sqlx::Error::Database(e)) => {
            e.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                && e.code().and_then(|code| code.parse().ok()).is_some_and(sqlite_locked)
        }
        StoreError::Local(rusqlite::Error::SqliteFailure(e, _)) => sqlite_locked(e.extended_code),
        // The writer keeps only the text of what failed its transaction. A SQLite lock it could
        // not take means nothing was written. A PostgreSQL connection lost mid-batch is not
        // matched: its COMMIT may have gone through, so "nothing happened, retry" would be a
        // guess.
        StoreError::Batch(message) => SQLITE_LOCKED_MESSAGES.iter().any(|m| message.ends_with(m)),
        _ => false,
    }
}

/// 403 naming the missing scope, also in `WWW-Authenticate` (RFC 6750 §3.1).
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let Inner { problem, headers: extra, source } = *self.0;
        let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            match &source {
                Some(source) => tracing::error!(
                    code = problem.code.as_str(),
                    error = format!("{source:#}"),
                    "request failed"
                ),
                None => tracing::error!(code = problem.code.as_str(), "request failed"),
            }
        }
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
        for (name, value) in extra {
            headers.insert(name, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(error: impl Into<ApiError>) -> (u16, Problem, Option<String>) {
        let response = error.into().into_response();
        let retry_after = response.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let status = response.status().as_u16();
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(response.into_body(), 1 << 20))
            .expect("a body in memory")
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap(), retry_after)
    }

    /// A real SQLITE_BUSY: another connection holds the write lock and this one does not wait.
    fn sqlite_busy() -> rusqlite::Error {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locked.db");
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder.execute_batch("PRAGMA journal_mode = WAL; BEGIN IMMEDIATE").unwrap();
        let waiter = rusqlite::Connection::open(&path).unwrap();
        waiter.busy_timeout(std::time::Duration::ZERO).unwrap();
        waiter.execute_batch("BEGIN IMMEDIATE").unwrap_err()
    }

    #[test]
    fn storage_that_cannot_be_used_is_503_with_retry_after() {
        let busy = StoreError::from(sqlite_busy());
        // What the writer answers when its transaction cannot begin: the cause's text.
        let batch = StoreError::Batch(busy.to_string());
        let unavailable = [
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable("connection refused".into()),
            StoreError::WriterGone,
            StoreError::Database(sqlx::Error::PoolClosed),
            busy,
            batch,
            StoreError::Batch("transaction failed: database error: database table is locked".into()),
        ];
        for error in unavailable {
            let shown = error.to_string();
            let (status, problem, retry_after) = answer(error);
            assert_eq!((status, problem.code), (503, ErrorCode::Unavailable), "{shown}");
            assert_eq!(retry_after.as_deref(), Some("1"), "{shown}");
            assert_eq!(problem.detail.as_deref(), Some("The database is not available; try again."));
        }
    }

    #[test]
    fn other_storage_failures_are_500_and_hide_their_cause() {
        for error in [
            StoreError::Corrupt("column 3: bad status `sent?`".into()),
            StoreError::Batch("transaction failed: error communicating with database: broken pipe".into()),
            StoreError::Statement("no rows".into()),
            StoreError::Database(sqlx::Error::RowNotFound),
        ] {
            let (status, problem, retry_after) = answer(error);
            assert_eq!((status, problem.code, retry_after), (500, ErrorCode::Internal, None));
            assert_eq!(
                problem.detail.as_deref(),
                Some("Something went wrong on our side; it has been logged.")
            );
        }
    }
}
