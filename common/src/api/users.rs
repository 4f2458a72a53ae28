//! End-user tokens (`POST /api/v1/users/{user_id}/token`).

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    ids::{ApplicationId, TenantId, UserId},
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
    pub user_id: UserId,
}

/// `GET /api/v1/users/me`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CurrentUserOut {
    pub user_id: UserId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub expires_at: Timestamp,
}
