//! The suppression list (`/api/v1/suppressions`, CONTRACT §9): recipients a tenant does not send
//! to on a channel, for every category or one.

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    api::notifications::Channel,
    ids::{SuppressionId, TransactionId},
    wire::wire_enum,
};

wire_enum! {
    /// Why a recipient is suppressed.
    pub enum SuppressionReason {
        /// The address does not exist: a `5.x.x` bounce, or the relay refused it with a 5xx.
        HardBounce = "hard_bounce",
        /// The recipient marked a message as spam (a feedback report).
        Complaint = "complaint",
        /// The recipient left one category with the one-click link (always with a category).
        Unsubscribe = "unsubscribe",
        /// The recipient texted STOP, or the carrier said so (Twilio error 21610).
        CarrierOptOut = "carrier_opt_out",
        /// An operator added it.
        Manual = "manual",
    }
}

/// One entry of the list. The recipient is shown masked; the raw one is never stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Suppression {
    pub suppression_id: SuppressionId,
    pub channel: Channel,
    pub recipient_masked: String,
    /// The category it stops; `null` stops every category, and transactional sends.
    pub category: Option<String>,
    pub reason: SuppressionReason,
    /// The notification or OTP that caused it, if any.
    pub transaction_id: Option<TransactionId>,
    pub created_at: Timestamp,
}

/// `POST /api/v1/suppressions`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuppressionIn {
    /// `email`, `sms` or `whatsapp`.
    pub channel: Channel,
    /// The raw address or E.164 number; stored only as a keyed hash and masked.
    pub recipient: String,
    /// Stop only this category (`[a-z0-9_.-]{1,64}`); absent: every category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Only `manual` may be given (the others are Herald's own findings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SuppressionReason>,
}

/// `GET /api/v1/suppressions`: one page, newest first.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SuppressionList {
    pub total_count: u64,
    pub page: u32,
    pub limit: u32,
    pub items: Vec<Suppression>,
}

/// The query of `GET /api/v1/suppressions`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SuppressionQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SuppressionReason>,
    /// A raw recipient, matched by its hash (never echoed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// From 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// 1 to 100 (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}
