//! One-time passwords. A code is generated (uniform digits from the OS CSPRNG) or supplied,
//! stored only as HMAC-SHA-256(server secret, salt ‖ code), and delivered synchronously through
//! the channel's provider inside the send request, so no plaintext code ever waits in a queue or
//! reaches the database. Verification compares in constant time and counts failures atomically:
//! the 5th wrong code tombstones the transaction for good.
//!
//! Limits, held in the database so they hold across daemons: at most 5 sends per recipient per
//! application per 10 minutes, and at most 20 failed verifications per recipient per application
//! per 24 hours across transactions (so re-sending cannot multiply an attacker's guesses).

use std::time::Duration;

use herald_common::{
    ErrorCode, FieldError, Problem, Scope, Timestamp,
    api::{
        notifications::Channel,
        otp::{
            OtpSendIn, OtpSendOut, OtpSent as SentStatus, OtpStatus, OtpVerified, OtpVerifyIn, OtpVerifyOut,
        },
    },
    ids::{ApplicationId, OtpId, TenantId},
    mask::mask,
};
use rand::RngExt;
use subtle::ConstantTimeEq;

use super::{
    InvalidFields,
    idempotent_replay::{self, IDEMPOTENCY_TTL_MS, Replay, ReplayError},
    validate,
};
use crate::{
    auth::{KeyPrincipal, MissingScope},
    providers::{OutgoingMessage, SendError},
    secret::{ServerSecret, hex, random_token},
    state::AppState,
    store::{IdempotencyKey, Limit, NewOtp, OtpMessages, OtpSendStart, OtpSnapshot, OtpVerdict, StoreError},
};

pub const SEND_LIMIT: Limit = Limit { max: 5, window_ms: 10 * 60 * 1000 };
pub const FAILURE_LIMIT: Limit = Limit { max: 20, window_ms: 24 * 3600 * 1000 };
/// Wrong codes a transaction takes before it is tombstoned.
pub const MAX_FAILED_ATTEMPTS: i64 = 5;
const DEFAULT_TTL: u32 = 300;
pub(crate) const TTL_RANGE: std::ops::RangeInclusive<u32> = 30..=crate::store::OTP_MAX_TTL_SECONDS;

pub const DEFAULT_EMAIL_SUBJECT: &str = "Your verification code";
pub const DEFAULT_EMAIL_BODY: &str = "Your verification code is {code}. It expires in {expires}.";
pub const DEFAULT_SMS_BODY: &str = "Your verification code is {code}. It expires in {expires}.";

/// The stored form of a code.
pub fn code_hash(secret: &ServerSecret, salt: &str, code: &str) -> [u8; 32] {
    secret.mac("herald.otp.code.v1", &[salt.as_bytes(), code.as_bytes()])
}

fn generate_code(length: u32) -> String {
    let mut rng = rand::rng();
    (0..length).map(|_| char::from(b'0' + rng.random_range(0..10u8))).collect()
}

fn valid_custom_code(code: &str) -> bool {
    (4..=16).contains(&code.len())
        && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The answer to a send.
pub enum OtpSent {
    Sent(OtpSendOut),
    /// A repeat of an earlier request with the same key: its stored response.
    Replayed(Replay),
}

/// Why a send or a verification did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum OtpError {
    #[error(transparent)]
    Invalid(#[from] InvalidFields),
    /// The key may not do this: a code of the caller's own needs `otp:custom_code`.
    #[error(transparent)]
    MissingScope(#[from] MissingScope),
    #[error("Too many codes sent to this recipient; at most 5 per 10 minutes.")]
    SendRateLimited { retry_after_ms: i64 },
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The provider did not take the code. Its problem is made here, not where the other errors
    /// become problems, because it is also the idempotency key's stored response: a replay must
    /// be the first answer byte for byte.
    #[error("{}", .0.detail.as_deref().unwrap_or("delivery failed"))]
    DeliveryFailed(Box<Problem>),
    /// The recipient is on the suppression list: nothing was sent or stored.
    #[error("The recipient is on the suppression list ({}); nothing was sent.", .0.failure_reason())]
    Suppressed(super::suppressions::Suppressed),
    #[error("No such OTP transaction.")]
    NotFound,
    #[error("This code was already verified.")]
    AlreadyVerified,
    #[error("This code has expired; ask for a new one.")]
    Expired,
    #[error("This code was never delivered, so it cannot be verified; ask for a new one.")]
    NotDelivered,
    #[error("Too many wrong codes: this transaction is blocked for good; ask for a new code.")]
    Tombstoned,
    #[error("The code does not match.")]
    WrongCode { attempts_remaining: u32 },
    #[error("Too many failed verifications for this recipient; at most 20 per 24 hours.")]
    VerifyRateLimited { retry_after_ms: i64 },
    /// The task that sends the code ended without an answer (it panicked).
    #[error("the code's delivery task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The answer could not be written out for the idempotency record.
    #[error("cannot serialize the answer: {0}")]
    Answer(#[from] serde_json::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A send request that passed [`check_send`].
#[derive(Debug, PartialEq, Eq)]
struct CheckedSend {
    /// Trimmed.
    recipient: String,
    /// Digits of a generated code (unused with a custom code).
    length: u32,
    ttl: u32,
}

/// Validates a send request: every field error at once.
fn check_send(input: &OtpSendIn) -> Result<CheckedSend, Vec<FieldError>> {
    let mut errors = Vec::new();
    let recipient = input.recipient.trim().to_owned();
    match input.channel {
        Channel::Email => {
            if let Err(m) = validate::email_address(&recipient) {
                errors.push(FieldError::new("recipient", m));
            }
        }
        Channel::Sms => {
            if let Err(m) = validate::e164(&recipient) {
                errors.push(FieldError::new("recipient", m));
            }
        }
        _ => errors.push(FieldError::new("channel", "must be `email` or `sms`")),
    }
    let length = input.length.unwrap_or(6);
    if input.length.is_some() && input.code.is_some() {
        errors.push(FieldError::new("length", "applies to generated codes; leave it out with `code`"));
    } else if length != 4 && length != 6 {
        errors.push(FieldError::new("length", "must be 4 or 6"));
    }
    let ttl = input.ttl_seconds.unwrap_or(DEFAULT_TTL);
    if !TTL_RANGE.contains(&ttl) {
        errors.push(FieldError::new(
            "ttl_seconds",
            format!("must be from {} to {}", TTL_RANGE.start(), TTL_RANGE.end()),
        ));
    }
    if let Some(code) = &input.code
        && !valid_custom_code(code)
    {
        errors.push(FieldError::new("code", "must be 4 to 16 letters, digits, `-` or `_`"));
    }
    if errors.is_empty() { Ok(CheckedSend { recipient, length, ttl }) } else { Err(errors) }
}

pub async fn send(
    state: &AppState,
    key: &KeyPrincipal,
    input: OtpSendIn,
    idempotency: Option<IdempotencyKey>,
) -> Result<OtpSent, OtpError> {
    if input.code.is_some() {
        // The scope is checked before the code's format: without it, a code is not allowed at all.
        key.require(Scope::OtpCustomCode)?;
    }
    let checked = check_send(&input).map_err(InvalidFields)?;
    let app = &key.application_id;
    let now = state.clock.now_millis();
    if let Some(earlier) = idempotent_replay::earlier(&state.store, app, idempotency.as_ref(), now).await? {
        return Ok(OtpSent::Replayed(earlier));
    }

    // OTPs are transactional: only entries for every category stop them (CONTRACT §9), and
    // before anything is stored, so a refused send leaves no transaction behind.
    if let Some(suppressed) =
        super::suppressions::stopping_otp(state, &key.tenant_id, input.channel, &checked.recipient).await?
    {
        metrics::counter!("herald_otp_total", "event" => "suppressed").increment(1);
        return Err(OtpError::Suppressed(suppressed));
    }

    let code = input.code.clone().unwrap_or_else(|| generate_code(checked.length));
    let salt = random_token(16);
    let recipient = checked.recipient;
    let normalized =
        if input.channel == Channel::Email { recipient.to_lowercase() } else { recipient.clone() };
    let id = OtpId::new();
    let masked = mask(&recipient);
    let otp = NewOtp {
        id: id.clone(),
        tenant_id: key.tenant_id.clone(),
        application_id: app.clone(),
        channel: input.channel,
        recipient_key: hex(&state
            .secret
            .mac("herald.otp.recipient.v1", &[app.as_str().as_bytes(), normalized.as_bytes()])),
        recipient_masked: masked.clone(),
        salt: salt.clone(),
        code_hash: hex(&code_hash(&state.secret, &salt, &code)),
        expires_at: now + i64::from(checked.ttl) * 1000,
        created_at: now,
    };
    let claim = idempotency.clone().map(|key| (key, IDEMPOTENCY_TTL_MS));
    match state.store.begin_otp_send(otp, claim, SEND_LIMIT).await? {
        OtpSendStart::Started => {}
        OtpSendStart::RateLimited { retry_after_ms } => {
            return Err(OtpError::SendRateLimited { retry_after_ms });
        }
        OtpSendStart::Idempotent(earlier) => {
            return Ok(OtpSent::Replayed(idempotent_replay::replay(earlier)?));
        }
    }

    // From here on the code is sent and the outcome recorded in a task of its own: if the
    // caller hangs up mid-request, the transaction and its idempotency key still end up
    // recorded as sent or failed (never stuck in flight).
    let pending = PendingCode {
        tenant_id: key.tenant_id.clone(),
        application_id: app.clone(),
        id,
        channel: input.channel,
        recipient,
        masked,
        code,
        ttl: checked.ttl,
        idempotency,
    };
    tokio::spawn(deliver_code(state.clone(), pending)).await?
}

/// A code recorded as sent, on its way to the provider.
struct PendingCode {
    tenant_id: TenantId,
    application_id: ApplicationId,
    id: OtpId,
    channel: Channel,
    recipient: String,
    masked: String,
    code: String,
    ttl: u32,
    idempotency: Option<IdempotencyKey>,
}

/// Sends the code through the channel's provider and records the outcome.
async fn deliver_code(state: AppState, pending: PendingCode) -> Result<OtpSent, OtpError> {
    let PendingCode { tenant_id, application_id, id, channel, recipient, masked, code, ttl, idempotency } =
        pending;
    let messages = state.store.otp_messages(&application_id).await?;
    let (subject, body) = compose(channel, &messages, &code, ttl);
    let message = OutgoingMessage {
        id: id.as_str(),
        channel,
        recipient: &recipient,
        recipient_masked: &masked,
        sender: None,
        subject: subject.as_deref(),
        body: &body,
        html_body: None,
        // An OTP is transactional: never an unsubscribe link.
        unsubscribe_url: None,
    };
    let delivered = state.providers.send(&message, None).await;
    let (status_code, body, result) = match delivered {
        Ok(_) => {
            // Recorded as sent before the call: nothing to write for a success.
            // At debug, as deliveries: the activity feed and the metric keep the record.
            tracing::debug!(transaction_id = %id, %channel, recipient = %masked, %tenant_id, "OTP sent");
            metrics::counter!("herald_otp_total", "event" => "sent").increment(1);
            let out = OtpSendOut {
                status: SentStatus::Sent,
                transaction_id: id,
                recipient: masked,
                channel,
                expires_in_seconds: ttl,
            };
            (200, serde_json::to_string(&out)?, Ok(OtpSent::Sent(out)))
        }
        Err(e) => {
            let reason = e.reason().to_owned();
            state.store.fail_otp_send(&id, reason.clone(), state.clock.now_millis()).await?;
            if let SendError::Unreachable { suppress, .. } = e {
                super::suppressions::suppress_otp_recipient(
                    &state, &tenant_id, &id, channel, &recipient, suppress,
                )
                .await?;
            }
            tracing::warn!(transaction_id = %id, %channel, recipient = %masked, error = %reason, "OTP delivery failed");
            metrics::counter!("herald_otp_total", "event" => "failed").increment(1);
            let problem = Problem::new(
                ErrorCode::DeliveryFailed,
                format!(
                    "The provider did not accept the code ({reason}); transaction {id} is failed, ask for a new code."
                ),
            );
            (
                problem.status,
                serde_json::to_string(&problem)?,
                Err(OtpError::DeliveryFailed(Box::new(problem))),
            )
        }
    };
    if let Some(idem) = &idempotency {
        state.store.complete_idempotency_key(&application_id, &idem.key, status_code, body).await?;
    }
    result
}

/// The subject (email) and body of the message carrying `code`.
fn compose(channel: Channel, messages: &OtpMessages, code: &str, ttl: u32) -> (Option<String>, String) {
    let minutes = ttl.div_ceil(60).to_string();
    let expires = match ttl {
        s if s % 60 != 0 && s < 120 => format!("{s} seconds"),
        60 => "1 minute".to_owned(),
        s => format!("{} minutes", s.div_ceil(60)),
    };
    let fill = |text: &str| {
        text.replace("{code}", code).replace("{minutes}", &minutes).replace("{expires}", &expires)
    };
    match channel {
        Channel::Email => (
            Some(fill(messages.otp_email_subject.as_deref().unwrap_or(DEFAULT_EMAIL_SUBJECT))),
            fill(messages.otp_email_body.as_deref().unwrap_or(DEFAULT_EMAIL_BODY)),
        ),
        _ => (None, fill(messages.otp_sms_body.as_deref().unwrap_or(DEFAULT_SMS_BODY))),
    }
}

/// What a verification at `now` decides for a transaction in the state `snapshot` shows:
/// `code_matches` is asked only when the code may be tried. The rules, in order: a finished
/// transaction stays finished; time runs out; the recipient's failure limit; then the code.
fn decide(
    snapshot: &OtpSnapshot,
    now: i64,
    failure_limit: Limit,
    code_matches: impl FnOnce(&str, &str) -> bool,
) -> OtpVerdict {
    match snapshot.status {
        OtpStatus::Verified => return OtpVerdict::AlreadyVerified,
        OtpStatus::Tombstoned => return OtpVerdict::Tombstoned,
        OtpStatus::Expired => return OtpVerdict::Expired { record: false },
        OtpStatus::Failed => return OtpVerdict::NotDelivered,
        OtpStatus::Sent => {}
    }
    if now >= snapshot.expires_at {
        return OtpVerdict::Expired { record: true };
    }
    if snapshot.recent_failures >= failure_limit.max {
        let oldest = snapshot.oldest_failure.unwrap_or(now);
        return OtpVerdict::RateLimited { retry_after_ms: (oldest + failure_limit.window_ms - now).max(1) };
    }
    if code_matches(&snapshot.salt, &snapshot.code_hash) {
        return OtpVerdict::Verified;
    }
    let failed_attempts = snapshot.failed_attempts + 1;
    OtpVerdict::Wrong { failed_attempts, tombstoned: failed_attempts >= MAX_FAILED_ATTEMPTS }
}

pub async fn verify(
    state: &AppState,
    key: &KeyPrincipal,
    input: OtpVerifyIn,
) -> Result<OtpVerifyOut, OtpError> {
    if input.code.is_empty() || input.code.len() > 64 {
        return Err(InvalidFields::field("code", "must be 1 to 64 characters").into());
    }
    let id = OtpId::parse(&input.transaction_id).map_err(|_| OtpError::NotFound)?;
    let secret = state.secret.clone();
    let code = input.code;
    let now = state.clock.now_millis();
    let verdict = state
        .store
        .verify_otp(&id, &key.application_id, now, FAILURE_LIMIT.window_ms, move |snapshot| {
            decide(snapshot, now, FAILURE_LIMIT, |salt, stored| {
                let computed = hex(&code_hash(&secret, salt, &code));
                bool::from(computed.as_bytes().ct_eq(stored.as_bytes()))
            })
        })
        .await?
        .ok_or(OtpError::NotFound)?;
    let event = match &verdict {
        OtpVerdict::Verified => "verified",
        OtpVerdict::Wrong { tombstoned: false, .. } => "invalid",
        OtpVerdict::Wrong { tombstoned: true, .. } => "tombstoned",
        _ => "refused",
    };
    metrics::counter!("herald_otp_total", "event" => event).increment(1);
    match verdict {
        OtpVerdict::Verified => Ok(OtpVerifyOut {
            status: OtpVerified::Verified,
            transaction_id: id,
            verified_at: Timestamp::from_millis(now),
        }),
        OtpVerdict::AlreadyVerified => Err(OtpError::AlreadyVerified),
        OtpVerdict::Expired { .. } => Err(OtpError::Expired),
        OtpVerdict::NotDelivered => Err(OtpError::NotDelivered),
        OtpVerdict::Tombstoned | OtpVerdict::Wrong { tombstoned: true, .. } => Err(OtpError::Tombstoned),
        OtpVerdict::Wrong { failed_attempts, .. } => Err(OtpError::WrongCode {
            attempts_remaining: u32::try_from(MAX_FAILED_ATTEMPTS - failed_attempts).unwrap_or(0),
        }),
        OtpVerdict::RateLimited { retry_after_ms } => Err(OtpError::VerifyRateLimited { retry_after_ms }),
    }
}

/// How long failure records are kept (the longest window).
pub const FAILURE_RETENTION: Duration = Duration::from_secs(24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_codes_are_digits_of_the_length() {
        for length in [4, 6] {
            let code = generate_code(length);
            assert_eq!(code.len(), length as usize);
            assert!(code.bytes().all(|b| b.is_ascii_digit()));
        }
        // Uniform digits: over many codes every digit appears at each position.
        let codes: Vec<String> = (0..2000).map(|_| generate_code(6)).collect();
        for position in 0..6 {
            let seen: std::collections::HashSet<u8> = codes.iter().map(|c| c.as_bytes()[position]).collect();
            assert_eq!(seen.len(), 10, "position {position}");
        }
    }

    #[test]
    fn custom_codes_follow_the_alphabet() {
        assert!(valid_custom_code("ab-12_Z"));
        assert!(!valid_custom_code("abc"));
        assert!(!valid_custom_code("12345678901234567"));
        assert!(!valid_custom_code("no spaces"));
        assert!(!valid_custom_code("ünï"));
    }

    fn snapshot(status: OtpStatus, failed_attempts: i64, recent_failures: i64) -> OtpSnapshot {
        OtpSnapshot::for_tests(status, failed_attempts, 10_000, recent_failures, Some(1_000))
    }

    #[test]
    fn verification_decisions() {
        use OtpStatus::*;
        let limit = Limit { max: 20, window_ms: 100_000 };
        let right = |_: &str, _: &str| true;
        let wrong = |_: &str, _: &str| false;
        // (status, failed so far, recipient's recent failures, now, code right?) → verdict
        let table: &[(OtpStatus, i64, i64, i64, bool, OtpVerdict)] = &[
            (Sent, 0, 0, 5_000, true, OtpVerdict::Verified),
            (Sent, 0, 0, 5_000, false, OtpVerdict::Wrong { failed_attempts: 1, tombstoned: false }),
            (Sent, 3, 0, 5_000, false, OtpVerdict::Wrong { failed_attempts: 4, tombstoned: false }),
            (Sent, 4, 0, 5_000, false, OtpVerdict::Wrong { failed_attempts: 5, tombstoned: true }),
            (Sent, 4, 0, 5_000, true, OtpVerdict::Verified),
            (Sent, 0, 0, 10_000, true, OtpVerdict::Expired { record: true }),
            (Sent, 0, 20, 5_000, true, OtpVerdict::RateLimited { retry_after_ms: 96_000 }),
            (Sent, 0, 19, 5_000, true, OtpVerdict::Verified),
            (Verified, 0, 0, 5_000, true, OtpVerdict::AlreadyVerified),
            (Tombstoned, 5, 0, 5_000, true, OtpVerdict::Tombstoned),
            (Expired, 0, 0, 5_000, true, OtpVerdict::Expired { record: false }),
            (Failed, 0, 0, 5_000, true, OtpVerdict::NotDelivered),
            // A finished transaction stays finished, whatever the time or the limit.
            (Verified, 0, 99, 99_999, false, OtpVerdict::AlreadyVerified),
        ];
        for (status, failed, recent, now, matches, expected) in table {
            let verdict = if *matches {
                decide(&snapshot(*status, *failed, *recent), *now, limit, right)
            } else {
                decide(&snapshot(*status, *failed, *recent), *now, limit, wrong)
            };
            assert_eq!(
                &verdict, expected,
                "{status:?} failed={failed} recent={recent} now={now} right={matches}"
            );
        }
    }

    #[test]
    fn the_code_is_not_compared_when_it_may_not_be_tried() {
        let limit = Limit { max: 20, window_ms: 100_000 };
        for snapshot in [snapshot(OtpStatus::Tombstoned, 5, 0), snapshot(OtpStatus::Sent, 0, 20)] {
            decide(&snapshot, 5_000, limit, |_, _| panic!("compared"));
        }
    }

    #[test]
    fn send_requests_report_every_bad_field() {
        let mut input = OtpSendIn::new(Channel::Whatsapp, "x");
        input.length = Some(5);
        input.ttl_seconds = Some(10);
        input.code = Some("no".into());
        let fields: Vec<String> = check_send(&input).unwrap_err().into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["channel", "length", "ttl_seconds", "code"]);
        let mut ok = OtpSendIn::new(Channel::Sms, " +14155550100 ");
        ok.length = Some(4);
        assert_eq!(
            check_send(&ok),
            Ok(CheckedSend { recipient: "+14155550100".into(), length: 4, ttl: DEFAULT_TTL })
        );
    }

    #[test]
    fn messages_fill_code_and_minutes() {
        let (subject, body) = compose(Channel::Email, &OtpMessages::default(), "123456", 300);
        assert_eq!(subject.as_deref(), Some(DEFAULT_EMAIL_SUBJECT));
        assert_eq!(body, "Your verification code is 123456. It expires in 5 minutes.");
        assert!(compose(Channel::Sms, &OtpMessages::default(), "1", 60).1.ends_with("in 1 minute."));
        assert!(compose(Channel::Sms, &OtpMessages::default(), "1", 45).1.ends_with("in 45 seconds."));
        let custom =
            OtpMessages { otp_sms_body: Some("{code} is your Acme code".into()), ..Default::default() };
        assert_eq!(compose(Channel::Sms, &custom, "9876", 61).1, "9876 is your Acme code");
    }
}
