//! Dispatch: validate a request for its channel, render its template, and store it with its
//! delivery job and idempotency record in one transaction.

use herald_common::{
    FieldError, Timestamp,
    api::notifications::{Accepted, Channel, DeliveryStatus, NotificationAccepted, NotificationIn},
    ids::{NotificationId, UserId},
    mask::mask,
};
use serde_json::{Map, Value};

use super::{
    InvalidFields,
    domains::DomainError,
    idempotent_replay::{self, IDEMPOTENCY_TTL_MS, Replay, ReplayError},
    templates, validate,
};
use crate::{
    auth::KeyPrincipal,
    state::AppState,
    store::{DispatchResult, IdempotencyKey, IdempotentResponse, NewNotification, StoreError},
};

/// Why a dispatch was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// A field of the request, or the content its template rendered, is not valid.
    #[error(transparent)]
    Invalid(#[from] InvalidFields),
    /// Its `from` is not on a domain the tenant may send from.
    #[error(transparent)]
    Sender(#[from] DomainError),
    /// Its `Idempotency-Key` was used before and its response cannot be replayed.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The accepted answer could not be written out for the idempotency record.
    #[error("cannot serialize the answer: {0}")]
    Answer(#[from] serde_json::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The answer to a dispatch.
pub enum Dispatched {
    Accepted(NotificationAccepted),
    /// A repeat of an earlier request with the same key: its stored response.
    Replayed(Replay),
}

pub async fn dispatch(
    state: &AppState,
    key: &KeyPrincipal,
    input: NotificationIn,
    idempotency: Option<IdempotencyKey>,
) -> Result<Dispatched, DispatchError> {
    let now = state.clock.now_millis();
    if let Some(earlier) =
        idempotent_replay::earlier(&state.store, &key.application_id, idempotency.as_ref(), now).await?
    {
        return Ok(Dispatched::Replayed(earlier));
    }
    let notification = prepare(state, key, input).await?;
    let accepted = NotificationAccepted {
        status: Accepted::Accepted,
        notification_id: notification.id.clone(),
        channel: notification.channel,
        delivery_status: DeliveryStatus::Queued,
    };
    let record = match idempotency {
        Some(key) => Some(IdempotentResponse {
            key,
            status_code: 202,
            body: serde_json::to_string(&accepted)?,
            ttl_ms: IDEMPOTENCY_TTL_MS,
        }),
        None => None,
    };
    let channel = notification.channel;
    match state.store.dispatch(notification, record).await? {
        DispatchResult::Created => {
            if channel != Channel::InApp {
                state.delivery_wake.notify_one();
            }
            metrics::counter!("herald_notifications_accepted_total", "channel" => channel.as_str())
                .increment(1);
            Ok(Dispatched::Accepted(accepted))
        }
        // A concurrent request with the same key committed first.
        other => Ok(Dispatched::Replayed(idempotent_replay::replay(other)?)),
    }
}

/// Renders `input`'s template (if any), validates the result for its channel and checks its
/// sender: the notification to store.
async fn prepare(
    state: &AppState,
    key: &KeyPrincipal,
    input: NotificationIn,
) -> Result<NewNotification, DispatchError> {
    let given = templates::Rendered {
        subject: input.subject.clone(),
        body: input.body.clone(),
        html_body: input.html_body.clone(),
    };
    let content = match &input.template_id {
        Some(template_id) => {
            let template = state
                .store
                .get_template(&key.tenant_id, template_id)
                .await?
                .ok_or_else(|| InvalidFields::field("template_id", "no such template"))?;
            templates::render(&template, input.template_data.as_ref().unwrap_or(&Map::new()), given)?
        }
        None if input.template_data.is_some() => {
            return Err(InvalidFields::field("template_data", "needs a template_id").into());
        }
        None => given,
    };
    let checked = check(&input, content).map_err(InvalidFields)?;
    if let Some(from) = &input.from {
        super::domains::check_sender(state, &key.tenant_id, from).await?;
    }
    let category = input.category.clone().or_else(|| match (input.channel, input.data.as_ref()) {
        (Channel::InApp, Some(data)) => data.get("category").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    });
    Ok(NewNotification {
        recipient_key: super::suppressions::recipient_key(&state.secret, input.channel, &checked.recipient),
        category,
        id: NotificationId::new(),
        tenant_id: key.tenant_id.clone(),
        application_id: key.application_id.clone(),
        channel: input.channel,
        recipient_masked: mask(&checked.recipient),
        recipient: checked.recipient,
        sender: input.from,
        subject: checked.content.subject,
        title: input.title,
        body: checked.body,
        html_body: checked.content.html_body,
        data: input.data.map(|d| Value::Object(d).to_string()),
        template_id: input.template_id,
        created_at: Timestamp::now().millis(),
    })
}

/// A request that passed [`check`].
#[derive(Debug)]
struct Checked {
    /// Trimmed.
    recipient: String,
    body: String,
    /// Subject and HTML body, after the template.
    content: templates::Rendered,
}

/// The most characters of a body on each channel.
pub(crate) fn body_limit(channel: Channel) -> usize {
    match channel {
        Channel::Sms => 1_600,
        Channel::Whatsapp => 4_096,
        Channel::InApp => 10_000,
        Channel::Email => 200_000,
    }
}

/// Validates a dispatch for its channel, with its content after the template: every field error
/// at once.
fn check(input: &NotificationIn, content: templates::Rendered) -> Result<Checked, Vec<FieldError>> {
    let channel = input.channel;
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
            Channel::InApp => {
                UserId::parse(&recipient).map(|_| ()).map_err(|m| format!("must be a user id: {m}"))
            }
        },
    );
    let body = content.body.clone().unwrap_or_default();
    let limit = body_limit(channel);
    check(
        "body",
        if body.trim().is_empty() {
            Err("is required (in the request or the template)".to_owned())
        } else if body.chars().count() > limit {
            Err(format!("must be at most {limit} characters for {channel}"))
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
                check(&format!("data.{name}"), in_app_data(name, value));
            }
        } else {
            check("data", Err(only("in_app")));
        }
    }
    if let Some(category) = &input.category {
        check("category", super::suppressions::check_category(category).map_err(str::to_owned));
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
    if errors.is_empty() { Ok(Checked { recipient, body, content }) } else { Err(errors) }
}

/// The rules for the keys of an in-app notification's `data` that Herald knows.
fn in_app_data(name: &str, value: &Value) -> Result<(), String> {
    match (name, value) {
        ("action_url" | "avatar_url", Value::String(url)) => validate::http_url(url).map_err(str::to_owned),
        ("action_url" | "avatar_url", _) => Err("must be an http:// or https:// URL".to_owned()),
        // The notification's category when there is no top-level one (CONTRACT §9).
        ("category", Value::String(c)) => super::suppressions::check_category(c).map_err(|m| m.to_owned()),
        ("category", _) => Err("must be a string".to_owned()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(input: &NotificationIn) -> templates::Rendered {
        templates::Rendered {
            subject: input.subject.clone(),
            body: input.body.clone(),
            html_body: input.html_body.clone(),
        }
    }

    fn fields(input: NotificationIn) -> Vec<String> {
        let content = rendered(&input);
        match check(&input, content) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn a_valid_request_of_each_channel_passes() {
        let mut email = NotificationIn::new(Channel::Email, " ann@example.com ", "Hi");
        email.subject = Some("Hello".into());
        email.html_body = Some("<p>Hi</p>".into());
        let checked = check(&email, rendered(&email)).unwrap();
        assert_eq!(checked.recipient, "ann@example.com", "trimmed");
        assert!(fields(NotificationIn::new(Channel::Sms, "+14155550100", "Hi")).is_empty());
        assert!(fields(NotificationIn::new(Channel::Whatsapp, "+14155550100", "Hi")).is_empty());
        let mut in_app = NotificationIn::new(Channel::InApp, "ann", "Hi");
        in_app.title = Some("Welcome".into());
        assert!(fields(in_app).is_empty());
    }

    #[test]
    fn every_bad_field_is_reported_at_once() {
        let mut bad = NotificationIn::new(Channel::Sms, "555", "");
        bad.subject = Some("no subjects on SMS".into());
        bad.html_body = Some("<p>".into());
        bad.title = Some("no titles either".into());
        bad.data = Some(Map::from_iter([("category".to_owned(), Value::from(1))]));
        bad.from = Some("a@example.com".into());
        assert_eq!(fields(bad), ["recipient", "body", "subject", "html_body", "title", "data", "from"]);
    }

    #[test]
    fn channel_rules() {
        let long = "x".repeat(1_601);
        assert_eq!(fields(NotificationIn::new(Channel::Sms, "+14155550100", long)), ["body"]);
        assert_eq!(
            fields(NotificationIn::new(Channel::InApp, "ann", "Hi")),
            ["title"],
            "in_app needs a title"
        );
        let mut subject_as_title = NotificationIn::new(Channel::InApp, "ann", "Hi");
        subject_as_title.subject = Some("s".repeat(257));
        assert_eq!(fields(subject_as_title), ["subject"], "a subject used as the title obeys its limit");
        let mut data = NotificationIn::new(Channel::InApp, "ann b", "Hi");
        data.title = Some("t".into());
        data.data = Some(Map::from_iter([
            ("action_url".to_owned(), Value::from("javascript:alert(1)")),
            ("free".to_owned(), Value::from(3)),
        ]));
        assert_eq!(fields(data), ["recipient", "data.action_url"]);
        let mut header = NotificationIn::new(Channel::Email, "ann@example.com", "Hi");
        header.subject = Some("Hi\r\nBcc: x@example.com".into());
        assert_eq!(fields(header), ["subject"]);
    }
}
