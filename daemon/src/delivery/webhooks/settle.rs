//! PostgreSQL: settles the endpoints disabled since it last looked
//! ([`crate::store::Store::settle_disabled_webhook_endpoints`]). Disabling an endpoint (`410`, 5
//! days of failure, an operator) fails its pending messages and owed events in the writer's
//! transaction, which cannot see the events of the transactions still in flight; this task
//! finishes the work with the fan-out lock held, so those events become failed messages too
//! (`recover` finds them) and no pending message is left to an endpoint no one sends to. A crash
//! in between leaves the endpoint marked, and the next daemon to look settles it. (SQLite has
//! one writer, which sees every event: the task does not run there.)

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{LOCK_PATIENCE, millis};
use crate::{state::AppState, store::FanOutLock};

/// How often it looks (a read of the endpoints' table): a disabled endpoint's last events reach
/// its `deliveries` within about this long.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Settles disabled endpoints every [`LOOK_EVERY`] until `shutdown`: it only tries the lock (no
/// event writer waits for it) until it has gone without it for [`LOCK_PATIENCE`], then waits.
pub async fn run_settle(state: AppState, shutdown: CancellationToken) {
    let mut busy_since: Option<i64> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = shutdown.cancelled() => break,
        }
        let now = state.clock.now_millis();
        let lock = match busy_since {
            Some(since) if now - since >= millis(LOCK_PATIENCE) => FanOutLock::Wait,
            _ => FanOutLock::Try,
        };
        busy_since = match state.store.settle_disabled_webhook_endpoints(now, lock).await {
            Ok(Some(_)) => None,
            Ok(None) => busy_since.or(Some(now)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot settle the disabled webhook endpoints");
                None
            }
        };
    }
}
