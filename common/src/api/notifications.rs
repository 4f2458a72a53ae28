//! Dispatch (`POST /api/v1/notifications`) and lookup (`GET /api/v1/notifications/{id}`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    Timestamp,
    ids::{ApplicationId, NotificationId, TemplateId},
    wire::wire_enum,
};

wire_enum! {
    /// A delivery channel.
    pub enum Channel {
        Email = "email",
        Sms = "sms",
        Whatsapp = "whatsapp",
        InApp = "in_app",
    }
}

wire_enum! {
    /// Where a notification is in its delivery (CONTRACT §5).
    pub enum DeliveryStatus {
        /// Accepted, waiting for a worker (also after a transient failure, until the next attempt).
        Queued = "queued",
        /// A worker is handing it to the provider.
        Sending = "sending",
        /// Accepted by the provider or SMTP server.
        Sent = "sent",
        /// The provider confirms it reached the handset or mailbox (a receipt); in_app: in the
        /// user's inbox.
        Delivered = "delivered",
        /// The recipient read it (a WhatsApp read receipt).
        Read = "read",
        /// The provider reports, after accepting it, that it could not deliver it.
        Undelivered = "undelivered",
        /// An email bounce report came back.
        Bounced = "bounced",
        /// The recipient marked the email as spam.
        Complained = "complained",
        /// Given up: `failure_reason` says why.
        Failed = "failed",
        /// Not sent: the recipient is on the suppression list (`failure_reason` names the
        /// reason and its date).
        Suppressed = "suppressed",
    }
}

impl DeliveryStatus {
    /// Where a status stands in the precedence of receipts (CONTRACT §8): `complained` >
    /// `read` > `delivered` > `bounced` = `undelivered` > `sent`. Receipts arrive late, twice
    /// and out of order; one moves the status only up this order, and only from `sent` or a
    /// status a receipt set. The statuses receipts do not reach (queued, sending, failed) are 0:
    /// a receipt for a notification in one of them is kept in its history only.
    pub const fn receipt_rank(self) -> u8 {
        match self {
            DeliveryStatus::Queued
            | DeliveryStatus::Sending
            | DeliveryStatus::Failed
            | DeliveryStatus::Suppressed => 0,
            DeliveryStatus::Sent => 1,
            DeliveryStatus::Undelivered | DeliveryStatus::Bounced => 2,
            DeliveryStatus::Delivered => 3,
            DeliveryStatus::Read => 4,
            DeliveryStatus::Complained => 5,
        }
    }

    /// Whether a receipt saying `receipt` moves a notification now in `self` to it.
    pub const fn is_moved_up_by(self, receipt: DeliveryStatus) -> bool {
        self.receipt_rank() > 0 && receipt.receipt_rank() > self.receipt_rank()
    }
}

wire_enum! {
    /// Who sent a receipt.
    pub enum ReceiptProvider {
        Twilio = "twilio",
        Whatsapp = "whatsapp",
        /// A delivery status or feedback report to the bounce listener.
        Email = "email",
    }
}

/// One receipt in an item's history (CONTRACT §8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReceiptOut {
    pub provider: ReceiptProvider,
    /// The provider's own word (`delivered`, `undelivered`, a DSN's `Action`, `abuse`…).
    pub provider_status: String,
    /// What it means in Herald's status model (a receipt that changes nothing, such as a
    /// delayed DSN, says `sent`).
    pub status: DeliveryStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// The provider's text, with the recipient masked out of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub received_at: Timestamp,
}

wire_enum! {
    /// What one delivery attempt came to.
    pub enum AttemptOutcome {
        /// The provider or SMTP server accepted the message.
        Sent = "sent",
        /// Put in the user's inbox (in_app).
        Delivered = "delivered",
        /// Failed in a way worth retrying (a timeout, a 4xx SMTP reply, a provider outage).
        TransientFailure = "transient_failure",
        /// Failed in a way retrying would not fix (a rejected recipient, an invalid number).
        PermanentFailure = "permanent_failure",
        /// Not tried: the recipient is on the suppression list (`error` says why).
        Suppressed = "suppressed",
    }
}

impl AttemptOutcome {
    pub fn is_failure(self) -> bool {
        matches!(self, AttemptOutcome::TransientFailure | AttemptOutcome::PermanentFailure)
    }
}

wire_enum! {
    /// The `status` of a dispatch response: always `accepted`.
    pub enum Accepted {
        Accepted = "accepted",
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
    /// Plain-text body. Required unless the template supplies it; with a template that has a
    /// body, the template's wins (this is then only a fallback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// HTML body (email only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html_body: Option<String>,
    /// A stored template: the parts it defines (subject, body, html_body) replace the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<TemplateId>,
    /// Values for the template's placeholders.
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
    /// What kind of message this is (`[a-z0-9_.-]{1,64}`, e.g. `marketing`, `digest.weekly`):
    /// a recipient can unsubscribe from a category. None (in_app: `data.category` when this is
    /// absent) means transactional: no unsubscribe link (CONTRACT §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub category: Option<String>,
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
            category: None,
        }
    }
}

/// Spec §2.2.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NotificationAccepted {
    pub status: Accepted,
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
    pub outcome: AttemptOutcome,
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
    /// The providers' receipts, oldest first.
    #[serde(default)]
    pub receipts: Vec<ReceiptOut>,
}
