//! The activity feed (`/api/v1/activity`): every notification and OTP transaction of a tenant,
//! with recipients masked.

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    api::notifications::{AttemptOut, Channel, DeliveryStatus},
    api::otp::OtpStatus,
    ids::{ApplicationId, TransactionId},
    wire::wire_enum,
};

wire_enum! {
    /// The status of an activity item: a notification's delivery status, or an OTP
    /// transaction's status.
    pub enum ActivityStatus {
        /// Notification: accepted, waiting for a worker (or for its next attempt).
        Queued = "queued",
        /// Notification: being handed to the provider.
        Sending = "sending",
        /// Notification: accepted by the provider. OTP: the code was delivered and can be verified.
        Sent = "sent",
        /// Notification: the provider confirms it arrived (a receipt); in_app: in the user's inbox.
        Delivered = "delivered",
        /// Notification: read (a WhatsApp read receipt).
        Read = "read",
        /// Notification: the provider could not deliver it after accepting it.
        Undelivered = "undelivered",
        /// Notification: the email bounced.
        Bounced = "bounced",
        /// Notification: the recipient marked the email as spam.
        Complained = "complained",
        /// Notification: given up (`failure_reason` says why). OTP: the provider refused the code.
        Failed = "failed",
        /// OTP: the right code was submitted.
        Verified = "verified",
        /// OTP: its time ran out before it was verified.
        Expired = "expired",
        /// OTP: five wrong codes; blocked for good.
        Tombstoned = "tombstoned",
        /// Notification: not sent, the recipient is on the suppression list.
        Suppressed = "suppressed",
    }
}

impl ActivityStatus {
    /// The statuses a retry applies to, when the item is `retryable`: Herald gave up
    /// (`failed`), or a receipt said it did not arrive (`undelivered`, `bounced`).
    pub const RETRIED: [ActivityStatus; 3] =
        [ActivityStatus::Failed, ActivityStatus::Undelivered, ActivityStatus::Bounced];

    /// A final state: nothing more will happen to the item unless it is retried.
    pub fn is_final(self) -> bool {
        !matches!(self, ActivityStatus::Queued | ActivityStatus::Sending)
    }
}

impl From<DeliveryStatus> for ActivityStatus {
    fn from(status: DeliveryStatus) -> Self {
        match status {
            DeliveryStatus::Queued => ActivityStatus::Queued,
            DeliveryStatus::Sending => ActivityStatus::Sending,
            DeliveryStatus::Sent => ActivityStatus::Sent,
            DeliveryStatus::Delivered => ActivityStatus::Delivered,
            DeliveryStatus::Read => ActivityStatus::Read,
            DeliveryStatus::Undelivered => ActivityStatus::Undelivered,
            DeliveryStatus::Bounced => ActivityStatus::Bounced,
            DeliveryStatus::Complained => ActivityStatus::Complained,
            DeliveryStatus::Failed => ActivityStatus::Failed,
            DeliveryStatus::Suppressed => ActivityStatus::Suppressed,
        }
    }
}

impl From<OtpStatus> for ActivityStatus {
    fn from(status: OtpStatus) -> Self {
        match status {
            OtpStatus::Sent => ActivityStatus::Sent,
            OtpStatus::Verified => ActivityStatus::Verified,
            OtpStatus::Expired => ActivityStatus::Expired,
            OtpStatus::Tombstoned => ActivityStatus::Tombstoned,
            OtpStatus::Failed => ActivityStatus::Failed,
        }
    }
}

wire_enum! {
    /// The `status` of a retry response: always `retry_queued`.
    pub enum RetryStatus {
        RetryQueued = "retry_queued",
    }
}

/// Spec §2.8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityItem {
    /// `notif_…` or `otp_…`.
    pub transaction_id: TransactionId,
    pub application_id: ApplicationId,
    pub application_name: String,
    pub channel: Channel,
    pub recipient_masked: String,
    /// Notifications: `queued`, `sending`, `sent`, `delivered`, `read`, `undelivered`,
    /// `bounced`, `complained`, `failed`, `suppressed`. OTP: `sent`, `verified`, `expired`, `tombstoned`,
    /// `failed`.
    pub status: ActivityStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub created_at: Timestamp,
    pub retryable: bool,
    pub retry_count: u32,
    /// The notification's category (CONTRACT §9); absent for transactional ones and OTPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
}

/// Spec §2.9.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityList {
    pub total_count: u64,
    pub page: u32,
    pub limit: u32,
    pub items: Vec<ActivityItem>,
}

/// `GET /api/v1/activity/{id}`: the item and what happened to it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityDetail {
    #[serde(flatten)]
    pub item: ActivityItem,
    pub updated_at: Timestamp,
    /// Delivery attempts (notifications), or the send (OTP).
    pub attempts: Vec<AttemptOut>,
    /// The providers' receipts, oldest first (notifications).
    #[serde(default)]
    pub receipts: Vec<crate::api::notifications::ReceiptOut>,
    /// Wrong codes submitted (OTP only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_verifications: Option<u32>,
}

/// Spec §2.10.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryQueued {
    pub status: RetryStatus,
    pub transaction_id: TransactionId,
    pub queued_at: Timestamp,
}

/// `POST /api/v1/activity/retry`: retry every failed, retryable notification that matches.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRetryIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<ApplicationId>,
    /// Created at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    /// Created before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkRetryOut {
    pub status: RetryStatus,
    /// Notifications queued again (at most 1,000 per call; call again for more).
    pub count: u64,
    pub queued_at: Timestamp,
}

impl BulkRetryOut {
    /// The most notifications one call queues: a `count` this high means there may be more.
    pub const MAX_PER_CALL: u64 = 1_000;
}
