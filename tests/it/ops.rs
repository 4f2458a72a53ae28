//! Health, readiness, metrics, request ids, and the supervision of background tasks.

use std::time::Duration;

use herald_common::api::{
    health::TaskState,
    notifications::{Channel, NotificationIn},
};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::SmtpSink};

async fn health_and_readiness(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    assert_eq!(d.client.healthz().await.unwrap().status, "ok");
    let ready = d.client.readyz().await.unwrap();
    assert_eq!(ready.status, "ok");
    let engine = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(ready.database.as_deref(), Some(engine));
    // With the database gone, readiness fails with a problem, liveness does not.
    d.state.store.close().await;
    let response = d.client.request(reqwest::Method::GET, "/readyz").send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    assert_eq!(d.client.healthz().await.unwrap().status, "ok");
}
both_backends!(health_and_readiness_on_each_backend, health_and_readiness);

/// A background task that dies (here the delivery workers, killed as a crash would) is logged,
/// counted in `/metrics`, reported by `/readyz` while it is down, and started again; mail then
/// flows as before.
async fn a_killed_worker_is_restarted(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(backend, vec![("HERALD_SMTP_URL", smtp.url())]).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let ready = d.client.readyz().await.unwrap();
    for task in ["delivery-workers", "housekeeping", "domain-checks", "change-listener", "activity-counters"]
    {
        assert_eq!(ready.tasks[task].state, TaskState::Running, "{task} in {:?}", ready.tasks);
    }

    assert!(d.state.tasks.kill("delivery-workers"), "the fault is injected");
    // The supervisor notices at once and waits 1 s before the restart: ask /readyz in that time.
    eventually("the supervisor to notice", Duration::from_secs(1), || async {
        (d.state.tasks.report()["delivery-workers"].state == TaskState::Restarting).then_some(())
    })
    .await;
    let problem =
        d.client.readyz().await.expect_err("not ready while a task is down").problem().cloned().unwrap();
    assert_eq!(problem.status, 503);
    assert!(
        problem.detail.as_deref().unwrap_or_default().contains("delivery-workers (restarting)"),
        "{problem:?}"
    );
    // A message accepted while the workers are down waits in the queue.
    key.send_notification(&NotificationIn::new(Channel::Email, "after@example.com", "still here"), None)
        .await
        .unwrap();

    let ready = eventually("the workers to run again", Duration::from_secs(5), || async {
        d.client.readyz().await.ok()
    })
    .await;
    assert_eq!(
        (ready.tasks["delivery-workers"].state, ready.tasks["delivery-workers"].restarts),
        (TaskState::Running, 1)
    );
    let mail = smtp.wait_for(1, Duration::from_secs(10)).await.remove(0);
    assert!(mail.raw.contains("still here"));
    let metrics =
        d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("herald_task_exits_total{")
            && l.contains("task=\"delivery-workers\"")
            && l.contains("reason=\"aborted\"")),
        "the exit is counted:\n{metrics}"
    );
    d.stop().await;
}
both_backends!(a_killed_worker_is_restarted_on_each_backend, a_killed_worker_is_restarted);

#[tokio::test]
async fn metrics_count_requests_by_route_template() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    key.user_token(&herald_tests::user_id("metrics-user-1"), None).await.unwrap();
    key.user_token(&herald_tests::user_id("metrics-user-2"), None).await.unwrap();
    let text = d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("herald_http_requests_total{")
                && l.contains("route=\"/api/v1/users/{user_id}/token\"")
                && l.contains("status=\"200\"")
        })
        .unwrap_or_else(|| panic!("no request counter for the token route in:\n{text}"));
    let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 2.0, "{line}");
    assert!(!text.contains("metrics-user-1"), "raw paths never become labels");
    assert!(text.contains("herald_http_request_duration_seconds_bucket"), "a latency histogram");
}

/// The store's cost counters grow with the work: calls into the database, write batches and the
/// operations they held (what `herald-bench dispatch` divides by the dispatches). They count for
/// the whole process, which the test daemons running beside this one share, so only growth and
/// the batch arithmetic are checked.
async fn store_costs_are_counted(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let sample = || async {
        let text =
            d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
        [
            "herald_store_calls_total",
            "herald_store_write_batches_total",
            "herald_store_write_operations_total",
        ]
        .map(|name| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        })
    };
    let before = sample().await;
    let mut n = NotificationIn::new(Channel::InApp, "ann", "counted");
    n.title = Some("Counted".into());
    key.send_notification(&n, None).await.unwrap();
    let after = sample().await;
    for (name, (a, b)) in ["calls", "batches", "operations"].iter().zip(before.iter().zip(&after)) {
        assert!(b > a, "{name}: {a} then {b}");
    }
    assert!(after[2] >= after[1], "a batch holds at least one operation: {after:?}");
    d.stop().await;
}
both_backends!(store_costs_are_counted_on_each_backend, store_costs_are_counted);

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let response = d.client.request(reqwest::Method::GET, "/healthz").send().await.unwrap();
    assert!(!response.headers()["x-request-id"].is_empty());
    let response = d
        .client
        .request(reqwest::Method::GET, "/nope")
        .header("x-request-id", "req-from-the-caller")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "req-from-the-caller", "a caller's id is kept");
}

#[tokio::test]
async fn browsers_of_allowed_origins_get_cors_headers() {
    let d = TestDaemon::start_with(
        Backend::Sqlite,
        vec![("HERALD_CORS_ORIGINS", "https://app.example.com".into())],
    )
    .await;
    let preflight = |origin: &'static str| {
        d.client
            .request(reqwest::Method::OPTIONS, "/api/v1/in-app/stream")
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "GET")
            .header("Access-Control-Request-Headers", "authorization, last-event-id")
            .send()
    };
    let allowed = preflight("https://app.example.com").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(allowed.headers()["access-control-allow-origin"], "https://app.example.com");
    let headers = allowed.headers()["access-control-allow-headers"].to_str().unwrap().to_owned();
    assert!(headers.contains("authorization") && headers.contains("last-event-id"), "{headers}");
    let other = preflight("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none(), "other origins get no grant");
    let plain = TestDaemon::start(Backend::Sqlite).await;
    let response = plain
        .client
        .request(reqwest::Method::GET, "/healthz")
        .header("Origin", "https://app.example.com")
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("access-control-allow-origin").is_none(), "none by default");
}
