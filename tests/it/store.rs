//! Store behaviour, the same test bodies on SQLite and PostgreSQL.

use std::collections::HashSet;

use herald_common::{
    Scope,
    ids::{ApplicationId, ConnectionId, KeyId, TenantId, UserId},
};
use herald_daemon::{
    config::Layers,
    store::{OpenStream, Store},
};
use herald_tests::{Backend, both_backends};

async fn open(backend: Backend, dir: &std::path::Path) -> (Store, String) {
    herald_tests::init_crypto();
    let url = backend.fresh_database_url(dir).await;
    (open_url(&url).await, url)
}

/// A fresh store holding one tenant with one application.
async fn open_with_application(backend: Backend, dir: &std::path::Path) -> (Store, ApplicationId) {
    let (store, _) = open(backend, dir).await;
    let tenant = store.create_tenant("T".into()).await.unwrap();
    let app = store.create_application(&tenant.id, "A".into()).await.unwrap().unwrap();
    (store, app.id)
}

async fn open_url(url: &str) -> Store {
    let config =
        Layers::new().env([("HERALD_DATABASE_URL".to_owned(), url.to_owned())]).build(false).unwrap();
    Store::open(&config).await.expect("open store")
}

async fn credentials_round_trip(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(backend, dir.path()).await;
    let tenant = store.create_tenant("Acme".into()).await.unwrap();
    let tenant_id = tenant.id.clone();
    assert_eq!(store.get_tenant(&tenant_id).await.unwrap().unwrap().name, "Acme");

    let app = store.create_application(&tenant_id, "Web".into()).await.unwrap().unwrap();
    let app_id = app.id.clone();
    assert_eq!(store.get_application(&app_id).await.unwrap().unwrap().tenant_id, tenant.id);
    assert!(
        store.create_application(&TenantId::new(), "x".into()).await.unwrap().is_none(),
        "unknown tenant"
    );
    store.create_application(&tenant_id, "Mobile".into()).await.unwrap().unwrap();
    let apps = store.list_applications(&tenant_id).await.unwrap();
    assert_eq!(apps.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["Web", "Mobile"], "ordered by id");

    let key_id = store
        .create_api_key(&app_id, "hash-1".into(), &[Scope::OtpSend, Scope::UsersToken])
        .await
        .unwrap()
        .unwrap();
    assert!(store.create_api_key(&ApplicationId::new(), "hash-2".into(), &[]).await.unwrap().is_none());
    let found = store.find_api_key("hash-1").await.unwrap().unwrap();
    assert_eq!((found.id.as_str(), found.tenant_id.as_str()), (key_id.as_str(), tenant.id.as_str()));
    assert_eq!(found.scopes(), vec![Scope::OtpSend, Scope::UsersToken]);
    assert!(found.revoked_at.is_none());
    assert!(store.find_api_key("hash-unknown").await.unwrap().is_none());

    assert!(store.revoke_api_key(&key_id).await.unwrap());
    assert!(!store.revoke_api_key(&key_id).await.unwrap(), "revoking twice reports nothing to do");
    assert!(!store.revoke_api_key(&KeyId::new()).await.unwrap());
    assert!(store.find_api_key("hash-1").await.unwrap().unwrap().revoked_at.is_some());
    store.close().await;
}
both_backends!(credentials_round_trip_on_each_backend, credentials_round_trip);

/// Many concurrent writes share group commits; one failing write (a duplicate key hash) rolls
/// back only itself.
async fn group_commit_isolates_failures(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, app_id) = open_with_application(backend, dir.path()).await;
    let mut tasks = Vec::new();
    for i in 0..400 {
        let store = store.clone();
        let app_id = app_id.clone();
        // Every hash appears twice: one of each pair must fail on the unique index.
        tasks.push(tokio::spawn(async move {
            store.create_api_key(&app_id, format!("hash-{}", i / 2), &[]).await
        }));
    }
    let mut ok = HashSet::new();
    let mut failed = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Some(id)) => assert!(ok.insert(id)),
            Ok(None) => panic!("the application exists"),
            Err(_) => failed += 1,
        }
    }
    assert_eq!((ok.len(), failed), (200, 200));
    for i in 0..200 {
        let found = store.find_api_key(&format!("hash-{i}")).await.unwrap().expect("committed");
        assert!(ok.contains(&found.id));
    }
    store.close().await;
}
both_backends!(group_commit_isolates_failures_on_each_backend, group_commit_isolates_failures);

/// Failing writes submitted ahead of succeeding ones, so that batches often begin with a failure
/// (the writer then restarts the transaction instead of using a savepoint): every failure leaves
/// the existing rows alone and every success commits.
async fn failures_first_in_a_batch(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, app_id) = open_with_application(backend, dir.path()).await;
    let mut taken = Vec::new();
    for i in 0..100 {
        taken.push(store.create_api_key(&app_id, format!("taken-{i}"), &[]).await.unwrap().unwrap());
    }
    let mut tasks = Vec::new();
    for i in 0..100 {
        for hash in [format!("taken-{i}"), format!("fresh-{i}")] {
            let (store, app_id) = (store.clone(), app_id.clone());
            tasks.push(tokio::spawn(async move { store.create_api_key(&app_id, hash, &[]).await }));
        }
    }
    let outcomes: Vec<bool> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| matches!(r.unwrap(), Ok(Some(_))))
        .collect();
    assert!(outcomes.chunks(2).all(|pair| pair == [false, true]), "{outcomes:?}");
    for (i, id) in taken.iter().enumerate() {
        let kept = store.find_api_key(&format!("taken-{i}")).await.unwrap().unwrap();
        assert_eq!(&kept.id, id);
        assert!(store.find_api_key(&format!("fresh-{i}")).await.unwrap().is_some());
    }
    store.close().await;
}
both_backends!(failures_first_in_a_batch_on_each_backend, failures_first_in_a_batch);

/// Opening a migrated database again applies nothing and keeps the data.
async fn reopening_keeps_data(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, url) = open(backend, dir.path()).await;
    let tenant = store.create_tenant("Kept".into()).await.unwrap();
    store.close().await;
    let store = open_url(&url).await;
    let found = store.get_tenant(&tenant.id).await.unwrap();
    assert_eq!(found.unwrap().name, "Kept");
    store.ping().await.unwrap();
    store.close().await;
}
both_backends!(reopening_keeps_data_on_each_backend, reopening_keeps_data);

/// Writes submitted before `close` are committed; writes after it fail cleanly.
async fn close_drains_the_writer(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, url) = open(backend, dir.path()).await;
    let writes: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.create_tenant(format!("t{i}")).await })
        })
        .collect();
    let mut ids = Vec::new();
    for w in writes {
        ids.push(w.await.unwrap().unwrap().id);
    }
    store.close().await;
    assert!(store.create_tenant("late".into()).await.is_err(), "the writer is closed");
    let reopened = open_url(&url).await;
    for id in ids {
        assert!(reopened.get_tenant(&id).await.unwrap().is_some());
    }
    reopened.close().await;
}
both_backends!(close_drains_the_writer_on_each_backend, close_drains_the_writer);

/// The per-user stream limit over every daemon sharing the database: streams count while their
/// daemon's registration is alive; a daemon that stops takes its streams with it, and one that
/// lapsed (killed) stops counting and is cleaned up.
async fn open_streams_are_counted_across_daemons(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(backend, dir.path()).await;
    let now = 1_000_000;
    store.renew_stream_daemon("dmn_a", now + 30_000).await.unwrap();
    store.renew_stream_daemon("dmn_b", now + 30_000).await.unwrap();
    let (app, other_app) = (ApplicationId::new(), ApplicationId::new());
    let user = |name: &str| UserId::parse(name).unwrap();
    let claim = |app: &ApplicationId, name: &str, connection: &ConnectionId, daemon: &str, at: i64| {
        let (store, app, name, connection, daemon) =
            (store.clone(), app.clone(), user(name), connection.clone(), daemon.to_owned());
        async move {
            let stream = OpenStream { application_id: &app, user_id: &name, connection_id: &connection };
            store.open_stream(stream, &daemon, 10, at).await.unwrap()
        }
    };
    // Connections by a name the test gives them.
    let mut connections = std::collections::HashMap::<String, ConnectionId>::new();
    let mut con = |name: &str| connections.entry(name.to_owned()).or_insert_with(ConnectionId::new).clone();
    let open = |connection: ConnectionId, daemon: &'static str| claim(&app, "ann", &connection, daemon, now);
    // Twenty concurrent claims through two daemons: exactly ten win.
    let claims: Vec<_> =
        (0..20).map(|i| open(con(&format!("con_{i}")), if i % 2 == 0 { "dmn_a" } else { "dmn_b" })).collect();
    let won = futures_util::future::join_all(claims).await.into_iter().filter(|&w| w).count();
    assert_eq!(won, 10);
    assert!(!open(con("con_x"), "dmn_a").await, "the 11th is refused");
    assert!(claim(&app, "bob", &con("con_bob"), "dmn_a", now).await, "per user");
    assert!(claim(&other_app, "ann", &con("con_o"), "dmn_a", now).await, "per application");

    // Streams that end free their slots.
    for i in 0..20 {
        store.close_stream(&con(&format!("con_{i}"))).await.unwrap();
    }
    for i in 0..10 {
        assert!(open(con(&format!("con_again_{i}")), if i < 6 { "dmn_a" } else { "dmn_b" }).await);
    }
    assert!(!open(con("con_y"), "dmn_b").await);

    // Daemon B stops: its four go at once.
    store.close_stream_daemon("dmn_b").await.unwrap();
    for i in 0..4 {
        assert!(open(con(&format!("con_after_b_{i}")), "dmn_a").await);
    }
    assert!(!open(con("con_z"), "dmn_a").await);

    // Daemon A lapses (not renewed past its lease): its streams no longer count, and the
    // cleanup deletes them; a renewed daemon's streams are kept.
    store.renew_stream_daemon("dmn_c", now + 120_000).await.unwrap();
    assert!(claim(&app, "cat", &con("con_cat"), "dmn_c", now).await);
    let later = now + 60_000;
    assert!(claim(&app, "ann", &con("con_late"), "dmn_c", later).await);
    assert_eq!(store.delete_lapsed_streams(later).await.unwrap(), 12, "ann's ten and bob's and other's on A");
    for i in 1..10 {
        assert!(claim(&app, "cat", &con(&format!("con_cat_{i}")), "dmn_c", later).await);
    }
    assert!(!claim(&app, "cat", &con("con_cat_x"), "dmn_c", later).await);
    store.close().await;
}
both_backends!(
    open_streams_are_counted_across_daemons_on_each_backend,
    open_streams_are_counted_across_daemons
);
