//! What `heraldd admin … --json` prints: exactly one of these objects (CONTRACT §3).

use serde::{Deserialize, Serialize};

use crate::{
    Scope,
    ids::{ApplicationId, KeyId, TenantId},
};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TenantCreated {
    pub tenant_id: TenantId,
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApplicationCreated {
    pub application_id: ApplicationId,
    pub tenant_id: TenantId,
    pub name: String,
    /// HS256 secret with which the integrator may mint end-user tokens offline.
    pub signing_secret: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyCreated {
    pub key_id: KeyId,
    /// The secret, shown this once: only its hash is stored.
    pub api_key: String,
    pub scopes: Vec<Scope>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyRevoked {
    pub key_id: KeyId,
    pub revoked: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bootstrapped {
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub api_key: String,
    pub key_id: KeyId,
    pub signing_secret: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApplicationSecret {
    pub application_id: ApplicationId,
    pub signing_secret: String,
    pub rotated: bool,
}
