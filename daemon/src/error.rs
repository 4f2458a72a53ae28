//! The one place where errors become HTTP responses: every failure is an RFC 9457 problem with
//! a stable `code`. Server-side failures are logged (inside the request's span, with its request
//! id) and answered with a body that reveals nothing of the cause.
//!
//! The service layer's errors ([`crate::service`]) and the store's become problems here, each
//! by one `From` impl: the variant decides the code (and so the status) and the headers; the
//! detail of a 4xx is the error's own text, and a 5xx's cause goes to the log only.

use axum::{
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use herald_common::{ErrorCode, FieldError, Problem, error::PROBLEM_CONTENT_TYPE};

use crate::{
    auth::MissingScope,
    service::{
        InvalidFields, domains::DomainError, idempotent_replay::ReplayError, notifications::DispatchError,
        otp::OtpError, receipts::ReceiptError, suppressions::SuppressionError, webhooks::WebhookError,
    },
    store::StoreError,
};

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

    /// A problem made whole elsewhere (see [`OtpError::DeliveryFailed`]).
    pub fn from_problem(problem: Problem) -> Self {
        Self(Box::new(Inner { problem, headers: Vec::new(), source: None }))
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
impl From<MissingScope> for ApiError {
    fn from(error: MissingScope) -> Self {
        let scope = error.0;
        let mut e = ApiError::new(ErrorCode::InsufficientScope, error.to_string()).with_header(
            header::WWW_AUTHENTICATE,
            &format!("Bearer realm=\"herald\", error=\"insufficient_scope\", scope=\"{scope}\""),
        );
        e.0.problem.scope = Some(scope.to_string());
        e
    }
}

impl From<InvalidFields> for ApiError {
    fn from(InvalidFields(errors): InvalidFields) -> Self {
        ApiError::validation(errors)
    }
}

impl From<ReplayError> for ApiError {
    fn from(error: ReplayError) -> Self {
        match error {
            ReplayError::KeyReused => ApiError::new(ErrorCode::IdempotencyKeyReused, error.to_string()),
            ReplayError::InFlight => ApiError::new(ErrorCode::IdempotencyInProgress, error.to_string())
                .with_header(header::RETRY_AFTER, "1"),
            ReplayError::Store(e) => e.into(),
        }
    }
}

impl From<DomainError> for ApiError {
    fn from(error: DomainError) -> Self {
        match error {
            DomainError::Invalid(e) => e.into(),
            DomainError::AlreadyExists(_) => ApiError::new(ErrorCode::Conflict, error.to_string()),
            DomainError::NotFound => ApiError::new(ErrorCode::NotFound, error.to_string()),
            DomainError::SenderNotVerified { .. } | DomainError::NotASendingDomain(_) => {
                ApiError::new(ErrorCode::DomainNotVerified, error.to_string())
            }
            DomainError::Key(e) => ApiError::internal(e),
            DomainError::Store(e) => e.into(),
        }
    }
}

impl From<DispatchError> for ApiError {
    fn from(error: DispatchError) -> Self {
        match error {
            DispatchError::Invalid(e) => e.into(),
            DispatchError::Sender(e) => e.into(),
            DispatchError::Replay(e) => e.into(),
            DispatchError::Answer(e) => ApiError::internal(e),
            DispatchError::Store(e) => e.into(),
        }
    }
}

impl From<ReceiptError> for ApiError {
    fn from(error: ReceiptError) -> Self {
        let detail = error.to_string();
        match error {
            ReceiptError::InvalidSignature => ApiError::new(ErrorCode::InvalidSignature, detail),
            ReceiptError::Malformed(_) => ApiError::new(ErrorCode::InvalidReceipt, detail),
            ReceiptError::Store(e) => e.into(),
        }
    }
}

impl From<SuppressionError> for ApiError {
    fn from(error: SuppressionError) -> Self {
        match error {
            SuppressionError::Invalid(e) => e.into(),
            SuppressionError::NotFound => ApiError::not_found("suppression"),
            SuppressionError::Store(e) => e.into(),
        }
    }
}

impl From<WebhookError> for ApiError {
    fn from(error: WebhookError) -> Self {
        match error {
            WebhookError::Invalid(e) => e.into(),
            WebhookError::NotFound => ApiError::not_found("webhook endpoint"),
            WebhookError::Disabled => ApiError::new(ErrorCode::Conflict, error.to_string()),
            WebhookError::Store(e) => e.into(),
        }
    }
}

impl From<OtpError> for ApiError {
    fn from(error: OtpError) -> Self {
        let detail = error.to_string();
        match error {
            OtpError::Invalid(e) => e.into(),
            OtpError::MissingScope(e) => e.into(),
            OtpError::SendRateLimited { retry_after_ms } | OtpError::VerifyRateLimited { retry_after_ms } => {
                ApiError::rate_limited(detail, retry_after_ms)
            }
            OtpError::Replay(e) => e.into(),
            OtpError::DeliveryFailed(problem) => ApiError::from_problem(*problem),
            OtpError::Suppressed(_) => ApiError::new(ErrorCode::RecipientSuppressed, detail),
            OtpError::NotFound => ApiError::new(ErrorCode::NotFound, detail),
            OtpError::AlreadyVerified => ApiError::new(ErrorCode::OtpAlreadyVerified, detail),
            OtpError::Expired | OtpError::NotDelivered => ApiError::new(ErrorCode::OtpExpired, detail),
            OtpError::Tombstoned => ApiError::new(ErrorCode::OtpTombstoned, detail),
            OtpError::WrongCode { attempts_remaining } => {
                ApiError::new(ErrorCode::OtpInvalidCode, detail).with_attempts_remaining(attempts_remaining)
            }
            OtpError::Task(e) => ApiError::internal(e),
            OtpError::Answer(e) => ApiError::internal(e),
            OtpError::Store(e) => e.into(),
        }
    }
}

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
    use herald_common::{Scope, ids::DomainId};

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

    #[test]
    fn a_store_failure_inside_a_service_error_maps_the_same() {
        let (status, _, retry_after) =
            answer(DispatchError::Replay(ReplayError::Store(StoreError::WriterGone)));
        assert_eq!((status, retry_after.as_deref()), (503, Some("1")));
        let (status, _, _) = answer(OtpError::Store(StoreError::Corrupt("x".into())));
        assert_eq!(status, 500);
        let (status, _, _) = answer(DispatchError::Sender(DomainError::Store(StoreError::WriterGone)));
        assert_eq!(status, 503);
    }

    #[test]
    fn service_errors_keep_their_codes_texts_and_headers() {
        let (status, p, retry_after) = answer(ReplayError::InFlight);
        assert_eq!(
            (status, p.code, retry_after.as_deref()),
            (409, ErrorCode::IdempotencyInProgress, Some("1"))
        );
        let (status, p, _) = answer(ReplayError::KeyReused);
        assert_eq!((status, p.code), (422, ErrorCode::IdempotencyKeyReused));
        assert_eq!(
            p.detail.as_deref(),
            Some("This Idempotency-Key was used with a different request; use a new key for a new request.")
        );

        let (status, p, _) = answer(OtpError::WrongCode { attempts_remaining: 3 });
        assert_eq!((status, p.code, p.attempts_remaining), (400, ErrorCode::OtpInvalidCode, Some(3)));
        let (status, p, retry_after) = answer(OtpError::VerifyRateLimited { retry_after_ms: 1_001 });
        assert_eq!((status, p.code, retry_after.as_deref()), (429, ErrorCode::RateLimited, Some("2")));
        let (status, p, _) = answer(OtpError::MissingScope(MissingScope(Scope::OtpCustomCode)));
        assert_eq!((status, p.scope.as_deref()), (403, Some("otp:custom_code")));
        assert_eq!(p.detail.as_deref(), Some("This credential lacks the `otp:custom_code` scope."));
        let (status, p, _) = answer(OtpError::NotDelivered);
        assert_eq!((status, p.code), (410, ErrorCode::OtpExpired));
        let (status, p, _) = answer(OtpError::NotFound);
        assert_eq!((status, p.detail.as_deref()), (404, Some("No such OTP transaction.")));

        let id = DomainId::new();
        let (status, p, _) = answer(DomainError::SenderNotVerified {
            name: "mail.example.com".into(),
            status: herald_common::api::domains::DomainStatus::Pending,
            id: id.clone(),
        });
        assert_eq!((status, p.code), (422, ErrorCode::DomainNotVerified));
        assert_eq!(
            p.detail.unwrap(),
            format!(
                "The sending domain `mail.example.com` is pending ({id}): publish its records and verify it \
                 before sending from it."
            )
        );
        let (_, p, _) = answer(DomainError::NotASendingDomain("example.org".into()));
        assert_eq!(
            p.detail.as_deref(),
            Some(
                "`example.org` is not a sending domain of this tenant: add it (POST /api/v1/domains), publish \
                 its records and verify it."
            )
        );
        let (status, p, _) = answer(DomainError::AlreadyExists("example.org".into()));
        assert_eq!(
            (status, p.detail.as_deref()),
            (409, Some("This tenant already has the domain `example.org`."))
        );

        let (status, p, _) = answer(InvalidFields::field("Idempotency-Key", "must be printable"));
        assert_eq!((status, p.code, p.errors.len()), (422, ErrorCode::ValidationFailed, 1));
        assert_eq!(p.detail.as_deref(), Some("`Idempotency-Key` must be printable"));
    }
}
