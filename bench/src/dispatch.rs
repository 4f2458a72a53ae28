//! `herald-bench dispatch`: accepted dispatches per second (in-app and email) next to the
//! daemon's own `/healthz`, email delivered per second to an SMTP sink with the latency from
//! 202 to receipt, and, with `--suppressions N`, the same with N entries on the suppression list.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use herald_tests::Backend;
use reqwest::Method;
use serde_json::json;

use crate::{
    BackendArg, backend_of, costs, engine_name, load, print_costs, profile, row, smtp, start_daemon,
};

/// What a dispatch run measures against.
pub struct DispatchRun {
    pub requests: usize,
    pub concurrency: usize,
    pub pin: bool,
    /// Entries on the suppression list first.
    pub suppressions: usize,
}

pub async fn dispatch(
    backend: BackendArg,
    run: DispatchRun,
    daemon: PathBuf,
    perf: Option<&Path>,
) -> anyhow::Result<()> {
    let DispatchRun { requests, concurrency, pin, suppressions } = run;
    let dir = tempfile::tempdir()?;
    let backend = backend_of(backend)?;
    let database_url = backend.fresh_database_url(dir.path()).await;
    let (smtp_port, received) = smtp::start().await?;
    let d = start_daemon(&daemon, dir.path(), &database_url, smtp_port, pin).await?;
    let nothing: Arc<dyn Fn(usize, Instant) + Send + Sync> = Arc::new(|_, _| {});

    if suppressions > 0 {
        let started = Instant::now();
        let entry: load::MakeRequest = Arc::new(|i| {
            let channel = if i % 2 == 0 { "email" } else { "sms" };
            let recipient = if i % 2 == 0 {
                format!("left-{i}@example.com")
            } else {
                format!("+1415{:07}", i % 10_000_000)
            };
            (
                Method::POST,
                "/api/v1/suppressions".into(),
                Some(json!({"channel": channel, "recipient": recipient})),
            )
        });
        let added =
            load::run(&d.url, Some(&d.boot.api_key), suppressions, concurrency, entry, nothing.clone()).await;
        anyhow::ensure!(added.ok == suppressions, "{} of {suppressions} suppressions were added", added.ok);
        println!("{suppressions} suppressions added in {:.1} s", started.elapsed().as_secs_f64());
    }

    // Warm up connections, caches and the database.
    let warm: load::MakeRequest = Arc::new(|i| {
        (
            Method::POST,
            "/api/v1/notifications".into(),
            Some(
                json!({"channel": "in_app", "recipient": format!("warm-{}", i % 100), "title": "w", "body": "w"}),
            ),
        )
    });
    load::run(&d.url, Some(&d.boot.api_key), 2_000, concurrency, warm, nothing.clone()).await;

    let health: load::MakeRequest = Arc::new(|_| (Method::GET, "/healthz".into(), None));
    let floor = load::run(&d.url, None, requests, concurrency, health, nothing.clone()).await;
    let pgbench = match backend {
        Backend::Postgres => Some(costs::pgbench_single_row_inserts(&database_url, dir.path(), 10).await?),
        Backend::Sqlite => None,
    };
    let http = reqwest::Client::new();
    let pid = d.child.id();

    let in_app: load::MakeRequest = Arc::new(|i| {
        (
            Method::POST,
            "/api/v1/notifications".into(),
            Some(json!({
                "channel": "in_app", "recipient": format!("user-{}", i % 1000), "title": "Bench", "body": "A benchmark notification",
                "data": {"action_url": "https://example.com/x", "category": "bench"}
            })),
        )
    });
    let recording = profile::start(perf, "in_app").await?;
    let before = costs::sample(&http, &d.url, pid).await?;
    let in_app =
        load::run(&d.url, Some(&d.boot.api_key), requests, concurrency, in_app, nothing.clone()).await;
    profile::stop(recording).await?;
    let in_app_cost = before.until(&costs::sample(&http, &d.url, pid).await?, in_app.ok);

    let accepted_at = Arc::new(Mutex::new(vec![None::<Instant>; requests]));
    let record = accepted_at.clone();
    let email: load::MakeRequest = Arc::new(|i| {
        (
            Method::POST,
            "/api/v1/notifications".into(),
            Some(json!({
                "channel": "email", "recipient": format!("bench{}@example.com", i % 1000), "subject": format!("bench-{i}"),
                "body": "A benchmark email"
            })),
        )
    });
    let recording = profile::start(perf, "email").await?;
    let before = costs::sample(&http, &d.url, pid).await?;
    let email_started = Instant::now();
    let email = load::run(
        &d.url,
        Some(&d.boot.api_key),
        requests,
        concurrency,
        email,
        Arc::new(move |i, at| {
            if let Ok(mut v) = record.lock() {
                v[i] = Some(at);
            }
        }),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while received.count() < email.ok && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered_in = email_started.elapsed();
    profile::stop(recording).await?;
    let email_cost = before.until(&costs::sample(&http, &d.url, pid).await?, received.count());
    let mut end_to_end: Vec<Duration> = {
        let accepted = accepted_at.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        accepted
            .iter()
            .enumerate()
            .filter_map(|(i, at)| Some(received.at(i)?.saturating_duration_since((*at)?)))
            .collect()
    };
    end_to_end.sort();

    let engine = engine_name(backend);
    println!(
        "\n{engine}, {requests} requests per row, concurrency {concurrency}{}, {suppressions} suppressions stored\n",
        if pin { ", daemon pinned to core 0" } else { "" }
    );
    println!("| path | req/s | of /healthz | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|---|");
    println!("{}", row("GET /healthz (floor)", &floor, None));
    println!("{}", row("POST in_app", &in_app, Some(floor.per_second())));
    println!("{}", row("POST email (accepted)", &email, Some(floor.per_second())));
    println!(
        "\nemail delivered to the SMTP sink: {} of {} in {:.2} s = {:.0}/s; 202 → received p50 {:.1} ms, p99 {:.1} ms",
        received.count(),
        email.ok,
        delivered_in.as_secs_f64(),
        received.count() as f64 / delivered_in.as_secs_f64(),
        load::percentile(&end_to_end, 50.0).as_secs_f64() * 1000.0,
        load::percentile(&end_to_end, 99.0).as_secs_f64() * 1000.0,
    );
    if let Some(tps) = pgbench {
        println!(
            "\npgbench, 8 clients, one single-row INSERT per transaction, 10 s: {tps:.0}/s; in-app dispatch is {:.2}x that",
            in_app.per_second() / tps
        );
    }
    print_costs(
        "dispatch",
        backend,
        &[("in_app accepted", &in_app_cost), ("email accepted and delivered", &email_cost)],
    );
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}
