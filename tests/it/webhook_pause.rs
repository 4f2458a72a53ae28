//! A dead endpoint's events are owed, not queued (`store/webhooks/pause.rs`), on each backend:
//! paused, it gets no message for a later event; caught up, it gets each once, in event order,
//! and is resumed; disabled, its owed events become failed messages that `recover` finds; and
//! retention keeps them; on PostgreSQL the events being written as it is disabled are settled
//! too. Then the daemon: a dead endpoint trips, is paused (the API shows it), and once it
//! answers every event arrives, each subject's in order, verified by the receiver peer with the
//! official `standardwebhooks` library; and the same with two daemons sharing PostgreSQL.

use std::time::Duration;

use herald_common::{
    api::{
        notifications::Channel,
        webhooks::{EndpointStatus, EventType},
    },
    ids::{TenantId, WebhookEndpointId},
};
use herald_daemon::store::{ENDPOINT_REMOVAL_GROUP, EndpointChanges, FanOutLock, Store};
use herald_tests::{Backend, both_backends, eventually};

use crate::{
    webhook_store::{add_endpoint, fan_out, open, suppression},
    webhooks::{WAIT, endpoint, start_with, suppress},
};

/// Counts with `sql` in the store at `url`.
pub(crate) async fn count(backend: Backend, url: &str, sql: &str) -> i64 {
    backend.count(url, sql).await
}

pub(crate) async fn messages_of(backend: Backend, url: &str, endpoint: &WebhookEndpointId) -> i64 {
    count(backend, url, &format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{endpoint}'"))
        .await
}

pub(crate) async fn paused(store: &Store, endpoint: &WebhookEndpointId) -> bool {
    let due = store.due_webhook_endpoints().await.unwrap();
    due.iter().find(|e| &e.id == endpoint).expect("an enabled endpoint").paused
}

/// Pauses `endpoint`, waiting for PostgreSQL's fan-out cursor; whether it was paused now.
pub(crate) async fn pause(store: &Store, endpoint: &WebhookEndpointId) -> bool {
    store
        .pause_webhook_endpoint(endpoint.clone(), 50, FanOutLock::Wait)
        .await
        .unwrap()
        .expect("waited for the lock")
}

/// Enables or disables `endpoint` at `now`, as a `PATCH` does.
pub(crate) async fn set_status(
    store: &Store,
    tenant: &TenantId,
    endpoint: &WebhookEndpointId,
    status: EndpointStatus,
    now: i64,
) {
    let changes = EndpointChanges { status: Some((status, None)), ..EndpointChanges::default() };
    store.update_webhook_endpoint(tenant.clone(), endpoint.clone(), changes, now).await.unwrap();
}

/// How many events got more than one message to `endpoint` (each message has its own
/// `webhook-id`, so a receiver would take them for two).
pub(crate) async fn made_twice(backend: Backend, url: &str, endpoint: &WebhookEndpointId) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM (SELECT event_id FROM webhook_messages WHERE endpoint_id = '{endpoint}'
         GROUP BY event_id HAVING COUNT(*) > 1) twice"
    );
    count(backend, url, &sql).await
}

/// Makes up to `limit` of `endpoint`'s owed messages: how many, and whether it is still paused.
pub(crate) async fn catch_up(store: &Store, endpoint: &WebhookEndpointId, limit: i64) -> (usize, bool) {
    let done =
        store.catch_up_webhook_endpoint(endpoint.clone(), limit, 100, FanOutLock::Wait, true).await.unwrap();
    done.expect("waited for the lock")
}

/// A probe's catch-up of `endpoint` (it still fails): at most one message, never resumed.
pub(crate) async fn probe(store: &Store, endpoint: &WebhookEndpointId) -> (usize, bool) {
    let done =
        store.catch_up_webhook_endpoint(endpoint.clone(), 1, 100, FanOutLock::Wait, false).await.unwrap();
    done.expect("waited for the lock")
}

/// Adds suppressions `from..to` (an event each) and lifts the first `lifted` of them (another
/// event each, about the same subject), then fans their events out.
pub(crate) async fn events(store: &Store, tenant: &TenantId, from: i64, to: i64, lifted: usize) {
    let mut added = Vec::new();
    for i in from..to {
        added.push(store.add_suppression(suppression(tenant, i)).await.unwrap().0.id);
    }
    for id in &added[..lifted] {
        store.delete_suppression(tenant, id).await.unwrap().unwrap();
    }
    fan_out(store).await;
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
    // A probe (the endpoint still fails) that finds nothing owed leaves it paused: resumed, its
    // later events would make messages again while it is dead.
    assert_eq!(probe(&store, &dead).await, (0, true), "nothing owed yet");
    assert!(paused(&store, &dead).await, "still paused");
    events(&store, &tenant, 10, 60, 20).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 10, "no message for an owed event");
    assert_eq!(messages_of(backend, &url, &live).await, 80, "the live endpoint gets every event");

    // Retention keeps the owed events, which no message refers to yet.
    herald_tests::remove_webhook_endpoint(&store, &tenant, &live, ENDPOINT_REMOVAL_GROUP).await;
    store.delete_settled_webhook_messages(i64::MAX, 1_000).await.unwrap();
    assert_eq!(count(backend, &url, "SELECT COUNT(*) FROM webhook_events").await, 80, "owed events kept");

    // One to probe with, then groups; the last resumes it.
    assert_eq!(probe(&store, &dead).await, (1, true), "a probe's one");
    assert_eq!(catch_up(&store, &dead, 1).await, (1, true));
    assert_eq!(catch_up(&store, &dead, 25).await, (25, true));
    assert_eq!(catch_up(&store, &dead, 1_000).await, (43, false));
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
/// is enabled again `recover` sends them all; the events that occurred while it was disabled
/// are none of them.
async fn a_disabled_endpoint_fails_what_it_is_owed(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    // Another endpoint of the tenant keeps its events written while `dead` is disabled.
    add_endpoint(&store, &tenant, None).await;
    events(&store, &tenant, 0, 3, 0).await;
    pause(&store, &dead).await;
    events(&store, &tenant, 3, 10, 0).await;
    set_status(&store, &tenant, &dead, EndpointStatus::Disabled, 500).await;
    let failed =
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{dead}' AND status = 'failed'");
    assert_eq!(count(backend, &url, &failed).await, 3, "its pending messages failed at once");
    // Three events occur well after it was disabled (at 500), before it is settled.
    events(&store, &tenant, 3_000, 3_003, 0).await;
    // Its owed events fail in groups (here of about 2 events), not in the disabling's write; on
    // PostgreSQL a group is 2 blocks of ids (migration 0027), not 2 ids, or 10 events there
    // would take thousands of groups.
    let (settled, calls) = settle_in(&store, 2).await;
    assert!(settled == 1 && (4..=7).contains(&calls), "settled in {calls} groups");
    assert_eq!(
        count(backend, &url, &failed).await,
        10,
        "and its 7 owed events, each once, not the 3 later ones"
    );
    assert_eq!(settle(&store).await, 0);
    assert_eq!(
        count(backend, &url, "SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL").await,
        0
    );
    set_status(&store, &tenant, &dead, EndpointStatus::Enabled, 600).await;
    assert!(!paused(&store, &dead).await);
    assert_eq!(store.recover_webhook_messages(dead.clone(), 0, 700).await.unwrap(), 10);
    store.close().await;
}
both_backends!(
    a_disabled_endpoint_fails_what_it_is_owed_on_each_backend,
    a_disabled_endpoint_fails_what_it_is_owed
);

/// PostgreSQL: a transaction in flight on a connection of its own that has written an event
/// about `subject` at `at` (its fan-out ran) and not committed yet ([`commit`]).
async fn writing_event(url: &str, tenant: &TenantId, subject: &str, at: i64) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut writer = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut writer).await.unwrap();
    sqlx::query(
        "INSERT INTO webhook_events (tenant_id, event_type, subject_id, data, occurred_at)
         VALUES ($1, 'suppression.created', $2, '{}', $3)",
    )
    .bind(tenant)
    .bind(subject)
    .bind(at)
    .execute(&mut writer)
    .await
    .unwrap();
    writer
}

async fn commit(mut writer: sqlx::PgConnection) {
    sqlx::query("COMMIT").execute(&mut writer).await.unwrap();
}

/// Settles the disabled endpoints, waiting for PostgreSQL's fan-out cursor: how many.
pub(crate) async fn settle(store: &Store) -> usize {
    settle_in(store, 10_000).await.0
}

/// Settles the disabled endpoints in groups of about `range` events until none is left: how
/// many, in how many calls.
async fn settle_in(store: &Store, range: i64) -> (usize, usize) {
    let (mut settled, mut calls) = (0, 0);
    loop {
        let done = store.settle_disabled_webhook_endpoints(800, range, FanOutLock::Wait).await.unwrap();
        let (now, left) = done.expect("waited for the lock");
        (settled, calls) = (settled + now, calls + 1);
        if left == 0 {
            return (settled, calls);
        }
    }
}

/// PostgreSQL: an endpoint disabled while a transaction is writing an event, which commits
/// after the disable did. The fan-out has not reached that event (it goes only as far as no
/// writer in flight can still add to), and passes it by for the disabled
/// endpoints: settling waits until the fan-out has passed it, then makes it a failed message for
/// each, so that `recover` finds it, once.
#[tokio::test]
async fn a_disabled_endpoint_settles_the_events_being_written() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let paused_one = add_endpoint(&store, &tenant, None).await;
    let other = add_endpoint(&store, &tenant, None).await;
    events(&store, &tenant, 0, 3, 0).await;
    pause(&store, &paused_one).await;
    events(&store, &tenant, 3, 5, 0).await;
    let writer = writing_event(&url, &tenant, "sup_in_flight", 300).await;
    for id in [&paused_one, &other] {
        set_status(&store, &tenant, id, EndpointStatus::Disabled, 500).await;
    }
    commit(writer).await;
    let with = |id: &WebhookEndpointId, status: &str| {
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{id}' AND status = '{status}'")
    };
    assert_eq!(count(backend, &url, &with(&paused_one, "failed")).await, 3, "its pending messages");
    assert_eq!(count(backend, &url, &with(&other, "failed")).await, 5, "its pending messages");

    let once = store.settle_disabled_webhook_endpoints(800, 10_000, FanOutLock::Wait).await.unwrap();
    assert_eq!(once, Some((0, 2)), "the fan-out has not passed the event in flight: both wait");
    assert_eq!(fan_out(&store).await, 1);
    assert_eq!(count(backend, &url, &with(&other, "pending")).await, 0, "no message for a disabled endpoint");
    assert_eq!(settle(&store).await, 2);
    assert_eq!(
        count(backend, &url, &with(&paused_one, "failed")).await,
        6,
        "the owed events, and the one in flight"
    );
    assert_eq!(count(backend, &url, &with(&other, "failed")).await, 6, "the event in flight");
    assert_eq!(
        count(backend, &url, "SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL").await,
        0,
        "settled"
    );
    assert_eq!(settle(&store).await, 0, "nothing more to settle");
    set_status(&store, &tenant, &paused_one, EndpointStatus::Enabled, 600).await;
    assert!(!paused(&store, &paused_one).await);
    assert_eq!(
        store.recover_webhook_messages(paused_one.clone(), 0, 700).await.unwrap(),
        6,
        "each event once"
    );
    store.close().await;
}

/// PostgreSQL: disabled while a transaction wrote an event, then enabled again before it was
/// settled: it is caught up from its mark, and the event in flight gets one message, from the
/// fan-out (each message has its own `webhook-id`).
#[tokio::test]
async fn enabled_again_before_it_is_settled_it_gets_each_event_once() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let endpoint = add_endpoint(&store, &tenant, None).await;
    events(&store, &tenant, 0, 3, 0).await;
    let writer = writing_event(&url, &tenant, "sup_in_flight", 300).await;
    set_status(&store, &tenant, &endpoint, EndpointStatus::Disabled, 500).await;
    commit(writer).await;
    set_status(&store, &tenant, &endpoint, EndpointStatus::Enabled, 600).await;
    assert!(paused(&store, &endpoint).await, "marked, not settled");
    assert_eq!(catch_up(&store, &endpoint, 1_000).await, (0, false), "nothing owed: resumed");
    assert_eq!(fan_out(&store).await, 1);
    assert_eq!(catch_up(&store, &endpoint, 1_000).await, (0, false));
    assert_eq!(made_twice(backend, &url, &endpoint).await, 0, "the event in flight's message made once");
    assert_eq!(messages_of(backend, &url, &endpoint).await, 4);
    store.close().await;
}

/// PostgreSQL: the fan-out goes only as far as no transaction writing events can still add to
/// (event ids are not in commit order): past an event committed before a writer took its ids,
/// not past that writer's, though a later event has committed. It waits for no writer (and no
/// writer waits for it), and a writer of another schema in the same database does not hold it
/// back. While another transaction holds its cursor, it does nothing, at once. A pause does not
/// wait for the writer either (it locks the fan-out's cursor, which no writer holds), and the
/// events the fan-out had not reached are owed: the catch-up makes their one message each.
#[tokio::test]
async fn the_fan_out_stops_short_of_the_events_being_written_and_waits_for_no_one() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let other_dir = tempfile::tempdir().unwrap();
    let (other, other_tenant, other_url) = open(backend, other_dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    store.add_suppression(suppression(&tenant, 1)).await.unwrap();
    let writer = writing_event(&url, &tenant, "sup_in_flight", 5).await;
    let other_writer = writing_event(&other_url, &other_tenant, "sup_elsewhere", 5).await;
    store.add_suppression(suppression(&tenant, 2)).await.unwrap();
    let fanned = tokio::time::timeout(Duration::from_secs(1), store.fan_out_webhook_events(100))
        .await
        .expect("the fan-out waits for no writer");
    assert_eq!(fanned.unwrap(), Some(1), "the event before the writer's, not the one after");
    assert_eq!(messages_of(backend, &url, &dead).await, 1);
    let paused = tokio::time::timeout(
        Duration::from_secs(1),
        store.pause_webhook_endpoint(dead.clone(), 50, FanOutLock::Try),
    )
    .await
    .expect("the pause does not wait for the writer");
    assert_eq!(paused.unwrap(), Some(true));
    // Another transaction holding the cursor (another daemon's fan-out, a pause): nothing done,
    // at once, to be tried again.
    let mut holder = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await.unwrap()
    };
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM webhook_fan_out WHERE id = 1 FOR UPDATE").execute(&mut holder).await.unwrap();
    assert_eq!(store.fan_out_webhook_events(100).await.unwrap(), None, "the cursor is held");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(store.fan_out_webhook_events(100).await.unwrap(), Some(0), "the writer is still in flight");
    commit(writer).await;
    assert_eq!(
        store.fan_out_webhook_events(100).await.unwrap(),
        Some(2),
        "the writer's event and the later one"
    );
    assert_eq!(messages_of(backend, &url, &dead).await, 1, "paused before the fan-out reached them: owed");
    assert_eq!(catch_up(&store, &dead, 10).await, (2, false));
    assert_eq!(messages_of(backend, &url, &dead).await, 3, "one each");
    assert_eq!(made_twice(backend, &url, &dead).await, 0);
    commit(other_writer).await;
    assert_eq!(other.fan_out_webhook_events(100).await.unwrap(), Some(1));
    other.close().await;
    store.close().await;
}

/// The daemon: a dead endpoint trips after five failures and is paused (the API shows it);
/// while it is dead its later events make no messages (a probe a second makes one); once it
/// answers, every event arrives, each subject's in order, each event's message made once, and it
/// is resumed. With two daemons sharing PostgreSQL (`daemons` 2, the API's requests to each in
/// turn), whichever trips first pauses it, the other's dispatcher reads it as paused and probes
/// it too, and their catch-ups are serialized by the fan-out's cursor and the endpoint's row.
async fn paused_then_caught_up(backend: Backend, daemons: usize) {
    let extra = vec![
        ("HERALD_WEBHOOK_ENDPOINT_CONCURRENCY", "4".to_owned()),
        ("HERALD_WEBHOOK_RETRY_SCHEDULE", ["100ms"; 20].join(",")),
    ];
    let (first, boot, key, receiver) = start_with(backend, extra.clone()).await;
    let mut others = Vec::new();
    for _ in 1..daemons {
        others.push(first.start_sharing([crate::webhooks::env(), extra.clone()].concat()).await);
    }
    let keys: Vec<_> =
        std::iter::once(key.clone()).chain(others.iter().map(|d| d.with_token(&boot.api_key))).collect();
    let client = |i: usize| &keys[i % keys.len()];
    let url = first.database_url.clone();
    let dead = endpoint(&key, &receiver, "dead", None).await.endpoint.endpoint_id;
    endpoint(&key, &receiver, "live", None).await;
    receiver.set_answers("dead", &["500"]);
    let mut added = Vec::new();
    for i in 0..10 {
        added.push(suppress(client(i), Channel::Email, &format!("a{i}@example.com")).await);
    }
    let paused_sql = "SELECT COUNT(*) FROM webhook_endpoints WHERE paused_after IS NOT NULL";
    eventually("the dead endpoint to be paused", WAIT, || async {
        (count(backend, &url, paused_sql).await == 1).then_some(())
    })
    .await;
    let shown: serde_json::Value = key.get(&format!("/api/v1/webhooks/{dead}")).await.unwrap();
    assert_eq!(
        (shown["status"].as_str(), shown["paused"].as_bool()),
        (Some("enabled"), Some(true)),
        "{shown}"
    );
    assert!(shown["failing_since"].is_string(), "{shown}");
    let before = messages_of(backend, &url, &dead).await;
    for i in 10..60 {
        added.push(suppress(client(i), Channel::Email, &format!("a{i}@example.com")).await);
    }
    for (i, s) in added[..10].iter().enumerate() {
        client(i + 1).delete(&format!("/api/v1/suppressions/{}", s.suppression_id)).await.unwrap();
    }
    receiver.wait_for("live", 70, WAIT).await;
    let during = messages_of(backend, &url, &dead).await - before;
    // Each probe while it is dead makes one message; queued, the 60 events would make 60.
    assert!(
        during <= 10 * daemons as i64,
        "{during} messages made by {daemons} daemon(s) for a paused endpoint's 60 events"
    );

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
    assert_eq!(made_twice(backend, &url, &dead).await, 0, "no event's message made twice");
    assert_eq!(messages_of(backend, &url, &dead).await, 70);
    eventually("the endpoint to be resumed", WAIT, || async {
        (count(backend, &url, paused_sql).await == 0).then_some(())
    })
    .await;
    let shown: serde_json::Value = key.get(&format!("/api/v1/webhooks/{dead}")).await.unwrap();
    assert_eq!((shown["paused"].as_bool(), shown["failing_since"].is_null()), (Some(false), true), "{shown}");
}

async fn a_dead_endpoint_is_paused_then_caught_up(backend: Backend) {
    paused_then_caught_up(backend, 1).await;
}
both_backends!(
    a_dead_endpoint_is_paused_then_caught_up_on_each_backend,
    a_dead_endpoint_is_paused_then_caught_up
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_pause_and_catch_up_a_dead_endpoint_on_postgres() {
    if Backend::Postgres.available() {
        paused_then_caught_up(Backend::Postgres, 2).await;
    }
}
