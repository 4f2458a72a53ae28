//! Idempotency keys, for the two requests that take one (dispatch and OTP sends): the request's
//! `Idempotency-Key` fingerprinted with its body, and what a key that an earlier request already
//! used means for a repeat: that request's response, replayed as it was, or the reason it cannot
//! be. The records are the store's (`store/idempotency.rs`), written in the same transaction as
//! the request's own work, so a key never outlives or precedes what it stands for.

use std::time::Duration;

use herald_common::ids::ApplicationId;
use serde_json::Value;

use super::InvalidFields;
use crate::{
    secret::ServerSecret,
    store::{DispatchResult, IdempotencyKey, Store, StoreError},
};

/// How long an idempotency key is remembered.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// [`IDEMPOTENCY_TTL`] in milliseconds, as the store's records count time.
pub const IDEMPOTENCY_TTL_MS: i64 = IDEMPOTENCY_TTL.as_millis() as i64;

/// Why a request with a key already used cannot have that key's response.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("This Idempotency-Key was used with a different request; use a new key for a new request.")]
    KeyReused,
    /// The first request with the key has not stored its response yet.
    #[error("A request with this Idempotency-Key is still being processed; retry shortly.")]
    InFlight,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The stored response of an earlier request with the same key, to be sent again unchanged.
#[derive(Debug, PartialEq, Eq)]
pub struct Replay {
    pub status_code: u16,
    pub body: String,
}

/// Checks an `Idempotency-Key` header (1 to 255 printable ASCII characters) and fingerprints
/// the body it came with: an HMAC (keyed with the server secret, so a stored fingerprint cannot
/// be tested against guessed recipients or codes) of its canonical JSON, so whitespace and key
/// order do not matter.
pub fn fingerprint(secret: &ServerSecret, key: &str, body: &Value) -> Result<IdempotencyKey, InvalidFields> {
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(InvalidFields::field("Idempotency-Key", "must be 1 to 255 printable ASCII characters"));
    }
    let canonical = serde_json::to_vec(&canonical(body)).unwrap_or_default();
    let digest = secret.mac("herald.idempotency.v1", &[&canonical]);
    Ok(IdempotencyKey {
        key: key.to_owned(),
        request_hash: digest.iter().map(|b| format!("{b:02x}")).collect(),
    })
}

/// The value with object keys sorted at every level.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Looks `key` up before any work is done: the earlier request's response to replay, or `None`
/// when there is no key or it is free, and the request goes ahead.
pub async fn earlier(
    store: &Store,
    application_id: &ApplicationId,
    key: Option<&IdempotencyKey>,
    now: i64,
) -> Result<Option<Replay>, ReplayError> {
    let Some(key) = key else { return Ok(None) };
    match store.check_idempotency_key(application_id, key, now).await? {
        DispatchResult::Created => Ok(None),
        taken => replay(taken).map(Some),
    }
}

/// What a key already used by an earlier request means for this one: that request's stored
/// response, or the error that explains why there is none to give.
pub fn replay(result: DispatchResult) -> Result<Replay, ReplayError> {
    match result {
        DispatchResult::Replay { status_code, body } => Ok(Replay { status_code, body }),
        DispatchResult::KeyReused => Err(ReplayError::KeyReused),
        // `Created` only reaches here from a write that found the key taken after all (by a
        // concurrent request that has not answered yet).
        DispatchResult::InFlight | DispatchResult::Created => Err(ReplayError::InFlight),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Secret;

    fn secret() -> ServerSecret {
        ServerSecret::new(Secret::new("test-secret-test-secret-test-secret-0123"))
    }

    #[test]
    fn the_fingerprint_ignores_key_order_and_whitespace_but_not_values() {
        let a = fingerprint(&secret(), "k", &json!({"a": 1, "b": {"c": [1, 2], "d": "x"}})).unwrap();
        let b: Value = serde_json::from_str(r#"{ "b": { "d": "x", "c": [1,2] }, "a": 1 }"#).unwrap();
        assert_eq!(a, fingerprint(&secret(), "k", &b).unwrap());
        let other = fingerprint(&secret(), "k", &json!({"a": 1, "b": {"c": [2, 1], "d": "x"}})).unwrap();
        assert_ne!(a.request_hash, other.request_hash, "array order is part of the request");
    }

    #[test]
    fn keys_are_printable_ascii_of_1_to_255() {
        assert!(fingerprint(&secret(), "order 42/a", &json!({})).is_ok());
        assert!(fingerprint(&secret(), &"k".repeat(255), &json!({})).is_ok());
        for bad in [String::new(), "k".repeat(256), "tab\there".into(), "é".into()] {
            let error = fingerprint(&secret(), &bad, &json!({})).unwrap_err();
            assert_eq!(error.0[0].field, "Idempotency-Key", "{bad:?}");
        }
    }

    #[test]
    fn a_used_key_replays_or_says_why_not() {
        let stored = DispatchResult::Replay { status_code: 202, body: "{}".into() };
        assert_eq!(replay(stored).unwrap(), Replay { status_code: 202, body: "{}".into() });
        assert!(matches!(replay(DispatchResult::KeyReused), Err(ReplayError::KeyReused)));
        assert!(matches!(replay(DispatchResult::InFlight), Err(ReplayError::InFlight)));
        assert!(matches!(replay(DispatchResult::Created), Err(ReplayError::InFlight)));
    }
}
