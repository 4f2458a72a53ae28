//! Twilio's status callbacks (CONTRACT §8): Herald asks for one on every SMS it sends
//! (`StatusCallback`), and Twilio posts the message's later statuses as a form signed with the
//! account's auth token (`X-Twilio-Signature`). The signature is checked before anything else is
//! read, so an unsigned caller learns nothing about which messages exist; then `MessageStatus`
//! and `ErrorCode` are turned into Herald's status model through the two tables below, which
//! docs/DELIVERY.md shows row for row (a unit test holds them together).

use aws_lc_rs::hmac;
use base64::{Engine, engine::general_purpose::STANDARD};
use herald_common::api::notifications::{DeliveryStatus, ReceiptProvider};
use serde::Deserialize;

use super::{Counted, ReceiptError, Said, Target, record, refused, same_signature};
use crate::service::suppressions;
use crate::{config::Secret, state::AppState};

const PROVIDER: ReceiptProvider = ReceiptProvider::Twilio;

/// The fields of a status callback Herald reads. Twilio sends more (`To`, `From`, `AccountSid`,
/// `ApiVersion`, `SmsSid`, `SmsStatus`, …): they are covered by the signature like every field,
/// and otherwise ignored, so the recipient's number is never kept or logged.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct TwilioStatusIn {
    /// The message's SID (`SM…`), as Twilio answered when Herald sent it.
    pub message_sid: String,
    /// `queued`, `accepted`, `scheduled`, `sending`, `sent`, `delivered`, `undelivered`,
    /// `failed`, `read` or `canceled`.
    pub message_status: String,
    /// Twilio's error code, with `undelivered` and `failed`.
    #[serde(default)]
    pub error_code: Option<String>,
}

/// A status callback as it reached the daemon.
#[derive(Clone, Copy, Debug)]
pub struct Callback<'a> {
    /// The URL Twilio requested: the public URL, then the request's path and query.
    pub url: &'a str,
    /// `X-Twilio-Signature`.
    pub signature: Option<&'a str>,
    /// The body, or `None` when it was not sent as `application/x-www-form-urlencoded`.
    pub form: Option<&'a [u8]>,
}

/// Takes a status callback: refused (and counted) unless `auth_token` signed it and it is one;
/// otherwise recorded against the message it names, which writes nothing for a message Herald
/// does not know. `auth_token` is `None` when SMS is not sent through Twilio.
pub async fn receive(
    state: &AppState,
    auth_token: Option<&Secret>,
    callback: Callback<'_>,
    received_at: i64,
) -> Result<Counted, ReceiptError> {
    let (message_sid, said) = read(auth_token, callback).map_err(|e| {
        // Mostly a wrong HERALD_PUBLIC_URL or auth token, so the URL checked is worth seeing;
        // not higher than debug, since anyone can post here.
        tracing::debug!(url = callback.url, error = %e, "Twilio status callback refused");
        refused(PROVIDER, e)
    })?;
    record(state, Target::ProviderMessage(message_sid), said, received_at).await
}

/// The message and what Twilio said about it, once the signature holds.
fn read(auth_token: Option<&Secret>, callback: Callback<'_>) -> Result<(String, Said), ReceiptError> {
    let input: TwilioStatusIn = signed_form(auth_token, callback, "status callback")?;
    let said = said(&input)?;
    Ok((input.message_sid, said))
}

/// The form of a request Twilio signed, once the signature holds; `what` names it in errors.
fn signed_form<T: serde::de::DeserializeOwned>(
    auth_token: Option<&Secret>,
    callback: Callback<'_>,
    what: &str,
) -> Result<T, ReceiptError> {
    let (Some(auth_token), Some(signature)) = (auth_token, callback.signature) else {
        return Err(ReceiptError::InvalidSignature);
    };
    // A body that is not a form has no parameters to sign: Twilio signs the URL alone then.
    let params: Vec<(String, String)> =
        callback.form.map(|form| form_urlencoded::parse(form).into_owned().collect()).unwrap_or_default();
    if !signature_holds(auth_token.expose().as_bytes(), callback.url, &params, signature) {
        return Err(ReceiptError::InvalidSignature);
    }
    let Some(form) = callback.form else {
        return Err(ReceiptError::Malformed(format!(
            "A Twilio {what} is a form (application/x-www-form-urlencoded)."
        )));
    };
    serde_urlencoded::from_bytes(form)
        .map_err(|e| ReceiptError::Malformed(format!("Not a Twilio {what}: {e}.")))
}

/// The fields of Twilio's incoming-message webhook Herald reads (the others are signed and
/// ignored; the body is read only for the keywords below, and never kept or logged).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct TwilioInboundIn {
    /// The sender's number (E.164).
    pub from: String,
    /// The message's text.
    #[serde(default)]
    pub body: String,
}

/// What an incoming SMS asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// STOP and its synonyms: this many tenants' entries were added.
    OptedOut(usize),
    /// START or UNSTOP: this many entries were lifted.
    OptedIn(usize),
    /// Any other text: nothing to do.
    Ignored,
}

/// The keywords Twilio's Advanced Opt-Out treats as an opt-out and an opt-in, alone in the body,
/// in any case (CONTRACT §8).
const OPT_OUT_WORDS: [&str; 6] = ["STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"];
const OPT_IN_WORDS: [&str; 2] = ["START", "UNSTOP"];

/// What `body` asks for, if it is one of the keywords.
pub fn keyword(body: &str) -> Option<bool> {
    let word = body.trim();
    if OPT_OUT_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word)) {
        Some(false)
    } else if OPT_IN_WORDS.iter().any(|w| w.eq_ignore_ascii_case(word)) {
        Some(true)
    } else {
        None
    }
}

/// Takes an incoming SMS (Twilio's incoming-message webhook, signed like the status callbacks):
/// STOP and its synonyms add a `carrier_opt_out` for the sender on sms in every tenant that has
/// texted it (CONTRACT §9), START and UNSTOP lift them; any other text changes nothing.
pub async fn inbound(
    state: &AppState,
    auth_token: Option<&Secret>,
    callback: Callback<'_>,
) -> Result<Inbound, ReceiptError> {
    let input: TwilioInboundIn = signed_form(auth_token, callback, "incoming message").map_err(|e| {
        tracing::debug!(url = callback.url, error = %e, "Twilio incoming message refused");
        refused(PROVIDER, e)
    })?;
    let from = input.from.trim();
    if crate::service::validate::e164(from).is_err() {
        return Err(refused(PROVIDER, ReceiptError::Malformed("`From` is not an E.164 number.".to_owned())));
    }
    let (inbound, action) = match keyword(&input.body) {
        Some(false) => (Inbound::OptedOut(suppressions::opt_out(state, from).await?), "opt_out"),
        Some(true) => (Inbound::OptedIn(suppressions::opt_in(state, from).await?), "opt_in"),
        None => (Inbound::Ignored, "ignored"),
    };
    metrics::counter!("herald_inbound_sms_total", "action" => action).increment(1);
    if inbound != Inbound::Ignored {
        tracing::info!(from = %herald_common::mask::mask(from), ?inbound, "carrier opt-out keyword");
    }
    Ok(inbound)
}

/// Twilio's signature of a request to `url` with the form `params`: base64 of the HMAC-SHA1,
/// keyed with the auth token, of the URL followed by each parameter's name and value, sorted by
/// name and then value. Repeats of one name and value count once, as in Twilio's own helper
/// library (whose `RequestValidator` the tests check this against).
pub fn signature(auth_token: &[u8], url: &str, params: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    // Byte order of UTF-8 is the order of code points, which is how the helper library sorts.
    sorted.sort_unstable();
    sorted.dedup();
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, auth_token);
    let mut context = hmac::Context::with_key(&key);
    context.update(url.as_bytes());
    for (name, value) in sorted {
        context.update(name.as_bytes());
        context.update(value.as_bytes());
    }
    STANDARD.encode(context.sign().as_ref())
}

/// Whether `given` is Twilio's signature of the request. Twilio does not always sign the URL
/// as it was given: its helper library accepts the signature of the URL without its port and
/// with the scheme's default port added, since, in its words, signature generation on Twilio's
/// side is inconsistent. Herald accepts the same two.
pub fn signature_holds(auth_token: &[u8], url: &str, params: &[(String, String)], given: &str) -> bool {
    let given = given.trim().as_bytes();
    [without_port(url), with_port(url)]
        .iter()
        .any(|url| same_signature(signature(auth_token, url, params).as_bytes(), given))
}

/// `url` split around its authority's port: (before the port, the port, after the authority).
fn port_parts(url: &str) -> (&str, Option<&str>, &str) {
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let authority_end =
        url[authority_start..].find(['/', '?', '#']).map_or(url.len(), |i| authority_start + i);
    let authority = &url[authority_start..authority_end];
    // An IPv6 host is bracketed: its colons are not the port's.
    let host_end = authority.rfind(']').map_or(0, |i| i + 1);
    match authority[host_end..].rfind(':') {
        Some(colon) => {
            let colon = authority_start + host_end + colon;
            (&url[..colon], Some(&url[colon + 1..authority_end]), &url[authority_end..])
        }
        None => (&url[..authority_end], None, &url[authority_end..]),
    }
}

fn without_port(url: &str) -> String {
    let (head, _, tail) = port_parts(url);
    format!("{head}{tail}")
}

fn with_port(url: &str) -> String {
    match port_parts(url) {
        (_, Some(_), _) => url.to_owned(),
        (head, None, tail) => {
            let port =
                if url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://")) { 443 } else { 80 };
            format!("{head}:{port}{tail}")
        }
    }
}

/// What each `MessageStatus` means. `canceled` is a message canceled at Twilio before it was
/// sent (a scheduled one): it never arrived, so it is `undelivered`, and a retry sends it.
/// A status not listed here is kept in the history and changes nothing.
pub const STATUSES: &[(&str, DeliveryStatus, &str)] = &[
    ("queued", DeliveryStatus::Sent, "history only"),
    ("accepted", DeliveryStatus::Sent, "history only"),
    ("scheduled", DeliveryStatus::Sent, "history only"),
    ("sending", DeliveryStatus::Sent, "history only"),
    ("sent", DeliveryStatus::Sent, "history only: the carrier took it"),
    ("delivered", DeliveryStatus::Delivered, "the handset confirmed it"),
    ("read", DeliveryStatus::Read, "read (RCS and WhatsApp senders)"),
    ("undelivered", DeliveryStatus::Undelivered, "retryable as `ErrorCode` says"),
    ("failed", DeliveryStatus::Undelivered, "retryable as `ErrorCode` says"),
    ("canceled", DeliveryStatus::Undelivered, "canceled at Twilio before it was sent; retryable"),
];

/// One of Twilio's error codes: what it means, and whether sending again can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwilioErrorCode {
    pub code: &'static str,
    pub meaning: &'static str,
    pub retryable: bool,
    /// Why it is or is not retryable.
    pub why: &'static str,
}

const fn code(
    code: &'static str,
    meaning: &'static str,
    retryable: bool,
    why: &'static str,
) -> TwilioErrorCode {
    TwilioErrorCode { code, meaning, retryable, why }
}

/// The common codes of an undelivered or failed message. The rule (CONTRACT §8): retryable
/// unless the code says the number cannot receive, or the recipient does not want it; a code
/// that names a problem of the sending account is retryable, since the operator can fix it and
/// retry. A code not in this table is retryable: nothing says the number cannot receive.
pub const ERROR_CODES: &[TwilioErrorCode] = &[
    code("21211", "Invalid 'To' phone number", false, "the number does not exist"),
    code(
        "21408",
        "Permission to send an SMS has not been enabled for the region of the 'To' number",
        true,
        "the account's geographic permissions; retry once enabled",
    ),
    code("21610", "Attempt to send to an unsubscribed recipient", false, "the recipient replied STOP"),
    code("21614", "'To' number is not a valid mobile number", false, "the number cannot receive SMS"),
    code("30001", "Queue overflow", true, "sent faster than the sender's throughput; later"),
    code("30002", "Account suspended", true, "the account's; retry once it is active"),
    code("30003", "Unreachable destination handset", true, "the handset is off or out of coverage"),
    code("30004", "Message blocked", false, "the recipient or the carrier blocks this sender"),
    code("30005", "Unknown destination handset", false, "the number is not in service"),
    code("30006", "Landline or unreachable carrier", false, "the number cannot receive SMS"),
    code("30007", "Message filtered by the carrier", false, "taken for spam: the same text would be again"),
    code("30008", "Unknown error", true, "nothing says the number cannot receive"),
    code("30009", "Missing inbound segment", true, "a part of the message was lost on the way"),
    code("30010", "Message price exceeds max price", true, "the account's price limit"),
    code("30022", "US A2P 10DLC: rate limits exceeded", true, "the sender's throughput; later"),
    code("30023", "US A2P 10DLC: daily message cap reached", true, "the sender's daily cap; tomorrow"),
    code(
        "30032",
        "Toll-free number has not been verified",
        true,
        "the sender's registration; retry once verified",
    ),
    code(
        "30034",
        "Message from an unregistered number (US A2P 10DLC)",
        true,
        "the sender's registration; retry once registered",
    ),
    code("30410", "Provider timeout", true, "the carrier did not answer in time"),
];

/// What Twilio said, in Herald's terms.
fn said(input: &TwilioStatusIn) -> Result<Said, ReceiptError> {
    let sid = &input.message_sid;
    if sid.is_empty() || sid.len() > 64 || !sid.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(ReceiptError::Malformed(
            "MessageSid must be a Twilio SID (letters and digits).".to_owned(),
        ));
    }
    let word = input.message_status.to_ascii_lowercase();
    if word.is_empty() || word.len() > 32 || !word.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return Err(ReceiptError::Malformed("MessageStatus must be one of Twilio's statuses.".to_owned()));
    }
    let error_code = match input.error_code.as_deref() {
        None | Some("") => None,
        Some(code) if code.len() <= 8 && code.bytes().all(|b| b.is_ascii_digit()) => Some(code),
        Some(_) => return Err(ReceiptError::Malformed("ErrorCode must be a number.".to_owned())),
    };
    let status =
        STATUSES.iter().find(|(w, ..)| *w == word).map_or(DeliveryStatus::Sent, |(_, status, _)| *status);
    let known = error_code.and_then(|c| ERROR_CODES.iter().find(|e| e.code == c));
    let detail = match (error_code, known) {
        (Some(_), Some(known)) => Some(format!("{}: {}", known.code, known.meaning)),
        (Some(code), None) => Some(format!("{code}: Twilio error {code} (not in Herald's table of codes)")),
        (None, _) if word == "canceled" => {
            Some("canceled: the message was canceled at Twilio before it was sent".to_owned())
        }
        (None, _) if status == DeliveryStatus::Undelivered => {
            Some(format!("{word}: Twilio gave no error code"))
        }
        (None, _) => None,
    };
    Ok(Said {
        provider: PROVIDER,
        provider_status: word,
        status,
        error_code: error_code.map(str::to_owned),
        detail,
        // Only an undelivered item is ever retried; the code decides, and an unknown one does not
        // say the number cannot receive.
        retryable: status == DeliveryStatus::Undelivered && known.is_none_or(|k| k.retryable),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// A status callback as Twilio sends one.
    fn callback_params() -> Vec<(String, String)> {
        pairs(&[
            ("MessageSid", "SM0123456789abcdef0123456789abcdef"),
            ("MessageStatus", "undelivered"),
            ("ErrorCode", "30003"),
            ("To", "+14155550100"),
            ("From", "+15550000000"),
            ("AccountSid", "AC123"),
            ("ApiVersion", "2010-04-01"),
            ("SmsSid", "SM0123456789abcdef0123456789abcdef"),
            ("SmsStatus", "undelivered"),
        ])
    }

    /// The signatures were made by Twilio's helper library (PyPI `twilio` 9.13.0):
    /// `RequestValidator("12345").compute_signature(url, params)`, with `params` a dict of
    /// [`callback_params`]; the repeated and non-ASCII one through an object with `getall` (as
    /// Flask's MultiDict), whose values the library sorts and counts once.
    #[test]
    fn signatures_match_twilios_helper_library() {
        let token = b"12345";
        let url = "https://herald.example.com/api/v1/receipts/twilio";
        assert_eq!(signature(token, url, &callback_params()), "gNqyGnGaL/bwvJBT5+hN4A5rTZM=");
        assert_eq!(
            signature(token, "https://herald.example.com:443/api/v1/receipts/twilio", &callback_params()),
            "V4C4RBJOTM4gRIVOolam66gyTW0="
        );
        let repeated = pairs(&[("b", "2"), ("a", "z"), ("a", "y"), ("a", "z"), ("é", "ü ")]);
        assert_eq!(
            signature(token, "http://127.0.0.1:8080/api/v1/receipts/twilio?x=1", &repeated),
            "ujXLgdRlTu5IlE8j0zdy/54DZuM="
        );
        assert_eq!(
            signature(token, "https://mycompany.com/myapp.php?foo=1&bar=2", &[]),
            "zYQTYrRWXE7LtzbG4PfP7/bkkGo="
        );
    }

    #[test]
    fn a_signature_holds_with_or_without_the_default_port_and_nothing_else() {
        let (token, params) = (b"12345", callback_params());
        let url = "https://herald.example.com/api/v1/receipts/twilio";
        assert!(signature_holds(token, url, &params, "gNqyGnGaL/bwvJBT5+hN4A5rTZM="));
        assert!(signature_holds(token, url, &params, "V4C4RBJOTM4gRIVOolam66gyTW0="), "with :443");
        assert!(!signature_holds(token, url, &params, "gNqyGnGaL/bwvJBT5+hN4A5rTZN="));
        assert!(!signature_holds(token, url, &params, ""));
        assert!(!signature_holds(b"54321", url, &params, "gNqyGnGaL/bwvJBT5+hN4A5rTZM="));
        let mut changed = params.clone();
        changed[1].1 = "delivered".to_owned();
        assert!(!signature_holds(token, url, &changed, "gNqyGnGaL/bwvJBT5+hN4A5rTZM="), "a changed field");
        assert!(!signature_holds(token, &format!("{url}?x=1"), &params, "gNqyGnGaL/bwvJBT5+hN4A5rTZM="));
    }

    #[test]
    fn ports_are_found_in_the_authority_only() {
        assert_eq!(with_port("https://h.example/a:1"), "https://h.example:443/a:1");
        assert_eq!(with_port("http://h.example?q=:2"), "http://h.example:80?q=:2");
        assert_eq!(with_port("http://h.example:8080/x"), "http://h.example:8080/x");
        assert_eq!(without_port("http://h.example:8080/x"), "http://h.example/x");
        assert_eq!(without_port("http://[::1]:8080/x"), "http://[::1]/x");
        assert_eq!(with_port("http://[::1]/x"), "http://[::1]:80/x");
        assert_eq!(without_port("https://h.example"), "https://h.example");
    }

    fn said_of(status: &str, error_code: Option<&str>) -> Said {
        let input = TwilioStatusIn {
            message_sid: "SM1".to_owned(),
            message_status: status.to_owned(),
            error_code: error_code.map(str::to_owned),
        };
        said(&input).unwrap()
    }

    #[test]
    fn statuses_map_as_the_table_says() {
        for (word, status) in [
            ("queued", DeliveryStatus::Sent),
            ("accepted", DeliveryStatus::Sent),
            ("scheduled", DeliveryStatus::Sent),
            ("sending", DeliveryStatus::Sent),
            ("sent", DeliveryStatus::Sent),
            ("delivered", DeliveryStatus::Delivered),
            ("read", DeliveryStatus::Read),
            ("undelivered", DeliveryStatus::Undelivered),
            ("failed", DeliveryStatus::Undelivered),
            ("canceled", DeliveryStatus::Undelivered),
            ("Delivered", DeliveryStatus::Delivered),
            ("partially_delivered", DeliveryStatus::Sent),
        ] {
            let said = said_of(word, None);
            assert_eq!(said.status, status, "{word}");
            assert_eq!(said.provider_status, word.to_ascii_lowercase());
            assert_eq!(said.retryable, status == DeliveryStatus::Undelivered, "{word}");
            assert_eq!(said.detail.is_some(), status == DeliveryStatus::Undelivered, "{word}");
        }
    }

    #[test]
    fn error_codes_decide_retries() {
        for (code, retryable) in [
            ("21211", false),
            ("21610", false),
            ("30005", false),
            ("30006", false),
            ("30007", false),
            ("30003", true),
            ("30008", true),
            ("99999", true),
        ] {
            let said = said_of("undelivered", Some(code));
            assert_eq!((said.retryable, said.error_code.as_deref()), (retryable, Some(code)), "{code}");
        }
        assert_eq!(
            said_of("undelivered", Some("30003")).detail.unwrap(),
            "30003: Unreachable destination handset"
        );
        assert!(said_of("failed", Some("99999")).detail.unwrap().starts_with("99999: "));
        assert_eq!(said_of("undelivered", None).detail.unwrap(), "undelivered: Twilio gave no error code");
        assert!(said_of("undelivered", None).retryable);
        // A code beside a status that is no failure is history, never a retry.
        assert!(!said_of("delivered", Some("30003")).retryable);
        let mut codes: Vec<&str> = ERROR_CODES.iter().map(|e| e.code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ERROR_CODES.len(), "one row per code");
    }

    #[test]
    fn malformed_callbacks_are_refused() {
        for (sid, status, code) in [
            ("", "delivered", None),
            ("SM 1", "delivered", None),
            ("SM1", "", None),
            ("SM1", "deli vered", None),
            ("SM1", "undelivered", Some("30003; DROP")),
        ] {
            let input = TwilioStatusIn {
                message_sid: sid.to_owned(),
                message_status: status.to_owned(),
                error_code: code.map(str::to_owned),
            };
            assert!(matches!(said(&input), Err(ReceiptError::Malformed(_))), "{sid:?} {status:?} {code:?}");
        }
        let token = Secret::new("12345");
        let url = "https://herald.example.com/api/v1/receipts/twilio";
        let signed = |params: &[(&str, &str)]| {
            let form = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
            (signature(b"12345", url, &pairs(params)), form)
        };
        let (sig, form) = signed(&[("MessageStatus", "delivered")]);
        let callback = Callback { url, signature: Some(&sig), form: Some(form.as_bytes()) };
        assert!(matches!(read(Some(&token), callback), Err(ReceiptError::Malformed(_))), "no MessageSid");
        let sig = signature(b"12345", url, &[]);
        let callback = Callback { url, signature: Some(&sig), form: None };
        assert!(matches!(read(Some(&token), callback), Err(ReceiptError::Malformed(_))), "not a form");
        // Unsigned, the same bodies are refused for their signature first.
        let callback = Callback { url, signature: None, form: None };
        assert!(matches!(read(Some(&token), callback), Err(ReceiptError::InvalidSignature)));
        let callback = Callback { url, signature: Some(&sig), form: None };
        assert!(matches!(read(None, callback), Err(ReceiptError::InvalidSignature)), "no Twilio configured");
    }

    /// docs/DELIVERY.md shows both tables as they are here.
    #[test]
    fn the_documentation_shows_the_tables() {
        let doc = include_str!("../../../../docs/DELIVERY.md");
        for (word, status, note) in STATUSES {
            let row = format!("| `{word}` | `{}` | {note} |", status.as_str());
            assert!(doc.contains(&row), "docs/DELIVERY.md lacks the row {row}");
        }
        for e in ERROR_CODES {
            let retryable = if e.retryable { "yes" } else { "no" };
            let row = format!("| {} | {} | {retryable} | {} |", e.code, e.meaning, e.why);
            assert!(doc.contains(&row), "docs/DELIVERY.md lacks the row {row}");
        }
    }
}
