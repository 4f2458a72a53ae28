//! One-time passwords (`/api/v1/otp/send`, `/api/v1/otp/verify`).

use serde::{Deserialize, Serialize};

use crate::{Timestamp, api::notifications::Channel, ids::OtpId, wire::wire_enum};

wire_enum! {
    /// Where an OTP transaction stands (spec §3.1). `expired` is also shown for a `sent`
    /// code whose time ran out, before anyone wrote it down.
    pub enum OtpStatus {
        /// Delivered; waiting for the code.
        Sent = "sent",
        /// The right code was submitted.
        Verified = "verified",
        /// Its time ran out.
        Expired = "expired",
        /// Five wrong codes: blocked for good.
        Tombstoned = "tombstoned",
        /// The provider refused the code; nothing to verify.
        Failed = "failed",
    }
}

wire_enum! {
    /// The `status` of an OTP send response: always `sent`.
    pub enum OtpSent {
        Sent = "sent",
    }
}

wire_enum! {
    /// The `status` of an OTP verify response: always `verified`.
    pub enum OtpVerified {
        Verified = "verified",
    }
}

/// Spec §2.5.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OtpSendIn {
    /// `email` or `sms`.
    pub channel: Channel,
    /// Email address or E.164 phone number.
    pub recipient: String,
    /// Digits of a generated code: 4 or 6 (default 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u32>,
    /// Seconds until the code expires: 30 to 600 (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u32>,
    /// A code of your own (scope `otp:custom_code`): 4 to 16 letters, digits, `-` or `_`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl OtpSendIn {
    pub fn new(channel: Channel, recipient: impl Into<String>) -> Self {
        Self { channel, recipient: recipient.into(), length: None, ttl_seconds: None, code: None }
    }
}

/// Spec §2.6 (the fuller form).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OtpSendOut {
    pub status: OtpSent,
    pub transaction_id: OtpId,
    /// The recipient, masked.
    pub recipient: String,
    pub channel: Channel,
    pub expires_in_seconds: u32,
}

/// Spec §2.7.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OtpVerifyIn {
    pub transaction_id: String,
    pub code: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OtpVerifyOut {
    pub status: OtpVerified,
    pub transaction_id: OtpId,
    pub verified_at: Timestamp,
}
