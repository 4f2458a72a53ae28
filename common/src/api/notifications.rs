//! Dispatch (`POST /api/v1/notifications`) and lookup (`GET /api/v1/notifications/{id}`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    Timestamp,
    ids::{ApplicationId, NotificationId},
};

/// A delivery channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Email,
    Sms,
    Whatsapp,
    InApp,
}

impl Channel {
    pub const ALL: [Channel; 4] = [Channel::Email, Channel::Sms, Channel::Whatsapp, Channel::InApp];

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Sms => "sms",
            Channel::Whatsapp => "whatsapp",
            Channel::InApp => "in_app",
        }
    }

    pub fn parse(text: &str) -> Option<Channel> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a notification is in its delivery (CONTRACT §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Accepted, waiting for a worker (also after a transient failure, until the next attempt).
    Queued,
    /// A worker is handing it to the provider.
    Sending,
    /// Accepted by the provider or SMTP server.
    Sent,
    /// In the user's inbox (in_app).
    Delivered,
    /// Given up: `failure_reason` says why.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Queued => "queued",
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Sent => "sent",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryStatus> {
        [Self::Queued, Self::Sending, Self::Sent, Self::Delivered, Self::Failed]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

/// Spec §2.1, plus `from` (CONTRACT §4).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotificationIn {
    pub channel: Channel,
    /// Email address, E.164 phone number, or user id, by channel.
    pub recipient: String,
    /// Subject line (email; in_app uses it as the title when `title` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Title of an in-app notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Plain-text body. Required unless the template supplies it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// HTML body (email only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html_body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub template_data: Option<Map<String, Value>>,
    /// Free-form object for in-app notifications: `action_url`, `avatar_url`, `category`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub data: Option<Map<String, Value>>,
    /// Sender address (email), on one of the tenant's verified domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

impl NotificationIn {
    /// A notification with just a channel, a recipient and a body.
    pub fn new(channel: Channel, recipient: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            channel,
            recipient: recipient.into(),
            subject: None,
            title: None,
            body: Some(body.into()),
            html_body: None,
            template_id: None,
            template_data: None,
            data: None,
            from: None,
        }
    }
}

/// Spec §2.2.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NotificationAccepted {
    /// Always `accepted`.
    pub status: String,
    pub notification_id: NotificationId,
    pub channel: Channel,
    /// `queued` on acceptance.
    pub delivery_status: DeliveryStatus,
}

/// One try at handing a notification to its provider.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptOut {
    /// 1 for the first attempt; keeps counting across manual retries.
    pub attempt: u32,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    /// `sent`, `delivered`, `transient_failure` or `permanent_failure`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /api/v1/notifications/{id}`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NotificationOut {
    pub notification_id: NotificationId,
    pub application_id: ApplicationId,
    pub channel: Channel,
    pub recipient_masked: String,
    pub delivery_status: DeliveryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub retryable: bool,
    pub retry_count: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub attempts: Vec<AttemptOut>,
}
