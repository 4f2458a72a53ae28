//! A dead endpoint's events are owed, not queued (`store/webhooks/pause.rs`), on each backend:
//! paused, it gets no message for a later event; caught up, it gets each once, in event order,
//! and is resumed; disabled, its owed events become failed messages that `recover` finds; and
//! retention keeps them. Then the daemon: a dead endpoint trips, is paused, and once it answers
//! every event arrives, each subject's in order, verified by the receiver peer with the official
//! `standardwebhooks` library.

use std::time::Duration;

use herald_common::{
    api::{
        notifications::Channel,
        webhooks::{EndpointStatus, EventType},
    },
    ids::{TenantId, WebhookEndpointId},
};
use herald_daemon::store::{EndpointChanges, FanOutLock, Store};
use herald_tests::{Backend, both_backends, eventually};

use crate::{
    webhook_store::{add_endpoint, open, suppression},
    webhooks::{WAIT, endpoint, start_with, suppress},
};

/// Counts with `sql` in the store at `url`.
async fn count(backend: Backend, url: &str, sql: &str) -> i64 {
    backend.count(url, sql).await
}

async fn messages_of(backend: Backend, url: &str, endpoint: &WebhookEndpointId) -> i64 {
    count(backend, url, &format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{endpoint}'"))
        .await
}

async fn paused(store: &Store, endpoint: &WebhookEndpointId) -> bool {
    let due = store.due_webhook_endpoints().await.unwrap();
    due.iter().find(|e| &e.id == endpoint).expect("an enabled endpoint").paused
}

/// Pauses `endpoint`, waiting for PostgreSQL's fan-out lock; whether it was paused now.
async fn pause(store: &Store, endpoint: &WebhookEndpointId) -> bool {
    store
        .pause_webhook_endpoint(endpoint.clone(), FanOutLock::Wait)
        .await
        .unwrap()
        .expect("waited for the lock")
}

/// Makes up to `limit` of `endpoint`'s owed messages: how many, and whether it is still paused.
async fn catch_up(store: &Store, endpoint: &WebhookEndpointId, limit: i64) -> (usize, bool) {
    let done = store.catch_up_webhook_endpoint(endpoint.clone(), limit, 100, FanOutLock::Wait).await.unwrap();
    done.expect("waited for the lock")
}

/// Adds suppressions `from..to` (an event each) and lifts the first `lifted` of them (another
/// event each, about the same subject).
async fn events(store: &Store, tenant: &TenantId, from: i64, to: i64, lifted: usize) {
    let mut added = Vec::new();
    for i in from..to {
        added.push(store.add_suppression(suppression(tenant, i)).await.unwrap().0.id);
    }
    for id in &added[..lifted] {
        store.delete_suppression(tenant, id).await.unwrap().unwrap();
    }
}

async fn a_paused_endpoint_is_owed_its_events_and_caught_up_in_order(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    let live = add_endpoint(&store, &tenant, None).await;
    events(&store, &tenant, 0, 10, 0).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 10);

    assert!(pause(&store, &dead).await, "paused now");
    assert!(!pause(&store, &dead).await, "already paused");
    assert!(paused(&store, &dead).await && !paused(&store, &live).await);
    events(&store, &tenant, 10, 60, 20).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 10, "no message for an owed event");
    assert_eq!(messages_of(backend, &url, &live).await, 80, "the live endpoint gets every event");

    // Retention keeps the owed events, which no message refers to yet.
    store.delete_webhook_endpoint(tenant.clone(), live.clone()).await.unwrap();
    store.delete_settled_webhook_messages(i64::MAX).await.unwrap();
    assert_eq!(count(backend, &url, "SELECT COUNT(*) FROM webhook_events").await, 80, "owed events kept");

    // One to probe with, then groups; the last resumes it.
    assert_eq!(catch_up(&store, &dead, 1).await, (1, true));
    assert_eq!(catch_up(&store, &dead, 25).await, (25, true));
    assert_eq!(catch_up(&store, &dead, 1_000).await, (44, false));
    assert!(!paused(&store, &dead).await, "resumed");
    assert_eq!(catch_up(&store, &dead, 1_000).await, (0, false));
    assert_eq!(messages_of(backend, &url, &dead).await, 80);
    assert_eq!(
        count(
            backend,
            &url,
            "SELECT COUNT(*) FROM webhook_messages a JOIN webhook_messages b
             ON b.endpoint_id = a.endpoint_id AND b.id > a.id AND b.event_id <= a.event_id"
        )
        .await,
        0,
        "each event once, messages in the order of their events"
    );
    // A lifted suppression's event still waits behind its creation's.
    let claimed = store
        .claim_webhook_messages(dead.clone(), i64::MAX / 2, i64::MAX / 2, 1_000, "l".into())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 60, "every subject's first event");
    assert!(claimed.iter().all(|m| m.event_type == EventType::SuppressionCreated));

    // Resumed, it gets its messages from the fan-out again.
    events(&store, &tenant, 60, 61, 0).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 81);
    store.close().await;
}
both_backends!(
    a_paused_endpoint_is_owed_its_events_and_caught_up_in_order_on_each_backend,
    a_paused_endpoint_is_owed_its_events_and_caught_up_in_order
);

/// Disabled while paused, an endpoint's owed events fail with its pending messages, and once it
/// is enabled again `recover` sends them all.
async fn a_disabled_endpoint_fails_what_it_is_owed(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    events(&store, &tenant, 0, 3, 0).await;
    pause(&store, &dead).await;
    events(&store, &tenant, 3, 10, 2).await;
    let status = |status| EndpointChanges { status: Some((status, None)), ..EndpointChanges::default() };
    store
        .update_webhook_endpoint(tenant.clone(), dead.clone(), status(EndpointStatus::Disabled), 500)
        .await
        .unwrap();
    let failed =
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{dead}' AND status = 'failed'");
    assert_eq!(count(backend, &url, &failed).await, 12, "3 pending and 9 owed, failed");
    assert_eq!(
        count(backend, &url, "SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL").await,
        0
    );
    store
        .update_webhook_endpoint(tenant.clone(), dead.clone(), status(EndpointStatus::Enabled), 600)
        .await
        .unwrap();
    assert!(!paused(&store, &dead).await);
    assert_eq!(store.recover_webhook_messages(dead.clone(), 0, 700).await.unwrap(), 12);
    store.close().await;
}
both_backends!(
    a_disabled_endpoint_fails_what_it_is_owed_on_each_backend,
    a_disabled_endpoint_fails_what_it_is_owed
);

/// PostgreSQL: a pause waits for the transactions that are writing events (or, only trying the
/// lock, does nothing while one is in flight). One that wrote an
/// event before the pause and commits after it keeps that event's message (its fan-out saw the
/// endpoint as it was), and the pause counts from it: the catch-up makes no second message.
#[tokio::test]
async fn a_pause_waits_for_the_events_being_written() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    let mut writer = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO webhook_events (tenant_id, event_type, subject_id, data, occurred_at)
         VALUES ($1, 'suppression.created', 'sup_1', '{}', 5)",
    )
    .bind(&tenant)
    .execute(&mut *tx)
    .await
    .unwrap();
    assert_eq!(
        store.pause_webhook_endpoint(dead.clone(), FanOutLock::Try).await.unwrap(),
        None,
        "only tried: the lock is taken, nothing is done"
    );
    let pausing = tokio::spawn({
        let (store, dead) = (store.clone(), dead.clone());
        async move { store.pause_webhook_endpoint(dead, FanOutLock::Wait).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pausing.is_finished(), "the pause waits for the transaction writing an event");
    tx.commit().await.unwrap();
    assert_eq!(pausing.await.unwrap().unwrap(), Some(true));
    assert_eq!(
        messages_of(backend, &url, &dead).await,
        1,
        "the event written before the pause has its message"
    );
    assert_eq!(catch_up(&store, &dead, 10).await, (0, false));
    assert_eq!(messages_of(backend, &url, &dead).await, 1, "and only one");
    store.close().await;
}

/// The daemon: a dead endpoint trips after five failures and is paused; while it is dead its
/// later events make no messages (a probe a second makes one); once it answers, every event
/// arrives, each subject's in order, and it is resumed.
async fn a_dead_endpoint_is_paused_then_caught_up(backend: Backend) {
    let extra = vec![
        ("HERALD_WEBHOOK_ENDPOINT_CONCURRENCY", "4".to_owned()),
        ("HERALD_WEBHOOK_RETRY_SCHEDULE", ["100ms"; 20].join(",")),
    ];
    let (d, _boot, key, receiver) = start_with(backend, extra).await;
    let url = d.database_url.clone();
    let dead = endpoint(&key, &receiver, "dead", None).await.endpoint.endpoint_id;
    endpoint(&key, &receiver, "live", None).await;
    receiver.set_answers("dead", &["500"]);
    let mut added = Vec::new();
    for i in 0..10 {
        added.push(suppress(&key, Channel::Email, &format!("a{i}@example.com")).await);
    }
    let paused_sql = "SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL";
    eventually("the dead endpoint to be paused", WAIT, || async {
        (count(backend, &url, paused_sql).await == 1).then_some(())
    })
    .await;
    let before = messages_of(backend, &url, &dead).await;
    for i in 10..60 {
        added.push(suppress(&key, Channel::Email, &format!("a{i}@example.com")).await);
    }
    for s in &added[..10] {
        key.delete(&format!("/api/v1/suppressions/{}", s.suppression_id)).await.unwrap();
    }
    receiver.wait_for("live", 70, WAIT).await;
    let during = messages_of(backend, &url, &dead).await - before;
    // Each probe while it is dead makes one message; queued, the 60 events would make 60.
    assert!(during <= 10, "{during} messages made for a paused endpoint's 60 events");

    receiver.set_answers("dead", &["ok"]);
    let arrived = eventually("every event to reach the endpoint once it answers", WAIT, || async {
        let ok: Vec<_> = receiver.received("dead").into_iter().filter(|r| r.answered < 300).collect();
        let mut ids: Vec<&str> = ok.iter().map(|r| r.webhook_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        (ids.len() == 70).then_some(ok)
    })
    .await;
    assert!(arrived.iter().all(|r| r.verified.iter().any(|v| *v)), "each verified by standardwebhooks");
    for s in &added[..10] {
        let at = |kind: &str| {
            arrived
                .iter()
                .position(|r| {
                    r.event_type() == kind && r.body["data"]["suppression_id"] == s.suppression_id.as_str()
                })
                .unwrap_or_else(|| panic!("{kind} of {} arrived", s.suppression_id))
        };
        assert!(
            at("suppression.created") < at("suppression.deleted"),
            "{}'s events in order",
            s.suppression_id
        );
    }
    eventually("the endpoint to be resumed", WAIT, || async {
        (count(backend, &url, paused_sql).await == 0).then_some(())
    })
    .await;
}
both_backends!(
    a_dead_endpoint_is_paused_then_caught_up_on_each_backend,
    a_dead_endpoint_is_paused_then_caught_up
);
