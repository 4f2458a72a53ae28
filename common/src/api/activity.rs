//! The activity feed (`/api/v1/activity`): every notification and OTP transaction of a tenant,
//! with recipients masked.

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    api::notifications::{AttemptOut, Channel},
    ids::ApplicationId,
};

/// Spec §2.8.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ActivityItem {
    /// `notif_…` or `otp_…`.
    pub transaction_id: String,
    pub application_id: ApplicationId,
    pub application_name: String,
    pub channel: Channel,
    pub recipient_masked: String,
    /// Notifications: `queued`, `sending`, `sent`, `delivered`, `failed`. OTP: `sent`,
    /// `verified`, `expired`, `tombstoned`, `failed`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub created_at: Timestamp,
    pub retryable: bool,
    pub retry_count: u32,
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
    /// Wrong codes submitted (OTP only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_verifications: Option<u32>,
}

/// Spec §2.10.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetryQueued {
    /// Always `retry_queued`.
    pub status: String,
    pub transaction_id: String,
    pub queued_at: Timestamp,
}

/// `POST /api/v1/activity/retry`: retry every failed, retryable notification that matches.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRetryIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<String>,
    /// Created at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    /// Created before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkRetryOut {
    /// Always `retry_queued`.
    pub status: String,
    /// Notifications queued again (at most 1,000 per call; call again for more).
    pub count: u64,
    pub queued_at: Timestamp,
}
