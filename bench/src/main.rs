//! herald-bench: measures the release daemon as a process on loopback, with the same load
//! generator for its own `/healthz` (the floor) and for dispatch, in the same run.
//!
//!     cargo build --release -p herald-daemon -p herald-bench
//!     target/release/herald-bench dispatch --backend sqlite
//!
//! With `--pin`, the daemon runs on core 0 (`taskset -c 0`) and the generator should run on core
//! 1 (`taskset -c 1 target/release/herald-bench …`), as the floors in PERFORMANCE.md were taken.

mod activity;
mod cli;
mod costs;
mod dispatch;
mod fleet;
mod http;
mod load;
mod profile;
mod receipts;
mod smtp;
mod streams;
mod tui;
mod webhooks;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use herald_common::api::admin::Bootstrapped;
use herald_tests::Backend;
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Parser)]
#[command(name = "herald-bench", about = "Benchmarks for Herald")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Sqlite,
    Postgres,
}

#[derive(Subcommand)]
enum Command {
    /// `GET /api/v1/activity` latency for every filter and for deep pages, over a tenant with
    /// `--items` feed items.
    Activity {
        #[arg(long, value_enum, default_value = "sqlite")]
        backend: BackendArg,
        #[arg(long, default_value_t = 1_000_000)]
        items: usize,
        /// Requests per query shape.
        #[arg(long, default_value_t = 100)]
        requests: usize,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
    },
    /// Many concurrent user streams: memory per stream and dispatch → notification.created
    /// latency at a steady rate (SQLite). Raise the fd limit first (`ulimit -n 65536`).
    Stream {
        #[arg(long, default_value_t = 10_000)]
        streams: usize,
        /// Notifications per second.
        #[arg(long, default_value_t = 1_000)]
        rate: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
        #[arg(long)]
        pin: bool,
    },
    /// OTP send (log SMS provider) + verify pairs per second.
    Otp {
        #[arg(long, value_enum, default_value = "sqlite")]
        backend: BackendArg,
        #[arg(long, default_value_t = 10_000)]
        pairs: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
        #[arg(long)]
        pin: bool,
        /// Record each measured phase with `perf record -a -g` into this folder, and print
        /// where the machine's CPU went (see bench/src/profile.rs).
        #[arg(long)]
        perf: Option<PathBuf>,
    },
    /// `herald send --file` with `--rows` rows next to the daemon's own email dispatch rate, and
    /// the start-up time of `herald --help` and `herald health` (SQLite).
    Cli {
        #[arg(long, default_value_t = 10_000)]
        rows: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
        /// The herald binary (a release build).
        #[arg(long, default_value = "target/release/herald")]
        herald: PathBuf,
        /// Runs of each start-up measure.
        #[arg(long, default_value_t = 30)]
        runs: usize,
    },
    /// The dashboard (`herald tui`, in tmux) while the activity stream carries `--rate`
    /// in-app dispatches a second for `--seconds`: its slowest frame and its memory (SQLite).
    Tui {
        #[arg(long, default_value_t = 1_000)]
        rate: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
        /// The herald binary (a release build).
        #[arg(long, default_value = "target/release/herald")]
        herald: PathBuf,
    },
    /// Event webhooks to a loopback receiver: in-app dispatch with and without an endpoint,
    /// deliveries per second, event → first attempt at a steady rate, and the same beside a dead
    /// endpoint's backlog (see bench/src/webhooks.rs).
    Webhooks {
        #[arg(long, value_enum, default_value = "sqlite")]
        backend: BackendArg,
        /// Dispatches for the throughput (each one event to every endpoint).
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Endpoints subscribed for the throughput.
        #[arg(long, default_value_t = 4)]
        fan_out: usize,
        /// Events a second for the latency.
        #[arg(long, default_value_t = 1_000)]
        rate: usize,
        /// How long each latency step (and each steady row of the dispatch-cost table) runs;
        /// with `--dispatch-only`, 0 leaves the steady rows out.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// The dead endpoint's backlog.
        #[arg(long, default_value_t = 100_000)]
        backlog: usize,
        /// Dispatches per row of the dispatch-cost table.
        #[arg(long, default_value_t = 10_000)]
        requests: usize,
        /// Rounds of the dispatch-cost table (each: no endpoint, one delivering, one down, in an
        /// order that alternates); the medians are compared.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// In-app dispatches the database has had at least before the dispatch-cost table (it
        /// runs last), so that its rows all run past the inbox indexes' growth (see
        /// bench/src/webhooks.rs).
        #[arg(long, default_value_t = 100_000)]
        warm_up: usize,
        /// Only the dispatch-cost table (and, unless `--seconds 0`, its steady part).
        #[arg(long)]
        dispatch_only: bool,
        /// Only the throughput step (2), then stop: to compare builds on that step alone.
        #[arg(long, conflicts_with = "dispatch_only")]
        throughput_only: bool,
        /// PostgreSQL: SQL run in the bench's schema once the daemon has migrated it, before
        /// anything is measured: a variant of the migrations' functions or triggers, to take
        /// a cost apart (bench/sql/webhooks/ holds those of docs/PERFORMANCE.md).
        #[arg(long)]
        postgres_sql: Option<PathBuf>,
        /// The dispatch-cost table's down case as a control: its endpoint is subscribed and
        /// tripped as before, then removed before the row, which runs with no endpoint.
        #[arg(long)]
        down_control: bool,
        /// The dispatch-cost table's delivering case with an endpoint subscribed to other
        /// events (`otp.verified`) than the dispatches make: what an endpoint costs that wants
        /// none of them.
        #[arg(long)]
        other_events: bool,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
    },
    /// Delivery receipts: signed Twilio status callbacks ingested per second, and the time from
    /// a callback to the operators' feed showing the item `delivered` at `--rate` a second.
    Receipts {
        #[arg(long, value_enum, default_value = "sqlite")]
        backend: BackendArg,
        /// Callbacks for the ingestion rate (one SMS each).
        #[arg(long, default_value_t = 20_000)]
        messages: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Callbacks a second for the latency.
        #[arg(long, default_value_t = 1_000)]
        rate: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
    },
    /// Accepted dispatches per second (in_app and email) next to /healthz, and email delivered
    /// per second to an SMTP sink with the latency from 202 to receipt.
    Dispatch {
        #[arg(long, value_enum, default_value = "sqlite")]
        backend: BackendArg,
        #[arg(long, default_value_t = 20_000)]
        requests: usize,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The heraldd binary (a release build).
        #[arg(long, default_value = "target/release/heraldd")]
        daemon: PathBuf,
        /// Run the daemon on core 0 with taskset.
        #[arg(long)]
        pin: bool,
        /// Daemons sharing one PostgreSQL database (2 or more: see bench/src/fleet.rs).
        #[arg(long, default_value_t = 1)]
        daemons: usize,
        /// Record each measured phase with `perf record -a -g` into this folder, and print
        /// where the machine's CPU went (see bench/src/profile.rs).
        #[arg(long)]
        perf: Option<PathBuf>,
        /// Entries on the tenant's suppression list before measuring (other addresses than
        /// those sent to, so every send-time check looks one up and finds none).
        #[arg(long, default_value_t = 0)]
        suppressions: usize,
    },
}

struct Daemon {
    child: tokio::process::Child,
    url: String,
    boot: Bootstrapped,
}

async fn start_daemon(
    binary: &PathBuf,
    dir: &std::path::Path,
    database_url: &str,
    smtp_port: u16,
    pin: bool,
) -> anyhow::Result<Daemon> {
    start_daemon_with(binary, dir, database_url, smtp_port, pin, &[], None).await
}

/// [`start_daemon`] with more `HERALD_*` settings, and for a daemon joining a database another
/// one bootstrapped, that one's tenant and keys (`joining`).
async fn start_daemon_with(
    binary: &PathBuf,
    dir: &std::path::Path,
    database_url: &str,
    smtp_port: u16,
    pin: bool,
    extra: &[(String, String)],
    joining: Option<Bootstrapped>,
) -> anyhow::Result<Daemon> {
    let env = |command: &mut tokio::process::Command| {
        command
            .envs(extra.iter().map(|(k, v)| (k, v)))
            .env("HERALD_DATABASE_URL", database_url)
            .env("HERALD_DATA_DIR", dir.join("data"))
            .env("HERALD_SECRET", "bench-secret-bench-secret-bench-secret-00")
            .env("HERALD_SMTP_URL", format!("smtp+plain://127.0.0.1:{smtp_port}"))
            .env("HERALD_LISTEN", "127.0.0.1:0")
            .env("HERALD_LOG_FORMAT", "json")
            .env("HERALD_LOG", std::env::var("HERALD_BENCH_LOG").unwrap_or_else(|_| "info".into()));
    };
    let boot = match joining {
        Some(boot) => boot,
        None => {
            let mut admin = tokio::process::Command::new(binary);
            env(&mut admin);
            let out =
                admin.args(["admin", "bootstrap", "--json"]).output().await.context("run heraldd admin")?;
            if !out.status.success() {
                bail!("heraldd admin bootstrap failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            serde_json::from_slice(&out.stdout)?
        }
    };
    let mut command = if pin {
        let mut c = tokio::process::Command::new("taskset");
        c.args(["-c", "0"]).arg(binary);
        c
    } else {
        tokio::process::Command::new(binary)
    };
    env(&mut command);
    let mut child = command.stderr(Stdio::piped()).kill_on_drop(true).spawn().context("start heraldd")?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if event["message"] == "heraldd listening" {
                return event["addr"].as_str().map(str::to_owned);
            }
        }
        None
    })
    .await
    .context("heraldd did not start in 30 s")?
    .context("heraldd exited")?;
    // With `HERALD_BENCH_DAEMON_LOG` set, the daemon's log goes to that file (otherwise it is
    // read and dropped); `HERALD_BENCH_LOG` sets its level.
    let mut log = match std::env::var_os("HERALD_BENCH_DAEMON_LOG") {
        Some(path) => Some(tokio::fs::File::create(path).await.context("the daemon's log file")?),
        None => None,
    };
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(file) = log.as_mut() {
                let _ = file.write_all(format!("{line}\n").as_bytes()).await;
            }
        }
    });
    Ok(Daemon { child, url: format!("http://{addr}"), boot })
}

fn row(name: &str, report: &load::Report, floor: Option<f64>) -> String {
    let ratio =
        floor.map(|f| format!("{:.0} %", 100.0 * report.per_second() / f)).unwrap_or_else(|| "—".into());
    format!(
        "| {name} | {:.0} | {ratio} | {:.2} | {:.2} | {} |",
        report.per_second(),
        report.percentile(50.0).as_secs_f64() * 1000.0,
        report.percentile(99.0).as_secs_f64() * 1000.0,
        report.errors
    )
}

/// The `/healthz` floor as a row of a five-column table (path, per second, p50, p99, errors).
fn floor_row(floor: &load::Report) -> String {
    format!(
        "| GET /healthz (floor) | {:.0} | {:.2} | {:.2} | {} |",
        floor.per_second(),
        floor.percentile(50.0).as_secs_f64() * 1000.0,
        floor.percentile(99.0).as_secs_f64() * 1000.0,
        floor.errors
    )
}

fn backend_of(backend: BackendArg) -> anyhow::Result<Backend> {
    let backend = match backend {
        BackendArg::Sqlite => Backend::Sqlite,
        BackendArg::Postgres => Backend::Postgres,
    };
    if !backend.available() {
        bail!("set HERALD_TEST_DATABASE_URL to benchmark PostgreSQL");
    }
    Ok(backend)
}

fn engine_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

/// Send + verify pairs: each worker sends a code of its own choosing (`otp:custom_code`) to a
/// number of its own (the send limit is per recipient) and verifies it.
async fn otp(
    backend: BackendArg,
    pairs: usize,
    concurrency: usize,
    daemon: PathBuf,
    pin: bool,
    perf: Option<&Path>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let backend = backend_of(backend)?;
    let database_url = backend.fresh_database_url(dir.path()).await;
    let (smtp_port, _) = smtp::start().await?;
    let d = start_daemon(&daemon, dir.path(), &database_url, smtp_port, pin).await?;
    let nothing: Arc<dyn Fn(usize, Instant) + Send + Sync> = Arc::new(|_, _| {});
    let health: load::MakeRequest = Arc::new(|_| (Method::GET, "/healthz".into(), None));
    let floor = load::run(&d.url, None, pairs * 2, concurrency, health, nothing.clone()).await;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let http = reqwest::Client::new();
    let pid = d.child.id();
    let recording = profile::start(perf, "otp").await?;
    let before = costs::sample(&http, &d.url, pid).await?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, url, key) = (next.clone(), d.url.clone(), d.boot.api_key.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0usize;
            let Ok(mut conn) = http::Connection::open(&url).await else {
                return (latencies, pairs);
            };
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= pairs {
                    break;
                }
                let code = format!("bench-{i}");
                let began = Instant::now();
                let send = json!({"channel": "sms", "recipient": format!("+1415{:07}", i), "code": code});
                let sent = conn
                    .send("POST", "/api/v1/otp/send", Some(&key), Some(&send.to_string().into_bytes()))
                    .await;
                let transaction = match sent {
                    Ok((200, body)) => serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v["transaction_id"].as_str().map(str::to_owned)),
                    _ => None,
                };
                let Some(transaction) = transaction else {
                    errors += 1;
                    continue;
                };
                let verify = json!({"transaction_id": transaction, "code": code}).to_string().into_bytes();
                match conn.send("POST", "/api/v1/otp/verify", Some(&key), Some(&verify)).await {
                    Ok((200, _)) => latencies.push(began.elapsed()),
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await?;
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    profile::stop(recording).await?;
    let cost = before.until(&costs::sample(&http, &d.url, pid).await?, latencies.len());
    latencies.sort();
    println!("\n{}, {pairs} OTP send + verify pairs, concurrency {concurrency}\n", engine_name(backend));
    println!("| path | per second | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|");
    println!("{}", floor_row(&floor));
    println!(
        "| send + verify pair | {:.0} | {:.2} | {:.2} | {errors} |",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        load::percentile(&latencies, 50.0).as_secs_f64() * 1000.0,
        load::percentile(&latencies, 99.0).as_secs_f64() * 1000.0,
    );
    print_costs("pair", backend, &[("send + verify", &cost)]);
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}

/// The costs of each kind of work, per `unit`: a Markdown table.
fn print_costs(unit: &str, backend: Backend, costs: &[(&str, &costs::Cost)]) {
    println!(
        "\n| per {unit} | store calls | operations per write batch | daemon CPU ms | PostgreSQL CPU ms |"
    );
    println!("|---|---|---|---|---|");
    for (name, cost) in costs {
        println!(
            "| {name} | {:.2} | {:.1} | {:.3} | {} |",
            cost.calls_per_unit,
            cost.operations_per_batch,
            cost.daemon_cpu_ms_per_unit,
            match backend {
                Backend::Postgres => format!("{:.3}", cost.postgres_cpu_ms_per_unit),
                Backend::Sqlite => "n/a".to_owned(),
            }
        );
    }
}

fn main() -> anyhow::Result<()> {
    // Named, so `--perf` tells the harness's threads from the daemon's.
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-load")
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match Cli::parse().command {
        Command::Dispatch { daemons: 2.., backend: BackendArg::Sqlite, .. } => {
            bail!("several daemons share a PostgreSQL database: add --backend postgres")
        }
        Command::Dispatch { daemons: daemons @ 2.., requests, concurrency, daemon, perf, .. } => {
            let (streams, rate, seconds) = (1_000, 1_000, 10);
            fleet::run(fleet::Options {
                daemons,
                requests,
                concurrency,
                daemon,
                streams,
                rate,
                seconds,
                perf,
            })
            .await
        }
        Command::Dispatch { backend, requests, concurrency, daemon, pin, perf, suppressions, .. } => {
            let run = dispatch::DispatchRun { requests, concurrency, pin, suppressions };
            dispatch::dispatch(backend, run, daemon, perf.as_deref()).await
        }
        Command::Webhooks {
            backend,
            events,
            fan_out,
            rate,
            seconds,
            backlog,
            requests,
            rounds,
            warm_up,
            dispatch_only,
            throughput_only,
            postgres_sql,
            down_control,
            other_events,
            daemon,
        } => {
            webhooks::run(webhooks::Options {
                backend,
                events,
                fan_out,
                rate,
                seconds,
                backlog,
                requests,
                rounds,
                warm_up,
                dispatch_only,
                throughput_only,
                postgres_sql,
                down_control,
                other_events,
                daemon,
            })
            .await
        }
        Command::Receipts { backend, messages, concurrency, rate, seconds, daemon } => {
            receipts::run(receipts::Options { backend, messages, concurrency, rate, seconds, daemon }).await
        }
        Command::Cli { rows, concurrency, daemon, herald, runs } => {
            cli::run(cli::Options { rows, concurrency, daemon, herald, runs }).await
        }
        Command::Tui { rate, seconds, daemon, herald } => {
            tui::run(tui::Options { rate, seconds, daemon, herald }).await
        }
        Command::Otp { backend, pairs, concurrency, daemon, pin, perf } => {
            otp(backend, pairs, concurrency, daemon, pin, perf.as_deref()).await
        }
        Command::Activity { backend, items, requests, daemon } => {
            let backend = backend_of(backend)?;
            let dir = tempfile::tempdir()?;
            let database_url = backend.fresh_database_url(dir.path()).await;
            let (smtp_port, _) = smtp::start().await?;
            // Bootstrap (and migrate) through the daemon, seed, then serve from a fresh start.
            let first = start_daemon(&daemon, dir.path(), &database_url, smtp_port, false).await?;
            let mut child = first.child;
            let _ = child.kill().await;
            let _ = child.wait().await;
            let config = herald_daemon::config::Layers::new()
                .env([("HERALD_DATABASE_URL".to_owned(), database_url.clone())])
                .build(false)?;
            let store = herald_daemon::store::Store::open(&config).await?;
            let tenant = herald_common::ids::TenantId::parse(first.boot.tenant_id.as_str())?;
            let second =
                store.create_application(&tenant, "Second".into()).await?.context("second application")?;
            let seeded = activity::seed(&database_url, &first.boot, second.id.as_str(), items).await?;
            // The seed arrived at once rather than as a trickle: fold PostgreSQL's counter changes
            // (the daemon folds every second) and vacuum them before measuring.
            store.fold_activity_counts().await?;
            store.vacuum_activity_deltas().await?;
            store.close().await;
            let d = start_daemon(&daemon, dir.path(), &database_url, smtp_port, false).await?;
            let key = first.boot.api_key.clone();
            let app = first.boot.application_id.to_string();
            let day = herald_common::Timestamp::from_millis(
                herald_common::Timestamp::now().millis() - 10 * 86_400_000,
            );
            let day_end = day.plus_millis(86_400_000);
            let shapes = [
                ("newest, no filter", "/api/v1/activity".to_owned()),
                ("status=failed", "/api/v1/activity?status=failed".to_owned()),
                ("channel=sms", "/api/v1/activity?channel=sms".to_owned()),
                ("application_id", format!("/api/v1/activity?application_id={app}")),
                ("status=failed&channel=email", "/api/v1/activity?status=failed&channel=email".to_owned()),
                ("status=verified (OTP)", "/api/v1/activity?status=verified".to_owned()),
                ("one day (from/to)", format!("/api/v1/activity?from={day}&to={day_end}")),
                ("limit=100", "/api/v1/activity?limit=100".to_owned()),
                ("page 500 (offset 10,000)", "/api/v1/activity?page=500".to_owned()),
                ("page 5,000 (offset 100,000)", "/api/v1/activity?page=5000".to_owned()),
                ("page 50,000 (offset 1,000,000)", "/api/v1/activity?page=50000".to_owned()),
            ];
            println!(
                "\n{}, {items} feed items seeded in {:.1} s; {requests} requests per row\n",
                engine_name(backend),
                seeded.as_secs_f64()
            );
            println!("| query | total_count | p50 ms | p99 ms |");
            println!("|---|---|---|---|");
            for (name, path) in shapes {
                let (p50, p99, total) = activity::measure(&d.url, &key, &path, requests).await?;
                println!(
                    "| {name} | {total} | {:.1} | {:.1} |",
                    p50.as_secs_f64() * 1000.0,
                    p99.as_secs_f64() * 1000.0
                );
            }
            let mut child = d.child;
            let _ = child.kill().await;
            Ok(())
        }
        Command::Stream { streams, rate, seconds, daemon, pin } => {
            let dir = tempfile::tempdir()?;
            let database_url = Backend::Sqlite.fresh_database_url(dir.path()).await;
            let (smtp_port, _) = smtp::start().await?;
            let d = start_daemon(&daemon, dir.path(), &database_url, smtp_port, pin).await?;
            let pid = d.child.id().unwrap_or_default();
            let result = streams::run(&d.url, pid, &d.boot, streams, rate, seconds).await;
            let mut child = d.child;
            let _ = child.kill().await;
            result
        }
    }
}
