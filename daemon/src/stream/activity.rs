//! The operators' live feed: `activity.created` and `activity.updated` for every item of the
//! tenant as it appears or changes (masked, as in the feed), with heartbeats and
//! `Last-Event-ID` replay.
//!
//! It polls the database twice a second instead of being woken: operator feeds are few, a
//! dashboard does not need millisecond latency, and the shared database makes it work across
//! daemons without any notification plumbing on the hot write paths. An event's id is
//! `<updated_at ms>-<transaction id>`. Live reads look back [`REORDER_WINDOW_MS`] and skip what
//! was already sent, so a change that commits out of time order (several PostgreSQL writers) is
//! not missed; a reconnect resumes strictly after its `Last-Event-ID`.

use std::{
    collections::{HashSet, VecDeque},
    convert::Infallible,
    time::Duration,
};

use axum::response::sse::Event;
use futures_util::Stream;
use herald_common::{
    Timestamp,
    stream::{HEARTBEAT, Heartbeat},
};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use crate::{clock::Clock, store::Store};

pub const ACTIVITY_CREATED: &str = "activity.created";
pub const ACTIVITY_UPDATED: &str = "activity.updated";
const POLL: Duration = Duration::from_millis(500);
pub const REORDER_WINDOW_MS: i64 = 2_000;
const BATCH: i64 = 500;

pub struct ActivityStream {
    store: Store,
    clock: std::sync::Arc<Clock>,
    tenant_id: String,
    /// The last event sent: (updated_at, transaction id).
    cursor: (i64, String),
    /// Events sent within the reorder window.
    sent: HashSet<(i64, String)>,
    pending: VecDeque<Event>,
    poll: Interval,
    heartbeat: Interval,
    shutdown: CancellationToken,
    finished: bool,
}

/// Parses `<ms>-<transaction id>`.
pub fn parse_event_id(text: &str) -> Option<(i64, String)> {
    let (ms, id) = text.trim().split_once('-')?;
    Some((ms.parse().ok()?, id.to_owned()))
}

impl ActivityStream {
    pub fn new(
        store: Store,
        clock: std::sync::Arc<Clock>,
        tenant_id: String,
        last_event_id: Option<(i64, String)>,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let now = clock.now_millis();
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ready = Event::default()
            .event(herald_common::stream::CONNECTION_READY)
            .json_data(serde_json::json!({"connection_id": herald_common::ids::ConnectionId::new()}))
            .unwrap_or_default();
        Self {
            store,
            clock,
            tenant_id,
            // Without Last-Event-ID: changes from now on.
            cursor: last_event_id.unwrap_or((now, String::new())),
            sent: HashSet::new(),
            pending: VecDeque::from([ready]),
            poll,
            heartbeat,
            shutdown,
            finished: false,
        }
    }

    async fn read_changes(&mut self) {
        let since = self.cursor.0 - REORDER_WINDOW_MS;
        let rows =
            match self.store.activity_changes(&self.tenant_id, since, self.clock.now_millis(), BATCH).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read activity changes; closing the stream");
                    self.finished = true;
                    return;
                }
            };
        let resume = self.cursor.clone();
        for row in rows {
            let key = (row.updated_at, row.transaction_id.clone());
            // Never twice; and on a fresh connection nothing at or before the cursor.
            if self.sent.contains(&key) || (self.sent.is_empty() && key <= resume) {
                continue;
            }
            let name = if row.created_at == row.updated_at { ACTIVITY_CREATED } else { ACTIVITY_UPDATED };
            let id = format!("{}-{}", row.updated_at, row.transaction_id);
            if let Ok(item) = crate::api::activity_item(row) {
                let event = Event::default().event(name).id(id).json_data(&item).unwrap_or_default();
                self.pending.push_back(event);
            }
            if key > self.cursor {
                self.cursor = key.clone();
            }
            self.sent.insert(key);
        }
        let horizon = self.cursor.0 - REORDER_WINDOW_MS;
        self.sent.retain(|(at, _)| *at >= horizon);
    }

    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => self.finished = true,
                _ = self.poll.tick() => self.read_changes().await,
                _ = self.heartbeat.tick() => {
                    let beat = Heartbeat { time: Timestamp::now() };
                    self.pending.push_back(Event::default().event(HEARTBEAT).json_data(&beat).unwrap_or_default());
                }
            }
        }
    }

    pub fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        futures_util::stream::unfold(self, |mut stream| async move {
            let event = stream.next_event().await?;
            Some((Ok(event), stream))
        })
    }
}
