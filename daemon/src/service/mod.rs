//! Domain logic shared by the API handlers and the background tasks.

pub mod notifications;
pub mod templates;
pub mod validate;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Periodic upkeep: expired idempotency keys are deleted every ten minutes.
pub async fn housekeeping(state: AppState, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        match state.store.delete_expired_idempotency_keys().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(keys = n, "deleted expired idempotency keys"),
            Err(e) => tracing::warn!(error = %e, "cannot delete expired idempotency keys"),
        }
    }
}
