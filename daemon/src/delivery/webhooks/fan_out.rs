//! The fan-out task: makes the messages of events (the store's `fan_out`). On PostgreSQL it is
//! the only fan-out, one daemon at a time; on SQLite it makes those that were not made in their
//! own transaction: a saturated writer's, those of a transaction whose fan-out failed, and at
//! start what a stopped daemon left. It is woken when events commit, and looks every [`POLL`]
//! besides.
//!
//! While the store's writer is saturated ([`Pressure`]) it holds back, as the dispatcher holds
//! the deliveries back, for at most [`super::pressure::HOLD_AT_MOST_MS`] since the oldest event it left that
//! an endpoint wants (it looks every [`LOOK_WHILE_HELD`], with a group of one): in a
//! burst of dispatches the messages' rows would share the two cores with the dispatches (on
//! PostgreSQL, made in the change's statement, they cost a saturated in-app dispatch 15–25 %
//! with one endpoint subscribed); they are made once the burst is over, in groups.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{LINGER_BUSY, Pressure, millis};
use crate::{state::AppState, store::Engine};

/// Events fanned out in one transaction on SQLite: a group costs one statement; a smaller one
/// holds the one writer for less time between two batches of dispatches.
const GROUP_SQLITE: i64 = 256;
/// Events fanned out in one transaction on PostgreSQL (while their messages are made the
/// cursor's row is held, which no writer waits for).
const GROUP_POSTGRES: i64 = 1_000;
/// The longest the fan-out sleeps without looking (events whose wake-up it missed).
const POLL: Duration = Duration::from_secs(1);
/// How long it waits, once woken, before it fans out: SQLite's task only takes what a saturated
/// writer left, woken by each of its commits a few milliseconds apart; on PostgreSQL it takes
/// every event, and waits little (the first attempt waits for it).
const LINGER_SQLITE: Duration = Duration::from_millis(100);
const LINGER_POSTGRES: Duration = Duration::from_millis(5);
/// While it is held back, how often it looks whether any of the events it was woken for is one
/// an endpoint wants (the hold-back's bound counts from the first that is, not from the first
/// wake-up): one tenant's burst of events no endpoint wants, then another's that one does, was
/// held back for what was left of the bound once the first had used it up.
const LOOK_WHILE_HELD: Duration = Duration::from_secs(1);
/// How long it waits when another transaction held the cursor (PostgreSQL).
const TRY_AGAIN: Duration = Duration::from_millis(5);
/// How long it waits after the store refused a group.
const BACKOFF: Duration = Duration::from_millis(200);

/// Fans out what is waiting, then waits for new events (or [`POLL`]).
pub async fn run_fan_out(state: AppState, shutdown: CancellationToken) {
    let postgres = state.store.engine() == Engine::Postgres;
    let (group, linger) =
        if postgres { (GROUP_POSTGRES, LINGER_POSTGRES) } else { (GROUP_SQLITE, LINGER_SQLITE) };
    let wake = state.store.webhook_event_wake().clone();
    let mut pressure = Pressure::new(state.store.engine());
    let mut waiting = Waiting { since: Some(state.clock.now_millis()), looked: state.clock.now_millis() };
    loop {
        let now = state.clock.now_millis();
        let pause = if waiting.since.is_some_and(|since| pressure.holds(Some(since), now)) {
            tracing::debug!(waited_ms = now - waiting.since.unwrap_or(now), "fan-out held back");
            if waiting.look_due(now) {
                let taken = state.store.fan_out_webhook_events(1).await.ok().flatten();
                waiting.looked(now, taken);
            }
            Some(LINGER_BUSY)
        } else {
            let started = std::time::Instant::now();
            let fanned = state.store.fan_out_webhook_events(group).await;
            tracing::debug!(?fanned, took_us = started.elapsed().as_micros() as u64, "fan-out");
            match fanned {
                // A full group: more may wait.
                Ok(Some(taken)) if taken >= group => continue,
                // Every event committed is fanned out, up to (PostgreSQL) those of writers still
                // in flight: each one's commit wakes the task again.
                Ok(Some(_)) => {
                    waiting.since = None;
                    None
                }
                // Another transaction held the cursor (another daemon's fan-out, which may have
                // read how far it could go before the events this task was woken for committed;
                // a pause, a catch-up, a settling).
                Ok(None) => Some(TRY_AGAIN),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fan webhook events out");
                    Some(BACKOFF)
                }
            }
        };
        let woken = tokio::select! {
            _ = wake.notified(), if pause.is_none() => true,
            _ = tokio::time::sleep(pause.unwrap_or(POLL)) => pause.is_some(),
            _ = shutdown.cancelled() => break,
        };
        if woken && pause.is_none() {
            let now = state.clock.now_millis();
            waiting.since.get_or_insert(now);
            // SQLite's task lingers for a group only while the writer is saturated: otherwise
            // what woke it is a slow commit's large batch (its events left to the task), and
            // their first attempts would wait for the linger (100-170 ms at a steady load's
            // start after a pause: docs/PERFORMANCE.md, thirty-fifth session). PostgreSQL's is
            // woken by every commit of events and lingers 5 ms to take them together.
            if postgres || pressure.holds(None, now) {
                tokio::select! {
                    _ = tokio::time::sleep(linger) => {}
                    _ = shutdown.cancelled() => break,
                }
            }
        } else if !woken {
            // The poll: events whose wake-up was missed (another daemon's, a lost notification).
            waiting.since.get_or_insert(state.clock.now_millis());
        }
    }
}

/// Since when events have waited for the task (it was woken, or left a full group), which bounds
/// how long it holds back; and when it last looked, while held back, whether one waits that an
/// endpoint wants.
struct Waiting {
    since: Option<i64>,
    looked: i64,
}

impl Waiting {
    /// Whether to look now (ms): [`LOOK_WHILE_HELD`] after the last look.
    fn look_due(&self, now: i64) -> bool {
        now - self.looked >= millis(LOOK_WHILE_HELD)
    }

    /// A look begun at `at` (a fan-out of a group of one, which passes every event no endpoint
    /// wants and takes one that one does) took `taken`: none, and whatever waits now was written
    /// after `at`, so the bound counts from there.
    fn looked(&mut self, at: i64, taken: Option<i64>) {
        self.looked = at;
        if taken == Some(0) {
            self.since = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{super::pressure::HOLD_AT_MOST_MS, Pressure, Waiting};

    /// Woken by events no endpoint wants (another tenant's burst), held back; a look finds none
    /// an endpoint wants, so the bound counts from that look, and goes on counting from it once
    /// a look finds one (written since).
    #[test]
    fn the_hold_back_counts_from_the_events_an_endpoint_wants() {
        let mut saturated = Pressure::with(true);
        let mut waiting = Waiting { since: Some(0), looked: 0 };
        assert!(!waiting.look_due(999));
        assert!(waiting.look_due(1_000));
        waiting.looked(1_000, Some(0));
        assert_eq!(waiting.since, Some(1_000));
        assert!(!waiting.look_due(1_999));
        waiting.looked(2_000, Some(1));
        assert_eq!(waiting.since, Some(1_000), "one waits: the bound goes on from the look before");
        waiting.looked(3_000, None);
        assert_eq!(waiting.since, Some(1_000), "the cursor was held: nothing learnt");
        assert!(saturated.holds(waiting.since, HOLD_AT_MOST_MS), "held past the first wake-up's bound");
        assert!(!saturated.holds(waiting.since, 1_000 + HOLD_AT_MOST_MS), "but not past its own");
    }
}
