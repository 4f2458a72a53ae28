//! One user's live stream: `connection.ready`, then every inbox item after the last event id
//! (replayed from `Last-Event-ID`, or new ones), `notification.updated` for changed items, and a
//! heartbeat. Written as one state machine per connection (no task of its own), so an idle
//! stream costs a few kilobytes.
//!
//! Order and exactness: the connection subscribes before it reads, reads `seq > last_sent` in
//! sequence order on every wake-up, and only moves `last_sent` forward, so an item can be neither
//! skipped nor sent twice, however wake-ups interleave with commits.

use std::{collections::VecDeque, convert::Infallible, sync::atomic::Ordering, time::Duration};

use axum::response::sse::Event;
use futures_util::Stream;
use herald_common::{
    Timestamp,
    ids::InAppId,
    stream::{ConnectionReady, Heartbeat, Resync, ResyncReason, StreamEvent},
};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::{StreamLease, sse_event};
use crate::{auth::UserIdentity, hub::Subscription, store::Store, views};

/// The oldest `Last-Event-ID` that is replayed: at most this many items behind the newest.
pub const REPLAY_WINDOW: i64 = 1_000;
/// Items read per wake-up.
const BATCH: i64 = 100;

pub struct InboxStream {
    store: Store,
    user: UserIdentity,
    subscription: Subscription,
    /// Held for the stream's life: its slot in the per-user limit across daemons.
    _lease: StreamLease,
    last_sent: i64,
    pending: VecDeque<Event>,
    /// Items may be waiting (set at start for a replay, and after a full batch).
    more: bool,
    heartbeat: Interval,
    expires: Instant,
    shutdown: CancellationToken,
    finished: bool,
}

/// Where a new stream starts.
pub enum Start {
    /// After this event id (a valid `Last-Event-ID`).
    After(i64),
    /// The id cannot be replayed without a gap: send `stream.resync` and end.
    Resync(Resync),
}

/// What `Last-Event-ID` means for a user whose newest item is `newest`.
pub fn start_for(last_event_id: Option<&str>, newest: i64) -> Start {
    let Some(text) = last_event_id.map(str::trim).filter(|t| !t.is_empty()) else {
        return Start::After(newest);
    };
    match text.parse::<i64>() {
        Ok(id) if (0..=newest).contains(&id) && newest - id <= REPLAY_WINDOW => Start::After(id),
        Ok(id) if (0..=newest).contains(&id) => Start::Resync(Resync {
            reason: ResyncReason::ReplayWindow,
            detail: format!(
                "{} notifications were missed; at most {REPLAY_WINDOW} are replayed",
                newest - id
            ),
        }),
        _ => Start::Resync(Resync {
            reason: ResyncReason::UnknownEventId,
            detail: format!("`{text}` is not an event id of this stream"),
        }),
    }
}

fn event(event: StreamEvent) -> Event {
    let Ok(event) = sse_event(&event, None);
    event
}

/// What a new stream starts from, read when it was opened.
pub struct Opening {
    pub subscription: Subscription,
    pub lease: StreamLease,
    pub start: Start,
    pub unread_count: u64,
    /// The user's newest item number.
    pub newest: i64,
}

impl InboxStream {
    pub fn new(
        store: Store,
        user: UserIdentity,
        opening: Opening,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let Opening { subscription, lease, start, unread_count, newest } = opening;
        let ready = ConnectionReady {
            connection_id: subscription.subscriber.connection_id.clone(),
            unread_count: Some(unread_count),
            last_event_id: Some(newest.to_string()),
        };
        let mut pending = VecDeque::from([event(StreamEvent::Ready(ready))]);
        let (last_sent, more, finished) = match start {
            Start::After(id) => (id, id < newest, false),
            Start::Resync(resync) => {
                pending.push_back(event(StreamEvent::Resync(resync)));
                (newest, false, true)
            }
        };
        // Tokens are accepted for a minute past `exp` (clock skew); so is the stream.
        let until_expiry = (user.expires_at.millis() + 60_000 - Timestamp::now().millis()).max(0) as u64;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            store,
            user,
            subscription,
            _lease: lease,
            last_sent,
            pending,
            more,
            heartbeat,
            expires: Instant::now() + Duration::from_millis(until_expiry),
            shutdown,
            finished,
        }
    }

    /// Reads the items after `last_sent` into `pending`.
    async fn catch_up(&mut self) {
        let (app, user) = (&self.user.application_id, &self.user.user_id);
        // Boxed: an idle stream's state is sized for its largest await, and sqlx's query futures
        // are large; boxed, they cost memory only while a read is running.
        let items = match Box::pin(self.store.inbox_after(app, user, self.last_sent, BATCH)).await {
            Ok(items) => items,
            Err(e) => {
                // The client reconnects with its Last-Event-ID and loses nothing. A corrupt row
                // ends the stream here too, before the item: never skipped silently.
                tracing::warn!(error = %e, "cannot read the inbox for a stream; closing it");
                self.finished = true;
                return;
            }
        };
        self.more = items.len() as i64 == BATCH;
        for record in items {
            self.last_sent = record.seq;
            let created = StreamEvent::NotificationCreated(views::inbox_item(record));
            let Ok(event) = sse_event(&created, Some(self.last_sent.to_string()));
            self.pending.push_back(event);
        }
    }

    async fn send_update(&mut self, item_id: InAppId) {
        match Box::pin(self.store.inbox_item(&self.user.application_id, &item_id)).await {
            Ok(Some(item)) if item.user_id == self.user.user_id => {
                self.pending.push_back(event(StreamEvent::NotificationUpdated(views::inbox_item(item))));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a changed inbox item; closing the stream");
                self.finished = true;
            }
        }
    }

    /// The next event, or `None` when the stream is over.
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.finished {
                return None;
            }
            if self.subscription.subscriber.overflowed.load(Ordering::Acquire) {
                let resync = Resync {
                    reason: ResyncReason::SlowConsumer,
                    detail: "this connection fell too far behind; reconnect with your Last-Event-ID"
                        .to_owned(),
                };
                self.pending.push_back(event(StreamEvent::Resync(resync)));
                self.finished = true;
                continue;
            }
            if self.more {
                Box::pin(self.catch_up()).await;
                continue;
            }
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => self.finished = true,
                _ = tokio::time::sleep_until(self.expires) => self.finished = true,
                _ = self.subscription.subscriber.created.notified() => self.more = true,
                update = self.subscription.updates.recv() => match update {
                    Some(item_id) => Box::pin(self.send_update(item_id)).await,
                    None => self.finished = true,
                },
                _ = self.heartbeat.tick() => {
                    self.pending.push_back(event(StreamEvent::Heartbeat(Heartbeat { time: Timestamp::now() })));
                }
            }
        }
    }

    pub fn into_stream(self) -> impl Stream<Item = Result<Event, Infallible>> + Send {
        futures_util::stream::unfold(Box::new(self), |mut stream| async move {
            let event = stream.next_event().await?;
            Some((Ok(event), stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_ids_within_the_window_replay() {
        assert!(matches!(start_for(None, 7), Start::After(7)));
        assert!(matches!(start_for(Some("3"), 7), Start::After(3)));
        assert!(matches!(start_for(Some("0"), 1000), Start::After(0)));
        assert!(
            matches!(start_for(Some("0"), 1001), Start::Resync(r) if r.reason == ResyncReason::ReplayWindow)
        );
        assert!(
            matches!(start_for(Some("8"), 7), Start::Resync(r) if r.reason == ResyncReason::UnknownEventId)
        );
        assert!(
            matches!(start_for(Some("x"), 7), Start::Resync(r) if r.reason == ResyncReason::UnknownEventId)
        );
    }
}
