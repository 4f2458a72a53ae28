//! The inbox API and the live stream, with SSE clients nobody here wrote (Python httpx-sse and
//! Rust eventsource-stream): replay, exactness under concurrent dispatch and reconnects,
//! heartbeats, expiry, limits, and several daemons on one PostgreSQL.

use std::{collections::HashSet, time::Duration};

use herald_common::{
    Timestamp,
    api::{
        inbox::InboxPatch,
        notifications::{Channel, NotificationIn},
    },
    client::{Client, InboxQuery},
};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, sse::SseClient};
use jsonwebtoken::{Algorithm, EncodingKey, Header};

const WAIT: Duration = Duration::from_secs(5);

fn in_app(user: &str, title: &str) -> NotificationIn {
    let mut n = NotificationIn::new(Channel::InApp, user, format!("body of {title}"));
    n.title = Some(title.to_owned());
    n.data = Some(
        serde_json::json!({"action_url": "https://example.com/n", "category": "test"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    n
}

async fn setup(d: &TestDaemon, user: &str) -> (Client, String) {
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let token = key.user_token(&herald_tests::user_id(user), None).await.unwrap().token;
    (key, token)
}

/// Connects once a slot of the user's is free again: a stream the client dropped gives its slot
/// back when its daemon sees the connection closed, a moment later. Refusals other than the
/// limit's fail.
async fn connect_to_freed_slot(url: &str, token: &str) -> SseClient {
    eventually("a freed slot to be usable", Duration::from_secs(20), || async {
        match SseClient::connect(url, token, None).await {
            Ok(client) => Some(client),
            Err(refused) if refused.status == 429 => None,
            Err(refused) => panic!("{refused:?}"),
        }
    })
    .await
}

async fn inbox_api(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let (key, token) = setup(&d, "ann").await;
    let ann = d.with_token(&token);
    let bob = d.with_token(&key.user_token(&herald_tests::user_id("bob"), None).await.unwrap().token);
    for i in 1..=25 {
        key.send_notification(&in_app("ann", &format!("n{i}")), None).await.unwrap();
    }
    key.send_notification(&in_app("bob", "for bob"), None).await.unwrap();

    let page = ann.inbox(&InboxQuery::default()).await.unwrap();
    assert_eq!((page.unread_count, page.notifications.len()), (25, 20), "limit defaults to 20");
    assert_eq!(page.notifications[0].title, "n25", "newest first");
    assert_eq!(page.notifications[0].data["action_url"], "https://example.com/n");
    assert!(!page.notifications[0].is_read);
    let next =
        ann.inbox(&InboxQuery { cursor: page.next_cursor.clone(), ..Default::default() }).await.unwrap();
    assert_eq!(
        next.notifications.iter().map(|n| n.title.as_str()).collect::<Vec<_>>(),
        ["n5", "n4", "n3", "n2", "n1"]
    );
    assert!(next.next_cursor.is_none());

    let first = &page.notifications[0];
    let read =
        ann.patch_inbox_item(&first.id, &InboxPatch { is_read: Some(true), archived: None }).await.unwrap();
    assert!(read.is_read);
    let unread = ann
        .inbox(&InboxQuery { unread_only: Some(true), limit: Some(100), ..Default::default() })
        .await
        .unwrap();
    assert_eq!((unread.unread_count, unread.notifications.len()), (24, 24));
    ann.patch_inbox_item(&first.id, &InboxPatch { is_read: Some(false), archived: None }).await.unwrap();
    let archived =
        ann.patch_inbox_item(&first.id, &InboxPatch { archived: Some(true), is_read: None }).await.unwrap();
    assert!(archived.archived);
    let listing = ann.inbox(&InboxQuery { limit: Some(100), ..Default::default() }).await.unwrap();
    assert_eq!(
        (listing.unread_count, listing.notifications.len()),
        (24, 24),
        "archived items leave the listing"
    );
    let shelf = ann.inbox(&InboxQuery { archived: Some(true), ..Default::default() }).await.unwrap();
    assert_eq!(shelf.notifications.len(), 1);

    let all = ann.read_all().await.unwrap();
    assert_eq!((all.updated, all.unread_count), (24, 0));
    let p = bob
        .patch_inbox_item(&first.id, &InboxPatch { is_read: Some(true), archived: None })
        .await
        .unwrap_err();
    assert_eq!(p.problem().unwrap().status, 404, "another user's item");
    assert_eq!(bob.inbox(&InboxQuery::default()).await.unwrap().notifications.len(), 1);
    assert_eq!(
        key.inbox(&InboxQuery::default()).await.unwrap_err().problem().unwrap().status,
        401,
        "an API key is not a user token"
    );
    for bad in ["limit=0", "limit=101", "cursor=garbage", "colour=red"] {
        let p = ann.get::<serde_json::Value>(&format!("/api/v1/inbox?{bad}")).await.unwrap_err();
        assert_eq!(p.problem().unwrap().status, 422, "{bad}");
    }
}
both_backends!(inbox_api_on_each_backend, inbox_api);

#[tokio::test]
async fn a_python_client_sees_the_stream() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let (key, token) = setup(&d, "py").await;
    key.send_notification(&in_app("py", "before"), None).await.unwrap();
    let mut client = SseClient::connect_python(&d.url, &token, None).await.expect("connected");
    let ready = client.next(WAIT).await.unwrap();
    assert_eq!(ready.event, "connection.ready");
    assert!(ready.data["connection_id"].as_str().unwrap().starts_with("con_"));
    assert_eq!(
        (ready.data["unread_count"].as_u64(), ready.data["last_event_id"].as_str()),
        (Some(1), Some("1"))
    );

    key.send_notification(&in_app("py", "live"), None).await.unwrap();
    let created = client.next_non_heartbeat(WAIT).await.unwrap();
    assert_eq!((created.event.as_str(), created.id.as_deref()), ("notification.created", Some("2")));
    assert_eq!(created.data["title"], "live");
    assert!(created.data["id"].as_str().unwrap().starts_with("inapp_"));
    assert_eq!(created.data["data"]["category"], "test");

    let user = d.with_token(&token);
    let id = created.data["id"].as_str().unwrap().parse().unwrap();
    user.patch_inbox_item(&id, &InboxPatch { is_read: Some(true), archived: None }).await.unwrap();
    let updated = client.next_non_heartbeat(WAIT).await.unwrap();
    assert_eq!(
        (updated.event.as_str(), updated.data["is_read"].as_bool()),
        ("notification.updated", Some(true))
    );
    assert_eq!(
        updated.id.as_deref(),
        Some("2"),
        "an update has no id line of its own: the last event id stays at 2"
    );

    // A bad token is refused before any byte of stream.
    let refused = SseClient::connect_python(&d.url, "not-a-token", None).await.err().expect("refused");
    assert_eq!(refused.status, 401);
}

async fn replay_after_last_event_id(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let (key, token) = setup(&d, "rita").await;
    for i in 1..=5 {
        key.send_notification(&in_app("rita", &format!("r{i}")), None).await.unwrap();
    }
    let mut client = SseClient::connect(&d.url, &token, Some("2")).await.unwrap();
    assert_eq!(client.next(WAIT).await.unwrap().event, "connection.ready");
    for expected in 3..=5 {
        let event = client.next_non_heartbeat(WAIT).await.unwrap();
        assert_eq!(
            (event.event.as_str(), event.id.clone()),
            ("notification.created", Some(expected.to_string()))
        );
        assert_eq!(event.data["title"], format!("r{expected}"));
    }
    key.send_notification(&in_app("rita", "r6"), None).await.unwrap();
    assert_eq!(client.next_non_heartbeat(WAIT).await.unwrap().id.as_deref(), Some("6"), "then live, no gap");

    // An id from the future, or not an id at all, cannot be replayed: resync.
    let mut client = SseClient::connect(&d.url, &token, Some("99")).await.unwrap();
    assert_eq!(client.next(WAIT).await.unwrap().event, "connection.ready");
    let resync = client.next(WAIT).await.unwrap();
    assert_eq!(
        (resync.event.as_str(), resync.data["reason"].as_str()),
        ("stream.resync", Some("unknown_event_id"))
    );
    assert!(client.next(WAIT).await.is_none(), "and the stream ends");
}
both_backends!(replay_after_last_event_id_on_each_backend, replay_after_last_event_id);

/// 1,000 notifications dispatched concurrently while the client drops and reconnects with
/// `Last-Event-ID` about every 100 events: it ends with exactly the 1,000, in order, none twice.
async fn exact_under_concurrent_dispatch_and_reconnects(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let (key, token) = setup(&d, "racer").await;
    const TOTAL: usize = 1000;
    let sender = tokio::spawn({
        let key = key.clone();
        async move {
            let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
            let mut tasks = Vec::new();
            for i in 0..TOTAL {
                let permit = semaphore.clone().acquire_owned().await.unwrap();
                let key = key.clone();
                tasks.push(tokio::spawn(async move {
                    let _permit = permit;
                    key.send_notification(&in_app("racer", &format!("m{i}")), None).await.unwrap();
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        }
    });
    let mut received: Vec<u64> = Vec::new();
    let mut titles = HashSet::new();
    let mut last: Option<String> = Some("0".to_owned());
    let mut reconnects = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received.len() < TOTAL {
        assert!(tokio::time::Instant::now() < deadline, "stuck at {} events", received.len());
        let mut client = SseClient::connect(&d.url, &token, last.as_deref()).await.unwrap();
        reconnects += 1;
        let mut in_this_connection = 0;
        while let Some(event) = client.next(Duration::from_secs(3)).await {
            if event.event != "notification.created" {
                continue;
            }
            let id: u64 = event.id.as_deref().unwrap().parse().unwrap();
            received.push(id);
            assert!(titles.insert(event.data["title"].as_str().unwrap().to_owned()), "a title arrived twice");
            last = event.id.clone();
            in_this_connection += 1;
            if in_this_connection >= 100 {
                break; // drop the connection mid-stream
            }
        }
    }
    sender.await.unwrap();
    assert_eq!(received, (1..=TOTAL as u64).collect::<Vec<_>>(), "every id once, in order");
    assert!(reconnects >= 10, "reconnected {reconnects} times");
}
both_backends!(
    exact_under_concurrent_dispatch_and_reconnects_on_each_backend,
    exact_under_concurrent_dispatch_and_reconnects
);

#[tokio::test]
async fn heartbeats_follow_the_configured_interval() {
    let d =
        TestDaemon::start_with(Backend::Sqlite, vec![("HERALD_STREAM_HEARTBEAT_SECONDS", "1".into())]).await;
    let (_, token) = setup(&d, "hb").await;
    let mut client = SseClient::connect(&d.url, &token, None).await.unwrap();
    assert_eq!(client.next(WAIT).await.unwrap().event, "connection.ready");
    let started = tokio::time::Instant::now();
    let mut times = Vec::new();
    for _ in 0..3 {
        let event = client.next(Duration::from_secs(3)).await.expect("a heartbeat");
        assert_eq!(event.event, "heartbeat");
        Timestamp::parse(event.data["time"].as_str().unwrap()).unwrap();
        times.push(started.elapsed());
    }
    let gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    assert!(times[0] > Duration::from_millis(700) && times[0] < Duration::from_millis(1500), "{times:?}");
    assert!(gaps.iter().all(|g| (0.7..1.5).contains(g)), "one a second: {gaps:?}");
}

#[tokio::test]
async fn streams_end_with_their_token_and_are_limited_per_user() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let now = Timestamp::now().seconds();
    let claims = serde_json::json!({"sub": "short", "tenant_id": boot.tenant_id, "application_id": boot.application_id, "exp": now - 55});
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(boot.signing_secret.as_bytes()),
    )
    .unwrap();
    let mut client = SseClient::connect(&d.url, &token, None).await.unwrap();
    assert_eq!(client.next(WAIT).await.unwrap().event, "connection.ready");
    let started = tokio::time::Instant::now();
    while client.next(Duration::from_secs(10)).await.is_some() {}
    let lasted = started.elapsed();
    // 55 s past `exp` is within the 60 s leeway: accepted, and the stream ends at the leeway.
    assert!(
        lasted > Duration::from_secs(3) && lasted < Duration::from_secs(8),
        "the stream ends with its token ({lasted:?})"
    );

    let key = d.with_token(&boot.api_key);
    let token = key.user_token(&herald_tests::user_id("busy"), None).await.unwrap().token;
    let mut open = Vec::new();
    for _ in 0..10 {
        open.push(SseClient::connect(&d.url, &token, None).await.expect("ten streams are fine"));
    }
    let refused = SseClient::connect(&d.url, &token, None).await.err().expect("the 11th is refused");
    assert_eq!(refused.status, 429);
    assert!(refused.body.contains("rate_limited"));
    drop(open.pop());
    connect_to_freed_slot(&d.url, &token).await;
}

#[tokio::test]
async fn shutdown_does_not_wait_for_open_streams() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let (_, token) = setup(&d, "stay").await;
    let mut client = SseClient::connect(&d.url, &token, None).await.unwrap();
    assert_eq!(client.next(WAIT).await.unwrap().event, "connection.ready");
    let started = tokio::time::Instant::now();
    d.stop().await;
    assert!(started.elapsed() < Duration::from_secs(3), "stopped in {:?}", started.elapsed());
    assert!(client.next(Duration::from_secs(2)).await.is_none(), "the stream was closed");
}

/// A stream held by daemon A sees what is dispatched and read through daemon B within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_daemons_on_one_postgres() {
    if !Backend::Postgres.available() {
        return;
    }
    let a = TestDaemon::start(Backend::Postgres).await;
    let b = a.start_sharing(Vec::new()).await;
    let boot = a.bootstrap().await;
    let key_b = b.with_token(&boot.api_key);
    let token = key_b.user_token(&herald_tests::user_id("roamer"), None).await.unwrap().token;
    let mut on_a = SseClient::connect(&a.url, &token, None).await.unwrap();
    assert_eq!(on_a.next(WAIT).await.unwrap().event, "connection.ready");

    let started = tokio::time::Instant::now();
    key_b.send_notification(&in_app("roamer", "via B"), None).await.unwrap();
    let created = on_a.next_non_heartbeat(Duration::from_secs(1)).await.expect("created within 1 s");
    assert_eq!(
        (created.event.as_str(), created.data["title"].as_str()),
        ("notification.created", Some("via B"))
    );
    let id = created.data["id"].as_str().unwrap().parse().unwrap();
    b.with_token(&token)
        .patch_inbox_item(&id, &InboxPatch { is_read: Some(true), archived: None })
        .await
        .unwrap();
    let updated = on_a.next_non_heartbeat(Duration::from_secs(1)).await.expect("updated within 1 s");
    assert_eq!(
        (updated.event.as_str(), updated.data["is_read"].as_bool()),
        ("notification.updated", Some(true))
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // The ten-stream limit holds over both daemons.
    let token = key_b.user_token(&herald_tests::user_id("crowd"), None).await.unwrap().token;
    let mut open = Vec::new();
    for i in 0..10 {
        let url = if i < 6 { &a.url } else { &b.url };
        open.push(SseClient::connect(url, &token, None).await.expect("ten streams are fine"));
    }
    for url in [&a.url, &b.url] {
        let refused = SseClient::connect(url, &token, None).await.err().expect("the 11th is refused");
        assert_eq!(refused.status, 429);
    }
    drop(open.pop()); // one held by B
    // A slot freed on B can be used on A.
    connect_to_freed_slot(&a.url, &token).await;
}

/// The same with two `heraldd` processes on one PostgreSQL database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemon_processes_on_one_postgres() {
    use crate::process::{heraldd, run, start_serving};
    if !Backend::Postgres.available() {
        return;
    }
    herald_tests::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let database_url = Backend::Postgres.fresh_database_url(dir.path()).await;
    let configure = |command: &mut tokio::process::Command| {
        command
            .env("HERALD_DATABASE_URL", &database_url)
            .env("HERALD_SECRET", "shared-secret-shared-secret-shared-secret");
    };
    let mut admin = heraldd(dir.path());
    configure(&mut admin);
    let (_, out, err) = run(admin.args(["admin", "bootstrap", "--json"])).await;
    let boot: herald_common::api::admin::Bootstrapped =
        serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{err}"));
    let (mut a, mut b) = (heraldd(dir.path()), heraldd(dir.path()));
    configure(&mut a);
    configure(&mut b);
    let (_a, addr_a, _) = start_serving(&mut a).await;
    let (_b, addr_b, _) = start_serving(&mut b).await;
    let key_b = Client::new(format!("http://{addr_b}")).with_token(&boot.api_key);
    let token = key_b.user_token(&herald_tests::user_id("roamer"), None).await.unwrap().token;
    let mut on_a = SseClient::connect_python(&format!("http://{addr_a}"), &token, None).await.unwrap();
    assert_eq!(on_a.next(WAIT).await.unwrap().event, "connection.ready");
    key_b.send_notification(&in_app("roamer", "across processes"), None).await.unwrap();
    let created = on_a.next_non_heartbeat(Duration::from_secs(1)).await.expect("created within 1 s");
    assert_eq!(created.data["title"], "across processes");
    let user_b = Client::new(format!("http://{addr_b}")).with_token(&token);
    user_b.read_all().await.unwrap();
    let updated = on_a.next_non_heartbeat(Duration::from_secs(1)).await.expect("updated within 1 s");
    assert_eq!(
        (updated.event.as_str(), updated.data["is_read"].as_bool()),
        ("notification.updated", Some(true))
    );
}

/// `connection.ready`'s `unread_count` and `last_event_id` come from one moment: while items
/// arrive all the time (every one unread), the count always equals the newest id. Read apart,
/// an item committed between the two reads was in the count but not at or below the id, so a
/// reader that counts the items above the id (as it must) showed one too many: the browser test
/// caught a badge of 13 for 12 unread this way.
async fn ready_is_one_moment(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let (key, token) = setup(&d, "busy").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                key.send_notification(&in_app("busy", "x"), None).await.unwrap();
                sent += 1;
            }
            sent
        }
    });
    let mut opened = 0;
    while opened < 150 {
        let mut client = match SseClient::connect(&d.url, &token, None).await {
            Ok(client) => client,
            Err(refused) if refused.status == 429 => {
                // Streams just dropped are released when the daemon next writes to them.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(refused) => panic!("{refused:?}"),
        };
        let ready = client.next(WAIT).await.unwrap();
        assert_eq!(ready.event, "connection.ready");
        let last: u64 = ready.data["last_event_id"].as_str().unwrap().parse().unwrap();
        assert_eq!(ready.data["unread_count"].as_u64(), Some(last), "open {opened}: {}", ready.data);
        opened += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.await.unwrap() > 0);
}
both_backends!(ready_is_one_moment_on_each_backend, ready_is_one_moment);
