//! The inbox pane: one end user's inbox as the stream keeps it current, with the unread count
//! and the items that just arrived highlighted.

use std::collections::VecDeque;

use herald_common::{
    api::inbox::{InboxItem, InboxOut},
    client::ConnectionState,
    ids::UserId,
};

/// Items kept in the pane (the newest).
pub const CAPACITY: usize = 200;
/// How long a new item stays highlighted.
pub const FRESH_MS: i64 = 5_000;

pub struct InboxPane {
    pub user: UserId,
    pub state: ConnectionState,
    /// Newest first.
    pub items: VecDeque<InboxItem>,
    pub unread: u64,
    /// When each new item arrived (ms), newest first, for the highlight.
    arrived: VecDeque<(herald_common::ids::InAppId, i64)>,
    /// Whether the unread count is known (after the first page or `connection.ready`).
    pub loaded: bool,
}

impl InboxPane {
    pub fn new(user: UserId) -> Self {
        Self {
            user,
            state: ConnectionState::Connecting,
            items: VecDeque::new(),
            unread: 0,
            arrived: VecDeque::new(),
            loaded: false,
        }
    }

    /// A page: the first, or a reload (after a resync or a reconnection). An item the stream
    /// brought that the page lacks and that is newer than all of it was created after the page
    /// was read, so it stays on top, and counts if unread (ids sort by creation).
    pub fn load(&mut self, page: InboxOut) {
        let newest = page.notifications.first().map(|i| i.id.clone());
        let newer: Vec<InboxItem> = self
            .items
            .iter()
            .filter(|i| newest.as_ref().is_none_or(|n| i.id > *n))
            .filter(|i| self.arrived.iter().any(|(id, _)| *id == i.id))
            .cloned()
            .collect();
        let unread_newer = newer.iter().filter(|i| !i.is_read && !i.archived).count() as u64;
        self.items = newer.into_iter().chain(page.notifications).take(CAPACITY).collect();
        self.unread = page.unread_count + unread_newer;
        self.loaded = true;
    }

    /// A `notification.created`: the item on top, highlighted, counted if unread.
    pub fn created(&mut self, item: InboxItem, now_ms: i64) {
        if self.items.iter().any(|i| i.id == item.id) {
            return;
        }
        if !item.is_read && !item.archived {
            self.unread += 1;
        }
        self.arrived.push_front((item.id.clone(), now_ms));
        self.arrived.truncate(CAPACITY);
        self.items.push_front(item);
        self.items.truncate(CAPACITY);
    }

    /// A `notification.updated`: the item changed in place, and the unread count with it.
    /// Returns `false` when the item is not in the pane (the count may then be off: reload it).
    pub fn updated(&mut self, item: InboxItem) -> bool {
        let counts = |i: &InboxItem| !i.is_read && !i.archived;
        match self.items.iter_mut().find(|i| i.id == item.id) {
            Some(known) => {
                match (counts(known), counts(&item)) {
                    (true, false) => self.unread = self.unread.saturating_sub(1),
                    (false, true) => self.unread += 1,
                    _ => {}
                }
                *known = item;
                true
            }
            None => false,
        }
    }

    pub fn is_fresh(&self, item: &InboxItem, now_ms: i64) -> bool {
        self.arrived.iter().any(|(id, at)| *id == item.id && now_ms - at < FRESH_MS)
    }
}

#[cfg(test)]
mod tests {
    use herald_common::{Timestamp, ids::InAppId};

    use super::*;

    pub fn inbox_item(title: &str, is_read: bool) -> InboxItem {
        InboxItem {
            id: InAppId::new(),
            title: title.into(),
            body: format!("body of {title}"),
            is_read,
            archived: false,
            created_at: Timestamp::from_millis(1_000),
            data: Default::default(),
        }
    }

    #[test]
    fn the_unread_count_follows_creations_and_changes() {
        let mut pane = InboxPane::new(UserId::parse("ann").unwrap());
        pane.load(InboxOut {
            unread_count: 1,
            notifications: vec![inbox_item("old", false)],
            next_cursor: None,
        });
        let new = inbox_item("new", false);
        pane.created(new.clone(), 10_000);
        assert_eq!(pane.unread, 2);
        assert!(pane.is_fresh(&new, 12_000) && !pane.is_fresh(&new, 20_000));
        pane.created(new.clone(), 10_000);
        assert_eq!((pane.items.len(), pane.unread), (2, 2), "a replayed item is not counted twice");
        let mut read = new.clone();
        read.is_read = true;
        assert!(pane.updated(read.clone()));
        assert_eq!(pane.unread, 1);
        assert!(pane.updated(read), "the same state again changes nothing");
        assert_eq!(pane.unread, 1);
        assert!(!pane.updated(inbox_item("unknown", true)));
    }

    #[test]
    fn a_page_keeps_what_the_stream_brought_while_it_loaded() {
        let mut pane = InboxPane::new(UserId::parse("ann").unwrap());
        let (old, during) = (inbox_item("old", false), inbox_item("during", false));
        // The stream is live, the page is asked for; an item is created after the page was read
        // and its event arrives first.
        pane.created(during.clone(), 10_000);
        pane.load(InboxOut { unread_count: 1, notifications: vec![old.clone()], next_cursor: None });
        let titles: Vec<&str> = pane.items.iter().map(|i| i.title.as_str()).collect();
        assert_eq!((titles, pane.unread), (vec!["during", "old"], 2));
        // A page read after it holds it already: once, counted once.
        pane.load(InboxOut { unread_count: 2, notifications: vec![during, old], next_cursor: None });
        assert_eq!((pane.items.len(), pane.unread), (2, 2));
    }
}
