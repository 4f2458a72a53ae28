//! Liveness and readiness.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::wire::wire_enum;

wire_enum! {
    /// `ok` when healthy.
    pub enum HealthStatus {
        Ok = "ok",
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthOut {
    pub status: HealthStatus,
    /// `/readyz`: the storage engine, `sqlite` or `postgres`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// `/readyz`: the daemon's background tasks (delivery workers, housekeeping, …) by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<String, TaskStatus>,
}

wire_enum! {
    /// Where a background task stands.
    pub enum TaskState {
        Running = "running",
        /// It died and starts again after a backoff.
        Restarting = "restarting",
        /// It kept dying and was given up on; the daemon is stopping.
        Failed = "failed",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskStatus {
    pub state: TaskState,
    /// Times it died and was started again.
    pub restarts: u64,
}
