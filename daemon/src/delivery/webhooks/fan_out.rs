//! SQLite's fan-out task: makes the messages of events that were not fanned out in their own
//! transaction (the writer does that just before each commit; see the store's `fan_out`): those
//! of the transactions of a saturated writer, those of a transaction whose fan-out failed, and
//! at start what a stopped daemon left. It is woken then, lingers [`LINGER`] so that a saturated
//! writer's events make groups, and looks every [`POLL`] besides. (PostgreSQL fans out in the
//! change's statement; this task does not run there.)

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Events fanned out in one transaction. A group costs one statement; a smaller one holds
/// SQLite's writer for less time between two batches of dispatches.
const GROUP: i64 = 256;
/// The longest the fan-out sleeps without looking (events whose wake-up it missed).
const POLL: Duration = Duration::from_secs(1);
/// How long it waits, once woken, before it fans out: while the writer is saturated it is woken
/// by each of its commits, a few milliseconds apart.
const LINGER: Duration = Duration::from_millis(100);
/// How long it waits after the store refused a group.
const BACKOFF: Duration = Duration::from_millis(200);

/// Fans out what is waiting, then waits for new events (or [`POLL`]).
pub async fn run_fan_out(state: AppState, shutdown: CancellationToken) {
    let wake = state.store.webhook_event_wake().clone();
    loop {
        let pause = match state.store.fan_out_webhook_events(GROUP).await {
            // A full group: more may wait.
            Ok(taken) if taken >= GROUP => continue,
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot fan webhook events out");
                Some(BACKOFF)
            }
        };
        let woken = tokio::select! {
            _ = wake.notified(), if pause.is_none() => true,
            _ = tokio::time::sleep(pause.unwrap_or(POLL)) => false,
            _ = shutdown.cancelled() => break,
        };
        if woken {
            tokio::select! {
                _ = tokio::time::sleep(LINGER) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
}
