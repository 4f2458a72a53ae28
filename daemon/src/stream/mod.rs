//! The stream hub: who is connected, and waking them. Connections are not sent data through the
//! hub; they are woken ("this user's inbox has news") and read what is new from the database
//! after the last event they sent. That keeps replay and live delivery one mechanism (no gap, no
//! duplicate), keeps a slow connection from holding queued data, and lets a wake-up come from
//! this daemon or, through PostgreSQL's LISTEN/NOTIFY, from any other.

pub mod activity;
pub mod inbox;
pub mod listener;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use std::time::Duration;

use herald_common::ids::ConnectionId;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::{state::AppState, store::StoreResult};

/// Streams one user may hold at once, over every daemon sharing the database.
pub const MAX_STREAMS_PER_USER: usize = 10;
/// How often a daemon renews its row in `stream_daemons`, and how long a renewal lasts: the
/// streams of a daemon that was killed stop counting toward the limit within this lease.
const DAEMON_RENEW_EVERY: Duration = Duration::from_secs(10);
pub const DAEMON_LEASE: Duration = Duration::from_secs(30);
/// Changed items a connection may have waiting before it is told to resync (read-all on a large
/// inbox must fit).
const UPDATE_QUEUE: usize = 4096;

type UserKey = (String, String);

/// One connected stream, as the hub sees it.
pub struct Subscriber {
    pub connection_id: ConnectionId,
    /// Woken when the user has new items.
    pub created: Notify,
    /// Ids of items that changed.
    updates: mpsc::Sender<String>,
    /// The connection fell too far behind: it must resync.
    pub overflowed: AtomicBool,
}

#[derive(Default)]
pub struct Hub {
    users: Mutex<HashMap<UserKey, Vec<Arc<Subscriber>>>>,
}

/// A registration in the hub; dropping it (the stream ended) removes it.
pub struct Subscription {
    hub: Arc<Hub>,
    key: UserKey,
    pub subscriber: Arc<Subscriber>,
    pub updates: mpsc::Receiver<String>,
    /// The stream's record in the database, for the limit across daemons (set once claimed).
    pub lease: Option<StreamLease>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Ok(mut users) = self.hub.users.lock()
            && let Some(list) = users.get_mut(&self.key)
        {
            list.retain(|s| !Arc::ptr_eq(s, &self.subscriber));
            if list.is_empty() {
                users.remove(&self.key);
            }
        }
    }
}

impl Hub {
    /// Registers a stream for `user` of `app`; `None` when the user already has the maximum.
    pub fn subscribe(self: &Arc<Self>, app: &str, user: &str) -> Option<Subscription> {
        let key = (app.to_owned(), user.to_owned());
        let mut users = self.users.lock().ok()?;
        let list = users.entry(key.clone()).or_default();
        // Checked before a subscriber exists: its drop counts a stream as closed.
        if list.len() >= MAX_STREAMS_PER_USER {
            return None;
        }
        let (sender, receiver) = mpsc::channel(UPDATE_QUEUE);
        let subscriber = Arc::new(Subscriber {
            connection_id: ConnectionId::new(),
            created: Notify::new(),
            updates: sender,
            overflowed: AtomicBool::new(false),
        });
        list.push(subscriber.clone());
        metrics::gauge!("herald_streams_open").increment(1.0);
        Some(Subscription { hub: self.clone(), key, subscriber, updates: receiver, lease: None })
    }

    fn subscribers(&self, app: &str, user: &str) -> Vec<Arc<Subscriber>> {
        self.users
            .lock()
            .ok()
            .and_then(|users| users.get(&(app.to_owned(), user.to_owned())).cloned())
            .unwrap_or_default()
    }

    /// `user` has new items.
    pub fn wake_created(&self, app: &str, user: &str) {
        for subscriber in self.subscribers(app, user) {
            subscriber.created.notify_one();
        }
    }

    /// An item of `user` changed.
    pub fn push_update(&self, app: &str, user: &str, item_id: &str) {
        for subscriber in self.subscribers(app, user) {
            if subscriber.updates.try_send(item_id.to_owned()).is_err() {
                subscriber.overflowed.store(true, Ordering::Release);
                subscriber.created.notify_one();
            }
        }
    }

    /// Every connection re-reads (after a lost PostgreSQL notification connection).
    pub fn wake_all(&self) {
        if let Ok(users) = self.users.lock() {
            for subscriber in users.values().flatten() {
                subscriber.created.notify_one();
            }
        }
    }

    pub fn streams(&self) -> usize {
        self.users.lock().map(|u| u.values().map(Vec::len).sum()).unwrap_or(0)
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        metrics::gauge!("herald_streams_open").decrement(1.0);
    }
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
    connection_id: String,
}

impl StreamLease {
    /// Claims a slot for `subscription`'s stream among `user`'s streams on every daemon; `None`
    /// when the user already has [`MAX_STREAMS_PER_USER`].
    pub async fn claim(
        state: &AppState,
        app: &str,
        user: &str,
        subscription: &Subscription,
    ) -> StoreResult<Option<Self>> {
        let connection_id = subscription.subscriber.connection_id.to_string();
        let now = state.clock.now_millis();
        let claimed = state
            .store
            .open_stream(app, user, &connection_id, &state.daemon_id, MAX_STREAMS_PER_USER, now)
            .await?;
        Ok(claimed.then(|| Self { store: state.store.clone(), connection_id }))
    }
}

impl Drop for StreamLease {
    fn drop(&mut self) {
        let (store, id) = (self.store.clone(), std::mem::take(&mut self.connection_id));
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
