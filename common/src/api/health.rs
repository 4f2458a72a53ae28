//! Liveness and readiness.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthOut {
    /// `ok` when healthy; `unavailable` when a dependency is not reachable.
    pub status: String,
    /// The storage engine: `sqlite` or `postgres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}
