//! Dispatch: validate a request for its channel, render its template, and store it with its
//! delivery job and idempotency record in one transaction.

use std::time::Duration;

use herald_common::{
    ErrorCode, FieldError, Timestamp,
    api::{
        notifications::{Channel, DeliveryStatus, NotificationAccepted, NotificationIn},
        users::validate_user_id,
    },
    ids::NotificationId,
    mask::mask,
};
use serde_json::{Map, Value};

use super::{templates, validate};
use crate::{
    auth::KeyPrincipal,
    error::{ApiError, ApiResult},
    secret::ServerSecret,
    state::AppState,
    store::{DispatchResult, IdempotentResponse, NewNotification},
};

/// How long an idempotency key is remembered.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// An `Idempotency-Key` header and the fingerprint of the request it came with.
pub struct Idempotency {
    pub key: String,
    pub request_hash: String,
}

impl Idempotency {
    /// Checks the header (1 to 255 printable ASCII characters) and fingerprints the body: an
    /// HMAC (keyed with the server secret, so a stored fingerprint cannot be tested against
    /// guessed recipients or codes) of its canonical JSON, so whitespace and key order do not
    /// matter.
    pub fn new(secret: &ServerSecret, key: &str, body: &Value) -> ApiResult<Self> {
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(ApiError::field("Idempotency-Key", "must be 1 to 255 printable ASCII characters"));
        }
        let canonical = serde_json::to_vec(&canonical(body)).unwrap_or_default();
        let digest = secret.mac("herald.idempotency.v1", &[&canonical]);
        Ok(Self { key: key.to_owned(), request_hash: digest.iter().map(|b| format!("{b:02x}")).collect() })
    }
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

/// The answer to a dispatch.
pub enum Dispatched {
    Accepted(NotificationAccepted),
    /// A repeat of an earlier request with the same key: its stored response.
    Replayed {
        status_code: u16,
        body: String,
    },
}

pub async fn dispatch(
    state: &AppState,
    key: &KeyPrincipal,
    input: NotificationIn,
    idempotency: Option<Idempotency>,
) -> ApiResult<Dispatched> {
    let app = key.application_id.as_str();
    if let Some(idem) = &idempotency {
        let earlier = state
            .store
            .check_idempotency_key(app, &idem.key, &idem.request_hash, state.clock.now_millis())
            .await?;
        if earlier != DispatchResult::Created {
            return answer_for_key(earlier);
        }
    }
    let notification = prepare(state, key, input).await?;
    let accepted = NotificationAccepted {
        status: "accepted".to_owned(),
        notification_id: NotificationId::parse(&notification.id).map_err(ApiError::internal)?,
        channel: notification.channel,
        delivery_status: DeliveryStatus::Queued,
    };
    let record = match idempotency {
        Some(idem) => Some(IdempotentResponse {
            key: idem.key,
            request_hash: idem.request_hash,
            status_code: 202,
            body: serde_json::to_string(&accepted).map_err(ApiError::internal)?,
            ttl_ms: IDEMPOTENCY_TTL.as_millis() as i64,
        }),
        None => None,
    };
    let channel = notification.channel;
    let (app_id, recipient) = (notification.application_id.clone(), notification.recipient.clone());
    match state.store.dispatch(notification, record).await? {
        DispatchResult::Created => {
            if channel != Channel::InApp {
                state.delivery_wake.notify_one();
            } else if state.store.engine() == crate::store::Engine::Sqlite {
                // PostgreSQL notifies every daemon, this one included, at commit.
                state.hub.wake_created(&app_id, &recipient);
            }
            metrics::counter!("herald_notifications_accepted_total", "channel" => channel.as_str())
                .increment(1);
            Ok(Dispatched::Accepted(accepted))
        }
        // A concurrent request with the same key committed first.
        other => answer_for_key(other),
    }
}

fn answer_for_key(result: DispatchResult) -> ApiResult<Dispatched> {
    earlier_response(result).map(|(status_code, body)| Dispatched::Replayed { status_code, body })
}

/// What an idempotency key already used by an earlier request means for this one: that
/// request's stored response (status, body) to replay, or the error that explains why not.
pub fn earlier_response(result: DispatchResult) -> ApiResult<(u16, String)> {
    match result {
        DispatchResult::Replay { status_code, body } => Ok((status_code, body)),
        DispatchResult::KeyReused => Err(ApiError::new(
            ErrorCode::IdempotencyKeyReused,
            "This Idempotency-Key was used with a different request; use a new key for a new request.",
        )),
        DispatchResult::InFlight | DispatchResult::Created => Err(ApiError::new(
            ErrorCode::IdempotencyInProgress,
            "A request with this Idempotency-Key is still being processed; retry shortly.",
        )
        .with_header(axum::http::header::RETRY_AFTER, "1")),
    }
}

/// Validates `input` for its channel (all field errors at once) and renders its template.
async fn prepare(state: &AppState, key: &KeyPrincipal, input: NotificationIn) -> ApiResult<NewNotification> {
    let channel = input.channel;
    let given = templates::Rendered { subject: input.subject, body: input.body, html_body: input.html_body };
    let content = match &input.template_id {
        Some(template_id) => {
            let template = state
                .store
                .get_template(key.tenant_id.as_str(), template_id)
                .await?
                .ok_or_else(|| ApiError::field("template_id", "no such template"))?;
            templates::render(&template, input.template_data.as_ref().unwrap_or(&Map::new()), given)?
        }
        None if input.template_data.is_some() => {
            return Err(ApiError::field("template_data", "needs a template_id"));
        }
        None => given,
    };

    let mut errors = Vec::new();
    let mut check = |field: &str, result: Result<(), String>| {
        if let Err(message) = result {
            errors.push(FieldError::new(field, message));
        }
    };
    let recipient = input.recipient.trim().to_owned();
    check(
        "recipient",
        match channel {
            Channel::Email => validate::email_address(&recipient).map_err(str::to_owned),
            Channel::Sms | Channel::Whatsapp => validate::e164(&recipient).map_err(str::to_owned),
            Channel::InApp => validate_user_id(&recipient).map_err(|m| format!("must be a user id: {m}")),
        },
    );
    let body = content.body.unwrap_or_default();
    let body_limit = match channel {
        Channel::Sms => 1_600,
        Channel::Whatsapp => 4_096,
        Channel::InApp => 10_000,
        Channel::Email => 200_000,
    };
    check(
        "body",
        if body.trim().is_empty() {
            Err("is required (in the request or the template)".to_owned())
        } else if body.chars().count() > body_limit {
            Err(format!("must be at most {body_limit} characters for {channel}"))
        } else {
            Ok(())
        },
    );
    let only = |channels: &str| format!("is only used with {channels}");
    if let Some(subject) = &content.subject {
        check(
            "subject",
            match channel {
                Channel::Email | Channel::InApp => validate::single_line(subject, 998),
                _ => Err(only("email and in_app")),
            },
        );
    }
    if content.html_body.is_some() && channel != Channel::Email {
        check("html_body", Err(only("email")));
    }
    if let Some(title) = &input.title {
        check(
            "title",
            if channel == Channel::InApp { validate::single_line(title, 256) } else { Err(only("in_app")) },
        );
    }
    if channel == Channel::InApp {
        match (&input.title, &content.subject) {
            (None, None) => check("title", Err("is required for in_app (or give a subject)".to_owned())),
            // The subject becomes the inbox title, so it obeys the title's limit.
            (None, Some(subject)) => check("subject", validate::single_line(subject, 256)),
            _ => {}
        }
    }
    if let Some(data) = &input.data {
        if channel == Channel::InApp {
            for (name, value) in data {
                let result = match (name.as_str(), value) {
                    ("action_url" | "avatar_url", Value::String(url)) => {
                        validate::http_url(url).map_err(str::to_owned)
                    }
                    ("action_url" | "avatar_url", _) => Err("must be an http:// or https:// URL".to_owned()),
                    ("category", Value::String(c)) => validate::single_line(c, 64),
                    ("category", _) => Err("must be a string".to_owned()),
                    _ => Ok(()),
                };
                check(&format!("data.{name}"), result);
            }
        } else {
            check("data", Err(only("in_app")));
        }
    }
    if let Some(from) = &input.from {
        check(
            "from",
            match channel {
                Channel::Email => validate::email_address(from).map_err(str::to_owned),
                _ => Err(only("email")),
            },
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    if let Some(from) = &input.from {
        super::domains::check_sender(state, key.tenant_id.as_str(), from).await?;
    }
    Ok(NewNotification {
        id: NotificationId::new().to_string(),
        tenant_id: key.tenant_id.to_string(),
        application_id: key.application_id.to_string(),
        channel,
        recipient_masked: mask(&recipient),
        recipient,
        sender: input.from,
        subject: content.subject,
        title: input.title,
        body,
        html_body: content.html_body,
        data: input.data.map(|d| Value::Object(d).to_string()),
        template_id: input.template_id,
        created_at: Timestamp::now().millis(),
    })
}
