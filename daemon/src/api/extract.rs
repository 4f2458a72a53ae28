//! Our own JSON extractor, so that bad input gets our problem body: a wrong content type is 415,
//! a body over the limit 413, malformed JSON 400 `invalid_json`, and a body of the wrong shape
//! (missing, unknown or mistyped fields) 422 `validation_failed` with the field's JSON path.

use axum::{
    body::Bytes,
    extract::{FromRequest, Request},
    http::{StatusCode, header},
};
use herald_common::{ErrorCode, FieldError};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The largest request body Herald reads (CONTRACT §1).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

pub struct AppJson<T>(pub T);

/// A JSON request body as bytes, after the content-type and size checks, for handlers that need
/// the body itself as well as its parsed form (idempotency fingerprints).
pub struct JsonBody(pub Bytes);

fn is_json(request: &Request) -> bool {
    let Some(value) = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let JsonBody(bytes) = JsonBody::from_request(request, state).await?;
        parse_json(&bytes).map(AppJson)
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(&request) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "Send the body as JSON with `Content-Type: application/json`.",
            ));
        }
        let bytes = Bytes::from_request(request, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    format!("The body is larger than {} KiB.", MAX_BODY_BYTES / 1024),
                )
            } else {
                ApiError::new(ErrorCode::InvalidJson, "The body could not be read.")
            }
        })?;
        Ok(JsonBody(bytes))
    }
}

/// Our own query-string extractor: unknown or malformed parameters are a 422 naming the
/// parameter, like body fields.
pub struct AppQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for AppQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer).map(AppQuery).map_err(|error| {
            let path = error.path().to_string();
            let message = error.inner().to_string();
            let named = ["unknown field `", "missing field `"]
                .iter()
                .find_map(|prefix| message.strip_prefix(prefix))
                .and_then(|rest| rest.split('`').next());
            let field = match named {
                Some(name) => name.to_owned(),
                None if path == "." => "query".to_owned(),
                None => path,
            };
            ApiError::field(field, message)
        })
    }
}

/// The request's `Idempotency-Key`, fingerprinted with its JSON body, if it has one.
pub fn idempotency_key(
    headers: &axum::http::HeaderMap,
    body: &[u8],
    secret: &crate::secret::ServerSecret,
) -> Result<Option<crate::service::notifications::Idempotency>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| ApiError::field("Idempotency-Key", "must be printable ASCII"))?;
    let body: serde_json::Value = parse_json(body)?;
    crate::service::notifications::Idempotency::new(secret, key, &body).map(Some)
}

/// The stored response of an earlier request with the same key, marked as replayed.
pub fn replayed(status_code: u16, body: String) -> axum::response::Response {
    use axum::{http::HeaderValue, response::IntoResponse};
    let status = StatusCode::from_u16(status_code).unwrap_or(StatusCode::OK);
    let content_type =
        if status.is_success() { "application/json" } else { herald_common::error::PROBLEM_CONTENT_TYPE };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Parses `bytes` as `T`, classifying failures as CONTRACT §2 says.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize::<_, T>(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if inner.is_data() {
            ApiError::validation(vec![field_error(&path, &inner)])
        } else {
            ApiError::new(ErrorCode::InvalidJson, format!("The body is not valid JSON: {inner}."))
        }
    })?;
    deserializer
        .end()
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("The body is not valid JSON: {e}.")))?;
    Ok(value)
}

/// Names the field a serde data error is about. `serde_path_to_error` gives the path of the
/// object in which a field is missing or unknown; the field's own name is in the message.
fn field_error(path: &str, error: &serde_json::Error) -> FieldError {
    let text = error.to_string();
    // serde_json appends " at line L column C"; the path says where.
    let message = text.split(" at line ").next().unwrap_or(&text).to_owned();
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next());
    let field = match (path, named) {
        (".", Some(name)) => name.to_owned(),
        (_, Some(name)) if !path.ends_with(name) => format!("{path}.{name}"),
        (".", None) => "body".to_owned(),
        _ => path.to_owned(),
    };
    let message = match named {
        Some(_) if message.starts_with("missing") => "is required".to_owned(),
        Some(_) => {
            let expected = message.split(", expected ").nth(1).unwrap_or_default();
            if expected.is_empty() {
                "is not a known field".to_owned()
            } else {
                format!("is not a known field (expected {expected})")
            }
        }
        None => message,
    };
    FieldError::new(field, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        url: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        name: String,
        count: Option<u32>,
        data: Option<Inner>,
    }

    fn fails(json: &str) -> herald_common::Problem {
        parse_json::<Body>(json.as_bytes()).unwrap_err().problem().clone()
    }

    #[test]
    fn malformed_json_is_400() {
        let p = fails("{\"name\": ");
        assert_eq!(p.status, 400);
        assert_eq!(p.code, ErrorCode::InvalidJson);
        assert_eq!(fails("{\"name\": \"a\"} trailing").status, 400);
    }

    #[test]
    fn shape_errors_are_422_with_the_field_path() {
        let p = fails("{}");
        assert_eq!((p.status, p.errors[0].field.as_str()), (422, "name"));
        assert_eq!(p.errors[0].message, "is required");
        let p = fails("{\"name\": \"a\", \"nmae\": 1}");
        assert_eq!(p.errors[0].field, "nmae");
        assert!(p.errors[0].message.starts_with("is not a known field"), "{:?}", p.errors);
        let p = fails("{\"name\": \"a\", \"count\": \"x\"}");
        assert_eq!(p.errors[0].field, "count");
        let p = fails("{\"name\": \"a\", \"data\": {\"url\": 5}}");
        assert_eq!(p.errors[0].field, "data.url");
        let p = fails("{\"name\": \"a\", \"data\": {}}");
        assert_eq!(p.errors[0].field, "data.url");
        let p = fails("[1]");
        assert_eq!(p.status, 422);
    }
}
