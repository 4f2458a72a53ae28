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
        read_body(request, state, ErrorCode::InvalidJson).await.map(JsonBody)
    }
}

/// A request body as it was sent, whatever its content type, for the providers' receipt
/// intakes: their signatures cover the raw bytes, so nothing may parse or check it first.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        read_body(request, state, ErrorCode::InvalidReceipt).await.map(RawBody)
    }
}

/// The body, at most [`MAX_BODY_BYTES`]; one that cannot be read is answered `unreadable`
/// (the route's own code for a body it cannot take).
async fn read_body<S: Send + Sync>(
    request: Request,
    state: &S,
    unreadable: ErrorCode,
) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("The body is larger than {} KiB.", MAX_BODY_BYTES / 1024),
            )
        } else {
            ApiError::new(unreadable, "The body could not be read.")
        }
    })
}

/// Our own query-string extractor: unknown or malformed parameters are a 422 naming the
/// parameter, like body fields.
pub struct AppQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for AppQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        if let Some((name, _)) =
            form_urlencoded::parse(query.as_bytes()).find(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::field(name.replace('\0', ""), "must not contain a NUL character (%00)"));
        }
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
) -> Result<Option<crate::store::IdempotencyKey>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| ApiError::field("Idempotency-Key", "must be printable ASCII"))?;
    let body: serde_json::Value = parse_json(body)?;
    Ok(Some(crate::service::idempotent_replay::fingerprint(secret, key, &body)?))
}

/// The stored response of an earlier request with the same key, marked as replayed.
pub fn replayed(earlier: crate::service::idempotent_replay::Replay) -> axum::response::Response {
    use axum::{http::HeaderValue, response::IntoResponse};
    let crate::service::idempotent_replay::Replay { status_code, body } = earlier;
    let status = StatusCode::from_u16(status_code).unwrap_or(StatusCode::OK);
    let content_type =
        if status.is_success() { "application/json" } else { herald_common::error::PROBLEM_CONTENT_TYPE };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Parses `bytes` as `T` (a request body: a JSON object), classifying failures as CONTRACT §2
/// says: bytes that are not JSON are 400 `invalid_json`; JSON of the wrong shape is 422
/// `validation_failed` naming every field that is unknown or of the wrong type (and the first
/// one missing), or `$` for a body that is not an object.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every request body is an object; serde would also read a struct from an array.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(shape_errors::<T>(bytes));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(&mut deserializer) {
        Ok(value) => {
            deserializer.end().map_err(not_json)?;
            refuse_nul(bytes)?;
            Ok(value)
        }
        // The fast path failed; find out why on a parsed copy (errors only).
        Err(_) => Err(shape_errors::<T>(bytes)),
    }
}

/// A NUL character in any string of a body is refused here, once for every endpoint:
/// PostgreSQL cannot store one in text, and no field of Herald's has a use for it. JSON can only
/// carry it escaped, so bodies without `\u0000` in their bytes (nearly all) cost one scan.
fn refuse_nul(bytes: &[u8]) -> Result<(), ApiError> {
    const ESCAPED_NUL: &[u8] = b"\\u0000";
    if !bytes.windows(ESCAPED_NUL.len()).any(|w| w == ESCAPED_NUL) {
        return Ok(());
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(not_json)?;
    let mut errors = Vec::new();
    find_nul(&value, String::new(), &mut errors);
    if errors.is_empty() { Ok(()) } else { Err(ApiError::validation(errors)) }
}

/// Adds an error for every string under `value` (at `path`) that holds a NUL.
fn find_nul(value: &serde_json::Value, path: String, errors: &mut Vec<FieldError>) {
    const MESSAGE: &str = "must not contain a NUL character (\\u0000)";
    let at = |path: &str| if path.is_empty() { ROOT.to_owned() } else { path.to_owned() };
    match value {
        serde_json::Value::String(text) if text.contains('\0') => {
            errors.push(FieldError::new(at(&path), MESSAGE))
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_nul(item, format!("{path}[{i}]"), errors);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                if key.contains('\0') {
                    errors.push(FieldError::new(at(&path), "has a key with a NUL character (\\u0000)"));
                    continue;
                }
                let inner = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                find_nul(item, inner, errors);
            }
        }
        _ => {}
    }
}

fn not_json(error: serde_json::Error) -> ApiError {
    ApiError::new(ErrorCode::InvalidJson, format!("The body is not valid JSON: {error}."))
}

/// Why `bytes` is not a `T`. A streaming parse stops at the first surprise, and for some types
/// (an enum given a number) reports it as a syntax error although the JSON is fine; so the
/// bytes are parsed as JSON first (not JSON: 400), then deserialized as `T` again and again,
/// each time without the field that failed, to name every bad field at once.
fn shape_errors<T: DeserializeOwned>(bytes: &[u8]) -> ApiError {
    let mut value: serde_json::Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(error) => return not_json(error),
    };
    if !value.is_object() {
        return ApiError::validation(vec![FieldError::new(ROOT, "must be a JSON object")]);
    }
    let mut nul = Vec::new();
    find_nul(&value, String::new(), &mut nul);
    let mut errors: Vec<FieldError> = Vec::new();
    // Bounded: a body has at most a few dozen fields, and each round removes one.
    for _ in 0..64 {
        let Err(error) = serde_path_to_error::deserialize::<_, T>(value.clone()) else { break };
        let path = error.path().to_string();
        let error = field_error(&path, &error.into_inner());
        // A field removed for being wrong is then missing: already said. Inside an object, drop
        // the object and go on; at the top, stop.
        if errors.iter().any(|e| e.field == error.field) {
            match error.field.rsplit_once('.') {
                Some((parent, _)) if remove_path(&mut value, parent) => continue,
                _ => break,
            }
        }
        let removed = remove_path(&mut value, &error.field);
        errors.push(error);
        if !removed {
            break;
        }
    }
    errors.extend(nul.into_iter().filter(|n| !errors.iter().any(|e| e.field == n.field)).collect::<Vec<_>>());
    if errors.is_empty() {
        errors.push(FieldError::new(ROOT, "is not what this endpoint takes"));
    }
    ApiError::validation(errors)
}

/// The field name of an error about the body as a whole.
const ROOT: &str = "$";

/// Removes the value at a dotted path (`data.url`, `items[2]`); whether there was one.
fn remove_path(value: &mut serde_json::Value, path: &str) -> bool {
    let mut parts: Vec<String> = Vec::new();
    for segment in path.split('.') {
        // `name[2][0]` is `name`, `2`, `0`.
        let mut pieces = segment.split('[');
        if let Some(name) = pieces.next().filter(|n| !n.is_empty()) {
            parts.push(name.to_owned());
        }
        parts.extend(pieces.map(|p| p.trim_end_matches(']').to_owned()));
    }
    let Some((last, parents)) = parts.split_last() else { return false };
    let mut at = value;
    for part in parents {
        let next = match at {
            serde_json::Value::Object(map) => map.get_mut(part.as_str()),
            serde_json::Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else { return false };
        at = next;
    }
    match at {
        serde_json::Value::Object(map) => map.remove(last.as_str()).is_some(),
        serde_json::Value::Array(items) => match last.parse::<usize>() {
            // Replaced, not removed, so the other elements keep their indices.
            Ok(i) if i < items.len() => {
                items[i] = serde_json::Value::Null;
                false
            }
            _ => false,
        },
        _ => false,
    }
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
        (".", None) => ROOT.to_owned(),
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
        assert_eq!((p.status, p.errors[0].field.as_str()), (422, "$"));
        let p = fails("null");
        assert_eq!((p.status, p.errors[0].field.as_str()), (422, "$"));
    }

    #[test]
    fn nul_characters_are_refused_naming_the_field() {
        let p = fails(r#"{"name": "a\u0000b", "data": {"url": "\u0000"}}"#);
        let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!((p.status, fields), (422, vec!["data.url", "name"]));
        // An escaped backslash before `u0000` is no NUL.
        assert!(parse_json::<Body>(br#"{"name": "a\\u0000b"}"#).is_ok());
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Free {
            data: serde_json::Map<String, serde_json::Value>,
        }
        let p = parse_json::<Free>(br#"{"data": {"list": ["ok", "\u0000"], "k\u0000": 1}}"#)
            .unwrap_err()
            .problem()
            .clone();
        let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["data", "data.list[1]"], "{:?}", p.errors);
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Kind {
        Email,
        Sms,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct WithEnum {
        kind: Kind,
        name: String,
        count: Option<u32>,
        data: Option<Inner>,
    }

    #[test]
    fn valid_json_of_the_wrong_type_is_422_naming_every_bad_field() {
        // An enum given a number is a syntax error to a streaming parse; it is still valid JSON.
        let p = parse_json::<WithEnum>(br#"{"kind": 12345}"#).unwrap_err().problem().clone();
        assert_eq!(p.status, 422, "{p:?}");
        assert_eq!(p.errors[0].field, "kind");
        let body = br#"{"kind": 1, "name": [], "count": "x", "data": {"url": 5}, "extra": true}"#;
        let p = parse_json::<WithEnum>(body).unwrap_err().problem().clone();
        let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
        // In the order of the body's keys, sorted.
        assert_eq!(fields, ["count", "data.url", "extra", "kind", "name"], "{:?}", p.errors);
        // Missing is said once, after the wrong ones, and a field removed for being wrong is
        // not also called missing.
        let p = parse_json::<WithEnum>(br#"{"count": "x"}"#).unwrap_err().problem().clone();
        let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["count", "kind"], "{:?}", p.errors);
        assert_eq!(
            parse_json::<WithEnum>(br#"{"kind": "email", "name": "a"} x"#).unwrap_err().problem().status,
            400
        );
    }
}
