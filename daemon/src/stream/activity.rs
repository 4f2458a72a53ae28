//! The operators' live feed: `activity.created` and `activity.updated` for every item of the
//! tenant as it appears or changes (masked, as in the feed), with heartbeats and
//! `Last-Event-ID` replay.
//!
//! It reads the database when this daemon commits a change to an activity item (a dispatch, a
//! delivery outcome, a receipt: [`Store::activity_changes_here`]), at most every
//! [`MIN_GAP`], and polls it twice a second besides, which finds the changes other daemons
//! commit (the shared database makes it work across daemons without notification plumbing on
//! the hot write paths, so theirs arrive within the poll). An event's id is
//! `<updated_at ms>-<transaction id>`. A poll reads what comes after the last event sent, then
//! sweeps the last [`REORDER_WINDOW_MS`] for what was not sent yet, so a change that commits out
//! of time order (several PostgreSQL writers) is not missed; a reconnect resumes strictly after
//! its `Last-Event-ID`.

use std::{
    collections::{HashSet, VecDeque},
    convert::Infallible,
    time::Duration,
};

use axum::response::sse::Event;
use futures_util::Stream;
use herald_common::{
    Timestamp,
    ids::{ConnectionId, TenantId, TransactionId},
    stream::{ConnectionReady, Heartbeat, StreamEvent},
};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::sse_event;
use crate::{clock::Clock, store::Store, views};

const POLL: Duration = Duration::from_millis(500);
/// The least time between two reads woken by this daemon's changes: a burst of changes is read
/// in pages, not one read per change.
const MIN_GAP: Duration = Duration::from_millis(10);
/// How far behind its cursor a read woken by this daemon's change looks for late commits.
const WOKEN_LOOKBACK_MS: i64 = 250;
pub const REORDER_WINDOW_MS: i64 = 2_000;
const BATCH: i64 = 500;
const MAX_PAGES_PER_POLL: usize = 20;

/// An event's place in the stream: (updated_at, transaction id).
type EventKey = (i64, String);

pub struct ActivityStream {
    store: Store,
    clock: std::sync::Arc<Clock>,
    tenant_id: TenantId,
    /// The last event sent.
    cursor: EventKey,
    /// Where the stream started: `Last-Event-ID` (the client holds everything up to it) or the
    /// moment it opened. Nothing at or before it is sent, however often the reorder window is
    /// read again.
    start: EventKey,
    /// Events sent within the reorder window.
    sent: HashSet<EventKey>,
    /// How far the pass over the reorder window has got.
    sweep: EventKey,
    pending: VecDeque<Event>,
    poll: Interval,
    /// This daemon's committed changes (`None` once the store closed).
    changes: Option<tokio::sync::watch::Receiver<u64>>,
    last_read: Instant,
    heartbeat: Interval,
    shutdown: CancellationToken,
    finished: bool,
}

/// Parses `<ms>-<transaction id>`.
pub fn parse_event_id(text: &str) -> Option<EventKey> {
    let (ms, id) = text.trim().split_once('-')?;
    let id = TransactionId::parse(id).ok()?;
    Some((ms.parse().ok()?, id.to_string()))
}

/// The event id of a change: `<updated_at ms>-<transaction id>`.
fn event_id((at, id): &EventKey) -> String {
    format!("{at}-{id}")
}

/// Waits for the next change a receiver sees, or for ever when there is none.
async fn changed(receiver: &mut Option<tokio::sync::watch::Receiver<u64>>) -> Result<(), ()> {
    match receiver {
        Some(receiver) => receiver.changed().await.map_err(|_| ()),
        None => std::future::pending().await,
    }
}

impl ActivityStream {
    pub fn new(
        store: Store,
        clock: std::sync::Arc<Clock>,
        tenant_id: TenantId,
        last_event_id: Option<EventKey>,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        // Without Last-Event-ID: changes from now on.
        let start = last_event_id.unwrap_or((clock.now_millis(), String::new()));
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ready =
            ConnectionReady { connection_id: ConnectionId::new(), unread_count: None, last_event_id: None };
        let Ok(ready) = sse_event(&StreamEvent::Ready(ready), None);
        let changes = Some(store.activity_changes_here());
        Self {
            changes,
            last_read: Instant::now(),
            store,
            clock,
            tenant_id,
            cursor: start.clone(),
            start,
            sent: HashSet::new(),
            sweep: (i64::MIN, String::new()),
            pending: VecDeque::from([ready]),
            poll,
            heartbeat,
            shutdown,
            finished: false,
        }
    }

    /// One read: the changes after the cursor, then, on a poll (`sweep`), part of a pass over
    /// the reorder window for changes that committed late. A read woken by this daemon's own
    /// change looks back only [`WOKEN_LOOKBACK_MS`] behind the cursor, where the usual late
    /// commit lands (a request held up for a moment between taking its time and queueing its
    /// write): the whole window, at a thousand changes a second, would be thousands of rows a
    /// hundred times a second. Anything later than that is found by the next poll.
    async fn read_changes(&mut self, sweep: bool) {
        self.last_read = Instant::now();
        let now = self.clock.now_millis();
        // New changes. Each page starts after the last one, so a backlog of any size is worked
        // through, a bounded number of pages per poll.
        for _ in 0..MAX_PAGES_PER_POLL {
            let after = self.cursor.clone();
            let Some((full, _)) = self.read_page(&after, now).await else { return };
            if !full {
                break;
            }
        }
        if !sweep {
            let until = self.cursor.clone();
            let mut after = (until.0 - WOKEN_LOOKBACK_MS, String::new());
            for _ in 0..MAX_PAGES_PER_POLL {
                let Some((full, last)) = self.read_page(&after, now).await else { return };
                match last {
                    Some(last) if full && last < until => after = last,
                    _ => break,
                }
            }
            return;
        }
        // Late commits: a change stamped before the cursor that was not visible when the cursor
        // passed it. The sweep walks the window from where the last poll left it, so a window
        // holding more changes than a poll reads still moves on, and starts again at its bottom
        // once it reaches the cursor.
        let horizon = (self.cursor.0 - REORDER_WINDOW_MS, String::new());
        if self.sweep < horizon {
            self.sweep = horizon;
        }
        for _ in 0..MAX_PAGES_PER_POLL {
            let after = self.sweep.clone();
            let Some((full, last)) = self.read_page(&after, now).await else { return };
            self.sweep = last.unwrap_or(after);
            if !full || self.sweep >= self.cursor {
                self.sweep = (i64::MIN, String::new());
                break;
            }
        }
        let horizon = self.cursor.0 - REORDER_WINDOW_MS;
        self.sent.retain(|(at, _)| *at >= horizon);
    }

    /// Reads one page of changes after `after` and queues an event for each not sent yet.
    /// `Some((full page, last key read))`, or `None` when the database failed and the stream is
    /// closing.
    async fn read_page(&mut self, after: &EventKey, now: i64) -> Option<(bool, Option<EventKey>)> {
        let page = self.store.activity_changes(&self.tenant_id, (after.0, &after.1), now, BATCH).await;
        let rows = match page {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read activity changes; closing the stream");
                self.finished = true;
                return None;
            }
        };
        let full = rows.len() as i64 == BATCH;
        let mut last = None;
        for row in rows {
            let key = (row.updated_at, row.transaction_id.to_string());
            last = Some(key.clone());
            // Never twice, and nothing from before the stream's start.
            if key <= self.start || self.sent.contains(&key) {
                continue;
            }
            let created = row.created_at == row.updated_at;
            let item = views::activity_item(row);
            let event =
                if created { StreamEvent::ActivityCreated(item) } else { StreamEvent::ActivityUpdated(item) };
            let Ok(event) = sse_event(&event, Some(event_id(&key)));
            self.pending.push_back(event);
            if key > self.cursor {
                self.cursor = key.clone();
            }
            self.sent.insert(key);
        }
        Some((full, last))
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
                _ = self.poll.tick() => self.read_changes(true).await,
                changed = changed(&mut self.changes) => {
                    if changed.is_err() {
                        self.changes = None;
                        continue;
                    }
                    let since = self.last_read.elapsed();
                    if since < MIN_GAP {
                        tokio::time::sleep(MIN_GAP - since).await;
                    }
                    self.read_changes(false).await;
                }
                _ = self.heartbeat.tick() => {
                    let beat = StreamEvent::Heartbeat(Heartbeat { time: Timestamp::now() });
                    let Ok(event) = sse_event(&beat, None);
                    self.pending.push_back(event);
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
