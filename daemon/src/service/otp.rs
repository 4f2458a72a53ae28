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
    ErrorCode, FieldError, Timestamp,
    api::{
        notifications::Channel,
        otp::{OtpSendIn, OtpSendOut, OtpVerifyIn, OtpVerifyOut},
    },
    ids::OtpId,
    mask::mask,
};
use rand::RngExt;
use subtle::ConstantTimeEq;

use super::{
    notifications::{IDEMPOTENCY_TTL, Idempotency, earlier_response},
    validate,
};
use crate::{
    auth::KeyPrincipal,
    delivery::SendError,
    error::{ApiError, ApiResult},
    secret::{ServerSecret, random_token},
    state::AppState,
    store::{ClaimedDelivery, DispatchResult, Limit, NewOtp, OtpMessages, OtpSendStart, VerifyOutcome},
};

pub const SEND_LIMIT: Limit = Limit { max: 5, window_ms: 10 * 60 * 1000 };
pub const FAILURE_LIMIT: Limit = Limit { max: 20, window_ms: 24 * 3600 * 1000 };
const DEFAULT_TTL: u32 = 300;
const TTL_RANGE: std::ops::RangeInclusive<u32> = 30..=crate::store::OTP_MAX_TTL_SECONDS;

pub const DEFAULT_EMAIL_SUBJECT: &str = "Your verification code";
pub const DEFAULT_EMAIL_BODY: &str = "Your verification code is {code}. It expires in {expires}.";
pub const DEFAULT_SMS_BODY: &str = "Your verification code is {code}. It expires in {expires}.";

/// The stored form of a code.
pub fn code_hash(secret: &ServerSecret, salt: &str, code: &str) -> [u8; 32] {
    secret.mac("herald.otp.code.v1", &[salt.as_bytes(), code.as_bytes()])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
    Replayed { status_code: u16, body: String },
}

pub async fn send(
    state: &AppState,
    key: &KeyPrincipal,
    input: OtpSendIn,
    idempotency: Option<Idempotency>,
) -> ApiResult<OtpSent> {
    if input.code.is_some() {
        // The scope is checked before the code's format: without it, a code is not allowed at all.
        key_scope(key, herald_common::Scope::OtpCustomCode)?;
    }
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
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }

    let app = key.application_id.as_str();
    let now = state.clock.now_millis();
    if let Some(idem) = &idempotency {
        let earlier = state.store.check_idempotency_key(app, &idem.key, &idem.request_hash, now).await?;
        if earlier != DispatchResult::Created {
            return answer_for_key(earlier);
        }
    }

    let code = input.code.clone().unwrap_or_else(|| generate_code(length));
    let salt = random_token(16);
    let normalized =
        if input.channel == Channel::Email { recipient.to_lowercase() } else { recipient.clone() };
    let id = OtpId::new();
    let masked = mask(&recipient);
    let otp = NewOtp {
        id: id.to_string(),
        tenant_id: key.tenant_id.to_string(),
        application_id: app.to_owned(),
        channel: input.channel.as_str().to_owned(),
        recipient_key: hex(&state
            .secret
            .mac("herald.otp.recipient.v1", &[app.as_bytes(), normalized.as_bytes()])),
        recipient_masked: masked.clone(),
        salt: salt.clone(),
        code_hash: hex(&code_hash(&state.secret, &salt, &code)),
        expires_at: now + i64::from(ttl) * 1000,
        created_at: now,
    };
    let claim = idempotency
        .as_ref()
        .map(|i| (i.key.clone(), i.request_hash.clone(), IDEMPOTENCY_TTL.as_millis() as i64));
    match state.store.begin_otp_send(otp, claim, SEND_LIMIT).await? {
        OtpSendStart::Started => {}
        OtpSendStart::RateLimited { retry_after_ms } => {
            return Err(ApiError::rate_limited(
                "Too many codes sent to this recipient; at most 5 per 10 minutes.",
                retry_after_ms,
            ));
        }
        OtpSendStart::Idempotent(earlier) => return answer_for_key(earlier),
    }

    // From here on the code is sent and the outcome recorded in a task of its own: if the
    // caller hangs up mid-request, the transaction and its idempotency key still end up
    // recorded as sent or failed (never stuck in flight).
    let task = tokio::spawn(deliver_code(
        state.clone(),
        key.tenant_id.to_string(),
        app.to_owned(),
        id,
        input.channel,
        recipient,
        masked,
        code,
        ttl,
        idempotency,
    ));
    task.await.map_err(ApiError::internal)?
}

/// Sends the code through the channel's provider and records the outcome.
#[allow(clippy::too_many_arguments)]
async fn deliver_code(
    state: AppState,
    tenant: String,
    app: String,
    id: OtpId,
    channel: Channel,
    recipient: String,
    masked: String,
    code: String,
    ttl: u32,
    idempotency: Option<Idempotency>,
) -> ApiResult<OtpSent> {
    let messages = state.store.otp_messages(&app).await?;
    let message = compose(channel, &messages, &code, ttl);
    let outgoing = ClaimedDelivery {
        id: id.to_string(),
        tenant_id: tenant,
        application_id: app.clone(),
        channel: channel.as_str().to_owned(),
        recipient,
        recipient_masked: masked.clone(),
        sender: None,
        subject: message.0,
        body: message.1,
        html_body: None,
        attempt_count: 1,
        cycle_attempt: 1,
    };
    let delivered =
        state.providers.send(&outgoing, None).await.map_err(|e| e.redact(&outgoing.recipient, &masked));
    drop(outgoing);
    let (status_code, body, result) = match delivered {
        Ok(_) => {
            // Recorded as sent before the call: nothing to write for a success.
            // At debug, as deliveries: the activity feed and the metric keep the record.
            tracing::debug!(transaction_id = %id, %channel, recipient = %masked, "OTP sent");
            metrics::counter!("herald_otp_total", "event" => "sent").increment(1);
            let out = OtpSendOut {
                status: "sent".to_owned(),
                transaction_id: id,
                recipient: masked,
                channel,
                expires_in_seconds: ttl,
            };
            (200, serde_json::to_string(&out).map_err(ApiError::internal)?, Ok(OtpSent::Sent(out)))
        }
        Err(e) => {
            let reason = match e {
                SendError::Transient { reason, .. } | SendError::Permanent { reason } => reason,
            };
            state.store.fail_otp_send(id.as_str(), reason.clone(), state.clock.now_millis()).await?;
            tracing::warn!(transaction_id = %id, %channel, recipient = %masked, error = %reason, "OTP delivery failed");
            metrics::counter!("herald_otp_total", "event" => "failed").increment(1);
            let error = ApiError::new(
                ErrorCode::DeliveryFailed,
                format!(
                    "The provider did not accept the code ({reason}); transaction {id} is failed, ask for a new code."
                ),
            );
            (502, serde_json::to_string(error.problem()).map_err(ApiError::internal)?, Err(error))
        }
    };
    if let Some(idem) = &idempotency {
        state.store.complete_idempotency_key(&app, &idem.key, status_code, body).await?;
    }
    result
}

fn key_scope(key: &KeyPrincipal, scope: herald_common::Scope) -> ApiResult<()> {
    if key.scopes.contains(&scope) { Ok(()) } else { Err(ApiError::insufficient_scope(scope)) }
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

fn answer_for_key(result: DispatchResult) -> ApiResult<OtpSent> {
    earlier_response(result).map(|(status_code, body)| OtpSent::Replayed { status_code, body })
}

pub async fn verify(state: &AppState, key: &KeyPrincipal, input: OtpVerifyIn) -> ApiResult<OtpVerifyOut> {
    let not_found = || ApiError::not_found("OTP transaction");
    if input.code.is_empty() || input.code.len() > 64 {
        return Err(ApiError::field("code", "must be 1 to 64 characters"));
    }
    let id = OtpId::parse(&input.transaction_id).map_err(|_| not_found())?;
    let secret = state.secret.clone();
    let code = input.code;
    let outcome = state
        .store
        .verify_otp(
            id.as_str(),
            key.application_id.as_str(),
            state.clock.now_millis(),
            FAILURE_LIMIT,
            move |salt, stored| {
                let computed = hex(&code_hash(&secret, salt, &code));
                bool::from(computed.as_bytes().ct_eq(stored.as_bytes()))
            },
        )
        .await?;
    let event = match &outcome {
        VerifyOutcome::Verified { .. } => "verified",
        VerifyOutcome::Invalid { .. } => "invalid",
        VerifyOutcome::TombstonedNow => "tombstoned",
        _ => "refused",
    };
    metrics::counter!("herald_otp_total", "event" => event).increment(1);
    match outcome {
        VerifyOutcome::Verified { verified_at } => Ok(OtpVerifyOut {
            status: "verified".to_owned(),
            transaction_id: id,
            verified_at: Timestamp::from_millis(verified_at),
        }),
        VerifyOutcome::NotFound => Err(not_found()),
        VerifyOutcome::AlreadyVerified => {
            Err(ApiError::new(ErrorCode::OtpAlreadyVerified, "This code was already verified."))
        }
        VerifyOutcome::Expired => {
            Err(ApiError::new(ErrorCode::OtpExpired, "This code has expired; ask for a new one."))
        }
        VerifyOutcome::NotDelivered => Err(ApiError::new(
            ErrorCode::OtpExpired,
            "This code was never delivered, so it cannot be verified; ask for a new one.",
        )),
        VerifyOutcome::Tombstoned | VerifyOutcome::TombstonedNow => Err(ApiError::new(
            ErrorCode::OtpTombstoned,
            "Too many wrong codes: this transaction is blocked for good; ask for a new code.",
        )),
        VerifyOutcome::Invalid { remaining } => {
            Err(ApiError::new(ErrorCode::OtpInvalidCode, "The code does not match.")
                .with_attempts_remaining(u32::try_from(remaining).unwrap_or(0)))
        }
        VerifyOutcome::RateLimited { retry_after_ms } => Err(ApiError::rate_limited(
            "Too many failed verifications for this recipient; at most 20 per 24 hours.",
            retry_after_ms,
        )),
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
