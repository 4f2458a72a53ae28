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

use herald_common::ids::ConnectionId;
use tokio::sync::{Notify, mpsc};

/// Streams one user may hold at once.
pub const MAX_STREAMS_PER_USER: usize = 10;
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
        Some(Subscription { hub: self.clone(), key, subscriber, updates: receiver })
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
