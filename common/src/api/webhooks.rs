//! Outbound event webhooks (`/api/v1/webhooks`, CONTRACT §10): the endpoints a tenant registers,
//! the events Herald sends them in the Standard Webhooks format, and what became of each message.

use serde::{Deserialize, Deserializer, Serialize};

use crate::{
    Timestamp,
    ids::{ApplicationId, MessageId, WebhookEndpointId},
    wire::wire_enum,
};

wire_enum! {
    /// The catalogue of events (the `type` of an event body).
    pub enum EventType {
        /// A notification was accepted by its provider or SMTP relay.
        NotificationSent = "notification.sent",
        /// The provider confirms the notification arrived (in_app: in the inbox).
        NotificationDelivered = "notification.delivered",
        /// The notification was read (a WhatsApp read receipt).
        NotificationRead = "notification.read",
        /// The provider could not deliver the notification after accepting it.
        NotificationUndelivered = "notification.undelivered",
        /// The email bounced.
        NotificationBounced = "notification.bounced",
        /// The recipient marked the email as spam.
        NotificationComplained = "notification.complained",
        /// Herald gave up on the notification.
        NotificationFailed = "notification.failed",
        /// The notification was not sent: its recipient is suppressed.
        NotificationSuppressed = "notification.suppressed",
        /// The right code of an OTP was submitted.
        OtpVerified = "otp.verified",
        /// An OTP was blocked after five wrong codes.
        OtpTombstoned = "otp.tombstoned",
        /// A sending domain was verified.
        DomainVerified = "domain.verified",
        /// A sending domain failed its check.
        DomainFailed = "domain.failed",
        /// A recipient was added to the suppression list.
        SuppressionCreated = "suppression.created",
        /// A suppression was lifted.
        SuppressionDeleted = "suppression.deleted",
        /// Sent by `POST /api/v1/webhooks/{endpoint_id}/test`.
        WebhookTest = "webhook.test",
    }
}

wire_enum! {
    /// Whether an endpoint receives events.
    pub enum EndpointStatus {
        Enabled = "enabled",
        Disabled = "disabled",
    }
}

wire_enum! {
    /// Where one message to one endpoint stands.
    pub enum MessageStatus {
        /// Not yet accepted by the endpoint: the next attempt is at `next_attempt_at`.
        Pending = "pending",
        /// The endpoint answered 2xx.
        Succeeded = "succeeded",
        /// Herald gave up (the schedule ran out, or the endpoint was disabled); `recover` sends it again.
        Failed = "failed",
    }
}

/// An endpoint as the API shows it: never its secret.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookEndpoint {
    pub endpoint_id: WebhookEndpointId,
    pub url: String,
    pub description: Option<String>,
    /// The event types it receives; `null`: every type.
    pub event_types: Option<Vec<EventType>>,
    /// The one application whose events it receives; `null`: every application of the tenant.
    pub application_id: Option<ApplicationId>,
    pub status: EndpointStatus,
    /// Why it was disabled (`410 Gone`, no success for 5 days, or an operator).
    pub disabled_reason: Option<String>,
    /// When its current run of failures began (no attempt has succeeded since); `null` once one
    /// succeeds. Failing for `HERALD_WEBHOOK_DISABLE_AFTER` (5 days) disables it.
    #[serde(default)]
    pub failing_since: Option<Timestamp>,
    /// Enabled, but failing so that Herald sends it only a probe a second: its later events are
    /// held (owed, in order) and go once it answers.
    #[serde(default)]
    pub paused: bool,
    pub created_at: Timestamp,
}

/// `POST /api/v1/webhooks`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpointIn {
    /// An `https` or `http` URL that does not resolve into a private network.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The event types to receive; absent: every type. An event is recorded only if an endpoint
    /// wants it when it happens, so the endpoint receives events from its creation on, and an
    /// event no endpoint wants costs the change that makes it nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_types: Option<Vec<EventType>>,
    /// Only this application's events; absent: every application of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<ApplicationId>,
}

/// `POST /api/v1/webhooks`' answer: the endpoint and its secret, shown only here.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookEndpointCreated {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    /// `whsec_` + base64 of the key: what the Standard Webhooks libraries take.
    pub secret: String,
}

/// `PATCH /api/v1/webhooks/{endpoint_id}`: each field present is changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpointPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `null` removes the description.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// `null`: every type. Types added receive the events that happen from then on.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<EventType>>)]
    pub event_types: Option<Option<Vec<EventType>>>,
    /// `enabled` re-enables a disabled endpoint and clears its `disabled_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EndpointStatus>,
}

/// A field that is present, `null` included (`Some(None)`), as opposed to absent (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `GET /api/v1/webhooks`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookEndpointList {
    pub endpoints: Vec<WebhookEndpoint>,
}

/// `POST /api/v1/webhooks/{endpoint_id}/rotate-secret`: the new secret, shown only here.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookSecret {
    pub secret: String,
}

/// `POST /api/v1/webhooks/{endpoint_id}/test`: the message that carries the `webhook.test` event.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookTestOut {
    pub message_id: MessageId,
}

/// One attempt to send a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookAttempt {
    pub at: Timestamp,
    /// The endpoint's answer, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Why it failed without an answer (timeout, refused connection, private address…), or what
    /// the non-2xx answer means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// One message to one endpoint, with its attempts (oldest first).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookDelivery {
    /// The `webhook-id` of every attempt.
    pub message_id: MessageId,
    pub event_type: EventType,
    pub status: MessageStatus,
    pub attempts: Vec<WebhookAttempt>,
    /// When it is tried next (pending only).
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

/// `GET /api/v1/webhooks/{endpoint_id}/deliveries`: one page, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookDeliveryList {
    pub total_count: u64,
    pub page: u32,
    pub limit: u32,
    pub items: Vec<WebhookDelivery>,
}

/// The query of `GET /api/v1/webhooks/{endpoint_id}/deliveries`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WebhookDeliveryQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<MessageStatus>,
    /// From 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// 1 to 100 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `POST /api/v1/webhooks/{endpoint_id}/recover`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoverIn {
    /// Every message that failed and was created at or after this time is sent again.
    pub since: Timestamp,
}

/// `POST /api/v1/webhooks/{endpoint_id}/recover`'s answer (202).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecoverOut {
    pub queued: u64,
}

/// The body of every webhook message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookEvent {
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When the change happened.
    pub timestamp: Timestamp,
    /// An activity item (notification and OTP events), a domain, a suppression, or, for
    /// `webhook.test`, `{endpoint_id}`.
    pub data: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_tells_null_from_absent() {
        let patch: WebhookEndpointPatch = serde_json::from_str(r#"{"event_types": null}"#).unwrap();
        assert_eq!(patch.event_types, Some(None));
        assert_eq!(patch.description, None);
        let patch: WebhookEndpointPatch =
            serde_json::from_str(r#"{"event_types": ["otp.verified"], "description": "x"}"#).unwrap();
        assert_eq!(patch.event_types, Some(Some(vec![EventType::OtpVerified])));
        assert_eq!(patch.description, Some(Some("x".into())));
        assert!(serde_json::from_str::<WebhookEndpointPatch>(r#"{"nope": 1}"#).is_err());
    }

    #[test]
    fn the_catalogue_has_fifteen_types() {
        assert_eq!(EventType::ALL.len(), 15);
        assert_eq!(EventType::parse("notification.delivered"), Some(EventType::NotificationDelivered));
    }
}
