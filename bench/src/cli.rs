//! `herald-bench cli`: the operator CLI against the release daemon on SQLite. A bulk send of
//! `--rows` rows (`herald send --file`, which adds an idempotency key to every row) next to the
//! daemon's own email dispatch rate measured by the same load generator as `dispatch`, in the same
//! run; and how long `herald --help` and `herald health` take to start and finish.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use herald_tests::Backend;
use reqwest::Method;
use serde_json::json;

use crate::{load, smtp, start_daemon};

pub struct Options {
    pub rows: usize,
    pub concurrency: usize,
    pub daemon: PathBuf,
    pub herald: PathBuf,
    pub runs: usize,
}

/// `runs` runs of `herald ARGS`: the wall times, sorted.
fn time_runs(
    herald: &Path,
    env: &[(&str, String)],
    args: &[&str],
    runs: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let status = std::process::Command::new(herald)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .with_context(|| format!("run {}", herald.display()))?;
        times.push(started.elapsed());
        if !status.success() {
            bail!("herald {} failed", args.join(" "));
        }
    }
    times.sort();
    Ok(times)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn run(options: Options) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let database_url = Backend::Sqlite.fresh_database_url(dir.path()).await;
    // The sink runs while its handle lives.
    let (smtp_port, _received) = smtp::start().await?;
    let d = start_daemon(&options.daemon, dir.path(), &database_url, smtp_port, false).await?;
    let nothing: Arc<dyn Fn(usize, Instant) + Send + Sync> = Arc::new(|_, _| {});
    let key = d.boot.api_key.clone();

    // Warm up, then the daemon's own email dispatch rate.
    let email = |prefix: &'static str| -> load::MakeRequest {
        Arc::new(move |i| {
            (
                Method::POST,
                "/api/v1/notifications".into(),
                Some(
                    json!({"channel": "email", "recipient": format!("{prefix}{i}@example.com"), "body": "A benchmark email"}),
                ),
            )
        })
    };
    load::run(&d.url, Some(&key), 2_000, options.concurrency, email("warm"), nothing.clone()).await;
    let health: load::MakeRequest = Arc::new(|_| (Method::GET, "/healthz".into(), None));
    let floor = load::run(&d.url, None, options.rows, options.concurrency, health, nothing.clone()).await;
    let direct =
        load::run(&d.url, Some(&key), options.rows, options.concurrency, email("direct"), nothing.clone())
            .await;

    // The same number of emails through `herald send --file`.
    let csv = dir.path().join("rows.csv");
    let mut text = String::from("recipient\n");
    for i in 0..options.rows {
        text.push_str(&format!("cli{i}@example.com\n"));
    }
    std::fs::write(&csv, text)?;
    let env = [
        ("HERALD_URL", d.url.clone()),
        ("HERALD_API_KEY", key.clone()),
        ("HERALD_CLI_CONFIG", dir.path().join("none.toml").display().to_string()),
    ];
    let concurrency = options.concurrency.to_string();
    let args = [
        "send",
        "--channel",
        "email",
        "--body",
        "A benchmark email",
        "--file",
        csv.to_str().unwrap_or_default(),
        "--concurrency",
        &concurrency,
        "--json",
    ];
    let started = Instant::now();
    let output = std::process::Command::new(&options.herald)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .context("run herald send --file")?;
    let took = started.elapsed();
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("herald's summary: {}", String::from_utf8_lossy(&output.stderr)))?;
    let sent = summary["sent"].as_u64().unwrap_or(0);
    let cli_rate = sent as f64 / took.as_secs_f64();

    // Start-up: --help (no network) and health (one request).
    let help = time_runs(&options.herald, &env, &["--help"], options.runs)?;
    let health_runs = time_runs(&options.herald, &env, &["health"], options.runs)?;

    println!("\nSQLite, {} rows, concurrency {}\n", options.rows, options.concurrency);
    println!("| path | per second | of /healthz | of direct dispatch |");
    println!("|---|---|---|---|");
    println!("| GET /healthz (floor) | {:.0} | | |", floor.per_second());
    println!(
        "| POST email, the load generator (direct) | {:.0} | {:.0} % | |",
        direct.per_second(),
        100.0 * direct.per_second() / floor.per_second()
    );
    println!(
        "| `herald send --file` ({sent} sent, {} refused) | {cli_rate:.0} | {:.0} % | **{:.0} %** |",
        summary["refused"],
        100.0 * cli_rate / floor.per_second(),
        100.0 * cli_rate / direct.per_second()
    );
    let at = |times: &[Duration], p: f64| ms(load::percentile(times, p));
    println!("\n| command ({} runs) | p50 ms | p90 ms | max ms |", options.runs);
    println!("|---|---|---|---|");
    println!(
        "| `herald --help` | {:.1} | {:.1} | {:.1} |",
        at(&help, 50.0),
        at(&help, 90.0),
        at(&help, 100.0)
    );
    println!(
        "| `herald health` | {:.1} | {:.1} | {:.1} |",
        at(&health_runs, 50.0),
        at(&health_runs, 90.0),
        at(&health_runs, 100.0)
    );
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}
