//! The RFC 9457 `application/problem+json` body every Herald error uses, and the stable error
//! codes (CONTRACT §2). The daemon builds these in one place; clients parse them.

use serde::{Deserialize, Serialize};

/// The media type of every error response.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Stable, documented error codes. The HTTP status of each is fixed here so the daemon and the
/// docs cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidJson,
    ValidationFailed,
    Unauthorized,
    InsufficientScope,
    NotFound,
    RouteNotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    UnsupportedMediaType,
    Conflict,
    IdempotencyKeyReused,
    IdempotencyInProgress,
    OtpInvalidCode,
    OtpExpired,
    OtpTombstoned,
    OtpAlreadyVerified,
    DeliveryFailed,
    NotRetryable,
    RateLimited,
    DomainNotVerified,
    /// A provider's callback whose signature is missing or wrong (CONTRACT §8).
    InvalidSignature,
    /// A provider's callback whose body is not one it sends.
    InvalidReceipt,
    /// An OTP to a recipient on the suppression list (CONTRACT §9).
    RecipientSuppressed,
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub fn status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidJson | OtpInvalidCode | InvalidReceipt => 400,
            Unauthorized => 401,
            InsufficientScope | InvalidSignature => 403,
            NotFound | RouteNotFound => 404,
            MethodNotAllowed => 405,
            Conflict | IdempotencyInProgress | OtpAlreadyVerified | NotRetryable => 409,
            OtpExpired => 410,
            PayloadTooLarge => 413,
            UnsupportedMediaType => 415,
            ValidationFailed | IdempotencyKeyReused | DomainNotVerified | RecipientSuppressed => 422,
            OtpTombstoned => 423,
            RateLimited => 429,
            Internal => 500,
            DeliveryFailed => 502,
            Unavailable => 503,
        }
    }

    pub fn title(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidJson => "Malformed JSON",
            ValidationFailed => "Validation failed",
            Unauthorized => "Unauthorized",
            InsufficientScope => "Insufficient scope",
            NotFound => "Not found",
            RouteNotFound => "No such route",
            MethodNotAllowed => "Method not allowed",
            PayloadTooLarge => "Payload too large",
            UnsupportedMediaType => "Unsupported media type",
            Conflict => "Conflict",
            IdempotencyKeyReused => "Idempotency key reused",
            IdempotencyInProgress => "Idempotent request in progress",
            OtpInvalidCode => "Invalid code",
            OtpExpired => "Code expired",
            OtpTombstoned => "Verification blocked",
            OtpAlreadyVerified => "Already verified",
            DeliveryFailed => "Delivery failed",
            NotRetryable => "Not retryable",
            RateLimited => "Rate limited",
            DomainNotVerified => "Domain not verified",
            InvalidSignature => "Invalid signature",
            InvalidReceipt => "Malformed receipt",
            RecipientSuppressed => "Recipient suppressed",
            Unavailable => "Service unavailable",
            Internal => "Internal error",
        }
    }

    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidJson => "invalid_json",
            ValidationFailed => "validation_failed",
            Unauthorized => "unauthorized",
            InsufficientScope => "insufficient_scope",
            NotFound => "not_found",
            RouteNotFound => "route_not_found",
            MethodNotAllowed => "method_not_allowed",
            PayloadTooLarge => "payload_too_large",
            UnsupportedMediaType => "unsupported_media_type",
            Conflict => "conflict",
            IdempotencyKeyReused => "idempotency_key_reused",
            IdempotencyInProgress => "idempotency_in_progress",
            OtpInvalidCode => "otp_invalid_code",
            OtpExpired => "otp_expired",
            OtpTombstoned => "otp_tombstoned",
            OtpAlreadyVerified => "otp_already_verified",
            DeliveryFailed => "delivery_failed",
            NotRetryable => "not_retryable",
            RateLimited => "rate_limited",
            DomainNotVerified => "domain_not_verified",
            InvalidSignature => "invalid_signature",
            InvalidReceipt => "invalid_receipt",
            RecipientSuppressed => "recipient_suppressed",
            Unavailable => "unavailable",
            Internal => "internal",
        }
    }

    /// The `type` URI of the problem.
    pub fn type_uri(self) -> String {
        format!("https://herald.dev/errors/{}", self.as_str())
    }
}

/// One invalid field of a request, by its JSON path (`data.action_url`, `recipients[3]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

/// An RFC 9457 problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub code: ErrorCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The scope that was missing (`insufficient_scope`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Verification attempts left (`otp_invalid_code`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_remaining: Option<u32>,
    /// Invalid fields (`validation_failed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

impl Problem {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            type_uri: code.type_uri(),
            title: code.title().to_owned(),
            status: code.status(),
            code,
            detail: Some(detail.into()),
            scope: None,
            attempts_remaining: None,
            errors: Vec::new(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.code.as_str(), self.status)?;
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        for error in &self.errors {
            write!(f, "; {}: {}", error.field, error.message)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_match_serde_names() {
        for code in [ErrorCode::InvalidJson, ErrorCode::OtpTombstoned, ErrorCode::RouteNotFound] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn problem_serialises_without_empty_members() {
        let p = Problem::new(ErrorCode::NotFound, "No such thing.");
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["type"], "https://herald.dev/errors/not_found");
        assert_eq!(v["status"], 404);
        assert!(v.get("errors").is_none());
        assert!(v.get("scope").is_none());
    }
}
