//! In-app notifications' events while their tenant's only endpoint is paused (a dead endpoint
//! subscribed): owed, caught up each once and in order, failed when it is disabled, kept by
//! retention while owed, on each backend. On PostgreSQL a writer's statement writes them as
//! batches (migration 0023), made rows only when something reads them: these tests look at the
//! batches too, and at what the fan-out does with the events of writers still in flight and
//! with a batch wider than a reader looks back.

use herald_common::{
    api::webhooks::EndpointStatus,
    ids::{TenantId, WebhookEndpointId},
};
use herald_daemon::store::{ENDPOINT_REMOVAL_GROUP, Store};
use herald_tests::{Backend, both_backends};

use crate::{
    webhook_pause::{
        catch_up, count, events, made_twice, messages_of, pause, paused, probe, set_status, settle,
    },
    webhook_store::{add_endpoint, fan_out, open},
};

const BATCHES: &str = "SELECT COUNT(*) FROM webhook_event_batches";

/// One statement inserting `n` delivered in-app notifications `{prefix}{i}` of `tenant`'s
/// application `app_shop`, as a writer's batch does.
fn in_app(tenant: &TenantId, prefix: &str, n: usize, at: i64) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "('{prefix}{i:03}', '{tenant}', 'app_shop', 'in_app', 'user_{i}', 'u****{i}', 'Hi', 'delivered', {at}, {at})"
            )
        })
        .collect();
    format!(
        "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body,
                                    status, created_at, updated_at)
         VALUES {}",
        rows.join(", ")
    )
}

/// A store at `dir` with a tenant and its application `app_shop`.
async fn shop(backend: Backend, dir: &std::path::Path) -> (Store, TenantId, String) {
    let (store, tenant, url) = open(backend, dir).await;
    with_application(backend, &url, &tenant).await;
    (store, tenant, url)
}

async fn with_application(backend: Backend, url: &str, tenant: &TenantId) {
    let app = format!(
        "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_shop', '{tenant}', 'Shop', 1)"
    );
    backend.execute(url, &[app]).await;
}

/// A second tenant with its application `app_other` and an endpoint, paused.
async fn paused_shop(backend: Backend, url: &str, store: &Store) -> (TenantId, WebhookEndpointId) {
    let other = store.create_tenant("U".into()).await.unwrap().id;
    let other_app = format!(
        "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_other', '{other}', 'O', 1)"
    );
    backend.execute(url, &[other_app]).await;
    let dead = add_endpoint(store, &other, None).await;
    assert!(pause(store, &dead).await);
    (other, dead)
}

/// No event got two messages, and each endpoint's messages are in the order of their events.
async fn once_in_order(backend: Backend, url: &str, store: &Store) {
    let out_of_order = "SELECT COUNT(*) FROM webhook_messages a JOIN webhook_messages b
                        ON b.endpoint_id = a.endpoint_id AND b.id > a.id AND b.event_id <= a.event_id";
    assert_eq!(count(backend, url, out_of_order).await, 0, "each event once, in order");
    for endpoint in store.due_webhook_endpoints().await.unwrap() {
        assert_eq!(made_twice(backend, url, &endpoint.id).await, 0);
    }
}

async fn in_app_events_are_owed_to_a_paused_endpoint_and_caught_up_in_order(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = shop(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    backend.execute(&url, &[in_app(&tenant, "ntf_a", 3, 10)]).await;
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 3, "fanned out while it answers");
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 0, "made rows to be fanned out");
    }

    assert!(pause(&store, &dead).await);
    // Five writers' statements of ten, between events written as rows (suppressions).
    let statements: Vec<String> =
        (0..5).map(|s| in_app(&tenant, &format!("ntf_b{s}_"), 10, 20 + s)).collect();
    backend.execute(&url, &statements[..2]).await;
    events(&store, &tenant, 0, 5, 0).await;
    backend.execute(&url, &statements[2..]).await;
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 3, "no message for an owed event");
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 5, "owed only to a paused endpoint: left as batches");
        assert_eq!(
            count(backend, &url, "SELECT COUNT(*) FROM webhook_events WHERE subject_id LIKE 'ntf_b%'").await,
            0
        );
    }
    // Retention keeps what a paused endpoint is owed.
    store.delete_settled_webhook_messages(i64::MAX, 1_000).await.unwrap();
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 5, "owed batches kept");
    }

    assert_eq!(probe(&store, &dead).await, (1, true), "a probe's one");
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 4, "a probe makes one batch rows, not a group");
    }
    assert_eq!(catch_up(&store, &dead, 24).await, (24, true));
    let (made, still) = catch_up(&store, &dead, 1_000).await;
    assert_eq!((made, still), (30, false), "the rest, and resumed");
    assert!(!paused(&store, &dead).await);
    assert_eq!(messages_of(backend, &url, &dead).await, 58);
    once_in_order(backend, &url, &store).await;
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 0, "every batch read and made rows");
    }
    // Resumed, its tenant's next statement is fanned out to it again.
    backend.execute(&url, &[in_app(&tenant, "ntf_c", 4, 40)]).await;
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &dead).await, 62);
    once_in_order(backend, &url, &store).await;
    store.close().await;
}
both_backends!(
    in_app_events_are_owed_to_a_paused_endpoint_and_caught_up_in_order_on_each_backend,
    in_app_events_are_owed_to_a_paused_endpoint_and_caught_up_in_order
);

/// Disabled while paused, an endpoint's owed in-app events become failed messages (`recover`
/// finds them); once no paused or unsettled endpoint is owed them, retention deletes them.
async fn owed_in_app_events_fail_when_disabled_and_go_with_retention(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = shop(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    pause(&store, &dead).await;
    backend.execute(&url, &[in_app(&tenant, "ntf_a", 7, 10), in_app(&tenant, "ntf_b", 5, 11)]).await;
    fan_out(&store).await;
    set_status(&store, &tenant, &dead, EndpointStatus::Disabled, 500).await;
    assert_eq!(settle(&store).await, 1);
    let failed =
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{dead}' AND status = 'failed'");
    assert_eq!(count(backend, &url, &failed).await, 12, "each owed event failed, once");
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 0, "read to be failed: made rows");
    }
    set_status(&store, &tenant, &dead, EndpointStatus::Enabled, 600).await;
    assert_eq!(store.recover_webhook_messages(dead.clone(), 0, 700).await.unwrap(), 12);

    // Paused again, then deleted: what it was owed is nobody's, and retention takes it.
    pause(&store, &dead).await;
    backend.execute(&url, &[in_app(&tenant, "ntf_c", 3, 900)]).await;
    fan_out(&store).await;
    store.delete_settled_webhook_messages(i64::MAX, 1_000).await.unwrap();
    let owed = "SELECT COUNT(*) FROM webhook_events WHERE subject_id LIKE 'ntf_c%'";
    match backend {
        Backend::Postgres => assert_eq!(count(backend, &url, BATCHES).await, 1, "kept while owed"),
        Backend::Sqlite => assert_eq!(count(backend, &url, owed).await, 3, "kept while owed"),
    }
    herald_tests::remove_webhook_endpoint(&store, &tenant, &dead, ENDPOINT_REMOVAL_GROUP).await;
    // Not before they are as old as retention keeps them.
    store.delete_settled_webhook_messages(900, 1).await.unwrap();
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 1, "not old enough yet");
    }
    store.delete_settled_webhook_messages(i64::MAX, 1).await.unwrap();
    assert_eq!(count(backend, &url, owed).await, 0);
    if backend == Backend::Postgres {
        assert_eq!(count(backend, &url, BATCHES).await, 0, "owed to no one: deleted");
    }
    store.close().await;
}
both_backends!(
    owed_in_app_events_fail_when_disabled_and_go_with_retention_on_each_backend,
    owed_in_app_events_fail_when_disabled_and_go_with_retention
);

/// PostgreSQL: a writer's statement in flight (its events' ids taken, not committed) holds the
/// fan-out back below its ids, batches or not, while another tenant's batches owed only to a
/// paused endpoint are passed and left; at its commit every event is fanned out, in id order.
#[tokio::test]
async fn the_fan_out_waits_for_a_batch_in_flight_and_passes_those_owed_to_paused_endpoints() {
    use sqlx::Connection;
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = shop(backend, dir.path()).await;
    let live = add_endpoint(&store, &tenant, None).await;
    let (other, dead) = paused_shop(backend, &url, &store).await;

    let mut first = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut first).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(in_app(&tenant, "ntf_a", 3, 10))).execute(&mut first).await.unwrap();
    // A later writer of both tenants commits first.
    let later = in_app(&tenant, "ntf_b", 2, 11);
    let later_other = in_app(&other, "ntf_o", 4, 11).replace("app_shop", "app_other");
    backend.execute(&url, &[later, later_other]).await;
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &live).await, 0, "held below the writer in flight");
    sqlx::query("COMMIT").execute(&mut first).await.unwrap();
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &live).await, 5, "all of its tenant's, once committed");
    once_in_order(backend, &url, &store).await;
    let subjects: Vec<String> = sqlx::query_scalar(
        "SELECT subject_id FROM webhook_messages WHERE endpoint_id = $1 ORDER BY event_id",
    )
    .bind(live.to_string())
    .fetch_all(&mut sqlx::PgConnection::connect(&url).await.unwrap())
    .await
    .unwrap();
    assert_eq!(subjects, ["ntf_a000", "ntf_a001", "ntf_a002", "ntf_b000", "ntf_b001"], "in id order");
    assert_eq!(
        count(backend, &url, "SELECT COUNT(*) FROM webhook_event_batches WHERE subject_ids[1] LIKE 'ntf_o%'")
            .await,
        1,
        "the paused endpoint's tenant's batch passed and left"
    );
    assert_eq!(messages_of(backend, &url, &dead).await, 0);
    assert_eq!(catch_up(&store, &dead, 1_000).await, (4, false), "read by its catch-up");
    store.close().await;
}

/// A fan-out of a group of one (the fan-out task's look while it holds back in a burst): on
/// PostgreSQL it passes every event no endpoint wants (a paused endpoint's tenant's) and takes
/// none of them, then takes one an endpoint wants; on SQLite it counts every event, wanted or
/// not (so the task's hold-back bound goes on counting: the safe side).
async fn a_group_of_one_passes_what_no_endpoint_wants_and_takes_one_that_one_does(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = shop(backend, dir.path()).await;
    let live = add_endpoint(&store, &tenant, None).await;
    let (other, dead) = paused_shop(backend, &url, &store).await;

    let unwanted = in_app(&other, "ntf_o", 4, 10).replace("app_shop", "app_other");
    backend.execute(&url, &[unwanted.clone(), unwanted.replace("ntf_o", "ntf_p")]).await;
    let taken = store.fan_out_webhook_events(1).await.unwrap();
    let wanted_first = in_app(&tenant, "ntf_a", 3, 11);
    match backend {
        Backend::Postgres => {
            assert_eq!(taken, Some(0), "none of the paused endpoint's tenant's events is taken");
            backend.execute(&url, &[wanted_first]).await;
            assert_eq!(store.fan_out_webhook_events(1).await.unwrap(), Some(1), "one an endpoint wants");
            assert_eq!(messages_of(backend, &url, &live).await, 1);
        }
        Backend::Sqlite => {
            assert_eq!(taken, Some(1), "SQLite's group counts any event");
            backend.execute(&url, &[wanted_first]).await;
        }
    }
    fan_out(&store).await;
    assert_eq!(messages_of(backend, &url, &live).await, 3, "the rest, each once");
    assert_eq!(messages_of(backend, &url, &dead).await, 0);
    once_in_order(backend, &url, &store).await;
    assert_eq!(catch_up(&store, &dead, 1_000).await, (8, false), "owed to the paused one all the same");
    store.close().await;
}

both_backends!(
    a_group_of_one_passes_what_no_endpoint_wants_and_takes_one_that_one_does_on_each_backend,
    a_group_of_one_passes_what_no_endpoint_wants_and_takes_one_that_one_does
);

/// PostgreSQL: a statement whose events' ids span more than a reader looks back
/// (`herald_webhook_batch_span()`, made 0 here) writes them as rows at once.
#[tokio::test]
async fn a_batch_wider_than_a_reader_looks_back_is_written_as_rows() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = shop(backend, dir.path()).await;
    let dead = add_endpoint(&store, &tenant, None).await;
    pause(&store, &dead).await;
    let narrow = "CREATE OR REPLACE FUNCTION herald_webhook_batch_span() RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$ SELECT 0::BIGINT $$";
    backend
        .execute(&url, &[narrow.to_owned(), in_app(&tenant, "ntf_w", 3, 10), in_app(&tenant, "ntf_1", 1, 11)])
        .await;
    assert_eq!(
        count(backend, &url, "SELECT COUNT(*) FROM webhook_events WHERE subject_id LIKE 'ntf_w%'").await,
        3,
        "three ids span two: rows"
    );
    assert_eq!(count(backend, &url, BATCHES).await, 1, "one event spans none: a batch");
    fan_out(&store).await;
    assert_eq!(catch_up(&store, &dead, 1_000).await, (4, false));
    once_in_order(backend, &url, &store).await;
    store.close().await;
}

/// Dispatches through the store's writer, many at once so that they meet in groups (each group
/// one statement on PostgreSQL, whose trigger writes the group's events as batches): each in-app
/// notification of the tenant with an endpoint has one event, in the order of its id; another
/// tenant's (no endpoint) and the emails (queued) have none. On PostgreSQL no batch is wider
/// than a reader looks back (`herald_webhook_batch_span()`, made 4 here: wider ones are rows).
async fn grouped_dispatches_write_each_in_app_event_once(backend: Backend) {
    use herald_common::api::notifications::Channel;

    use crate::batches::notification;
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let app = store.create_application(&tenant, "A".into()).await.unwrap().unwrap().id;
    let live = add_endpoint(&store, &tenant, None).await;
    let quiet = store.create_tenant("Q".into()).await.unwrap().id;
    let quiet_app = store.create_application(&quiet, "Q".into()).await.unwrap().unwrap().id;
    if backend == Backend::Postgres {
        let narrow = "CREATE OR REPLACE FUNCTION herald_webhook_batch_span() RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$ SELECT 4::BIGINT $$";
        backend.execute(&url, &[narrow.to_owned()]).await;
    }
    let mut dispatches = Vec::new();
    for i in 0..500usize {
        let n = match i % 5 {
            0..=2 => notification(&tenant, &app, Channel::InApp, &format!("user-{}", i % 7)),
            3 => notification(&tenant, &app, Channel::Email, "a@example.com"),
            _ => notification(&quiet, &quiet_app, Channel::InApp, &format!("user-{}", i % 7)),
        };
        let store = store.clone();
        dispatches.push(tokio::spawn(async move { store.dispatch(n, None).await }));
    }
    for dispatch in dispatches {
        dispatch.await.unwrap().unwrap();
    }
    if backend == Backend::Postgres {
        let wide = "SELECT COUNT(*) FROM webhook_event_batches WHERE last_id - first_id > 4";
        assert_eq!(count(backend, &url, wide).await, 0, "no batch wider than a reader looks back");
        let batches = count(backend, &url, BATCHES).await;
        assert!(batches < 300, "{batches} batches: the writer's groups wrote several events each, or rows");
    }
    fan_out(&store).await;
    let events = |filter: &str| {
        format!(
            "SELECT COUNT(*) FROM webhook_events v JOIN notifications n ON n.id = v.subject_id
             WHERE v.event_type = 'notification.delivered' AND {filter}"
        )
    };
    let in_app = format!("n.tenant_id = '{tenant}' AND n.channel = 'in_app'");
    assert_eq!(count(backend, &url, &events(&in_app)).await, 300, "one event for each in-app notification");
    let once = format!(
        "SELECT COUNT(DISTINCT subject_id) FROM webhook_events WHERE subject_id IN
         (SELECT id FROM notifications WHERE {})",
        in_app.replace("n.", "")
    );
    assert_eq!(count(backend, &url, &once).await, 300, "each once");
    assert_eq!(
        count(backend, &url, &events(&format!("n.tenant_id = '{quiet}'"))).await,
        0,
        "none without an endpoint"
    );
    let all = format!("SELECT COUNT(*) FROM webhook_events WHERE tenant_id = '{tenant}'");
    assert_eq!(count(backend, &url, &all).await, 300, "none for the emails, queued");
    assert_eq!(messages_of(backend, &url, &live).await, 300);
    once_in_order(backend, &url, &store).await;
    store.close().await;
}

both_backends!(
    grouped_dispatches_write_each_in_app_event_once_on_each_backend,
    grouped_dispatches_write_each_in_app_event_once
);
