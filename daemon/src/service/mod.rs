//! Domain logic shared by the API handlers and the background tasks.
//!
//! Each area answers with its own error ([`notifications::DispatchError`], [`otp::OtpError`],
//! [`domains::DomainError`], [`idempotent_replay::ReplayError`], [`receipts::ReceiptError`], [`suppressions::SuppressionError`], and [`InvalidFields`] for bad
//! input everywhere), saying what went wrong in the area's terms; none of them knows HTTP.
//! `crate::error` is the one place they become problem responses.

pub mod domains;
pub mod idempotent_replay;
pub mod notifications;
pub mod otp;
pub mod receipts;
pub mod suppressions;
pub mod templates;
pub mod unsubscribe;
pub mod validate;
pub mod webhooks;

use std::time::Duration;

use herald_common::FieldError;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Fields of a request that are not valid, each with what is wrong with it: every area's
/// answer to bad input, reported all at once where the area can find them all.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid fields: {}", field_names(.0))]
pub struct InvalidFields(pub Vec<FieldError>);

impl InvalidFields {
    /// One invalid field.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self(vec![FieldError::new(field, message)])
    }
}

fn field_names(errors: &[FieldError]) -> String {
    errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>().join(", ")
}

/// Periodic upkeep, every ten minutes: activity counters that reached zero, expired idempotency
/// keys, OTP failure records older than the longest limit window, the open-stream records of
/// daemons that stopped without saying so, and webhook messages settled more than
/// [`webhooks::RETENTION`] ago (with the events no message needs any more) are deleted.
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
        let settled = state.clock.now_millis() - webhooks::RETENTION.as_millis() as i64;
        match state.store.delete_settled_webhook_messages(settled, webhooks::RETENTION_CHUNK).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(messages = n, "deleted settled webhook messages"),
            Err(e) => tracing::warn!(error = %e, "cannot delete settled webhook messages"),
        }
    }
}
