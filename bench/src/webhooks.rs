//! `herald-bench webhooks`: event webhooks delivered to a loopback receiver (an axum server in
//! this process that answers at once; it checks no signature, so the daemon is what is measured).
//! Every event here is a `notification.delivered` of an in-app dispatch (in-app is delivered at
//! once, so each accepted dispatch is one event).
//!
//! 1. **Dispatch cost**: in-app dispatches accepted per second with no endpoint, with one
//!    subscribed that takes each event as it comes (the sends share the machine with the
//!    dispatches), and with one subscribed that is down (503, and down a while: it failed five
//!    before the row, so it is only probed, and paused in the store, which makes no message for
//!    its events; the outbox's own cost), `--rounds` times over. Each row also gives
//!    the deliveries that arrived while the dispatches ran, the writer's commits and the KiB
//!    the daemon wrote to storage (`/proc/PID/io`: WAL and checkpoints) per dispatch, and the
//!    daemon's CPU time per 1,000 dispatches (and the PostgreSQL server's), read from `/proc`:
//!    steadier than a rate on a shared machine. The delivering row's costs include its
//!    deliveries (read once they all arrived).
//!    The table runs last (steps 2-4 keep the fresh database of earlier sessions), on the
//!    database steps 2-4 grew, topped up to `--warm-up` dispatches (100,000 by default) if they
//!    grew it less (with `--dispatch-only`, all of them). Each round is bracketed by two rows
//!    with no endpoint, the other two cases between them in an order that alternates; each case
//!    is compared with the mean of its round's two none rows (the rows slow as the database
//!    grows, 18 % over 15 rows on SQLite, and a row of 10,000 varies ±10 % on its own), and how
//!    far those two lie from their mean is none's own noise. A dispatch writes an
//!    inbox entry under its user, and while the inbox indexes are small a commit's entries share
//!    pages, so each row on a younger database wrote fewer pages per dispatch than the next
//!    (a WAL read in the seventh session: 12 pages a commit of each inbox index in the first
//!    row, 36 in the third), and the cases run later in a round looked dearer for that.
//!    Then the same three at a steady `--rate` (1b): the API's answer times when the machine is
//!    not saturated, what an integrator's request sees.
//! 2. **Throughput**: `--fan-out` endpoints subscribed, `--events` dispatches as fast as they are
//!    taken; deliveries per second from the first dispatch to the last delivery. With
//!    Then its endpoints are removed, each with the messages it was delivered, during an in-app
//!    dispatch at a steady `--rate` (2b): how long the removals take and what they cost the
//!    API's answers meanwhile. With `--throughput-only`, the run stops after that (to compare
//!    builds on this step alone).
//! 3. **Latency**: one endpoint, `--rate` dispatches a second for `--seconds`; for each delivery,
//!    its arrival minus the event's `timestamp` (when the change committed): event → first attempt.
//!    With `HERALD_BENCH_TIMELINE` set, each step also lists its 100 ms spells (by the events'
//!    timestamps) whose slowest first attempt took over 50 ms: when a tail happened, and whether
//!    the dispatches themselves slowed then (fewer events in the spell), and the step's first
//!    event as a wall clock (to set beside the database server's log). With
//!    `HERALD_BENCH_DAEMON_LOG=FILE` the daemon's log is kept there (`HERALD_BENCH_LOG` sets its
//!    filter, e.g. `info,herald_daemon::delivery::webhooks=debug` for each fan-out call and
//!    hold-back).
//! 4. **Isolation**: `--backlog` events are dispatched with no endpoint subscribed, then step 3
//!    runs again (the control before); a dead endpoint (it answers 503 at once) is given a
//!    backlog of as many events, then step 3 runs beside it; then the dead endpoint is removed
//!    (its messages with it) and step 3 runs again (the control after). Each fill grows the
//!    database, which slows every write a little: the control before ran on a database smaller
//!    by a fill, the one after on one as large, so the two together straddle the run beside the
//!    backlog, and the difference is the dead endpoint's. Each of the three starts 5 s after its
//!    fill (or the removal): begun at once, on SQLite they measured the fill's aftermath (p99
//!    0.3–0.7 s, larger after the dead endpoint's fill, which writes events and messages too;
//!    19–30 ms after the wait). (Disabling the endpoint instead would fail its backlog, CONTRACT
//!    §10.) Against step 3's too, on a database smaller by a fill. With
//!    `HERALD_BENCH_UNSUBSCRIBE_DEAD` set, the dead endpoint is unsubscribed from the step's
//!    events after its fill (its backlog kept): what the backlog costs, apart from the message
//!    each event makes for it. Each of the three runs `--rounds` times in a row; with more than
//!    one, the medians of their p99s are compared too (one stall in one step decided a single
//!    round).

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context as _;
use axum::{
    Router,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    routing::post,
};
use herald_common::Timestamp;
use reqwest::Method;
use serde_json::json;

mod dispatch_cost;

use self::dispatch_cost::{Table, dispatch_costs};
use crate::{BackendArg, backend_of, engine_name, load, smtp, start_daemon_with};
use herald_tests::Backend;

pub struct Options {
    pub backend: BackendArg,
    pub events: usize,
    pub fan_out: usize,
    pub rate: usize,
    pub seconds: u64,
    pub backlog: usize,
    pub requests: usize,
    pub rounds: usize,
    pub warm_up: usize,
    pub dispatch_only: bool,
    pub throughput_only: bool,
    pub postgres_sql: Option<PathBuf>,
    pub down_control: bool,
    pub other_events: bool,
    pub daemon: PathBuf,
}

/// How long the isolation step waits after a fill (or a removal) before it measures.
const QUIET: Duration = Duration::from_secs(5);

/// What one endpoint of the receiver got.
#[derive(Default)]
struct Seen {
    count: usize,
    last: Option<Instant>,
    /// Arrival minus the event's timestamp, in ms.
    lag_ms: Vec<i64>,
    /// Each event's timestamp (ms since the epoch) and its lag, in arrival order.
    timeline: Vec<(i64, i64)>,
}

type Book = Arc<Mutex<HashMap<String, Seen>>>;

async fn receive(State(book): State<Book>, Path(name): Path<String>, body: Bytes) -> StatusCode {
    if name.starts_with("dead") {
        if let Ok(mut book) = book.lock() {
            book.entry(name).or_default().count += 1;
        }
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let now = Instant::now();
    let arrived = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64);
    let at = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| Timestamp::parse(v["timestamp"].as_str()?).ok());
    if let Ok(mut book) = book.lock() {
        let seen = book.entry(name).or_default();
        seen.count += 1;
        seen.last = Some(now);
        if let (Some(at), Ok(arrived)) = (at, arrived) {
            seen.lag_ms.push(arrived - at.millis());
            seen.timeline.push((at.millis(), arrived - at.millis()));
        }
    }
    StatusCode::NO_CONTENT
}

struct Receiver {
    base: String,
    book: Book,
}

impl Receiver {
    async fn start() -> anyhow::Result<Receiver> {
        let book: Book = Arc::default();
        let app = Router::new().route("/hook/{name}", post(receive)).with_state(book.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Receiver { base, book })
    }

    fn count(&self, name: &str) -> usize {
        self.book.lock().map(|b| b.get(name).map_or(0, |s| s.count)).unwrap_or(0)
    }

    fn take(&self, name: &str) -> Seen {
        self.book.lock().ok().and_then(|mut b| b.remove(name)).unwrap_or_default()
    }

    /// Waits until `name` has `count` deliveries (or `limit` passes).
    async fn wait_for(&self, name: &str, count: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.count(name) < count {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

/// The daemon's API as the bench calls it (the API key of the bootstrapped tenant).
struct Api {
    url: String,
    key: String,
    http: reqwest::Client,
    /// The daemon's database, to wait for the purge of a removed endpoint.
    store: (Backend, String),
}

impl Api {
    /// Subscribes `hook_url` to `notification.delivered`; the endpoint's id.
    async fn add_endpoint(&self, hook_url: &str) -> anyhow::Result<String> {
        self.add_endpoint_for(hook_url, "notification.delivered").await
    }

    /// Subscribes `hook_url` to `event_type`; the endpoint's id.
    async fn add_endpoint_for(&self, hook_url: &str, event_type: &str) -> anyhow::Result<String> {
        let response = self
            .http
            .post(format!("{}/api/v1/webhooks", self.url))
            .bearer_auth(&self.key)
            .json(&json!({"url": hook_url, "event_types": [event_type]}))
            .send()
            .await?;
        let status = response.status();
        let body: serde_json::Value = response.json().await?;
        anyhow::ensure!(status == reqwest::StatusCode::CREATED, "adding an endpoint: {status} {body}");
        body["endpoint_id"].as_str().map(str::to_owned).context("no endpoint_id")
    }

    /// Removes an endpoint, and waits until the daemon has purged its messages (a row of the
    /// bench that began meanwhile would pay for the purge).
    async fn remove_endpoint(&self, id: &str) -> anyhow::Result<()> {
        self.remove_endpoint_only(id).await?;
        self.purged().await;
        Ok(())
    }

    /// Removes an endpoint, and says how long the API took when that was more than 50 ms (a
    /// removal only marks the endpoint; the daemon purges its messages afterwards:
    /// docs/WEBHOOKS.md, "Removing an endpoint").
    async fn remove_endpoint_only(&self, id: &str) -> anyhow::Result<()> {
        let url = format!("{}/api/v1/webhooks/{id}", self.url);
        let started = Instant::now();
        let status = self.http.delete(url).bearer_auth(&self.key).send().await?.status();
        anyhow::ensure!(status.is_success(), "removing an endpoint: {status}");
        let took = started.elapsed();
        if took > Duration::from_millis(50) {
            println!("(removing endpoint {id} took {} ms)", took.as_millis());
        }
        Ok(())
    }

    /// Waits until the daemon has purged every removed endpoint, its messages and its row
    /// (`delivery/webhooks/purge.rs`).
    async fn purged(&self) {
        let left = "SELECT COUNT(*) FROM webhook_endpoints WHERE status = 'removed'";
        while self.store.0.count(&self.store.1, left).await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// No progress to report.
fn nothing() -> Arc<dyn Fn(usize, Instant) + Send + Sync> {
    Arc::new(|_, _| {})
}

fn in_app() -> load::MakeRequest {
    Arc::new(|i| {
        (
            Method::POST,
            "/api/v1/notifications".into(),
            Some(
                json!({"channel": "in_app", "recipient": format!("user-{}", i % 1000), "title": "Bench", "body": "A webhook benchmark"}),
            ),
        )
    })
}

fn in_app_body(i: usize) -> serde_json::Value {
    json!({"channel": "in_app", "recipient": format!("user-{}", i % 1000), "title": "Bench", "body": "A webhook benchmark"})
}

/// Percentile `p` of sorted lags in ms.
fn lag(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(((p / 100.0) * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// `--rate` in-app dispatches a second for `--seconds` with `name` subscribed: the lags of its
/// deliveries, sorted, and how many of the events it got.
async fn paced_lags(
    api: &Api,
    receiver: &Receiver,
    name: &str,
    o: &Options,
) -> anyhow::Result<(Vec<i64>, usize, usize)> {
    let total = o.rate * o.seconds as usize;
    let probe = DiskProbe::start();
    let paced =
        load::paced(&api.url, &api.key, "/api/v1/notifications", o.rate, total, in_app_body, |_| {}).await;
    if let Some(probe) = probe {
        probe.report();
    }
    receiver.wait_for(name, paced.accepted, Duration::from_secs(120)).await;
    let mut seen = receiver.take(name);
    if std::env::var_os("HERALD_BENCH_TIMELINE").is_some() {
        print_slow_spells(&seen.timeline);
    }
    seen.lag_ms.sort_unstable();
    Ok((seen.lag_ms, seen.count, paced.accepted))
}

/// With `HERALD_BENCH_DISK_PROBE` set, the disk's own latency during a paced step, measured
/// beside it: a thread of the bench writes 4 KiB into a file of the temporary folder (where the
/// SQLite database is; PostgreSQL's WAL is on the same disk here) and `fdatasync`s it every
/// 10 ms, overwriting the file's first MiB in turn as SQLite's WAL is overwritten. A durable
/// commit cannot be faster than that: when the probe's p99 is over 50 ms, so is any latency
/// that waits for a commit (docs/PERFORMANCE.md, thirty-fourth session). Off by default: its
/// hundred syncs a second are load of their own.
struct DiskProbe {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<Vec<Duration>>>,
}

impl DiskProbe {
    fn start() -> Option<DiskProbe> {
        std::env::var_os("HERALD_BENCH_DISK_PROBE")?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            use std::io::{Seek, SeekFrom, Write};
            let mut file = tempfile::tempfile_in(std::env::temp_dir())?;
            let page = [7u8; 4096];
            for _ in 0..256 {
                file.write_all(&page)?;
            }
            file.sync_all()?;
            let mut took = Vec::new();
            let mut i = 0u64;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                file.seek(SeekFrom::Start((i % 256) * 4096))?;
                let started = Instant::now();
                file.write_all(&page)?;
                file.sync_data()?;
                took.push(started.elapsed());
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(took)
        });
        Some(DiskProbe { stop, thread })
    }

    fn report(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.thread.join() {
            Ok(Ok(mut took)) if !took.is_empty() => {
                took.sort_unstable();
                let at = |p: f64| {
                    let i = ((took.len() as f64 * p / 100.0).ceil() as usize).clamp(1, took.len()) - 1;
                    took[i].as_secs_f64() * 1000.0
                };
                println!(
                    "  (the disk meanwhile: {} syncs of 4 KiB, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms)",
                    took.len(),
                    at(50.0),
                    at(99.0),
                    at(100.0)
                );
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => println!("  (the disk probe failed: {e})"),
            Err(_) => println!("  (the disk probe panicked)"),
        }
    }
}

/// With `HERALD_BENCH_TIMELINE` set: each 100 ms of a paced step (by the events' timestamps)
/// whose slowest first attempt took over 50 ms, to see when a step's tail happened.
fn print_slow_spells(timeline: &[(i64, i64)]) {
    let Some(start) = timeline.iter().map(|(at, _)| *at).min() else { return };
    // The step's start as a wall clock, to set beside the database server's log.
    println!("  (the step's first event at {})", Timestamp::from_millis(start));
    let mut spells: std::collections::BTreeMap<i64, (usize, i64)> = Default::default();
    for (at, lag) in timeline {
        let spell = spells.entry((at - start) / 100).or_default();
        spell.0 += 1;
        spell.1 = spell.1.max(*lag);
    }
    for (spell, (events, slowest)) in spells.iter().filter(|(_, (_, slowest))| *slowest > 50) {
        println!("  t+{:.1} s: {events} events, slowest {slowest} ms", *spell as f64 / 10.0);
    }
}

/// 2b. The throughput's endpoints removed, each with the messages it was delivered, one after
/// another from a second into an in-app dispatch at a steady `--rate` for four seconds: what
/// the removals and the purge of their messages cost the API's answers. (Until migration 0029
/// each removal deleted its messages in one statement, in the writer's transaction, with every
/// dispatch of that batch waiting; until the thirty-fourth session the API call deleted them in
/// groups before it answered.) Then the same dispatch again with no endpoint, as a control.
async fn removal_under_load(
    api: &Api,
    receiver: &Receiver,
    o: &Options,
    engine: &str,
    ids: Vec<String>,
) -> anyhow::Result<()> {
    let total = o.rate * 4;
    let dispatching =
        load::paced(&api.url, &api.key, "/api/v1/notifications", o.rate, total, in_app_body, |_| {});
    let removing = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let started = Instant::now();
        for id in &ids {
            api.remove_endpoint_only(id).await?;
        }
        let removed = started.elapsed();
        api.purged().await;
        anyhow::Ok((removed, started.elapsed()))
    };
    let (paced, removed) = tokio::join!(dispatching, removing);
    let (removed, purged) = removed?;
    for i in 0..ids.len() {
        receiver.take(&format!("fan-{i}"));
    }
    // The control: the same dispatch once the endpoints are gone (the machine's own tail).
    let control =
        load::paced(&api.url, &api.key, "/api/v1/notifications", o.rate, total, in_app_body, |_| {}).await;
    let ms = |answered: &[Duration], p: f64| load::percentile(answered, p).as_secs_f64() * 1000.0;
    println!(
        "{engine}: the {} endpoints removed in {} ms, one after another, and purged of their messages {} ms after the first removal, during in-app dispatch at {}/s: {} of {} accepted, answers p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (at {:.1} s); the same dispatch after, no endpoint: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ids.len(),
        removed.as_millis(),
        purged.as_millis(),
        o.rate,
        paced.accepted,
        total,
        ms(&paced.answered, 50.0),
        ms(&paced.answered, 99.0),
        ms(&paced.answered, 100.0),
        paced.slowest.0.as_secs_f64(),
        ms(&control.answered, 50.0),
        ms(&control.answered, 99.0),
        ms(&control.answered, 100.0),
    );
    Ok(())
}

/// 2-4. Deliveries per second, event → first attempt at a steady rate, and the same beside a
/// dead endpoint's backlog against controls.
async fn deliveries(
    api: &Api,
    receiver: &Receiver,
    o: &Options,
    engine: &str,
    store: (Backend, &str),
) -> anyhow::Result<()> {
    let nothing = nothing();
    let hook = |name: &str| format!("{}/hook/{name}", receiver.base);
    // 2. Throughput: every event to `fan_out` endpoints.
    let mut ids = Vec::new();
    for i in 0..o.fan_out {
        ids.push(api.add_endpoint(&hook(&format!("fan-{i}"))).await?);
    }
    let started = Instant::now();
    let dispatched = load::run(&api.url, Some(&api.key), o.events, 64, in_app(), nothing.clone()).await;
    let mut delivered = 0;
    let mut last = started;
    for i in 0..o.fan_out {
        let name = format!("fan-{i}");
        receiver.wait_for(&name, dispatched.ok, Duration::from_secs(600)).await;
        let seen = receiver.take(&name);
        delivered += seen.count;
        last = last.max(seen.last.unwrap_or(started));
    }
    let took = last - started;
    println!(
        "\n{engine}: {} events × {} endpoints: {delivered} deliveries in {:.2} s from the first dispatch = {:.0} deliveries/s (dispatch took {:.2} s, {} errors)",
        dispatched.ok,
        o.fan_out,
        took.as_secs_f64(),
        delivered as f64 / took.as_secs_f64(),
        dispatched.elapsed.as_secs_f64(),
        dispatched.errors,
    );
    removal_under_load(api, receiver, o, engine, ids).await?;
    if o.throughput_only {
        return Ok(());
    }

    // 3. Latency at a steady rate, one endpoint (each delivery's arrival against its event's
    //    timestamp: event → first attempt).
    let fill = |what: &'static str| {
        let (url, key, nothing) = (api.url.clone(), api.key.clone(), nothing.clone());
        async move {
            let filled = Instant::now();
            let fill = load::run(&url, Some(&key), o.backlog, 64, in_app(), nothing).await;
            println!("\n{engine}: {} events {what} in {:.1} s", fill.ok, filled.elapsed().as_secs_f64());
        }
    };
    let paced = |what: &'static str| async move {
        let (lags, got, sent) = paced_lags(api, receiver, "healthy", o).await?;
        println!(
            "{engine}: {what}, {} events/s for {} s: {got} of {sent} delivered; p50 {} ms, p99 {} ms, max {} ms",
            o.rate,
            o.seconds,
            lag(&lags, 50.0),
            lag(&lags, 99.0),
            lag(&lags, 100.0)
        );
        anyhow::Ok(lags)
    };
    let healthy = api.add_endpoint(&hook("healthy")).await?;
    println!();
    let alone = paced("event → first attempt, one endpoint").await?;

    // 4. The same beside a dead endpoint with a backlog, against controls before and after on
    //    databases as large (see the module's comment).
    //    Each of the three starts after the same [`QUIET`]: on SQLite the seconds after a fill
    //    of 100,000 stall (p99 0.3–0.7 s when the step began at once), which is the fill's
    //    aftermath, not the backlog's presence.
    api.remove_endpoint(&healthy).await?;
    fill("with no endpoint subscribed (the control before: the same growth, no backlog)").await;
    tokio::time::sleep(QUIET).await;
    // Each of the three `--rounds` times in a row: a stall of 60-120 ms (a checkpoint) in one
    // 10-second step moves its p99 by more than the 20 % the target allows, and fell in a
    // control as often as beside the backlog; the medians say more than one step each.
    let rounds = o.rounds.max(1);
    let healthy = api.add_endpoint(&hook("healthy")).await?;
    let mut control = Vec::new();
    for _ in 0..rounds {
        control.push(paced("then to one endpoint").await?);
    }
    api.remove_endpoint(&healthy).await?;
    let dead = api.add_endpoint(&hook("dead")).await?;
    fill("for a dead endpoint (503 at once): its backlog").await;
    if std::env::var_os("HERALD_BENCH_UNSUBSCRIBE_DEAD").is_some() {
        let status = api
            .http
            .patch(format!("{}/api/v1/webhooks/{dead}", api.url))
            .bearer_auth(&api.key)
            .json(&json!({"event_types": ["notification.failed"]}))
            .send()
            .await?
            .status();
        anyhow::ensure!(status.is_success(), "unsubscribing: {status}");
        println!("{engine}: (the dead endpoint unsubscribed from the step's events, its backlog kept)");
    }
    tokio::time::sleep(QUIET).await;
    // What the backlog is: messages, and the events owed to it once it was paused (a dead
    // endpoint's later events make no message: `store/webhooks/pause.rs`).
    let (backend, database_url) = store;
    let queued =
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{dead}' AND status = 'pending'");
    let mut owed = format!(
        "SELECT (SELECT COUNT(*) FROM webhook_events v JOIN webhook_endpoints e ON e.id = '{dead}'
                 WHERE v.id > e.paused_after AND v.endpoint_id IS NULL)"
    );
    if backend == Backend::Postgres {
        // And those still in their writer statement's batch (migration 0023).
        owed.push_str(&format!(
            " + (SELECT COALESCE(SUM(cardinality(b.subject_ids)), 0) FROM webhook_event_batches b
                 JOIN webhook_endpoints e ON e.id = '{dead}'
                 WHERE b.tenant_id = e.tenant_id AND b.last_id > e.paused_after)"
        ));
    }
    println!(
        "{engine}: its backlog: {} messages pending, {} events owed",
        backend.count(database_url, &queued).await,
        backend.count(database_url, &owed).await
    );
    let healthy = api.add_endpoint(&hook("healthy")).await?;
    let mut beside = Vec::new();
    for _ in 0..rounds {
        beside.push(paced("beside it").await?);
    }
    // The second control, on the database the backlog grew: the dead endpoint removed, and
    // purged of its messages.
    api.remove_endpoint(&dead).await?;
    tokio::time::sleep(QUIET).await;
    let mut after = Vec::new();
    for _ in 0..rounds {
        after.push(paced("the dead endpoint removed").await?);
    }
    api.remove_endpoint(&healthy).await?;
    let p99s = |steps: &[Vec<i64>]| steps.iter().map(|lags| lag(lags, 99.0)).collect::<Vec<_>>();
    let median = |mut p99s: Vec<i64>| {
        p99s.sort_unstable();
        p99s[p99s.len() / 2]
    };
    let (p99s_before, p99s_beside, p99s_after) = (p99s(&control), p99s(&beside), p99s(&after));
    let joined = |steps: Vec<Vec<i64>>| {
        let mut lags = steps.concat();
        lags.sort_unstable();
        lags
    };
    let (control, beside, after) = (joined(control), joined(beside), joined(after));
    let (p99_before, p99_after) = (lag(&control, 99.0), lag(&after, 99.0));
    let mut controls = [control, after].concat();
    controls.sort_unstable();
    let p99_beside = lag(&beside, 99.0);
    let against = |p99: i64| (p99_beside as f64 / p99.max(1) as f64 - 1.0) * 100.0;
    println!(
        "{engine}: isolation: p99 beside the backlog {p99_beside} ms against {} ms in the two controls together: {:+.0} % (against the control before {:+.0} %, after {:+.0} %; against step 3, on a database smaller by a fill, {:+.0} %)",
        lag(&controls, 99.0),
        against(lag(&controls, 99.0)),
        against(p99_before),
        against(p99_after),
        against(lag(&alone, 99.0)),
    );
    if rounds > 1 {
        let (beside, controls) =
            (median(p99s_beside.clone()), median([p99s_before.clone(), p99s_after.clone()].concat()));
        println!(
            "{engine}: isolation, medians of {rounds} steps each: p99 beside the backlog {beside} ms ({p99s_beside:?}) against {controls} ms in the controls (before {p99s_before:?}, after {p99s_after:?}): {:+.0} %",
            (beside as f64 / controls.max(1) as f64 - 1.0) * 100.0
        );
    }
    Ok(())
}

/// `--postgres-sql`: runs the file's statements in the bench's schema (the daemon has migrated
/// it: it answers).
async fn apply_postgres_sql(
    backend: Backend,
    database_url: &str,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    use sqlx::Connection as _;
    anyhow::ensure!(backend == Backend::Postgres, "--postgres-sql needs --backend postgres");
    let sql = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut conn = sqlx::PgConnection::connect(database_url).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .with_context(|| format!("running {}", path.display()))?;
    conn.close().await?;
    Ok(())
}

pub async fn run(o: Options) -> anyhow::Result<()> {
    let mut dir = tempfile::tempdir()?;
    // To look at the database afterwards (`sqlite3 DIR/…`): its directory is kept and named.
    if std::env::var_os("HERALD_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
    let backend = backend_of(o.backend)?;
    let database_url = backend.fresh_database_url(dir.path()).await;
    let (smtp_port, _) = smtp::start().await?;
    let receiver = Receiver::start().await?;
    let settings = vec![("HERALD_WEBHOOK_ALLOWED_NETWORKS".to_owned(), "127.0.0.0/8".to_owned())];
    let d =
        start_daemon_with(&o.daemon, dir.path(), &database_url, smtp_port, false, &settings, None).await?;
    let api = Api {
        url: d.url.clone(),
        key: d.boot.api_key.clone(),
        http: reqwest::Client::new(),
        store: (backend, database_url.clone()),
    };
    let nothing = nothing();
    let engine = engine_name(backend);
    if let Some(path) = &o.postgres_sql {
        apply_postgres_sql(backend, &database_url, path).await?;
        println!("\n{engine}: {} applied in the bench's schema", path.display());
    }
    let hook = |name: &str| format!("{}/hook/{name}", receiver.base);

    // Warm up.
    load::run(&d.url, Some(&api.key), 2_000, 64, in_app(), nothing.clone()).await;
    let pid = d.child.id();
    let mut grown = 2_000;
    if !o.dispatch_only {
        deliveries(&api, &receiver, &o, engine, (backend, &database_url)).await?;
        if o.throughput_only {
            let mut child = d.child;
            let _ = child.kill().await;
            return Ok(());
        }
        grown += o.events + 2 * o.backlog + 4 * o.rate * o.seconds as usize;
    }

    // 1. Last, on a database grown past its inbox indexes' growth (the module's comment): by
    //    steps 2-4, topped up to `--warm-up` dispatches if they grew it less.
    let more = o.warm_up.saturating_sub(grown);
    if more > 0 {
        let warmed = Instant::now();
        let warm = load::run(&d.url, Some(&api.key), more, 64, in_app(), nothing.clone()).await;
        println!(
            "\n{engine}: the database grown by {} more in-app dispatches in {:.1} s",
            warm.ok,
            warmed.elapsed().as_secs_f64()
        );
    }
    let postgres = (backend == Backend::Postgres).then_some(database_url.as_str());
    dispatch_costs(&Table { api: &api, receiver: &receiver, o: &o, engine, hook: &hook, pid, postgres })
        .await?;
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}
