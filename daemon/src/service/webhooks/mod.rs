//! Outbound event webhooks (CONTRACT §10): endpoints and their rules, secrets and signatures
//! (Standard Webhooks), and the body of each event, rendered from the snapshot the outbox's
//! triggers took when the change happened.
//!
//! Secrets are never stored: an endpoint's key is an HMAC of its id and secret generation under
//! the server secret, so the daemon re-derives it to sign, and shows it only when it is made
//! (creation, rotation).

pub mod network;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use herald_common::{
    FieldError, Timestamp,
    api::{
        activity::ActivityStatus,
        notifications::Channel,
        suppressions::SuppressionReason,
        webhooks::{
            EndpointStatus, EventType, MessageStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint,
            WebhookEndpointCreated, WebhookEndpointIn, WebhookEndpointPatch,
        },
    },
    ids::{ApplicationId, DomainId, MessageId, SuppressionId, TenantId, TransactionId, WebhookEndpointId},
};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Deserializer};
use sha2::Sha256;

use super::InvalidFields;
use crate::{
    secret::ServerSecret,
    state::AppState,
    store::{
        ActivityRow, AttemptRow, DomainRecord, DueEndpoint, EndpointChanges, MessageRecord, StoreError,
        SuppressionRecord, WebhookEndpointRecord,
    },
};

/// The longest URL an endpoint may have.
pub const MAX_URL_LEN: usize = 2048;
/// The longest description.
pub const MAX_DESCRIPTION_LEN: usize = 1024;
/// How long a settled (succeeded or failed) message is kept for `deliveries` and `recover`.
pub const RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
/// How many rows each of housekeeping's writes deletes ([`crate::store::Store::delete_settled_webhook_messages`]).
pub const RETENTION_CHUNK: i64 = 1_000;
/// What an operator's disabling says.
const DISABLED_BY_OPERATOR: &str = "disabled by an operator";

/// Why a webhook request was not done.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Invalid(#[from] InvalidFields),
    /// No such endpoint in the caller's tenant.
    #[error("no such webhook endpoint")]
    NotFound,
    /// A test event to a disabled endpoint would never be sent.
    #[error("the endpoint is disabled; enable it first")]
    Disabled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The key an endpoint's messages are signed with, in one generation.
pub fn endpoint_key(secret: &ServerSecret, id: &WebhookEndpointId, generation: i64) -> [u8; 32] {
    secret.mac("herald.webhook.secret.v1", &[id.as_str().as_bytes(), &generation.to_be_bytes()])
}

/// The secret as integrators are given it: `whsec_` + base64 of the key.
pub fn secret_text(key: &[u8]) -> String {
    format!("whsec_{}", STANDARD.encode(key))
}

/// One Standard Webhooks signature: `v1,` + base64 of HMAC-SHA256 over `id.timestamp.body`.
pub fn signature(key: &[u8], message_id: &str, timestamp: i64, body: &[u8]) -> String {
    #[allow(clippy::expect_used)] // HMAC accepts keys of every length: this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The `webhook-signature` header: the current secret's signature and, during the overlap after
/// a rotation (until `previous_until`), the previous one's, space-separated.
pub fn signature_header(
    secret: &ServerSecret,
    endpoint: &DueEndpoint,
    now: i64,
    message_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let sign =
        |generation| signature(&endpoint_key(secret, &endpoint.id, generation), message_id, timestamp, body);
    let current = sign(endpoint.secret_generation);
    match endpoint.previous_until {
        Some(until) if now < until && endpoint.secret_generation > 1 => {
            format!("{current} {}", sign(endpoint.secret_generation - 1))
        }
        _ => current,
    }
}

/// The stored form of an event-type filter: `,a,b,` (sorted, unique), `None` for every type.
fn stored_types(types: Option<Vec<EventType>>) -> Option<String> {
    let mut types = types?;
    types.sort();
    types.dedup();
    Some(format!(",{},", types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")))
}

fn listed_types(stored: Option<&str>) -> Option<Vec<EventType>> {
    stored.map(|s| s.split(',').filter_map(EventType::parse).collect())
}

/// The API's form of an endpoint (never its secret).
pub fn view(record: WebhookEndpointRecord) -> WebhookEndpoint {
    WebhookEndpoint {
        event_types: listed_types(record.event_types.as_deref()),
        endpoint_id: record.id,
        url: record.url,
        description: record.description,
        application_id: record.application_id,
        status: record.status,
        disabled_reason: record.disabled_reason,
        failing_since: record.failing_since.map(Timestamp::from_millis),
        // Failing and held back; paused and not failing, it is being caught up.
        paused: record.status == EndpointStatus::Enabled
            && record.paused_after.is_some()
            && record.failing_since.is_some(),
        created_at: Timestamp::from_millis(record.created_at),
    }
}

/// Checks a URL: `http`/`https`, a host, no fragment, bounded, and every address it resolves to
/// permitted by the private-network rule.
async fn check_url(state: &AppState, url: &str) -> Result<String, FieldError> {
    let invalid = |message: String| FieldError::new("url", message);
    if url.len() > MAX_URL_LEN {
        return Err(invalid(format!("must be at most {MAX_URL_LEN} characters")));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| invalid(format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("must be an http or https URL".to_owned()));
    }
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        return Err(invalid("must name a host".to_owned()));
    };
    if parsed.fragment().is_some() {
        return Err(invalid("must not have a fragment".to_owned()));
    }
    let port = parsed.port_or_known_default().unwrap_or(80);
    network_rule(state).check_host(host, port).await.map_err(invalid)?;
    Ok(parsed.to_string())
}

/// The configured private-network rule.
pub fn network_rule(state: &AppState) -> network::NetworkRule {
    network::NetworkRule::new(state.config.webhooks.allowed_networks.clone())
}

fn check_description(description: Option<&str>, errors: &mut Vec<FieldError>) {
    if description.is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_LEN) {
        errors.push(FieldError::new(
            "description",
            format!("must be at most {MAX_DESCRIPTION_LEN} characters"),
        ));
    }
}

fn check_types(types: Option<&Vec<EventType>>, errors: &mut Vec<FieldError>) {
    if types.is_some_and(|t| t.is_empty()) {
        errors.push(FieldError::new(
            "event_types",
            "must name at least one type (leave it out for every type)",
        ));
    }
}

/// Registers an endpoint; the answer holds its secret, shown only here.
pub async fn create(
    state: &AppState,
    tenant_id: &TenantId,
    input: WebhookEndpointIn,
) -> Result<WebhookEndpointCreated, WebhookError> {
    let mut errors = Vec::new();
    check_description(input.description.as_deref(), &mut errors);
    check_types(input.event_types.as_ref(), &mut errors);
    if let Some(app) = &input.application_id {
        let owned = state.store.get_application(app).await?.is_some_and(|a| &a.tenant_id == tenant_id);
        if !owned {
            errors.push(FieldError::new("application_id", "no such application in this tenant"));
        }
    }
    let url = check_url(state, &input.url).await.map_err(|e| errors.push(e)).ok();
    let Some(url) = url.filter(|_| errors.is_empty()) else {
        return Err(InvalidFields(errors).into());
    };
    let now = state.clock.now_millis();
    let record = WebhookEndpointRecord {
        id: WebhookEndpointId::new(),
        tenant_id: tenant_id.clone(),
        application_id: input.application_id,
        url,
        description: input.description,
        event_types: stored_types(input.event_types),
        status: EndpointStatus::Enabled,
        disabled_reason: None,
        secret_generation: 1,
        previous_until: None,
        failing_since: None,
        paused_after: None,
        created_at: now,
        updated_at: now,
    };
    state.store.insert_webhook_endpoint(record.clone()).await?;
    let secret = secret_text(&endpoint_key(&state.secret, &record.id, 1));
    Ok(WebhookEndpointCreated { endpoint: view(record), secret })
}

pub async fn get(
    state: &AppState,
    tenant_id: &TenantId,
    id: &WebhookEndpointId,
) -> Result<WebhookEndpointRecord, WebhookError> {
    state.store.webhook_endpoint(tenant_id, id).await?.ok_or(WebhookError::NotFound)
}

/// Applies a `PATCH`.
pub async fn update(
    state: &AppState,
    tenant_id: &TenantId,
    id: &WebhookEndpointId,
    patch: WebhookEndpointPatch,
) -> Result<WebhookEndpoint, WebhookError> {
    let mut errors = Vec::new();
    check_description(patch.description.as_ref().and_then(|d| d.as_deref()), &mut errors);
    check_types(patch.event_types.as_ref().and_then(|t| t.as_ref()), &mut errors);
    let url = match &patch.url {
        Some(url) => check_url(state, url).await.map_err(|e| errors.push(e)).ok(),
        None => None,
    };
    if !errors.is_empty() {
        return Err(InvalidFields(errors).into());
    }
    let changes = EndpointChanges {
        url,
        description: patch.description,
        event_types: patch.event_types.map(stored_types),
        status: patch.status.map(|s| match s {
            EndpointStatus::Enabled => (s, None),
            EndpointStatus::Disabled => (s, Some(DISABLED_BY_OPERATOR.to_owned())),
        }),
    };
    let record = state
        .store
        .update_webhook_endpoint(tenant_id.clone(), id.clone(), changes, state.clock.now_millis())
        .await?
        .ok_or(WebhookError::NotFound)?;
    if patch.status == Some(EndpointStatus::Enabled) {
        state.store.wake_webhooks();
    }
    Ok(view(record))
}

pub async fn remove(
    state: &AppState,
    tenant_id: &TenantId,
    id: &WebhookEndpointId,
) -> Result<(), WebhookError> {
    if !state.store.remove_webhook_endpoint(tenant_id.clone(), id.clone(), state.clock.now_millis()).await? {
        return Err(WebhookError::NotFound);
    }
    // The dispatcher drops the endpoint's lane at its next look, and the purge deletes its
    // messages (`delivery/webhooks/purge.rs`).
    state.store.wake_webhooks();
    state.webhook_purge.notify_one();
    Ok(())
}

/// A new secret; the old one signs beside it for the configured overlap.
pub async fn rotate_secret(
    state: &AppState,
    tenant_id: &TenantId,
    id: &WebhookEndpointId,
) -> Result<String, WebhookError> {
    let now = state.clock.now_millis();
    let overlap = i64::try_from(state.config.webhooks.secret_overlap.as_millis()).unwrap_or(i64::MAX / 4);
    let record = state
        .store
        .rotate_webhook_secret(tenant_id.clone(), id.clone(), now.saturating_add(overlap), now)
        .await?
        .ok_or(WebhookError::NotFound)?;
    Ok(secret_text(&endpoint_key(&state.secret, &record.id, record.secret_generation)))
}

/// Sends a `webhook.test` event to one endpoint; the message's id.
pub async fn test(
    state: &AppState,
    tenant_id: &TenantId,
    id: &WebhookEndpointId,
) -> Result<MessageId, WebhookError> {
    let endpoint = get(state, tenant_id, id).await?;
    if endpoint.status != EndpointStatus::Enabled {
        return Err(WebhookError::Disabled);
    }
    let (row, created_at) = state
        .store
        .add_webhook_test_event(tenant_id.clone(), id.clone(), state.clock.now_millis())
        .await?
        // Disabled between the read and the write.
        .ok_or(WebhookError::Disabled)?;
    Ok(MessageId::of_row(created_at, row))
}

/// The API's form of a message and its attempts.
pub fn delivery_view((message, attempts): (MessageRecord, Vec<AttemptRow>)) -> WebhookDelivery {
    WebhookDelivery {
        message_id: MessageId::of_row(message.created_at, message.id),
        event_type: message.event_type,
        next_attempt_at: message
            .next_attempt_at
            .filter(|_| message.status == MessageStatus::Pending)
            .map(Timestamp::from_millis),
        status: message.status,
        created_at: Timestamp::from_millis(message.created_at),
        attempts: attempts
            .into_iter()
            .map(|a| WebhookAttempt {
                at: Timestamp::from_millis(a.attempted_at),
                http_status: a.http_status.and_then(|s| u16::try_from(s).ok()),
                error: a.error,
                duration_ms: u64::try_from(a.duration_ms).unwrap_or(0),
            })
            .collect(),
    }
}

/// Why an event's snapshot could not be made into a body (a corrupt row: never expected).
#[derive(Debug, thiserror::Error)]
#[error("the event's snapshot cannot be read: {0}")]
pub struct RenderError(String);

/// The body of an event, from the snapshot its trigger took: `{type, timestamp, data}`, where
/// `data` is what the API shows of the subject at that moment (the masked activity item, the
/// domain, the suppression). Serialized straight from the view, with its fields in the API's
/// order: through a `serde_json::Value` each body cost a map per object and a sort of its keys
/// (a sixth of a send's CPU).
pub fn render_body(
    spf_include: &str,
    event_type: EventType,
    snapshot: &str,
    occurred_at: i64,
) -> Result<String, RenderError> {
    /// [`herald_common::api::webhooks::WebhookEvent`] with its `data` typed.
    #[derive(serde::Serialize)]
    struct Body<T> {
        #[serde(rename = "type")]
        event_type: EventType,
        timestamp: Timestamp,
        data: T,
    }
    fn body<T: serde::Serialize>(
        event_type: EventType,
        occurred_at: i64,
        data: T,
    ) -> serde_json::Result<String> {
        serde_json::to_string(&Body { event_type, timestamp: Timestamp::from_millis(occurred_at), data })
    }
    let fail = |e: serde_json::Error| RenderError(e.to_string());
    match event_type {
        EventType::DomainVerified | EventType::DomainFailed => {
            let domain: DomainSnapshot = serde_json::from_str(snapshot).map_err(fail)?;
            body(event_type, occurred_at, super::domains::out(&domain.into_record(), spf_include))
        }
        EventType::SuppressionCreated | EventType::SuppressionDeleted => {
            let entry: SuppressionSnapshot = serde_json::from_str(snapshot).map_err(fail)?;
            body(event_type, occurred_at, super::suppressions::view(entry.into_record()))
        }
        EventType::WebhookTest => {
            let data: serde_json::Value = serde_json::from_str(snapshot).map_err(fail)?;
            body(event_type, occurred_at, data)
        }
        _ => {
            let item: ItemSnapshot = serde_json::from_str(snapshot).map_err(fail)?;
            body(event_type, occurred_at, crate::views::activity_item(item.into_row()))
        }
    }
    .map_err(fail)
}

/// SQLite's JSON has no booleans: its integers 0 and 1 are read as them.
fn flag<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Int(i64),
    }
    Ok(match Flag::deserialize(deserializer)? {
        Flag::Bool(b) => b,
        Flag::Int(n) => n != 0,
    })
}

/// A notification's or OTP's activity item fields, as the triggers snapshot them.
#[derive(Deserialize)]
struct ItemSnapshot {
    transaction_id: TransactionId,
    application_id: ApplicationId,
    application_name: Option<String>,
    channel: Channel,
    recipient_masked: String,
    status: ActivityStatus,
    failure_reason: Option<String>,
    #[serde(deserialize_with = "flag")]
    retryable: bool,
    retry_count: i64,
    created_at: i64,
    category: Option<String>,
}

impl ItemSnapshot {
    fn into_row(self) -> ActivityRow {
        ActivityRow {
            transaction_id: self.transaction_id,
            application_id: self.application_id,
            application_name: self.application_name.unwrap_or_default(),
            channel: self.channel,
            recipient_masked: self.recipient_masked,
            status: self.status,
            failure_reason: self.failure_reason,
            retryable: self.retryable,
            retry_count: self.retry_count,
            created_at: self.created_at,
            updated_at: self.created_at,
            failed_attempts: 0,
            category: self.category,
        }
    }
}

/// A domain as the trigger snapshots it (without its private key).
#[derive(Deserialize)]
struct DomainSnapshot {
    id: DomainId,
    tenant_id: TenantId,
    name: String,
    dkim_selector: String,
    challenge_token: String,
    dkim_record: String,
    status: herald_common::api::domains::DomainStatus,
    checks: Option<String>,
    created_at: i64,
    last_checked_at: Option<i64>,
    verified_at: Option<i64>,
    next_check_at: Option<i64>,
}

impl DomainSnapshot {
    fn into_record(self) -> DomainRecord {
        DomainRecord {
            id: self.id,
            tenant_id: self.tenant_id,
            name: self.name,
            dkim_selector: self.dkim_selector,
            challenge_token: self.challenge_token,
            dkim_record: self.dkim_record,
            dkim_private_key: String::new(),
            status: self.status,
            checks: self.checks,
            created_at: self.created_at,
            last_checked_at: self.last_checked_at,
            verified_at: self.verified_at,
            next_check_at: self.next_check_at,
        }
    }
}

/// A suppression as the triggers snapshot it.
#[derive(Deserialize)]
struct SuppressionSnapshot {
    id: SuppressionId,
    tenant_id: TenantId,
    channel: Channel,
    recipient_masked: String,
    category: String,
    reason: SuppressionReason,
    transaction_id: Option<TransactionId>,
    created_at: i64,
}

impl SuppressionSnapshot {
    fn into_record(self) -> SuppressionRecord {
        SuppressionRecord {
            id: self.id,
            tenant_id: self.tenant_id,
            channel: self.channel,
            recipient_masked: self.recipient_masked,
            category: self.category,
            reason: self.reason,
            transaction_id: self.transaction_id,
            created_at: self.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_common::api::webhooks::WebhookEvent;

    #[test]
    fn signatures_follow_the_standard() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(secret_text(&key), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    }

    #[test]
    fn event_type_filters_round_trip() {
        let stored = stored_types(Some(vec![
            EventType::OtpVerified,
            EventType::NotificationSent,
            EventType::OtpVerified,
        ]));
        assert_eq!(stored.as_deref(), Some(",notification.sent,otp.verified,"));
        assert_eq!(
            listed_types(stored.as_deref()),
            Some(vec![EventType::NotificationSent, EventType::OtpVerified])
        );
        assert_eq!(stored_types(None), None);
    }

    #[test]
    fn item_snapshots_of_both_dialects_render_the_feed_item() {
        let sqlite = r#"{"transaction_id":"notif_01jd8x3v7q0000000000000000","application_id":"app_01jd8x3v7q0000000000000000","application_name":"A","channel":"email","recipient_masked":"a***@x.com","status":"failed","failure_reason":"550 no","retryable":0,"retry_count":1,"created_at":5,"category":null}"#;
        let body = render_body("spf", EventType::NotificationFailed, sqlite, 7).unwrap();
        let event: WebhookEvent = serde_json::from_str(&body).unwrap();
        assert_eq!(event.event_type, EventType::NotificationFailed);
        assert_eq!(event.data["failure_reason"], "550 no");
        assert_eq!(event.data["retryable"], false);
        let postgres = sqlite.replace(r#""retryable":0"#, r#""retryable": true"#);
        let body = render_body("spf", EventType::NotificationFailed, &postgres, 7).unwrap();
        assert!(body.contains(r#""retryable":true"#), "{body}");
    }
}
