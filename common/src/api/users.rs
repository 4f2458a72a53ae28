//! End-user tokens (`POST /api/v1/users/{user_id}/token`).

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    ids::{ApplicationId, TenantId},
};

#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserTokenIn {
    /// Lifetime of the token, 60..=86400 seconds. Default 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UserTokenOut {
    /// An HS256 JWT for the inbox and stream endpoints of this user.
    pub token: String,
    pub expires_at: Timestamp,
    pub user_id: String,
}

/// `GET /api/v1/users/me`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CurrentUserOut {
    pub user_id: String,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub expires_at: Timestamp,
}

/// The rules for a user id (the `recipient` of an `in_app` notification): 1 to 128 characters
/// of letters, digits and `-_.@:+`.
pub fn validate_user_id(user_id: &str) -> Result<(), &'static str> {
    if user_id.is_empty() || user_id.len() > 128 {
        return Err("must be 1 to 128 characters");
    }
    if !user_id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@:+".contains(&b)) {
        return Err("may contain only letters, digits and - _ . @ : +");
    }
    Ok(())
}
