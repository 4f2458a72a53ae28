//! Domain logic shared by the API handlers and the background tasks.

pub mod domains;
pub mod notifications;
pub mod otp;
pub mod templates;
pub mod validate;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Periodic upkeep, every ten minutes: activity counters that reached zero, expired idempotency
/// keys, OTP failure records older than the longest limit window, and the open-stream records of
/// daemons that stopped without saying so are deleted.
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
        let before = state.clock.now_millis() - otp::FAILURE_RETENTION.as_millis() as i64;
        if let Err(e) = state.store.delete_old_otp_failures(before).await {
            tracing::warn!(error = %e, "cannot delete old OTP failure records");
        }
        if let Err(e) = state.store.prune_activity_counts().await {
            tracing::warn!(error = %e, "cannot prune the activity counters");
        }
        // A lease's length of grace, so a daemon whose renewal is merely late keeps its rows.
        let lapsed = state.clock.now_millis() - crate::stream::DAEMON_LEASE.as_millis() as i64;
        match state.store.delete_lapsed_streams(lapsed).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(streams = n, "deleted the streams of daemons that stopped renewing"),
            Err(e) => tracing::warn!(error = %e, "cannot delete lapsed streams"),
        }
    }
}
