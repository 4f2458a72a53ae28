//! PostgreSQL's outbox statistics, kept as fresh as the outbox: every [`LOOK_EVERY`] the task asks
//! the server how many of `webhook_messages`' rows were written since they were last gathered,
//! and once they are [`CHANGED`] and a [`SHARE_OF_ROWS`] of the table, gathers them again (the
//! store's `refresh_webhook_statistics` says why: a burst to an endpoint the statistics do not
//! know was planned as one message). The server's own counters decide, so daemons sharing a
//! database do not analyze it once each (they lag by up to a second: a busy backend reports its
//! counts at most once a second).
//! An `ANALYZE` reads a bounded sample; after one, the task waits [`SHARE`] times as long as
//! it took, and at least [`AFTER_ANALYZE`], so it never takes more than a small share of the
//! server. (SQLite plans from its own heuristics: the task does not run there.)

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// How often the server's count of changed rows is read (a cheap read of its statistics).
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The least wait after an `ANALYZE` before the next look.
const AFTER_ANALYZE: Duration = Duration::from_secs(1);
/// Rows written since the statistics were gathered that make them stale: a second of a modest
/// burst, against the tens of thousands autovacuum would wait for on a large outbox.
const CHANGED: i64 = 1_000;
/// And at least this share of the rows the statistics counted: a large outbox's statistics
/// stay good for longer, and a steady load does not gather them every second (an `ANALYZE` of
/// 200,000 messages took 80 ms here; at 1,000 deliveries a second, 3,000 rows change a second).
const SHARE_OF_ROWS: f64 = 0.05;
/// After an `ANALYZE`, the task waits this many times its duration: at most a fiftieth of the
/// time goes to gathering statistics.
const SHARE: u32 = 50;

/// Refreshes the outbox's statistics whenever enough of it changed, until `shutdown`.
pub async fn run_statistics(state: AppState, shutdown: CancellationToken) {
    let mut pause = LOOK_EVERY;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => break,
        }
        let started = Instant::now();
        pause = match state.store.refresh_webhook_statistics(CHANGED, SHARE_OF_ROWS).await {
            Ok(true) => AFTER_ANALYZE.max(started.elapsed() * SHARE),
            Ok(false) => LOOK_EVERY,
            Err(e) => {
                tracing::warn!(error = %e, "cannot refresh the webhook outbox's statistics");
                AFTER_ANALYZE * 10
            }
        };
    }
}
