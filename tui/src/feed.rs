//! The activity the dashboard holds: the newest items (a bounded ring, keyed by id so a change
//! updates its item in place), and per-channel throughput and failure counts over the last
//! minutes for the header's sparklines.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, HashMap, VecDeque},
};

use herald_common::{
    api::{
        activity::{ActivityItem, ActivityStatus},
        notifications::Channel,
    },
    ids::TransactionId,
};

/// Items kept: the newest this many (memory stays flat however long the dashboard runs).
pub const CAPACITY: usize = 1_000;

type SortKey = (Reverse<i64>, Reverse<String>);

fn key_of(item: &ActivityItem) -> SortKey {
    (Reverse(item.created_at.millis()), Reverse(item.transaction_id.to_string()))
}

/// What the feed is filtered to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub channel: Option<Channel>,
    pub status: Option<ActivityStatus>,
    /// Part of an id (case-insensitive).
    pub search: String,
}

impl Filter {
    pub fn matches(&self, item: &ActivityItem) -> bool {
        self.channel.is_none_or(|c| c == item.channel)
            && self.status.is_none_or(|s| s == item.status)
            && (self.search.is_empty()
                || item
                    .transaction_id
                    .as_str()
                    .to_ascii_lowercase()
                    .contains(&self.search.to_ascii_lowercase()))
    }

    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }

    /// How the title shows it.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(channel) = self.channel {
            parts.push(format!("channel={channel}"));
        }
        if let Some(status) = self.status {
            parts.push(format!("status={status}"));
        }
        if !self.search.is_empty() {
            parts.push(format!("id~{}", self.search));
        }
        parts.join(" ")
    }
}

/// The newest items, newest first.
#[derive(Default)]
pub struct Feed {
    items: BTreeMap<SortKey, ActivityItem>,
    keys: HashMap<TransactionId, SortKey>,
    /// When an item last changed (ms), to highlight it for a moment.
    changed: HashMap<TransactionId, i64>,
}

/// What an upsert did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    New,
    /// The item's status changed from this.
    Changed(ActivityStatus),
    Same,
}

impl Feed {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds an item or updates it in place; the oldest go when there are more than
    /// [`CAPACITY`].
    pub fn upsert(&mut self, item: ActivityItem, now_ms: i64) -> Upsert {
        let id = item.transaction_id.clone();
        let key = key_of(&item);
        let result = match self.keys.get(&id) {
            Some(old_key) => {
                let old = self.items.remove(old_key);
                match old {
                    Some(old) if old.status != item.status || old.retry_count != item.retry_count => {
                        Upsert::Changed(old.status)
                    }
                    _ => Upsert::Same,
                }
            }
            None => Upsert::New,
        };
        if result != Upsert::Same {
            self.changed.insert(id.clone(), now_ms);
        }
        self.keys.insert(id, key.clone());
        self.items.insert(key, item);
        while self.items.len() > CAPACITY {
            if let Some((_, oldest)) = self.items.pop_last() {
                self.keys.remove(&oldest.transaction_id);
                self.changed.remove(&oldest.transaction_id);
            }
        }
        result
    }

    pub fn get(&self, id: &TransactionId) -> Option<&ActivityItem> {
        self.keys.get(id).and_then(|key| self.items.get(key))
    }

    /// The items the filter shows, newest first.
    pub fn visible<'a>(&'a self, filter: &'a Filter) -> impl Iterator<Item = &'a ActivityItem> + 'a {
        self.items.values().filter(move |item| filter.matches(item))
    }

    /// Whether the item changed within `window_ms` of `now_ms`.
    pub fn recently_changed(&self, id: &TransactionId, now_ms: i64, window_ms: i64) -> bool {
        self.changed.get(id).is_some_and(|at| now_ms - at < window_ms)
    }

    /// Forgets highlights older than `window_ms` (called on ticks, to keep the map small).
    pub fn expire_highlights(&mut self, now_ms: i64, window_ms: i64) {
        self.changed.retain(|_, at| now_ms - *at < window_ms);
    }

    pub fn count(&self, status: ActivityStatus) -> usize {
        self.items.values().filter(|i| i.status == status).count()
    }
}

/// Seconds per sparkline bar.
pub const BUCKET_SECONDS: i64 = 5;
/// Bars kept: five minutes.
pub const BUCKETS: usize = 60;

/// One bar's counts for one channel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Items created.
    pub created: u64,
    /// Items that reached sent, delivered or failed.
    pub finished: u64,
    pub failed: u64,
}

#[derive(Clone, Debug, Default)]
struct Bucket {
    /// Its first second (Unix).
    start: i64,
    counts: [Counts; 4],
}

fn channel_index(channel: Channel) -> usize {
    match channel {
        Channel::Email => 0,
        Channel::Sms => 1,
        Channel::Whatsapp => 2,
        Channel::InApp => 3,
    }
}

/// Throughput and failures per channel over the last minutes, from the live feed.
#[derive(Debug, Default)]
pub struct Stats {
    buckets: VecDeque<Bucket>,
    pub total_created: u64,
    pub total_failed: u64,
}

impl Stats {
    fn bucket(&mut self, now_ms: i64) -> &mut Bucket {
        let start = now_ms.div_euclid(1000) / BUCKET_SECONDS * BUCKET_SECONDS;
        self.advance(now_ms);
        if self.buckets.back().is_none_or(|b| b.start != start) {
            self.buckets.push_back(Bucket { start, ..Default::default() });
        }
        self.buckets.back_mut().expect("a bucket was just pushed")
    }

    /// Drops buckets older than the window.
    pub fn advance(&mut self, now_ms: i64) {
        let oldest = now_ms.div_euclid(1000) - BUCKET_SECONDS * BUCKETS as i64;
        while self.buckets.front().is_some_and(|b| b.start < oldest) {
            self.buckets.pop_front();
        }
    }

    /// Counts an event of the live feed: a new item, or an item that changed from `before`.
    pub fn record(&mut self, item: &ActivityItem, before: Option<ActivityStatus>, now_ms: i64) {
        // Receipts move a finished item on (sent to delivered, undelivered…): still finished
        // once, but a receipt that says it did not arrive is a failure too.
        let finished = |s: ActivityStatus| {
            matches!(
                s,
                ActivityStatus::Sent
                    | ActivityStatus::Delivered
                    | ActivityStatus::Read
                    | ActivityStatus::Undelivered
                    | ActivityStatus::Bounced
                    | ActivityStatus::Complained
                    | ActivityStatus::Failed
            )
        };
        let failure = |s: ActivityStatus| {
            matches!(
                s,
                ActivityStatus::Failed
                    | ActivityStatus::Undelivered
                    | ActivityStatus::Bounced
                    | ActivityStatus::Complained
            )
        };
        let is_new = before.is_none();
        let newly_finished = finished(item.status) && before.is_none_or(|b| !finished(b));
        let failed = failure(item.status) && !before.is_some_and(failure);
        let index = channel_index(item.channel);
        let counts = &mut self.bucket(now_ms).counts[index];
        counts.created += u64::from(is_new);
        counts.finished += u64::from(newly_finished);
        counts.failed += u64::from(failed);
        self.total_created += u64::from(is_new);
        self.total_failed += u64::from(failed);
    }

    /// The last `bars` bars for `channel`, oldest first (bars with no events are 0).
    pub fn series(&self, channel: Channel, bars: usize, now_ms: i64) -> Vec<Counts> {
        let last = now_ms.div_euclid(1000) / BUCKET_SECONDS * BUCKET_SECONDS;
        let index = channel_index(channel);
        (0..bars)
            .rev()
            .map(|back| {
                let start = last - back as i64 * BUCKET_SECONDS;
                self.buckets.iter().find(|b| b.start == start).map(|b| b.counts[index]).unwrap_or_default()
            })
            .collect()
    }

    /// Items created per second over the last minute.
    pub fn rate(&self, channel: Channel, now_ms: i64) -> f64 {
        let bars = (60 / BUCKET_SECONDS) as usize;
        let created: u64 = self.series(channel, bars, now_ms).iter().map(|c| c.created).sum();
        created as f64 / 60.0
    }

    /// Failed as a share of finished, in percent, over the last minute (`None`: nothing finished).
    pub fn failure_rate(&self, channel: Channel, now_ms: i64) -> Option<f64> {
        let series = self.series(channel, (60 / BUCKET_SECONDS) as usize, now_ms);
        let (failed, finished) = series.iter().fold((0, 0), |(f, n), c| (f + c.failed, n + c.finished));
        (finished > 0).then(|| 100.0 * failed as f64 / finished as f64)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use herald_common::{
        Timestamp,
        ids::{ApplicationId, NotificationId},
    };

    use super::*;

    pub fn item(channel: Channel, status: ActivityStatus, created_ms: i64) -> ActivityItem {
        ActivityItem {
            transaction_id: NotificationId::new().into(),
            application_id: ApplicationId::new(),
            application_name: "Web".into(),
            channel,
            recipient_masked: "a***@example.com".into(),
            status,
            failure_reason: (status == ActivityStatus::Failed).then(|| "SMTP 451 try later".to_owned()),
            created_at: Timestamp::from_millis(created_ms),
            retryable: status == ActivityStatus::Failed,
            retry_count: 0,
            category: None,
        }
    }

    #[test]
    fn items_update_in_place_and_the_ring_is_bounded() {
        let mut feed = Feed::default();
        let first = item(Channel::Email, ActivityStatus::Queued, 1_000);
        assert_eq!(feed.upsert(first.clone(), 0), Upsert::New);
        let mut sent = first.clone();
        sent.status = ActivityStatus::Sent;
        assert_eq!(feed.upsert(sent, 0), Upsert::Changed(ActivityStatus::Queued));
        assert_eq!(feed.len(), 1);
        assert_eq!(feed.get(&first.transaction_id).unwrap().status, ActivityStatus::Sent);
        for i in 0..CAPACITY + 10 {
            feed.upsert(item(Channel::Sms, ActivityStatus::Sent, 2_000 + i as i64), 0);
        }
        assert_eq!(feed.len(), CAPACITY);
        assert!(feed.get(&first.transaction_id).is_none(), "the oldest went");
        let all = Filter::default();
        let newest: Vec<_> = feed.visible(&all).take(1).collect();
        assert_eq!(newest[0].created_at.millis(), 2_000 + CAPACITY as i64 + 9, "newest first");
    }

    #[test]
    fn filters_select_by_channel_status_and_id() {
        let mut feed = Feed::default();
        let failed = item(Channel::Email, ActivityStatus::Failed, 1);
        feed.upsert(failed.clone(), 0);
        feed.upsert(item(Channel::Sms, ActivityStatus::Sent, 2), 0);
        let only = |filter: Filter| feed.visible(&filter).count();
        assert_eq!(only(Filter::default()), 2);
        assert_eq!(only(Filter { channel: Some(Channel::Email), ..Default::default() }), 1);
        assert_eq!(only(Filter { status: Some(ActivityStatus::Sent), ..Default::default() }), 1);
        let tail = failed.transaction_id.as_str()[20..].to_ascii_uppercase();
        assert_eq!(only(Filter { search: tail, ..Default::default() }), 1);
    }

    #[test]
    fn stats_count_per_channel_per_bar() {
        let mut stats = Stats::default();
        let now = 1_000_000_000;
        let queued = item(Channel::Email, ActivityStatus::Queued, now);
        stats.record(&queued, None, now);
        let mut failed = queued.clone();
        failed.status = ActivityStatus::Failed;
        stats.record(&failed, Some(ActivityStatus::Queued), now + 1_000);
        stats.record(&item(Channel::InApp, ActivityStatus::Delivered, now), None, now + 1_000);
        let email = stats.series(Channel::Email, 3, now + 1_000);
        assert_eq!(email[2], Counts { created: 1, finished: 1, failed: 1 });
        assert_eq!(stats.failure_rate(Channel::Email, now + 1_000), Some(100.0));
        assert_eq!(stats.series(Channel::InApp, 1, now + 1_000)[0].finished, 1);
        assert_eq!((stats.total_created, stats.total_failed), (2, 1));
        // Five minutes later the bars are gone.
        stats.advance(now + 400_000);
        assert_eq!(
            stats.series(Channel::Email, BUCKETS, now + 400_000).iter().map(|c| c.created).sum::<u64>(),
            0
        );
    }
}
