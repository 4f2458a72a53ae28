//! Settles the disabled endpoints ([`crate::store::Store::settle_disabled_webhook_endpoints`]).
//! Disabling an endpoint (`410`, 5 days of failure, an operator) fails its pending messages in
//! the writer's transaction and marks it: the events it is owed (five days of them, if it failed
//! that long), and those the fan-out has not reached yet (on PostgreSQL those of the
//! transactions still in flight too, which that transaction cannot see), become failed messages
//! here (`recover` finds them), a group of event ids at a time, with PostgreSQL's fan-out cursor
//! locked for each group. A crash in between leaves
//! the mark, and the next daemon to look goes on from it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{LOCK_PATIENCE, millis};
use crate::{state::AppState, store::FanOutLock};

/// How often it looks (a read of the endpoints' table): a disabled endpoint's last events reach
/// its `deliveries` within about this long.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Events per group, about: a group's statement reads about this many events and makes a failed
/// message for each the endpoint wants (on PostgreSQL 1,000 took 11 ms, 10,000 took 46 ms, with
/// every event writer waiting behind the lock).
const RANGE: i64 = 2_000;
/// Between two groups of the same endpoints: the event writers go first (the lock is held about
/// a fifth of the time while an endpoint owed millions of events is settled: 43 million, five
/// days at 100 a second, take about 25 minutes).
const BETWEEN_GROUPS: Duration = Duration::from_millis(50);

/// Settles disabled endpoints until `shutdown`: every [`LOOK_EVERY`], and group after group
/// while some are left. It only tries the lock (no event writer waits for it) until it has gone
/// without it for [`LOCK_PATIENCE`], then waits.
pub async fn run_settle(state: AppState, shutdown: CancellationToken) {
    let mut busy_since: Option<i64> = None;
    let mut pause = LOOK_EVERY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => break,
        }
        let now = state.clock.now_millis();
        let lock = match busy_since {
            Some(since) if now - since >= millis(LOCK_PATIENCE) => FanOutLock::Wait,
            _ => FanOutLock::Try,
        };
        (busy_since, pause) = match state.store.settle_disabled_webhook_endpoints(now, RANGE, lock).await {
            Ok(Some((_, 0))) => (None, LOOK_EVERY),
            Ok(Some(_)) => (None, BETWEEN_GROUPS),
            Ok(None) => (busy_since.or(Some(now)), LOOK_EVERY.min(BETWEEN_GROUPS * 10)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot settle the disabled webhook endpoints");
                (None, LOOK_EVERY)
            }
        };
    }
}
