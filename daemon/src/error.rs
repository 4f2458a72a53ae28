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

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match &error {
            StoreError::Database(sqlx::Error::PoolTimedOut) | StoreError::WriterGone => {
                let mut e =
                    ApiError::new(ErrorCode::Unavailable, "The database is not available; try again.")
                        .with_header(header::RETRY_AFTER, "1");
                e.0.source = Some(error.into());
                e
            }
            _ => ApiError::internal(error),
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
