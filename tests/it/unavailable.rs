//! Storage that cannot be used, by fault injection: the daemon's connection pool held by the
//! test, its SQLite database locked by another process, its writer stopped. Each request answers
//! 503 `unavailable` with `Retry-After`, and once the fault is lifted the same request succeeds:
//! the failed attempt wrote nothing, not even its idempotency key.

use std::time::Duration;

use herald_common::{
    ErrorCode, Problem,
    api::{
        notifications::{Channel, NotificationIn},
        otp::OtpSendIn,
    },
    client::Client,
};
use herald_daemon::store::Store;
use herald_tests::{Backend, TestDaemon, both_backends};
use reqwest::Method;
use sqlx::Connection;
use tokio::sync::watch;

/// An in-app notification: stored at once, no provider involved.
fn in_app(body: &str) -> NotificationIn {
    let mut n = NotificationIn::new(Channel::InApp, "ann", body);
    n.title = Some("Hello".into());
    n
}

async fn post_notification(client: &Client, n: &NotificationIn, key: Option<&str>) -> reqwest::Response {
    let mut request = client.request(Method::POST, "/api/v1/notifications").json(n);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.expect("the daemon answers")
}

/// Asserts the answer is 503 `unavailable` as problem+json with `Retry-After: 1`.
async fn assert_unavailable(response: reqwest::Response, what: &str) {
    assert_eq!(response.status().as_u16(), 503, "{what}");
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(header("content-type").as_deref(), Some("application/problem+json"), "{what}");
    assert_eq!(header("retry-after").as_deref(), Some("1"), "{what}");
    let problem: Problem = response.json().await.expect("a problem body");
    assert_eq!((problem.status, problem.code), (503, ErrorCode::Unavailable), "{what}");
}

/// The notifications stored, counted behind the daemon's back.
async fn stored_notifications(d: &TestDaemon) -> i64 {
    d.backend.count(&d.database_url, "SELECT COUNT(*) FROM notifications").await
}

/// Takes the connections of the daemon's pool and keeps them until the returned sender says
/// `true`. Holders that find the pool empty wait in line ahead of any later request (the pool
/// serves waiters in order), so nothing the daemon asks for afterwards gets a connection.
/// Returns once a holder has one.
async fn hold_the_pool(store: &Store, holders: usize) -> watch::Sender<bool> {
    let (release, released) = watch::channel(false);
    let (taken, mut first) = tokio::sync::mpsc::channel(holders);
    for _ in 0..holders {
        let (store, mut released, taken) = (store.clone(), released.clone(), taken.clone());
        tokio::spawn(async move {
            let held = store.read().await;
            if held.is_ok() {
                let _ = taken.send(()).await;
            }
            let _ = released.wait_for(|done| *done).await;
            drop(held);
        });
    }
    first.recv().await.expect("a holder takes a connection");
    // The other holders queue up meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    release
}

/// Reads and writes while every connection of the pool is taken: each waits out the pool's
/// acquire timeout (PostgreSQL 10 s, SQLite's read pool 30 s) and answers 503. On PostgreSQL
/// the writers borrow from the same pool, so a write that needs no read is 503 too; SQLite's
/// writer has a connection of its own.
async fn a_pool_that_times_out(backend: Backend) {
    // One connection (PostgreSQL: two, one of them the LISTEN connection's).
    let d = TestDaemon::start_with(backend, vec![("HERALD_DATABASE_MAX_CONNECTIONS", "1".into())]).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    // Also puts the key in the daemon's credential cache, so the requests below get past
    // authentication without a connection and wait where the handler reads.
    let first = key.send_notification(&in_app("first"), None).await.unwrap();
    let path = format!("/api/v1/notifications/{}", first.notification_id);

    let release = hold_the_pool(&d.state.store, 2).await;
    let (keyed, unkeyed) = (in_app("keyed"), in_app("unkeyed"));
    let read = key.request(Method::GET, &path).send();
    let keyed_write = post_notification(&key, &keyed, Some("order-1"));
    let write = async {
        if backend == Backend::Postgres { Some(post_notification(&key, &unkeyed, None).await) } else { None }
    };
    let (read, keyed_write, write) = tokio::join!(read, keyed_write, write);
    assert_unavailable(read.unwrap(), "a read").await;
    assert_unavailable(keyed_write, "a dispatch reading its Idempotency-Key").await;
    if let Some(write) = write {
        assert_unavailable(write, "a write on PostgreSQL").await;
    }

    release.send_replace(true);
    let got = key.request(Method::GET, &path).send().await.unwrap();
    assert_eq!(got.status(), 200, "the same read after the fault");
    let again = key.dispatch(&keyed, Some("order-1")).await.unwrap();
    assert!(!again.replayed, "the failed attempt stored no response under its key");
    let mut expected = 2;
    if backend == Backend::Postgres {
        key.send_notification(&unkeyed, None).await.unwrap();
        expected += 1;
    }
    assert_eq!(stored_notifications(&d).await, expected, "each notification once");
    d.stop().await;
}
both_backends!(a_pool_that_times_out_is_503_then_the_request_succeeds, a_pool_that_times_out);

/// Another process holds SQLite's write lock past the writer's busy timeout (10 s): the
/// dispatch's write batch cannot begin and the request is 503; after the lock is released the
/// same request is accepted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_database_is_503_then_the_request_succeeds() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    key.send_notification(&in_app("first"), None).await.unwrap();

    let mut lock = sqlx::SqliteConnection::connect(&d.database_url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut lock).await.unwrap();
    let refused = post_notification(&key, &in_app("keyed"), Some("order-1")).await;
    assert_unavailable(refused, "a dispatch while the database is locked").await;
    sqlx::raw_sql("ROLLBACK").execute(&mut lock).await.unwrap();
    lock.close().await.unwrap();

    let again = key.dispatch(&in_app("keyed"), Some("order-1")).await.unwrap();
    assert!(!again.replayed, "the failed attempt stored no response under its key");
    assert_eq!(stored_notifications(&d).await, 2);
    d.stop().await;
}

/// The store closed under a running daemon (as at shutdown): its writer stopped and its pool
/// closed. A request that reads first meets the closed pool; one that only writes (a dispatch
/// without a key, an OTP send) meets the stopped writer. Each answers 503 at once, and a
/// restarted daemon takes the same requests.
async fn a_stopped_writer(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    // Puts the key in the credential cache: authentication needs no connection below.
    key.send_notification(&in_app("first"), None).await.unwrap();
    d.state.store.close().await;

    let (keyed, unkeyed) = (in_app("keyed"), in_app("unkeyed"));
    let refused = post_notification(&key, &keyed, Some("order-1")).await;
    assert_unavailable(refused, "a dispatch reading its Idempotency-Key").await;
    let refused = post_notification(&key, &unkeyed, None).await;
    assert_unavailable(refused, "a dispatch that only writes").await;
    let otp = OtpSendIn::new(Channel::Email, "ann@example.com");
    let refused = key.request(Method::POST, "/api/v1/otp/send").json(&otp).send().await.unwrap();
    assert_unavailable(refused, "an OTP send").await;

    let d = d.restart().await;
    let again = key.dispatch(&keyed, Some("order-1")).await.unwrap();
    assert!(!again.replayed, "the failed attempt stored no response under its key");
    key.send_notification(&unkeyed, None).await.unwrap();
    assert_eq!(stored_notifications(&d).await, 3, "each notification once");
    d.stop().await;
}
both_backends!(a_stopped_writer_is_503_then_a_restarted_daemon_takes_the_request, a_stopped_writer);
