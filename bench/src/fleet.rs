//! `herald-bench dispatch --daemons N`: several daemons on one PostgreSQL database, as Herald
//! scales out. In one run: the in-app and email dispatch rates of one daemon alone (all the
//! load on daemon 0), then of the load split evenly between all of them; every email counted at
//! the SMTP sink (each must arrive exactly once, whichever daemon's workers claimed it); and the
//! latency from a dispatch accepted by daemon 0 to `notification.created` on a stream held by
//! daemon 1.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::bail;
use herald_tests::Backend;
use reqwest::Method;
use serde_json::json;

use crate::{Daemon, costs, load, profile, row, smtp, start_daemon_with, streams};

pub struct Options {
    pub daemons: usize,
    pub requests: usize,
    pub concurrency: usize,
    pub daemon: PathBuf,
    /// Streams held on daemon 1, and the in-app dispatches a second sent to daemon 0 for them.
    pub streams: usize,
    pub rate: usize,
    pub seconds: u64,
    /// `--perf`: record the in-app phases (see `profile.rs`).
    pub perf: Option<PathBuf>,
}

/// The load of one phase, `requests` in all with `concurrency` connections, split evenly
/// between `targets`; request `i` of target `k` is request `offset + k * share + i`.
async fn split(
    targets: &[&Daemon],
    requests: usize,
    concurrency: usize,
    offset: usize,
    make: fn(usize) -> serde_json::Value,
) -> load::Report {
    let share = requests / targets.len();
    let runs: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let first = offset + k * share;
            let request: load::MakeRequest =
                Arc::new(move |i| (Method::POST, "/api/v1/notifications".into(), Some(make(first + i))));
            let nothing: Arc<dyn Fn(usize, Instant) + Send + Sync> = Arc::new(|_, _| {});
            let (url, key) = (d.url.clone(), d.boot.api_key.clone());
            let connections = (concurrency / targets.len()).max(1);
            tokio::spawn(
                async move { load::run(&url, Some(&key), share, connections, request, nothing).await },
            )
        })
        .collect();
    let mut reports = Vec::new();
    for run in runs {
        reports.push(run.await.unwrap_or(load::Report {
            ok: 0,
            errors: share,
            elapsed: Duration::ZERO,
            latencies: Vec::new(),
        }));
    }
    let mut latencies: Vec<Duration> = reports.iter().flat_map(|r| r.latencies.iter().copied()).collect();
    latencies.sort();
    load::Report {
        ok: reports.iter().map(|r| r.ok).sum(),
        errors: reports.iter().map(|r| r.errors).sum(),
        elapsed: reports.iter().map(|r| r.elapsed).max().unwrap_or_default(),
        latencies,
    }
}

fn in_app(i: usize) -> serde_json::Value {
    json!({"channel": "in_app", "recipient": format!("user-{}", i % 1000), "title": "Bench", "body": "A benchmark notification"})
}

fn email(i: usize) -> serde_json::Value {
    json!({"channel": "email", "recipient": format!("bench{}@example.com", i % 1000), "subject": format!("bench-{i}"), "body": "A benchmark email"})
}

pub async fn run(options: Options) -> anyhow::Result<()> {
    let Options { daemons, requests, concurrency, daemon, streams, rate, seconds, perf } = options;
    if daemons < 2 {
        bail!("--daemons needs at least 2");
    }
    if !Backend::Postgres.available() {
        bail!("several daemons share a PostgreSQL database: set HERALD_TEST_DATABASE_URL");
    }
    let dir = tempfile::tempdir()?;
    let database_url = Backend::Postgres.fresh_database_url(dir.path()).await;
    let (smtp_port, received) = smtp::start().await?;
    let mut fleet: Vec<Daemon> = Vec::new();
    for k in 0..daemons {
        let joining = fleet.first().map(|d| d.boot.clone());
        let data = dir.path().join(format!("daemon-{k}"));
        std::fs::create_dir_all(&data)?;
        fleet.push(start_daemon_with(&daemon, &data, &database_url, smtp_port, false, &[], joining).await?);
    }
    let all: Vec<&Daemon> = fleet.iter().collect();
    // Warm up every daemon's connections and caches.
    split(&all, 2_000 * daemons, concurrency, 10_000_000, in_app).await;
    let http = reqwest::Client::new();
    let sample = async || -> anyhow::Result<Vec<costs::Sample>> {
        let mut samples = Vec::new();
        for d in &fleet {
            samples.push(costs::sample(&http, &d.url, d.child.id()).await?);
        }
        Ok(samples)
    };

    let recording = profile::start(perf.as_deref(), "in_app_one_daemon").await?;
    let alone_in_app = split(&all[..1], requests, concurrency, 0, in_app).await;
    profile::stop(recording).await?;
    let recording = profile::start(perf.as_deref(), "in_app_split").await?;
    let shared_in_app = split(&all, requests, concurrency, 0, in_app).await;
    profile::stop(recording).await?;
    let alone_email = split(&all[..1], requests, concurrency, 0, email).await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while received.count() < alone_email.ok && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = sample().await?;
    let started = Instant::now();
    let shared_email = split(&all, requests, concurrency, requests, email).await;
    let sent = alone_email.ok + shared_email.ok;
    let deadline = Instant::now() + Duration::from_secs(300);
    while received.count() < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered_in = started.elapsed();
    let after = sample().await?;
    // Let late duplicates, if any, arrive before counting them.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (connected, accepted, latencies) =
        streams::across(&fleet[0].url, &fleet[1].url, &fleet[0].boot, streams, rate, seconds).await;

    println!(
        "\nPostgreSQL, {daemons} daemons on one database, {requests} requests per row, concurrency {concurrency}\n"
    );
    println!("| path | req/s | vs one daemon | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|---|");
    println!("{}", row("POST in_app, one daemon", &alone_in_app, None));
    println!(
        "{}",
        row(&format!("POST in_app, split over {daemons}"), &shared_in_app, Some(alone_in_app.per_second()))
    );
    println!("{}", row("POST email, one daemon", &alone_email, None));
    println!(
        "{}",
        row(&format!("POST email, split over {daemons}"), &shared_email, Some(alone_email.per_second()))
    );
    println!(
        "\nemail: {} distinct of {sent} accepted reached the SMTP sink, {} delivered twice; the split phase \
         was accepted and delivered in {:.2} s ({:.0}/s, every daemon's workers claiming)",
        received.count(),
        received.duplicates(),
        delivered_in.as_secs_f64(),
        shared_email.ok as f64 / delivered_in.as_secs_f64(),
    );
    let pct = |p: f64| load::percentile(&latencies, p).as_secs_f64() * 1000.0;
    println!(
        "\nacross daemons: {connected} streams on daemon 1, {accepted} in-app dispatches to daemon 0 at {rate}/s; \
         {} notification.created received, dispatch → event p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        pct(50.0),
        pct(99.0),
        pct(100.0)
    );
    println!(
        "\n| split email phase, per daemon | store calls per email | operations per write batch | daemon CPU ms per email |"
    );
    println!("|---|---|---|---|");
    let per_daemon = shared_email.ok / daemons;
    for (k, (b, a)) in before.iter().zip(&after).enumerate() {
        let cost = b.until(a, per_daemon);
        println!(
            "| daemon {k} | {:.2} | {:.1} | {:.3} |",
            cost.calls_per_unit, cost.operations_per_batch, cost.daemon_cpu_ms_per_unit
        );
    }
    let postgres = before[0].until(&after[0], shared_email.ok).postgres_cpu_ms_per_unit;
    println!("\nPostgreSQL CPU per email (accepted and delivered) in the split phase: {postgres:.3} ms");
    for d in fleet {
        let mut child = d.child;
        let _ = child.kill().await;
    }
    Ok(())
}
