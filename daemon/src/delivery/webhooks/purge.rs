//! Purges removed endpoints ([`crate::store::Store::purge_removed_webhook_endpoint`]). A removal
//! (`DELETE /api/v1/webhooks/{id}`) only marks the endpoint, in one short write, and wakes this
//! task; here its messages and their attempts are deleted a group at a time, each group a write
//! of its own, then the endpoint's row. The removals of a stopped daemon, or of another daemon
//! sharing PostgreSQL, are found by looking every [`LOOK_EVERY`]; two daemons purging one endpoint
//! pass each other's rows by.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{state::AppState, store::ENDPOINT_REMOVAL_GROUP};

/// How often it looks for removed endpoints when not woken (a read of the endpoints' table).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Purges removed endpoints until `shutdown`: group after group while one is left, then when
/// woken by a removal or every [`LOOK_EVERY`].
pub async fn run_purge(state: AppState, shutdown: CancellationToken) {
    // At once when the daemon starts: what a stopped daemon left.
    let mut pause = Duration::ZERO;
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = state.webhook_purge.notified() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        pause = match state.store.purge_removed_webhook_endpoint(ENDPOINT_REMOVAL_GROUP).await {
            Ok(Some(purged)) => {
                metrics::counter!("herald_webhook_messages_purged_total").increment(purged.messages);
                if purged.endpoint {
                    tracing::debug!("a removed webhook endpoint was purged");
                }
                Duration::ZERO
            }
            Ok(None) => LOOK_EVERY,
            Err(e) => {
                tracing::warn!(error = %e, "cannot purge a removed webhook endpoint");
                LOOK_EVERY
            }
        };
    }
}
