//! The dispatcher's store calls, on each backend: claims in order, and attempts recorded in
//! groups (one transaction; set-based on PostgreSQL) with what each decides for its message,
//! the message's siblings and its endpoint.

use herald_common::{
    api::{
        notifications::Channel,
        suppressions::SuppressionReason,
        webhooks::{EndpointStatus, EventType, MessageStatus},
    },
    ids::{TenantId, WebhookEndpointId},
};
use herald_daemon::{
    config::Layers,
    store::{
        ClaimedMessage, EndpointChanges, FanOutLock, MessageRecord, NewSuppression, Store, Verdict,
        WebhookAttemptRecord, WebhookEndpointRecord,
    },
};
use herald_tests::{Backend, both_backends};

const DAY_MS: i64 = 24 * 3600 * 1000;

pub(crate) async fn open(backend: Backend, dir: &std::path::Path) -> (Store, TenantId, String) {
    herald_tests::init_crypto();
    let url = backend.fresh_database_url(dir).await;
    let config = Layers::new().env([("HERALD_DATABASE_URL".to_owned(), url.clone())]).build(false).unwrap();
    let store = Store::open(&config).await.expect("open store");
    let tenant = store.create_tenant("T".into()).await.unwrap();
    (store, tenant.id, url)
}

pub(crate) async fn add_endpoint(
    store: &Store,
    tenant: &TenantId,
    failing_since: Option<i64>,
) -> WebhookEndpointId {
    add_endpoint_as(store, tenant, failing_since, None, EndpointStatus::Enabled).await
}

pub(crate) async fn add_endpoint_as(
    store: &Store,
    tenant: &TenantId,
    failing_since: Option<i64>,
    event_types: Option<&str>,
    status: EndpointStatus,
) -> WebhookEndpointId {
    let id = WebhookEndpointId::new();
    store
        .insert_webhook_endpoint(WebhookEndpointRecord {
            id: id.clone(),
            tenant_id: tenant.clone(),
            application_id: None,
            url: "https://hooks.example.com/in".into(),
            description: None,
            event_types: event_types.map(str::to_owned),
            status,
            disabled_reason: None,
            secret_generation: 1,
            previous_until: None,
            failing_since,
            paused_after: None,
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();
    id
}

/// Fans out every event committed (PostgreSQL's fan-out is the daemon's task's, which a store
/// alone does not run; SQLite's is mostly done at each commit): how many events it passed.
pub(crate) async fn fan_out(store: &Store) -> i64 {
    fan_out_in(store, i64::MAX).await
}

/// The same, one group of at most `group` events.
pub(crate) async fn fan_out_in(store: &Store, group: i64) -> i64 {
    store.fan_out_webhook_events(group).await.unwrap().expect("the cursor was free")
}

/// Claims the endpoint's due messages, once every event committed is fanned out.
async fn claim(store: &Store, endpoint: &WebhookEndpointId, now: i64, lease: &str) -> Vec<ClaimedMessage> {
    fan_out(store).await;
    store.claim_webhook_messages(endpoint.clone(), now, now + 30_000, 100, lease.to_owned()).await.unwrap()
}

pub(crate) fn attempt(
    endpoint: &WebhookEndpointId,
    message: &ClaimedMessage,
    lease: &str,
    at: i64,
    verdict: Verdict,
) -> WebhookAttemptRecord {
    let succeeded = verdict == Verdict::Succeeded;
    WebhookAttemptRecord {
        endpoint_id: endpoint.clone(),
        message_id: message.id,
        subject_id: message.subject_id.clone(),
        lease: lease.to_owned(),
        event_id: message.event_id,
        body: Some(format!("{{\"message\":{}}}", message.id)),
        at,
        http_status: Some(if succeeded { 200 } else { 500 }),
        error: (!succeeded).then(|| "HTTP 500".to_owned()),
        duration_ms: 3,
        verdict,
        disable_after_ms: 5 * DAY_MS,
        retried: message.attempts > 0,
    }
}

/// The endpoint's messages, oldest first, with how many attempts each has recorded.
async fn messages(store: &Store, endpoint: &WebhookEndpointId) -> Vec<(MessageRecord, usize)> {
    let (page, _) = store.webhook_messages(endpoint, None, 100, 1).await.unwrap();
    page.into_iter().rev().map(|(m, attempts)| (m, attempts.len())).collect()
}

async fn endpoint(store: &Store, tenant: &TenantId, id: &WebhookEndpointId) -> WebhookEndpointRecord {
    store.webhook_endpoint(tenant, id).await.unwrap().unwrap()
}

async fn a_group_settles_each_message_and_endpoint(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let t = 1_000_000;
    // Test events of one endpoint share a subject (the endpoint): they go in order.
    let ordered = add_endpoint(&store, &tenant, None).await;
    for i in 0..3 {
        store.add_webhook_test_event(tenant.clone(), ordered.clone(), t + i).await.unwrap().unwrap();
    }
    let healthy = add_endpoint(&store, &tenant, Some(t - 10)).await;
    store.add_webhook_test_event(tenant.clone(), healthy.clone(), t).await.unwrap().unwrap();
    let gone = add_endpoint(&store, &tenant, None).await;
    for i in 0..2 {
        store.add_webhook_test_event(tenant.clone(), gone.clone(), t + i).await.unwrap().unwrap();
    }
    let stale = add_endpoint(&store, &tenant, Some(t - 6 * DAY_MS)).await;
    store.add_webhook_test_event(tenant.clone(), stale.clone(), t).await.unwrap().unwrap();

    let now = t + 10;
    let first = claim(&store, &ordered, now, "lease-a").await;
    assert_eq!(first.len(), 1, "one message of a subject at a time");
    let mine = claim(&store, &healthy, now, "lease-b").await;
    let gone_claimed = claim(&store, &gone, now, "lease-c").await;
    let stale_claimed = claim(&store, &stale, now, "lease-d").await;
    let later = messages(&store, &ordered).await;

    let disabled = store
        .record_webhook_attempts(vec![
            attempt(&ordered, &first[0], "lease-a", now + 5, Verdict::RetryAt(now + 60_000)),
            attempt(&healthy, &mine[0], "lease-b", now + 5, Verdict::Succeeded),
            attempt(
                &gone,
                &gone_claimed[0],
                "lease-c",
                now + 6,
                Verdict::Disable("the endpoint answered 410 Gone".into()),
            ),
            attempt(&stale, &stale_claimed[0], "lease-d", now + 7, Verdict::RetryAt(now + 60_000)),
            // A lease another daemon took over: the attempt is kept, the message is its.
            attempt(
                &ordered,
                &ClaimedMessage { id: later[1].0.id, ..first[0].clone() },
                "lease-x",
                now + 8,
                Verdict::Succeeded,
            ),
        ])
        .await
        .unwrap();

    let mut disabled: Vec<(String, String)> =
        disabled.into_iter().map(|(id, reason)| (id.as_str().to_owned(), reason)).collect();
    disabled.sort();
    let mut expected = vec![
        (gone.as_str().to_owned(), "the endpoint answered 410 Gone".to_owned()),
        (stale.as_str().to_owned(), "no successful delivery for 5 days".to_owned()),
    ];
    expected.sort();
    assert_eq!(disabled, expected);

    // The retried message waits; its siblings wait behind it; the stale lease changed nothing
    // but its attempt is there.
    let ordered_now = messages(&store, &ordered).await;
    assert_eq!(ordered_now[0].0.status, MessageStatus::Pending);
    assert_eq!(ordered_now[0].0.next_attempt_at, Some(now + 60_000));
    assert_eq!(ordered_now[0].1, 1);
    for (sibling, attempts) in &ordered_now[1..] {
        assert_eq!(sibling.status, MessageStatus::Pending);
        assert!(sibling.next_attempt_at >= Some(now + 60_000), "{sibling:?} waits for the retry");
        assert_eq!(*attempts, usize::from(sibling.id == later[1].0.id));
    }
    assert_eq!(endpoint(&store, &tenant, &ordered).await.failing_since, Some(now + 5));
    assert!(claim(&store, &ordered, now + 100, "lease-e").await.is_empty(), "nothing due before the retry");

    // Success: settled, and the endpoint's failure clock stopped.
    assert_eq!(messages(&store, &healthy).await[0].0.status, MessageStatus::Succeeded);
    let healthy_now = endpoint(&store, &tenant, &healthy).await;
    assert_eq!((healthy_now.status, healthy_now.failing_since), (EndpointStatus::Enabled, None));

    // 410 and five days of failure disable, and fail what was pending.
    for id in [&gone, &stale] {
        assert_eq!(endpoint(&store, &tenant, id).await.status, EndpointStatus::Disabled);
        assert!(messages(&store, id).await.iter().all(|(m, _)| m.status == MessageStatus::Failed));
    }

    // The retry succeeds: the next message of the subject is due at once.
    let retry_at = now + 60_000;
    let again = claim(&store, &ordered, retry_at, "lease-f").await;
    assert_eq!(again.iter().map(|m| m.id).collect::<Vec<_>>(), [first[0].id]);
    let none = store
        .record_webhook_attempts(vec![attempt(
            &ordered,
            &again[0],
            "lease-f",
            retry_at + 1,
            Verdict::Succeeded,
        )])
        .await
        .unwrap();
    assert!(none.is_empty());
    assert_eq!(endpoint(&store, &tenant, &ordered).await.failing_since, None);
    let next = claim(&store, &ordered, retry_at + 1, "lease-g").await;
    assert_eq!(next.iter().map(|m| m.id).collect::<Vec<_>>(), [ordered_now[1].0.id]);

    // Removing an endpoint removes its messages and their attempts, and nothing else's
    // (PostgreSQL: triggers, in place of the foreign keys of SQLite).
    let count = |sql: &'static str| {
        let url = url.clone();
        async move { backend.count(&url, sql).await }
    };
    let (messages_before, attempts_before) = (
        count("SELECT COUNT(*) FROM webhook_messages").await,
        count("SELECT COUNT(*) FROM webhook_attempts").await,
    );
    assert!(herald_tests::remove_webhook_endpoint(&store, &tenant, &ordered, 2).await);
    assert_eq!(count("SELECT COUNT(*) FROM webhook_messages").await, messages_before - 3);
    assert_eq!(count("SELECT COUNT(*) FROM webhook_attempts").await, attempts_before - 3);
    // Settled messages are deleted by housekeeping with their attempts.
    store.delete_settled_webhook_messages(i64::MAX, 1_000).await.unwrap();
    assert_eq!(count("SELECT COUNT(*) FROM webhook_messages WHERE status <> 'pending'").await, 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_attempts a WHERE NOT EXISTS (SELECT 1 FROM webhook_messages m WHERE m.id = a.message_id)").await,
        0
    );
    store.close().await;
}
both_backends!(
    a_group_settles_each_message_and_endpoint_on_each_backend,
    a_group_settles_each_message_and_endpoint
);

/// Retention deletes the messages settled before its time, then the events before it that no
/// message needs, in writes of at most `chunk` rows each; it reads the events in id order only
/// up to the first that occurred at or after its time (the events after that one wait for a
/// later run), not the whole outbox.
async fn retention_deletes_in_chunks_up_to_the_first_recent_event(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    add_endpoint(&store, &tenant, None).await;
    for i in 0..30 {
        store.add_suppression(suppression(&tenant, i)).await.unwrap();
    }
    fan_out(&store).await;
    let nth_event = |n: usize| format!("(SELECT id FROM webhook_events ORDER BY id LIMIT 1 OFFSET {n})");
    backend
        .execute(
            &url,
            &[
                // The first 25 messages settled long ago; the last 5 are still pending.
                "UPDATE webhook_messages SET status = 'succeeded', updated_at = 100
                 WHERE event_id IN (SELECT id FROM webhook_events ORDER BY id LIMIT 25)"
                    .to_owned(),
                // The 21st event occurred after the retention's time.
                format!("UPDATE webhook_events SET occurred_at = 5000 WHERE id = {}", nth_event(20)),
            ],
        )
        .await;
    let count = |sql: &'static str| {
        let url = url.clone();
        async move { backend.count(&url, sql).await }
    };
    assert_eq!(store.delete_settled_webhook_messages(1_000, 7).await.unwrap(), 25, "in chunks of 7");
    assert_eq!(count("SELECT COUNT(*) FROM webhook_messages").await, 5, "the pending ones kept");
    assert_eq!(count("SELECT COUNT(*) FROM webhook_events").await, 10, "the first 20 events deleted");
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events WHERE occurred_at < 1000 AND id < (SELECT MIN(event_id) FROM webhook_messages)").await,
        4,
        "the 4 old events after the recent one, unneeded, wait for a later run"
    );
    backend
        .execute(&url, &[format!("UPDATE webhook_events SET occurred_at = 30 WHERE id = {}", nth_event(0))])
        .await;
    assert_eq!(store.delete_settled_webhook_messages(1_000, 7).await.unwrap(), 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events").await,
        5,
        "only the pending messages' events left"
    );
    // An old event the fan-out has not passed yet (written behind the writer's back, so that
    // SQLite's writer does not fan it out either) has no message yet, and is kept.
    backend
        .execute(
            &url,
            &[format!(
                "INSERT INTO webhook_events (tenant_id, event_type, subject_id, data, occurred_at)
                 VALUES ('{tenant}', 'suppression.created', 'sup_late', '{{}}', 10)"
            )],
        )
        .await;
    assert_eq!(store.delete_settled_webhook_messages(1_000, 7).await.unwrap(), 0);
    assert_eq!(count("SELECT COUNT(*) FROM webhook_events").await, 6, "not fanned out yet: kept");
    assert_eq!(fan_out(&store).await, 1);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_messages m JOIN webhook_events v ON v.id = m.event_id WHERE v.subject_id = 'sup_late'").await,
        1
    );
    store.close().await;
}
both_backends!(
    retention_deletes_in_chunks_up_to_the_first_recent_event_on_each_backend,
    retention_deletes_in_chunks_up_to_the_first_recent_event
);

/// A group of 120 attempts, one per endpoint, half succeeding: every message settles, and each
/// endpoint's failure clock starts, stops or keeps its start.
async fn a_large_group_settles_every_message(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, _) = open(backend, dir.path()).await;
    let t = 2_000_000;
    let mut records = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..120 {
        // Every third endpoint was failing already.
        let since = (i % 3 == 0).then_some(t - 5);
        let id = add_endpoint(&store, &tenant, since).await;
        store.add_webhook_test_event(tenant.clone(), id.clone(), t).await.unwrap().unwrap();
        let lease = format!("lease-{i}");
        let claimed = claim(&store, &id, t + 1, &lease).await;
        let verdict = if i % 2 == 0 { Verdict::Succeeded } else { Verdict::GiveUp };
        records.push(attempt(&id, &claimed[0], &lease, t + 2, verdict));
        endpoints.push(id);
    }
    assert!(store.record_webhook_attempts(records).await.unwrap().is_empty());
    for (i, id) in endpoints.iter().enumerate() {
        let (message, attempts) = messages(&store, id).await.remove(0);
        let expected = if i % 2 == 0 { MessageStatus::Succeeded } else { MessageStatus::Failed };
        assert_eq!((message.status, attempts), (expected, 1), "endpoint {i}");
        let since = match (i % 2, i % 3) {
            (0, _) => None,
            (_, 0) => Some(t - 5),
            _ => Some(t + 2),
        };
        assert_eq!(endpoint(&store, &tenant, id).await.failing_since, since, "endpoint {i}");
    }
    store.close().await;
}
both_backends!(a_large_group_settles_every_message_on_each_backend, a_large_group_settles_every_message);

/// A manual suppression of `user{i}@example.com`, created at `10 + i`.
pub(crate) fn suppression(tenant: &TenantId, i: i64) -> NewSuppression {
    NewSuppression {
        tenant_id: tenant.clone(),
        channel: Channel::Email,
        recipient_key: format!("user{i}@example.com"),
        recipient_masked: "u***@example.com".into(),
        category: None,
        reason: SuppressionReason::Manual,
        transaction_id: None,
        created_at: 10 + i,
    }
}

/// Events reach each enabled endpoint that wants them once, in the order of the events, and a test
/// event keeps the one message it was written with. SQLite fans out the transaction's events by
/// one statement just before its commit, and the fan-out task finds nothing left; on PostgreSQL
/// the fan-out task makes them all.
async fn events_are_fanned_out_once_in_order(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let count = |sql: &'static str| {
        let url = url.clone();
        async move { backend.count(&url, sql).await }
    };
    let every = add_endpoint(&store, &tenant, None).await;
    let deletions =
        add_endpoint_as(&store, &tenant, None, Some(",suppression.deleted,"), EndpointStatus::Enabled).await;
    let disabled = add_endpoint_as(&store, &tenant, None, None, EndpointStatus::Disabled).await;
    store.add_webhook_test_event(tenant.clone(), every.clone(), 1).await.unwrap().unwrap();
    let mut suppressions = Vec::new();
    for i in 0..300 {
        let (added, _) = store.add_suppression(suppression(&tenant, i)).await.unwrap();
        suppressions.push(added.id);
    }
    for id in &suppressions[..20] {
        store.delete_suppression(&tenant, id).await.unwrap().unwrap();
    }
    assert_eq!(count("SELECT COUNT(*) FROM webhook_events").await, 321);
    if backend == Backend::Sqlite {
        assert_eq!(count("SELECT COUNT(*) FROM webhook_messages").await, 321 + 20, "made with their events");
        assert_eq!(fan_out(&store).await, 0, "nothing left to fan out");
    } else {
        assert_eq!(count("SELECT COUNT(*) FROM webhook_messages").await, 1, "the test event's, with it");
        assert_eq!(fan_out_in(&store, 256).await, 256, "a group");
        assert_eq!(fan_out(&store).await, 321 - 256, "the rest, the test event passed too");
        assert_eq!(fan_out(&store).await, 0, "nothing left to fan out");
    }

    let per_endpoint = |id: &WebhookEndpointId| {
        let url = url.clone();
        let sql = format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{id}'");
        async move { backend.count(&url, &sql).await }
    };
    assert_eq!(per_endpoint(&every).await, 321);
    assert_eq!(per_endpoint(&deletions).await, 20);
    assert_eq!(per_endpoint(&disabled).await, 0);
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM (SELECT endpoint_id, event_id FROM webhook_messages
             GROUP BY endpoint_id, event_id HAVING COUNT(*) > 1) twice"
        )
        .await,
        0,
        "each event once per endpoint"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM webhook_messages a JOIN webhook_messages b
             ON b.endpoint_id = a.endpoint_id AND b.id > a.id AND b.event_id < a.event_id"
        )
        .await,
        0,
        "messages in the order of their events"
    );
    // A suppression's deletion waits behind its creation: the first claim takes no deletion.
    let claimed = store
        .claim_webhook_messages(every.clone(), i64::MAX / 2, i64::MAX / 2, 1_000, "l".into())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 301, "the test event and every suppression's first event");
    assert!(claimed.iter().all(|m| m.event_type != EventType::SuppressionDeleted));
    store.close().await;
}
both_backends!(events_are_fanned_out_once_in_order_on_each_backend, events_are_fanned_out_once_in_order);

/// SQLite: when the fan-out in the change's transaction fails, the change commits with its events
/// all the same, and the fan-out task makes their messages afterwards, once each, for the
/// endpoints that existed when they occurred.
#[tokio::test]
async fn a_failed_fan_out_leaves_its_events_to_the_fan_out_task() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite;
    let (store, tenant, url) = open(backend, dir.path()).await;
    let endpoint = add_endpoint(&store, &tenant, None).await;
    store.add_webhook_test_event(tenant.clone(), endpoint.clone(), 1).await.unwrap().unwrap();
    // Refuses every message but the test event's (already written).
    backend
        .execute(
            &url,
            &["CREATE TRIGGER refuse_messages BEFORE INSERT ON webhook_messages
               BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                .to_owned()],
        )
        .await;
    for i in 0..5 {
        store
            .add_suppression(suppression(&tenant, i))
            .await
            .expect("the change commits though its fan-out failed");
    }
    assert_eq!(backend.count(&url, "SELECT COUNT(*) FROM suppressions").await, 5);
    assert_eq!(backend.count(&url, "SELECT COUNT(*) FROM webhook_events").await, 6);
    assert_eq!(backend.count(&url, "SELECT COUNT(*) FROM webhook_messages").await, 1);
    // An endpoint added after the events (they occurred at 10–14) gets none of them.
    let late = add_endpoint(&store, &tenant, None).await;
    backend
        .execute(&url, &[format!("UPDATE webhook_endpoints SET created_at = 1000 WHERE id = '{late}'")])
        .await;
    backend.execute(&url, &["DROP TRIGGER refuse_messages".to_owned()]).await;
    // The test event's own transaction moved the cursor past it.
    assert_eq!(fan_out(&store).await, 5);
    assert_eq!(fan_out(&store).await, 0);
    assert_eq!(backend.count(&url, "SELECT COUNT(*) FROM webhook_messages").await, 6);
    assert_eq!(
        backend
            .count(&url, &format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{late}'"))
            .await,
        0,
        "no event from before the endpoint was added"
    );
    store.close().await;
}

/// SQLite: a transaction catches up, before its commit, the events a fan-out left behind only while
/// they are few (a short stall at a steady load). Once more than 64 wait (a saturated writer left
/// a burst's events to the fan-out task), a short transaction within the burst leaves them, and
/// its own, to the task: its commit would otherwise make the messages of the whole burst so far.
#[tokio::test]
async fn a_short_transaction_catches_up_a_few_events_left_behind_not_a_bursts() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::Sqlite;
    let (store, tenant, url) = open(backend, dir.path()).await;
    add_endpoint(&store, &tenant, None).await;
    let messages = || backend.count(&url, "SELECT COUNT(*) FROM webhook_messages");
    let refuse = "CREATE TRIGGER refuse_messages BEFORE INSERT ON webhook_messages
                  BEGIN SELECT RAISE(ABORT, 'refused by the test'); END";
    let mut next = 0;
    let mut add = async |n: i64| {
        for _ in 0..n {
            store.add_suppression(suppression(&tenant, next)).await.unwrap();
            next += 1;
        }
    };
    // A few left behind: the next transaction makes their messages with its own.
    backend.execute(&url, &[refuse.to_owned()]).await;
    add(10).await;
    backend.execute(&url, &["DROP TRIGGER refuse_messages".to_owned()]).await;
    assert_eq!(messages().await, 0);
    add(1).await;
    assert_eq!(messages().await, 11, "caught up before the commit");
    assert_eq!(fan_out(&store).await, 0, "nothing left to the task");
    // A burst's worth left behind: the next transaction leaves them, and its own event.
    backend.execute(&url, &[refuse.to_owned()]).await;
    add(70).await;
    backend.execute(&url, &["DROP TRIGGER refuse_messages".to_owned()]).await;
    add(1).await;
    assert_eq!(messages().await, 11, "left to the fan-out task");
    assert_eq!(fan_out(&store).await, 71, "the task makes them, in one group");
    assert_eq!(messages().await, 82);
    // The cursor has caught up: a transaction fans out its own events again.
    add(1).await;
    assert_eq!(messages().await, 83);
    store.close().await;
}

/// A notification's event keeps only what can change after it (migration 0019: `{}` for a new
/// notification, the failure fields once there are some); the claim completes it from the
/// notification, with the event type's status. An event written whole before that migration is
/// claimed as it was.
async fn a_notification_event_is_stored_compact_and_claimed_whole(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let endpoint = add_endpoint(&store, &tenant, None).await;
    let notification = |id: &str, status: &str, reason: &str, retryable: &str, retries: i64| {
        format!(
            "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body,
                                        status, failure_reason, retryable, retry_count, created_at, updated_at, category)
             VALUES ('{id}', '{tenant}', 'app_shop', 'in_app', 'user_1', 'u****1', 'Hi', '{status}', {reason},
                     {retryable}, {retries}, 5, 7, 'billing')"
        )
    };
    let legacy = r#"{"transaction_id":"ntf_old","application_id":"app_shop","application_name":"Old name","channel":"sms","recipient_masked":"+14*******00","status":"sent","failure_reason":null,"retryable":0,"retry_count":0,"created_at":1,"category":null}"#;
    backend
        .execute(
            &url,
            &[
                format!("INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_shop', '{tenant}', 'Shop', 1)"),
                notification("ntf_new", "delivered", "NULL", "FALSE", 0),
                notification("ntf_failed", "failed", "'550 no such user'", "TRUE", 2),
                format!(
                    "INSERT INTO webhook_events (tenant_id, application_id, event_type, subject_id, data, occurred_at)
                     VALUES ('{tenant}', 'app_shop', 'notification.sent', 'ntf_old', '{legacy}', 3)"
                ),
            ],
        )
        .await;
    // (On PostgreSQL a statement's notification events are a batch until the fan-out reads them.)
    fan_out(&store).await;
    assert_eq!(
        backend
            .count(&url, "SELECT COUNT(*) FROM webhook_events WHERE subject_id = 'ntf_new' AND data = '{}'")
            .await,
        1,
        "a new notification's event holds nothing the notification does not"
    );
    let claimed = claim(&store, &endpoint, i64::MAX / 2, "l").await;
    let data = |subject: &str| -> serde_json::Value {
        let message = claimed.iter().find(|m| m.subject_id == subject).unwrap_or_else(|| panic!("{subject}"));
        serde_json::from_str(&message.data).unwrap()
    };
    let new = data("ntf_new");
    assert_eq!(new["transaction_id"], "ntf_new");
    assert_eq!(new["application_id"], "app_shop");
    assert_eq!(new["application_name"], "Shop");
    assert_eq!(new["channel"], "in_app");
    assert_eq!(new["recipient_masked"], "u****1");
    assert_eq!(new["status"], "delivered");
    assert!(new["failure_reason"].is_null(), "{new}");
    assert!(new["retryable"] == false || new["retryable"] == 0, "{new}");
    assert_eq!(new["retry_count"], 0);
    assert_eq!(new["created_at"], 5);
    assert_eq!(new["category"], "billing");
    let failed = data("ntf_failed");
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "550 no such user");
    assert!(failed["retryable"] == true || failed["retryable"] == 1, "{failed}");
    assert_eq!(failed["retry_count"], 2);
    let old = data("ntf_old");
    assert_eq!(old, serde_json::from_str::<serde_json::Value>(legacy).unwrap(), "claimed as it was written");
    store.close().await;
}
both_backends!(
    a_notification_event_is_stored_compact_and_claimed_whole_on_each_backend,
    a_notification_event_is_stored_compact_and_claimed_whole
);

/// A removed endpoint is gone from every read of the API and from the dispatcher's at once, gets
/// no message for a later event and holds nothing back for retention (it was paused, owed
/// events); its messages wait for the purge, which deletes them a group at a time, then the
/// endpoint.
async fn a_removed_endpoint_is_gone_at_once_and_purged_after(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let count = |sql: String| {
        let url = url.clone();
        async move { backend.count(&url, &sql).await }
    };
    let messages_of =
        |id: &WebhookEndpointId| format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{id}'");
    let kept = add_endpoint(&store, &tenant, None).await;
    let removed = add_endpoint(&store, &tenant, None).await;
    for i in 0..3 {
        store.add_suppression(suppression(&tenant, i)).await.unwrap();
    }
    fan_out(&store).await;
    assert_eq!(count(messages_of(&removed)).await, 3);
    assert_eq!(
        store.pause_webhook_endpoint(removed.clone(), 20, FanOutLock::Wait).await.unwrap(),
        Some(true)
    );

    let stranger = store.create_tenant("U".into()).await.unwrap().id;
    assert!(!store.remove_webhook_endpoint(stranger, removed.clone(), 30).await.unwrap(), "not its");
    assert!(store.remove_webhook_endpoint(tenant.clone(), removed.clone(), 30).await.unwrap());
    assert!(
        !store.remove_webhook_endpoint(tenant.clone(), removed.clone(), 31).await.unwrap(),
        "removed once"
    );
    assert!(store.webhook_endpoint(&tenant, &removed).await.unwrap().is_none());
    let listed: Vec<WebhookEndpointId> =
        store.webhook_endpoints(&tenant).await.unwrap().into_iter().map(|e| e.id).collect();
    assert_eq!(listed, std::slice::from_ref(&kept));
    let enable = EndpointChanges { status: Some((EndpointStatus::Enabled, None)), ..Default::default() };
    assert!(
        store.update_webhook_endpoint(tenant.clone(), removed.clone(), enable, 32).await.unwrap().is_none()
    );
    assert!(store.rotate_webhook_secret(tenant.clone(), removed.clone(), 40, 32).await.unwrap().is_none());
    assert!(store.add_webhook_test_event(tenant.clone(), removed.clone(), 32).await.unwrap().is_none());
    assert!(store.due_webhook_endpoints().await.unwrap().iter().all(|e| e.id != removed));
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL".into()).await,
        0
    );

    for i in 3..5 {
        store.add_suppression(suppression(&tenant, i)).await.unwrap();
    }
    fan_out(&store).await;
    assert_eq!(count(messages_of(&kept)).await, 5);
    assert_eq!(count(messages_of(&removed)).await, 3, "no message made after the removal; none deleted yet");

    let mut steps = Vec::new();
    while let Some(step) = store.purge_removed_webhook_endpoint(2).await.unwrap() {
        steps.push((step.messages, step.endpoint));
    }
    assert_eq!(steps, [(2, false), (1, true)]);
    assert_eq!(count(messages_of(&removed)).await, 0);
    assert_eq!(count(messages_of(&kept)).await, 5);
    assert_eq!(count(format!("SELECT COUNT(*) FROM webhook_endpoints WHERE id = '{removed}'")).await, 0);
    store.close().await;
}
both_backends!(
    a_removed_endpoint_is_gone_at_once_and_purged_after_on_each_backend,
    a_removed_endpoint_is_gone_at_once_and_purged_after
);
