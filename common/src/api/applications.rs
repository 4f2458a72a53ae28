//! Applications of a tenant.

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    ids::{ApplicationId, TenantId},
};

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApplicationOut {
    pub application_id: ApplicationId,
    pub tenant_id: TenantId,
    pub name: String,
    pub created_at: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApplicationListOut {
    pub applications: Vec<ApplicationOut>,
}
