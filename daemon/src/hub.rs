//! The stream hub: which inbox streams this daemon holds, and waking them. Connections are not
//! sent data through the hub; they are woken ("this user's inbox has news") and read what is new
//! from the database after the last event they sent. That keeps replay and live delivery one
//! mechanism (no gap, no duplicate), keeps a slow connection from holding queued data, and lets a
//! wake-up come from this daemon or, through the store's change announcements, from any other.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use herald_common::ids::{ApplicationId, ConnectionId, InAppId, UserId};
use tokio::sync::{Notify, mpsc};

/// Streams one user may hold at once, over every daemon sharing the database.
pub const MAX_STREAMS_PER_USER: usize = 10;
/// Changed items a connection may have waiting before it is told to resync (read-all on a large
/// inbox must fit).
pub const UPDATE_QUEUE: usize = 4096;

type UserKey = (ApplicationId, UserId);

/// One connected stream, as the hub sees it.
pub struct Subscriber {
    pub connection_id: ConnectionId,
    /// Woken when the user has new items.
    pub created: Notify,
    /// Ids of items that changed.
    updates: mpsc::Sender<InAppId>,
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
    pub updates: mpsc::Receiver<InAppId>,
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
    /// Registers a stream for `user` of `app`; `None` when the user already has the maximum
    /// on this daemon.
    pub fn subscribe(self: &Arc<Self>, app: &ApplicationId, user: &UserId) -> Option<Subscription> {
        let key = (app.clone(), user.clone());
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

    fn subscribers(&self, app: &ApplicationId, user: &UserId) -> Vec<Arc<Subscriber>> {
        self.users
            .lock()
            .ok()
            .and_then(|users| users.get(&(app.clone(), user.clone())).cloned())
            .unwrap_or_default()
    }

    /// `user` has new items.
    pub fn wake_created(&self, app: &ApplicationId, user: &UserId) {
        for subscriber in self.subscribers(app, user) {
            subscriber.created.notify_one();
        }
    }

    /// An item of `user` changed.
    pub fn push_update(&self, app: &ApplicationId, user: &UserId, item: &InAppId) {
        for subscriber in self.subscribers(app, user) {
            if subscriber.updates.try_send(item.clone()).is_err() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_counted_woken_and_removed_on_drop() {
        let hub = Arc::new(Hub::default());
        let (app, ann) = (ApplicationId::new(), UserId::parse("ann").unwrap());
        let mut subs: Vec<_> =
            (0..MAX_STREAMS_PER_USER).map(|_| hub.subscribe(&app, &ann).unwrap()).collect();
        assert!(hub.subscribe(&app, &ann).is_none(), "the eleventh is refused");
        assert_eq!(hub.streams(), MAX_STREAMS_PER_USER);
        let item = InAppId::new();
        hub.push_update(&app, &ann, &item);
        let mut first = subs.remove(0);
        assert_eq!(first.updates.try_recv().ok(), Some(item));
        drop(first);
        assert_eq!(hub.streams(), MAX_STREAMS_PER_USER - 1);
    }
}
