//! WhatsApp Cloud API receipts (CONTRACT §8): Meta's webhook verification handshake, and the
//! `statuses` of its signed messages webhook turned into Herald's status model.
//!
//! The `X-Hub-Signature-256` header is checked over the raw body before anything is parsed, so
//! an unsigned caller learns nothing, not even whether its body would parse. A status's
//! `recipient_id` is the recipient's phone number and a `wamid` embeds it too: neither is
//! logged, and the number is masked out of the error text that becomes `failure_reason`.

use aws_lc_rs::hmac;
use herald_common::api::notifications::{DeliveryStatus, ReceiptProvider};
use serde::Deserialize;

use super::{Counted, ReceiptError, Said, Target, record, refused, same_signature};
use crate::{config::Secret, state::AppState};

const PROVIDER: ReceiptProvider = ReceiptProvider::Whatsapp;

/// The longest error text kept from a failed status (Meta's `details` can run long).
const DETAIL_MAX_CHARS: usize = 500;

/// A failed status's error code: whether a plain retry of the same message can succeed, and
/// what the code means (Meta's error-code reference). `docs/DELIVERY.md` lists the same table.
/// Codes not listed are retryable: CONTRACT §8 makes an `undelivered` item retryable unless the
/// provider's code says the message cannot reach the number.
const ERROR_CODES: &[(i64, bool, &str)] = &[
    (1, true, "API unknown error"),
    (2, true, "API service temporarily unavailable"),
    (4, true, "Application request limit reached"),
    (80007, true, "WhatsApp Business Account rate limit reached"),
    (130429, true, "Cloud API throughput reached"),
    (130472, false, "The recipient's number is part of an experiment that withholds this message"),
    (131000, true, "Something went wrong (generic error)"),
    (131016, true, "Service unavailable"),
    (131021, false, "The recipient is the sending number"),
    (
        131026,
        false,
        "Message undeliverable: the number is not on WhatsApp, has not accepted the latest terms, or runs an old version",
    ),
    (
        131047,
        false,
        "Re-engagement message: more than 24 hours since the recipient last wrote; only a template message reaches them now, and Herald sends free-form text",
    ),
    (131048, true, "Spam rate limit hit: too many messages were refused or reported; retry later"),
    (
        131049,
        true,
        "Not delivered to maintain healthy ecosystem engagement (Meta's per-recipient limit); retry later",
    ),
    (131050, false, "The recipient stopped marketing messages from this business"),
    (131051, false, "Unsupported message type"),
    (131056, true, "Pair rate limit: too many messages to the same recipient in a short time"),
    (131057, true, "The business account is in maintenance mode"),
    (133004, true, "Server temporarily unavailable"),
];

/// Whether an `undelivered` item whose failure carried `code` may be retried.
fn retryable_code(code: Option<i64>) -> bool {
    code.and_then(|code| ERROR_CODES.iter().find(|(c, _, _)| *c == code)).is_none_or(|(_, retry, _)| *retry)
}

/// Meta's webhook verification (`GET …?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`):
/// the challenge to echo when the token is the configured one. Refused, and counted as an
/// invalid signature, when it is not, when no token is configured, or when a part is missing.
pub fn verify_subscription(
    verify_token: Option<&Secret>,
    mode: Option<&str>,
    token: Option<&str>,
    challenge: Option<&str>,
) -> Result<String, ReceiptError> {
    let expected = verify_token.map(Secret::expose).filter(|t| !t.is_empty());
    match (expected, mode, token, challenge) {
        (Some(expected), Some("subscribe"), Some(token), Some(challenge))
            if same_signature(expected.as_bytes(), token.as_bytes()) =>
        {
            Ok(challenge.to_owned())
        }
        _ => Err(refused(PROVIDER, ReceiptError::InvalidSignature)),
    }
}

/// Takes a webhook: checks `signature` (the `X-Hub-Signature-256` header) over `body` with the
/// app secret, then records every status in it, each in order. Returns how each status ended; a
/// payload without statuses (an inbound message, another field) is taken and writes nothing.
///
/// If the store fails halfway, the statuses before are kept and Meta sends the whole payload
/// again: their repeats are kept in the history too, and cannot move a status down.
pub async fn take_webhook(
    state: &AppState,
    app_secret: Option<&Secret>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: i64,
) -> Result<Vec<Counted>, ReceiptError> {
    if !signed(app_secret, signature, body) {
        return Err(refused(PROVIDER, ReceiptError::InvalidSignature));
    }
    let statuses = parse(body).map_err(|error| refused(PROVIDER, error))?;
    let mut outcomes = Vec::with_capacity(statuses.len());
    for status in statuses {
        let received_at = status.time_ms().map_or(now_ms, |at| at.min(now_ms));
        let said = said_of(&status);
        outcomes.push(record(state, Target::ProviderMessage(status.id), said, received_at).await?);
    }
    Ok(outcomes)
}

/// Whether `header` is `sha256=<hex HMAC-SHA256 of body keyed with the app secret>`. Without an
/// app secret (or an empty one, which anybody could sign with) nothing is signed.
fn signed(app_secret: Option<&Secret>, header: Option<&str>, body: &[u8]) -> bool {
    let Some(secret) = app_secret.map(Secret::expose).filter(|s| !s.is_empty()) else { return false };
    let Some(given) = header.and_then(|h| strip_prefix_ignoring_case(h.trim(), "sha256=")).and_then(from_hex)
    else {
        return false;
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    same_signature(hmac::sign(&key, body).as_ref(), &given)
}

fn strip_prefix_ignoring_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

/// Hex digits (either case) as bytes; `None` for an odd length or a character that is not one.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| (b as char).to_digit(16);
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes.chunks(2).map(|pair| u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()).collect()
}

/// The Cloud API's webhook (only what Herald reads; other fields are ignored).
#[derive(Deserialize)]
struct Webhook {
    object: String,
    entry: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    changes: Vec<Change>,
}

#[derive(Deserialize)]
struct Change {
    /// Absent in some fields' changes; only `messages` changes carry statuses.
    #[serde(default)]
    value: Option<ChangeValue>,
}

#[derive(Deserialize)]
struct ChangeValue {
    /// Absent when the change is an inbound message rather than a status.
    #[serde(default)]
    statuses: Vec<Status>,
}

/// One status of a message Herald sent.
#[derive(Deserialize)]
struct Status {
    /// The `wamid` the send was answered with.
    id: String,
    /// `sent`, `delivered`, `read`, `failed` (or `deleted`, `warning`, …).
    status: String,
    /// Epoch seconds, as a string (a number is taken too).
    #[serde(default)]
    timestamp: Option<serde_json::Value>,
    /// The recipient's phone number (digits), only to mask it out of error texts.
    #[serde(default)]
    recipient_id: Option<String>,
    #[serde(default)]
    errors: Vec<CloudError>,
}

/// One error of a failed status. `code` and `error_data` are read loosely: relays and other
/// Graph API errors send the code as a string, or `error_data` as a plain string, and a
/// receipt refused for that would come back from Meta forever.
#[derive(Deserialize)]
struct CloudError {
    #[serde(default)]
    code: Option<serde_json::Value>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error_data: Option<serde_json::Value>,
}

impl CloudError {
    fn code(&self) -> Option<i64> {
        match self.code.as_ref()? {
            serde_json::Value::Number(number) => number.as_i64(),
            serde_json::Value::String(text) => text.trim().parse().ok(),
            _ => None,
        }
    }

    /// `error_data.details`, or `error_data` itself when it is text.
    fn details(&self) -> Option<&str> {
        match self.error_data.as_ref()? {
            serde_json::Value::String(text) => Some(text),
            data => data.get("details")?.as_str(),
        }
    }
}

impl Status {
    /// When Meta says it happened, in epoch milliseconds.
    fn time_ms(&self) -> Option<i64> {
        let seconds = match self.timestamp.as_ref()? {
            serde_json::Value::String(text) => text.trim().parse::<i64>().ok()?,
            serde_json::Value::Number(number) => number.as_i64()?,
            _ => return None,
        };
        seconds.checked_mul(1000).filter(|ms| *ms > 0)
    }
}

/// The statuses of a webhook body, or why it is not one. The error names where the shape went
/// wrong, never a value (values hold phone numbers).
fn parse(body: &[u8]) -> Result<Vec<Status>, ReceiptError> {
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| ReceiptError::Malformed("The body is not JSON.".to_owned()))?;
    let webhook: Webhook = serde_path_to_error::deserialize(&value).map_err(|error| {
        let path = error.path().to_string();
        let message = error.inner().to_string();
        let what = match message.strip_prefix("missing field `").and_then(|rest| rest.split('`').next()) {
            Some(field) if path == "." => format!("`{field}` is missing"),
            Some(field) => format!("`{path}.{field}` is missing"),
            None => format!("`{path}` has the wrong type"),
        };
        ReceiptError::Malformed(format!("The body is not a WhatsApp Cloud API webhook: {what}."))
    })?;
    if webhook.object != "whatsapp_business_account" {
        return Err(ReceiptError::Malformed(
            "The body is not a WhatsApp Cloud API webhook: `object` is not `whatsapp_business_account`."
                .to_owned(),
        ));
    }
    Ok(webhook
        .entry
        .into_iter()
        .flat_map(|entry| entry.changes)
        .filter_map(|change| change.value)
        .flat_map(|value| value.statuses)
        .collect())
}

/// What a status means in Herald's terms.
fn said_of(status: &Status) -> Said {
    let (meaning, failed) = match status.status.as_str() {
        "delivered" => (DeliveryStatus::Delivered, false),
        "read" => (DeliveryStatus::Read, false),
        "failed" => (DeliveryStatus::Undelivered, true),
        // `sent`, and the words that change nothing (`deleted`, `warning`, any Meta adds):
        // kept in the history only.
        _ => (DeliveryStatus::Sent, false),
    };
    let error = status.errors.first();
    let code = error.and_then(CloudError::code);
    let detail = match error {
        Some(error) => Some(error_text(error)),
        None if failed => Some("WhatsApp reported the message failed, without an error.".to_owned()),
        None => None,
    };
    let detail = detail.map(|text| masked(text, status.recipient_id.as_deref()));
    Said {
        provider: PROVIDER,
        provider_status: status.status.clone(),
        status: meaning,
        error_code: code.map(|c| c.to_string()),
        detail,
        retryable: failed && retryable_code(code),
    }
}

/// `WhatsApp error CODE: title (details)`, the form of send-time failures.
fn error_text(error: &CloudError) -> String {
    let code = error.code().map_or_else(|| "?".to_owned(), |c| c.to_string());
    let title = error.title.as_deref().or(error.message.as_deref()).unwrap_or("no title");
    let mut text = format!("WhatsApp error {code}: {title}");
    if let Some(details) = error.details().filter(|d| !d.is_empty() && *d != title) {
        text.push_str(&format!(" ({details})"));
    }
    text
}

/// `text` with the recipient's number masked out of it, at most [`DETAIL_MAX_CHARS`] long.
fn masked(text: String, recipient_id: Option<&str>) -> String {
    let digits = recipient_id.map(|r| r.trim_start_matches('+')).filter(|d| d.len() >= 4);
    let text = match digits {
        Some(digits) => {
            let mask = herald_common::mask::mask(&format!("+{digits}"));
            text.replace(digits, mask.trim_start_matches('+'))
        }
        None => text,
    };
    match text.char_indices().nth(DETAIL_MAX_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> Secret {
        Secret::new(s)
    }

    /// A fixed vector computed outside this code, with Python's standard library:
    /// `python3 -c 'import hmac, hashlib; print(hmac.new(b"app-secret",
    /// b"{\"object\":\"whatsapp_business_account\",\"entry\":[]}", hashlib.sha256).hexdigest())'`
    /// (the same as `printf %s '<body>' | openssl dgst -sha256 -hmac app-secret`).
    const VECTOR_BODY: &[u8] = br#"{"object":"whatsapp_business_account","entry":[]}"#;
    const VECTOR_SIGNATURE: &str = "sha256=d3e4f9da0ce6c71ab3dba55929b8eeeee2455349e534924ead19f98d143e904f";

    #[test]
    fn signatures_match_an_independent_hmac() {
        let key = secret("app-secret");
        assert!(signed(Some(&key), Some(VECTOR_SIGNATURE), VECTOR_BODY));
        assert!(
            signed(
                Some(&key),
                Some(&VECTOR_SIGNATURE.to_ascii_uppercase().replace("SHA256=", "sha256=")),
                VECTOR_BODY
            ),
            "hex in either case"
        );
        let mut tampered = VECTOR_BODY.to_vec();
        tampered[3] ^= 1;
        assert!(!signed(Some(&key), Some(VECTOR_SIGNATURE), &tampered), "another body");
        assert!(!signed(Some(&secret("other")), Some(VECTOR_SIGNATURE), VECTOR_BODY), "another key");
        assert!(!signed(None, Some(VECTOR_SIGNATURE), VECTOR_BODY), "no secret configured");
        assert!(!signed(Some(&secret("")), Some(VECTOR_SIGNATURE), VECTOR_BODY), "an empty secret");
        assert!(!signed(Some(&key), None, VECTOR_BODY), "no header");
        let bare = VECTOR_SIGNATURE.trim_start_matches("sha256=");
        assert!(!signed(Some(&key), Some(bare), VECTOR_BODY), "no sha256= prefix");
        assert!(!signed(Some(&key), Some(&format!("sha1={bare}")), VECTOR_BODY));
        assert!(
            !signed(Some(&key), Some(&VECTOR_SIGNATURE[..VECTOR_SIGNATURE.len() - 2]), VECTOR_BODY),
            "short"
        );
        assert!(!signed(Some(&key), Some("sha256=zz"), VECTOR_BODY), "not hex");
        assert!(!signed(Some(&key), Some("sha256=é"), VECTOR_BODY), "not ASCII");
    }

    #[test]
    fn hex_decodes_pairs_only() {
        assert_eq!(from_hex("00ff10Ab"), Some(vec![0, 255, 16, 171]));
        assert_eq!(from_hex(""), Some(vec![]));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("0g"), None);
    }

    #[test]
    fn the_handshake_needs_the_configured_token() {
        let token = secret("verify-me");
        let ok = verify_subscription(Some(&token), Some("subscribe"), Some("verify-me"), Some("1158201444"));
        assert_eq!(ok.unwrap(), "1158201444");
        for (configured, mode, given, challenge) in [
            (Some(&token), Some("subscribe"), Some("verify-you"), Some("1")),
            (Some(&token), Some("subscribe"), Some("verify-m"), Some("1")),
            (Some(&token), Some("unsubscribe"), Some("verify-me"), Some("1")),
            (Some(&token), None, Some("verify-me"), Some("1")),
            (Some(&token), Some("subscribe"), None, Some("1")),
            (Some(&token), Some("subscribe"), Some("verify-me"), None),
            (None, Some("subscribe"), Some("verify-me"), Some("1")),
        ] {
            let refused = verify_subscription(configured, mode, given, challenge);
            assert!(
                matches!(refused, Err(ReceiptError::InvalidSignature)),
                "{mode:?} {given:?} {challenge:?}"
            );
        }
        let empty = secret("");
        assert!(verify_subscription(Some(&empty), Some("subscribe"), Some(""), Some("1")).is_err());
    }

    fn status(json: serde_json::Value) -> Status {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn statuses_map_to_the_status_model() {
        for (word, meaning) in [
            ("sent", DeliveryStatus::Sent),
            ("delivered", DeliveryStatus::Delivered),
            ("read", DeliveryStatus::Read),
            ("deleted", DeliveryStatus::Sent),
            ("warning", DeliveryStatus::Sent),
        ] {
            let said = said_of(&status(
                serde_json::json!({"id": "wamid.x", "status": word, "timestamp": "1", "recipient_id": "16505551234"}),
            ));
            assert_eq!((said.provider_status.as_str(), said.status), (word, meaning));
            assert_eq!((said.error_code, said.detail, said.retryable), (None, None, false));
        }
    }

    #[test]
    fn a_failure_keeps_its_code_and_title_without_the_number() {
        let said = said_of(&status(serde_json::json!({
            "id": "wamid.x", "status": "failed", "timestamp": "1674864551", "recipient_id": "16505551234",
            "errors": [{"code": 131047, "title": "Re-engagement message", "message": "Re-engagement message",
                "error_data": {"details": "More than 24 hours have passed since 16505551234 last replied."}}],
        })));
        assert_eq!(said.status, DeliveryStatus::Undelivered);
        assert_eq!(said.error_code.as_deref(), Some("131047"));
        assert!(!said.retryable, "outside the 24 h window a plain retry fails again");
        let detail = said.detail.unwrap();
        assert_eq!(
            detail,
            "WhatsApp error 131047: Re-engagement message (More than 24 hours have passed since 16*******34 last replied.)"
        );

        let transient = said_of(&status(serde_json::json!({
            "id": "wamid.x", "status": "failed", "errors": [{"code": 131049, "title": "Healthy ecosystem"}],
        })));
        assert!(transient.retryable);
        assert_eq!(transient.detail.as_deref(), Some("WhatsApp error 131049: Healthy ecosystem"));

        let loose = said_of(&status(serde_json::json!({
            "id": "wamid.x", "status": "failed",
            "errors": [{"code": "131026", "title": "Message undeliverable", "error_data": "Not on WhatsApp."}],
        })));
        assert_eq!(loose.error_code.as_deref(), Some("131026"), "a code as a string");
        assert!(!loose.retryable);
        assert_eq!(
            loose.detail.as_deref(),
            Some("WhatsApp error 131026: Message undeliverable (Not on WhatsApp.)"),
            "error_data as a string"
        );

        let bare = said_of(&status(serde_json::json!({"id": "wamid.x", "status": "failed"})));
        assert!(bare.retryable && bare.error_code.is_none() && bare.detail.is_some(), "no code: retryable");

        let long = said_of(&status(serde_json::json!({
            "id": "wamid.x", "status": "failed", "errors": [{"code": 131000, "title": "x".repeat(2000)}],
        })));
        assert_eq!(long.detail.unwrap().chars().count(), DETAIL_MAX_CHARS + 1, "cut, with an ellipsis");
    }

    #[test]
    fn retryability_follows_the_table() {
        for code in [131026, 131047, 131050, 131051, 131021, 130472] {
            assert!(!retryable_code(Some(code)), "{code}");
        }
        for code in [1, 2, 131000, 131048, 131049, 131056, 999_999] {
            assert!(retryable_code(Some(code)), "{code}");
        }
        assert!(retryable_code(None));
    }

    /// docs/DELIVERY.md lists the table the code uses: each code, with its retryability.
    #[test]
    fn the_delivery_doc_lists_the_error_table() {
        let doc = include_str!("../../../../docs/DELIVERY.md");
        for (code, retryable, _) in ERROR_CODES {
            let row = format!("| {code} | {} |", if *retryable { "yes" } else { "no" });
            assert!(doc.contains(&row), "DELIVERY.md lacks the row `{row}`");
        }
    }

    #[test]
    fn bodies_that_are_not_webhooks_say_where() {
        let fails = |body: &str| match parse(body.as_bytes()) {
            Err(ReceiptError::Malformed(why)) => why,
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("{body} parsed"),
        };
        assert_eq!(fails("not json"), "The body is not JSON.");
        assert_eq!(
            fails(r#"{"object": "whatsapp_business_account", "entry": []} x"#),
            "The body is not JSON."
        );
        assert!(fails("{}").contains("`object` is missing"));
        assert!(fails(r#"{"object": "page", "entry": []}"#).contains("whatsapp_business_account"));
        let why = fails(
            r#"{"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {"statuses": [{"id": 16505551234, "status": "sent"}]}}]}]}"#,
        );
        assert_eq!(
            why,
            "The body is not a WhatsApp Cloud API webhook: `entry[0].changes[0].value.statuses[0].id` has the wrong type."
        );
        assert!(!why.contains("16505551234"), "values are never quoted");
        let why = fails(
            r#"{"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {"statuses": [{"status": "sent"}]}}]}]}"#,
        );
        assert!(why.contains("`entry[0].changes[0].value.statuses[0].id` is missing"), "{why}");
    }

    #[test]
    fn payloads_without_statuses_have_none() {
        let inbound = br#"{"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
            "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
            "contacts": [{"wa_id": "16505551234"}], "messages": [{"from": "16505551234", "id": "wamid.in",
            "timestamp": "1", "type": "text", "text": {"body": "hi"}}]}}]}]}"#;
        assert!(parse(inbound).unwrap().is_empty());
        let two = br#"{"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {"statuses": [
            {"id": "wamid.a", "status": "delivered", "timestamp": "1700000000"},
            {"id": "wamid.b", "status": "read", "timestamp": 1700000001}]}}]}]}"#;
        let statuses = parse(two).unwrap();
        assert_eq!(statuses.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["wamid.a", "wamid.b"]);
        assert_eq!(statuses[0].time_ms(), Some(1_700_000_000_000));
        assert_eq!(statuses[1].time_ms(), Some(1_700_000_001_000));
    }
}
