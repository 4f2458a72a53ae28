//! The activity feed's counts and deep pages come from hourly counters kept by triggers; these
//! tests hold them against the rows themselves. A seeded tenant with items spread over many
//! hours (OTP codes still running, expired, verified…) is listed with every kind of filter and
//! page, and each answer is compared with what filtering and sorting the seeded rows gives. Then
//! statuses change and rows are deleted, and the comparison runs again (on PostgreSQL before and
//! after the counters' pending changes are folded).

use herald_common::{
    api::{activity::ActivityStatus, notifications::Channel},
    ids::{ApplicationId, NotificationId, OtpId, TenantId},
};
use herald_daemon::{
    config::Layers,
    store::{ActivityFilter, Store},
};
use herald_tests::{Backend, both_backends};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// A seeded feed item, as the feed should show it.
#[derive(Clone, Debug)]
struct Item {
    id: String,
    otp: bool,
    application: ApplicationId,
    channel: &'static str,
    stored_status: &'static str,
    created_at: i64,
    expires_at: i64,
}

impl Item {
    fn shown_status(&self, now: i64) -> &'static str {
        match self.stored_status {
            "sent" | "sending" if self.otp && self.expires_at <= now => "expired",
            "sending" if self.otp => "sent",
            other => other,
        }
    }
}

/// A small deterministic generator (no dependency needed for a test's spread of values).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

fn expected<'i>(
    items: &'i [Item],
    filter: &ActivityFilter,
    now: i64,
    limit: usize,
    offset: usize,
) -> (Vec<&'i str>, usize) {
    let mut matching: Vec<&Item> = items
        .iter()
        .filter(|i| filter.channel.is_none_or(|c| c == i.channel))
        .filter(|i| filter.application_id.as_ref().is_none_or(|a| *a == i.application))
        .filter(|i| filter.status.is_none_or(|s| s == i.shown_status(now)))
        .filter(|i| filter.from.is_none_or(|f| i.created_at >= f))
        .filter(|i| filter.to.is_none_or(|t| i.created_at < t))
        .collect();
    matching.sort_by_key(|i| std::cmp::Reverse(i.created_at));
    let total = matching.len();
    (matching.into_iter().skip(offset).take(limit).map(|i| i.id.as_str()).collect(), total)
}

async fn compare_all(store: &Store, items: &[Item], tenant: &TenantId, apps: &[ApplicationId], now: i64) {
    let mut filters = vec![ActivityFilter::tenant(tenant.clone())];
    for channel in Channel::ALL {
        filters.push(ActivityFilter { channel: Some(*channel), ..filters[0].clone() });
    }
    for status in ActivityStatus::ALL {
        filters.push(ActivityFilter { status: Some(*status), ..filters[0].clone() });
    }
    filters.push(ActivityFilter { application_id: Some(apps[1].clone()), ..filters[0].clone() });
    filters.push(ActivityFilter {
        status: Some(ActivityStatus::Sent),
        channel: Some(Channel::Email),
        application_id: Some(apps[0].clone()),
        ..filters[0].clone()
    });
    // Ranges that start and end inside hours, on hour boundaries, within one hour, and around now.
    for (from, to) in [
        (Some(now - 50 * HOUR + 1_234), Some(now - 3 * HOUR - 77)),
        (Some((now / HOUR - 40) * HOUR), Some((now / HOUR - 10) * HOUR)),
        (Some(now - 30 * HOUR + 10), Some(now - 30 * HOUR + 1_800_000)),
        (Some(now - 2 * HOUR), None),
        (None, Some(now - 100 * HOUR + 5)),
        (Some(now - 20 * 60_000), Some(now + HOUR)),
        (Some((now / DAY - 4) * DAY), Some((now / DAY - 1) * DAY)),
        (Some((now / DAY - 3) * DAY - 5), Some((now / DAY - 1) * DAY + 5)),
    ] {
        filters.push(ActivityFilter { from, to, ..filters[0].clone() });
        filters.push(ActivityFilter {
            from,
            to,
            status: Some(ActivityStatus::Expired),
            ..filters[0].clone()
        });
        filters.push(ActivityFilter { from, to, channel: Some(Channel::Sms), ..filters[0].clone() });
    }
    for filter in &filters {
        let (_, total) = expected(items, filter, now, 1, 0);
        let offsets = [0, 1, 7, total / 2, total.saturating_sub(3), total, total + 5];
        for limit in [1usize, 7, 100] {
            for &offset in &offsets {
                let (rows, count) =
                    store.list_activity(filter, now, limit as i64, offset as i64).await.expect("list");
                let (want, want_total) = expected(items, filter, now, limit, offset);
                let got: Vec<&str> = rows.iter().map(|r| r.transaction_id.as_str()).collect();
                assert_eq!(count as usize, want_total, "count of {filter:?}");
                assert_eq!(got, want, "page of {filter:?}, limit {limit}, offset {offset}");
            }
        }
    }
}

async fn counters_match_the_rows(backend: Backend) {
    herald_tests::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let url = backend.fresh_database_url(dir.path()).await;
    let config = Layers::new().env([("HERALD_DATABASE_URL".to_owned(), url.clone())]).build(false).unwrap();
    let store = Store::open(&config).await.unwrap();
    let tenant = store.create_tenant("Feed".into()).await.unwrap();
    let mut apps = Vec::new();
    for name in ["Web", "Mobile"] {
        apps.push(store.create_application(&tenant.id, name.into()).await.unwrap().unwrap().id);
    }
    let other = store.create_tenant("Other".into()).await.unwrap();
    let other_app = store.create_application(&other.id, "X".into()).await.unwrap().unwrap();

    // Three minutes into an hour: codes sent just before the hour are still running, so the
    // hour before is not settled yet (the counters must not speak for it).
    let now = herald_common::Timestamp::now().millis() / HOUR * HOUR + 180_000;
    let mut rng = Lcg(7);
    let mut items = Vec::new();
    let mut inserts = Vec::new();
    for i in 0..1_500u64 {
        // Spread over ~120 hours, denser near now; every created_at distinct.
        let age = if i % 4 == 0 { rng.next(40 * 60_000) } else { rng.next(120 * HOUR as u64) };
        let created_at = now - age as i64 - 1 - (i as i64 % 997);
        let application = apps[rng.next(2) as usize].clone();
        let otp = i % 3 == 0;
        let item = if otp {
            let channel = ["email", "sms"][rng.next(2) as usize];
            let stored_status =
                ["sent", "sending", "verified", "tombstoned", "failed", "expired"][rng.next(6) as usize];
            let expires_at = created_at + [30_000, 300_000, 600_000][rng.next(3) as usize];
            Item {
                id: OtpId::new().to_string(),
                otp,
                application,
                channel,
                stored_status,
                created_at,
                expires_at,
            }
        } else {
            let channel = ["email", "sms", "whatsapp", "in_app"][rng.next(4) as usize];
            let stored_status = ["queued", "sending", "sent", "delivered", "failed"][rng.next(5) as usize];
            Item {
                id: NotificationId::new().to_string(),
                otp,
                application,
                channel,
                stored_status,
                created_at,
                expires_at: 0,
            }
        };
        inserts.push(insert(&item, &tenant.id));
        items.push(item);
    }
    // Another tenant's items never count.
    let stranger = Item {
        id: NotificationId::new().to_string(),
        otp: false,
        application: other_app.id.clone(),
        channel: "email",
        stored_status: "sent",
        created_at: now - 5 * HOUR,
        expires_at: 0,
    };
    inserts.push(insert(&stranger, &other.id));
    backend.execute(&url, &inserts).await;
    compare_all(&store, &items, &tenant.id, &apps, now).await;

    // Statuses move (a retry, deliveries finishing, a verification, an expired code noticed)
    // and rows go away; the counters follow.
    let mut changes = Vec::new();
    for (i, item) in items.iter_mut().enumerate().filter(|(i, _)| i % 5 == 0) {
        let table = if item.otp { "otp_transactions" } else { "notifications" };
        let status = match (item.otp, item.stored_status) {
            (false, "queued") => "sending",
            (false, "sending") => "sent",
            (false, "failed") => "queued",
            (false, _) => "failed",
            (true, "sent" | "sending") if i % 2 == 0 => "verified",
            (true, "sent" | "sending") => "expired",
            (true, _) => "tombstoned",
        };
        changes.push(format!("UPDATE {table} SET status = '{status}' WHERE id = '{}'", item.id));
        item.stored_status = status;
    }
    let gone: Vec<Item> = items.iter().skip(3).step_by(10).cloned().collect();
    for item in &gone {
        let table = if item.otp { "otp_transactions" } else { "notifications" };
        changes.push(format!("DELETE FROM {table} WHERE id = '{}'", item.id));
    }
    items.retain(|i| !gone.iter().any(|g| g.id == i.id));
    backend.execute(&url, &changes).await;
    compare_all(&store, &items, &tenant.id, &apps, now).await;
    // A minute later some running codes have expired; the feed says so.
    compare_all(&store, &items, &tenant.id, &apps, now + 60_000).await;
    store.fold_activity_counts().await.unwrap();
    compare_all(&store, &items, &tenant.id, &apps, now).await;
    store.prune_activity_counts().await.unwrap();
    compare_all(&store, &items, &tenant.id, &apps, now).await;
    store.close().await;
}
both_backends!(feed_counters_match_the_rows, counters_match_the_rows);

fn insert(item: &Item, tenant: &TenantId) -> String {
    if item.otp {
        format!(
            "INSERT INTO otp_transactions (id, tenant_id, application_id, channel, recipient_key, recipient_masked, \
             salt, code_hash, status, expires_at, created_at, updated_at) VALUES ('{}', '{tenant}', '{}', '{}', 'k', \
             'a***@example.com', 's', 'h', '{}', {}, {}, {})",
            item.id,
            item.application,
            item.channel,
            item.stored_status,
            item.expires_at,
            item.created_at,
            item.created_at
        )
    } else {
        format!(
            "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body, \
             status, created_at, updated_at) VALUES ('{}', '{tenant}', '{}', '{}', 'a@example.com', \
             'a***@example.com', 'b', '{}', {}, {})",
            item.id, item.application, item.channel, item.stored_status, item.created_at, item.created_at
        )
    }
}
