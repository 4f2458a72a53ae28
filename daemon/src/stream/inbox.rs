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
    stream::{
        CONNECTION_READY, ConnectionReady, HEARTBEAT, Heartbeat, NOTIFICATION_CREATED, NOTIFICATION_UPDATED,
        Resync, STREAM_RESYNC,
    },
};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::Subscription;
use crate::{auth::UserIdentity, store::Store};

/// The oldest `Last-Event-ID` that is replayed: at most this many items behind the newest.
pub const REPLAY_WINDOW: i64 = 1_000;
/// Items read per wake-up.
const BATCH: i64 = 100;

pub struct InboxStream {
    store: Store,
    user: UserIdentity,
    subscription: Subscription,
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
            reason: "replay_window".to_owned(),
            detail: format!(
                "{} notifications were missed; at most {REPLAY_WINDOW} are replayed",
                newest - id
            ),
        }),
        _ => Start::Resync(Resync {
            reason: "unknown_event_id".to_owned(),
            detail: format!("`{text}` is not an event id of this stream"),
        }),
    }
}

fn json_event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default().event(name).json_data(data).unwrap_or_else(|_| Event::default().event(name))
}

impl InboxStream {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        user: UserIdentity,
        subscription: Subscription,
        start: Start,
        unread_count: u64,
        newest: i64,
        heartbeat: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        let ready = ConnectionReady {
            connection_id: subscription.subscriber.connection_id.clone(),
            unread_count,
            last_event_id: newest.to_string(),
        };
        let mut pending = VecDeque::from([json_event(CONNECTION_READY, &ready)]);
        let (last_sent, more, finished) = match start {
            Start::After(id) => (id, id < newest, false),
            Start::Resync(resync) => {
                pending.push_back(json_event(STREAM_RESYNC, &resync));
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
        let (app, user) = (self.user.application_id.as_str(), self.user.user_id.as_str());
        // Boxed: an idle stream's state is sized for its largest await, and sqlx's query futures
        // are large; boxed, they cost memory only while a read is running.
        match Box::pin(self.store.inbox_after(app, user, self.last_sent, BATCH)).await {
            Ok(items) => {
                self.more = items.len() as i64 == BATCH;
                for item in items {
                    self.last_sent = item.seq;
                    let event = json_event(NOTIFICATION_CREATED, &crate::api::inbox_item(item));
                    self.pending.push_back(event.id(self.last_sent.to_string()));
                }
            }
            Err(e) => {
                // The client reconnects with its Last-Event-ID and loses nothing.
                tracing::warn!(error = %e, "cannot read the inbox for a stream; closing it");
                self.finished = true;
            }
        }
    }

    async fn send_update(&mut self, item_id: String) {
        match Box::pin(self.store.inbox_item(self.user.application_id.as_str(), &item_id)).await {
            Ok(Some(item)) if item.user_id == self.user.user_id => {
                self.pending.push_back(json_event(NOTIFICATION_UPDATED, &crate::api::inbox_item(item)));
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
                    reason: "slow_consumer".to_owned(),
                    detail: "this connection fell too far behind; reconnect with your Last-Event-ID"
                        .to_owned(),
                };
                self.pending.push_back(json_event(STREAM_RESYNC, &resync));
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
                    self.pending.push_back(json_event(HEARTBEAT, &Heartbeat { time: Timestamp::now() }));
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
        assert!(matches!(start_for(Some("0"), 1001), Start::Resync(r) if r.reason == "replay_window"));
        assert!(matches!(start_for(Some("8"), 7), Start::Resync(r) if r.reason == "unknown_event_id"));
        assert!(matches!(start_for(Some("x"), 7), Start::Resync(r) if r.reason == "unknown_event_id"));
    }
}
