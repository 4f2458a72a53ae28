//! `GET /api/v1/whoami`: what the presented credential is and may do.

use serde::{Deserialize, Serialize};

use crate::{
    Scope,
    ids::{ApplicationId, KeyId, TenantId},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    ApiKey,
    Operator,
    User,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoamiOut {
    pub kind: CredentialKind,
    pub tenant_id: TenantId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<ApplicationId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<KeyId>,
    /// The operator's or end user's subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub scopes: Vec<Scope>,
}
