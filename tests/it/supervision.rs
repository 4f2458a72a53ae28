//! The store's writers under the daemon's supervision, with the faults injected: a panic in a
//! batch is caught (its caller is answered, the panic counted, the writer goes on), `/readyz`
//! turns 503 while writes cannot commit, a writer that keeps panicking stops the daemon
//! non-zero, and the daemon still stops in time after a writer panicked. On both backends.

use std::time::{Duration, Instant};

use herald_common::api::{
    health::TaskState,
    notifications::{Channel, NotificationIn},
};
use herald_daemon::store::{Conn, Store, StoreError, StoreResult};
use herald_tests::{Backend, TestDaemon, both_backends, eventually};
use sqlx::Connection;

/// Submits a write that panics inside the writer's batch.
async fn panic_in_the_writer(store: &Store) -> StoreResult<()> {
    let fault = std::hint::black_box(true);
    store
        .write(move |_: &mut Conn<'_>| {
            Box::pin(async move {
                if fault {
                    panic!("injected into the writer");
                }
                Ok(())
            })
        })
        .await
}

async fn metrics(d: &TestDaemon) -> String {
    d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap()
}

/// One panic: its caller gets an error that says the writer (503, not 500), the panic is
/// counted, the daemon stays ready, writes go on, and a graceful stop takes no longer than usual.
async fn a_writer_panic_is_survived(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let error = panic_in_the_writer(&d.state.store).await.expect_err("the panicking write fails");
    assert!(matches!(error, StoreError::WriterGone), "{error:?}");
    let mut notification = NotificationIn::new(Channel::InApp, "ann", "after the panic");
    notification.title = Some("Still here".to_owned());
    let sent = key.send_notification(&notification, None).await.expect("the writer goes on");
    assert!(!sent.notification_id.as_str().is_empty());
    let ready = d.client.readyz().await.expect("still ready");
    assert_eq!(ready.tasks["store-writer"].state, TaskState::Running);
    let metrics = metrics(&d).await;
    assert!(
        metrics.lines().any(|l| l.starts_with("herald_task_exits_total{")
            && l.contains("task=\"store-writer\"")
            && l.contains("reason=\"panicked\"")),
        "the panic is counted:\n{metrics}"
    );
    let stopping = Instant::now();
    d.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(5), "stopped in {:?}", stopping.elapsed());
}
both_backends!(a_writer_panic_is_survived_on_each_backend, a_writer_panic_is_survived);

/// A writer that panics batch after batch is given up on: the daemon stops by itself and
/// exits with an error naming the writer; writes are refused meanwhile.
async fn a_writer_that_keeps_panicking_stops_the_daemon(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    // Serving first registers the daemon through the writer: the panics come after that, or the
    // start itself fails on the stopped writer instead of the supervisor stopping the daemon.
    eventually("the daemon to serve", Duration::from_secs(10), || async { d.client.readyz().await.ok() })
        .await;
    for _ in 0..herald_daemon::store::WRITER_CRASH_LOOP {
        assert!(panic_in_the_writer(&d.state.store).await.is_err());
    }
    let store = d.state.store.clone();
    let tasks = d.state.tasks.clone();
    let ended = d.exited(Duration::from_secs(10)).await.expect_err("the daemon exits non-zero");
    assert!(ended.to_string().contains("store-writer"), "{ended}");
    assert_eq!(tasks.report()["store-writer"].state, TaskState::Failed);
    let refused = store.write(|_: &mut Conn<'_>| Box::pin(async { Ok(()) })).await;
    assert!(matches!(refused, Err(StoreError::WriterGone)), "{refused:?}");
}
both_backends!(
    a_writer_that_keeps_panicking_stops_the_daemon_on_each_backend,
    a_writer_that_keeps_panicking_stops_the_daemon
);

/// While writes cannot commit, `/readyz` is 503 (reads still work): on SQLite another process
/// holds the write lock; on PostgreSQL the daemon's one writer is held by a long write. Once
/// the fault is lifted the daemon is ready again.
async fn readiness_follows_the_writes(backend: Backend) {
    let d = TestDaemon::start_with(backend, vec![("HERALD_DATABASE_WRITERS", "1".to_owned())]).await;
    d.client.readyz().await.expect("ready");
    // The fault: SQLite's write lock held from another connection, or PostgreSQL's one writer
    // held by a write that sleeps.
    let mut lock_holder = None;
    let mut long_write = None;
    match backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&d.database_url).await.unwrap();
            sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut conn).await.unwrap();
            lock_holder = Some(conn);
        }
        Backend::Postgres => {
            let store = d.state.store.clone();
            long_write = Some(tokio::spawn(async move {
                store
                    .write(|conn: &mut Conn<'_>| {
                        Box::pin(async move {
                            if let Conn::Postgres(pg) = conn {
                                sqlx::query("SELECT pg_sleep(6)").execute(&mut **pg).await?;
                            }
                            Ok(())
                        })
                    })
                    .await
            }));
        }
    }
    let problem = eventually("/readyz to refuse", Duration::from_secs(10), || async {
        d.client.readyz().await.err().and_then(|e| e.problem().cloned())
    })
    .await;
    assert_eq!(problem.status, 503);
    assert!(problem.detail.as_deref().unwrap_or_default().contains("cannot commit"), "{problem:?}");
    // Lifted: the lock released, or the long write done.
    if let Some(mut conn) = lock_holder {
        sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
    }
    if let Some(write) = long_write {
        write.await.unwrap().expect("the long write commits");
    }
    eventually("/readyz to accept again", Duration::from_secs(15), || async { d.client.readyz().await.ok() })
        .await;
    d.stop().await;
}
both_backends!(readiness_follows_the_writes_on_each_backend, readiness_follows_the_writes);
