//! The live streams (Server-Sent Events): one user's inbox stream ([`inbox`]) and the operators'
//! activity stream ([`activity`]), how their events are written, and this daemon's registration
//! for the per-user stream limit across daemons. Who is connected is the [`crate::hub`]'s.

pub mod activity;
pub mod inbox;

use std::{convert::Infallible, time::Duration};

use axum::response::sse::Event;
use herald_common::{
    ids::{ApplicationId, ConnectionId, UserId},
    stream::StreamEvent,
};
use tokio_util::sync::CancellationToken;

use crate::{
    hub::{MAX_STREAMS_PER_USER, Subscription},
    state::AppState,
    store::StoreResult,
};

/// How often a daemon renews its row in `stream_daemons`, and how long a renewal lasts: the
/// streams of a daemon that was killed stop counting toward the limit within this lease.
const DAEMON_RENEW_EVERY: Duration = Duration::from_secs(10);
pub const DAEMON_LEASE: Duration = Duration::from_secs(30);

/// An event as SSE, with its `id:` when it has one.
pub fn sse_event(event: &StreamEvent, id: Option<String>) -> Result<Event, Infallible> {
    let event = match event.data_json() {
        Ok(data) => Event::default().event(event.name().as_str()).data(data),
        // Every payload is plain data; should one ever fail, the client still sees the event.
        Err(_) => Event::default().event(event.name().as_str()),
    };
    Ok(match id {
        Some(id) => event.id(id),
        None => event,
    })
}

/// Registers this daemon as alive, so that its streams count toward users' limits.
pub async fn register_daemon(state: &AppState) -> StoreResult<()> {
    let until = state.clock.now_millis() + DAEMON_LEASE.as_millis() as i64;
    state.store.renew_stream_daemon(&state.daemon_id, until).await
}

/// Renews this daemon's registration until `shutdown`.
pub async fn renew_daemon(state: AppState, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(DAEMON_RENEW_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        if let Err(e) = register_daemon(&state).await {
            tracing::warn!(error = %e, "cannot renew this daemon's stream registration");
        }
    }
}

/// A stream's record in `open_streams`; dropping it (the stream ended) deletes the record.
pub struct StreamLease {
    store: crate::store::Store,
    connection_id: Option<ConnectionId>,
}

impl StreamLease {
    /// Claims a slot for `subscription`'s stream among `user`'s streams on every daemon; `None`
    /// when the user already has [`MAX_STREAMS_PER_USER`].
    pub async fn claim(
        state: &AppState,
        app: &ApplicationId,
        user: &UserId,
        subscription: &Subscription,
    ) -> StoreResult<Option<Self>> {
        let connection_id = subscription.subscriber.connection_id.clone();
        let stream =
            crate::store::OpenStream { application_id: app, user_id: user, connection_id: &connection_id };
        let now = state.clock.now_millis();
        let claimed = state.store.open_stream(stream, &state.daemon_id, MAX_STREAMS_PER_USER, now).await?;
        Ok(claimed.then(|| Self { store: state.store.clone(), connection_id: Some(connection_id) }))
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        let (store, Some(id)) = (self.store.clone(), self.connection_id.take()) else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.close_stream(&id).await {
                    // At shutdown the daemon deletes all of its streams' records anyway.
                    tracing::debug!(error = %e, connection_id = %id, "cannot delete a stream's record");
                }
            });
        }
    }
}

/// The docs state the stream limits with the numbers the code uses.
#[cfg(test)]
mod doc_tests {
    use super::inbox::REPLAY_WINDOW;
    use crate::hub::{MAX_STREAMS_PER_USER, UPDATE_QUEUE};

    /// `1,000`-style grouping, as the docs write numbers.
    fn grouped(n: i64) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    }

    #[test]
    fn configuration_and_stream_docs_state_the_limits() {
        let configuration = include_str!("../../../docs/CONFIGURATION.md");
        let stream = include_str!("../../../docs/STREAM.md");
        for doc in [configuration, stream] {
            assert!(doc.contains(&format!("{MAX_STREAMS_PER_USER} open streams")));
            assert!(doc.contains(&grouped(UPDATE_QUEUE as i64)), "the update queue, {UPDATE_QUEUE}");
        }
        let flat = configuration.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&format!("at most {} missed notifications", grouped(REPLAY_WINDOW))));
        assert!(flat.contains("per user across every daemon"), "the stream limit is global");
    }
}
