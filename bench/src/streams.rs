//! `herald-bench stream`: many concurrent user streams on one daemon: server memory per stream
//! (RSS before and after connecting them) and the time from dispatch to `notification.created`
//! at a steady rate of notifications to random connected users.
//!
//! Run it with a high file-descriptor limit (the daemon inherits it):
//!     bash -c 'ulimit -n 65536 && target/release/herald-bench stream --streams 10000'

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use herald_common::{Timestamp, api::admin::Bootstrapped};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rand::RngExt;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn user_token(boot: &Bootstrapped, user: &str) -> String {
    let claims = serde_json::json!({
        "sub": user, "tenant_id": boot.tenant_id, "application_id": boot.application_id,
        "exp": Timestamp::now().seconds() + 3600,
    });
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(boot.signing_secret.as_bytes()),
    )
    .unwrap_or_default()
}

type Sent = Arc<Mutex<HashMap<usize, Instant>>>;
/// Each event's latency with the time its notification was sent.
type Latencies = Arc<Mutex<Vec<(Duration, Instant)>>>;

/// Opens one stream and reports `notification.created` latencies until the connection ends.
async fn hold_stream(
    addr: String,
    token: String,
    ready: Arc<AtomicUsize>,
    sent: Sent,
    latencies: Latencies,
) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(&addr).await?;
    let request = format!(
        "GET /api/v1/in-app/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut lines = BufReader::new(stream).lines();
    let mut event = String::new();
    while let Some(line) = lines.next_line().await? {
        if let Some(name) = line.strip_prefix("event: ") {
            event = name.to_owned();
            if name == "connection.ready" {
                ready.fetch_add(1, Ordering::Relaxed);
            }
        } else if let Some(data) = line.strip_prefix("data: ")
            && event == "notification.created"
        {
            let at = Instant::now();
            let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
            let index = value["title"]
                .as_str()
                .and_then(|t| t.strip_prefix("b-"))
                .and_then(|i| i.parse::<usize>().ok());
            if let Some(sent_at) = index.and_then(|i| sent.lock().ok().and_then(|m| m.get(&i).copied()))
                && let Ok(mut l) = latencies.lock()
            {
                l.push((at - sent_at, sent_at));
            }
        }
    }
    Ok(())
}

/// Opens `streams` user streams (`user-0`, `user-1`, …) on the daemon at `url`, in waves;
/// returns how many reached `connection.ready` (within two minutes).
async fn open_streams(
    url: &str,
    boot: &Bootstrapped,
    streams: usize,
    sent: &Sent,
    latencies: &Latencies,
) -> usize {
    let addr = url.trim_start_matches("http://").to_owned();
    let ready = Arc::new(AtomicUsize::new(0));
    let connecting = Instant::now();
    let give_up = connecting + Duration::from_secs(120);
    for i in 0..streams {
        if Instant::now() > give_up {
            break;
        }
        // Open connections in waves, so the accept queue is never flooded.
        while i >= ready.load(Ordering::Relaxed) + 256 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (addr, token) = (addr.clone(), user_token(boot, &format!("user-{i}")));
        let (ready, sent, latencies) = (ready.clone(), sent.clone(), latencies.clone());
        tokio::spawn(async move {
            if let Err(e) = hold_stream(addr, token, ready, sent, latencies).await {
                eprintln!("stream {i} failed: {e}");
            }
        });
    }
    while ready.load(Ordering::Relaxed) < streams && connecting.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ready.load(Ordering::Relaxed)
}

/// Sends `rate` in-app notifications a second, `total` in all, to random users of the
/// `connected` streams through the daemon at `url`.
async fn send_paced(
    url: &str,
    boot: &Bootstrapped,
    connected: usize,
    rate: usize,
    total: usize,
    sent: &Sent,
) -> crate::load::Paced {
    let body = |index: usize| {
        let user = rand::rng().random_range(0..connected.max(1));
        serde_json::json!({"channel": "in_app", "recipient": format!("user-{user}"), "title": format!("b-{index}"), "body": "bench"})
    };
    let on_send = |index: usize| {
        if let Ok(mut m) = sent.lock() {
            m.insert(index, Instant::now());
        }
    };
    crate::load::paced(url, &boot.api_key, "/api/v1/notifications", rate, total, body, on_send).await
}

/// Streams held on one daemon (`stream_url`) while another daemon on the same database
/// (`dispatch_url`) takes `rate` in-app dispatches a second for `seconds`: how many streams
/// connected, how many dispatches were accepted, and each `notification.created` latency
/// (dispatch to event, sorted).
pub async fn across(
    dispatch_url: &str,
    stream_url: &str,
    boot: &Bootstrapped,
    streams: usize,
    rate: usize,
    seconds: u64,
) -> (usize, usize, Vec<Duration>) {
    let sent: Sent = Arc::default();
    let latencies: Latencies = Arc::default();
    let connected = open_streams(stream_url, boot, streams, &sent, &latencies).await;
    let paced = send_paced(dispatch_url, boot, connected, rate, rate * seconds as usize, &sent).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut latencies: Vec<Duration> =
        latencies.lock().map(|l| l.iter().map(|(l, _)| *l).collect()).unwrap_or_default();
    latencies.sort();
    (connected, paced.accepted, latencies)
}

pub async fn run(
    url: &str,
    pid: u32,
    boot: &Bootstrapped,
    streams: usize,
    rate: usize,
    seconds: u64,
) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    let sent: Sent = Arc::default();
    let latencies: Latencies = Arc::default();
    let connecting = Instant::now();
    let connected = open_streams(url, boot, streams, &sent, &latencies).await;
    let connected_in = connecting.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    let per_stream = (after.saturating_sub(before)) as f64 / connected.max(1) as f64;

    // A steady rate of in-app notifications to random connected users.
    let total = rate * seconds as usize;
    let started = Instant::now();
    let crate::load::Paced { accepted, answered, sending, .. } =
        send_paced(url, boot, connected, rate, total, &sent).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut timed = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    timed.sort();
    let latencies: Vec<Duration> = timed.iter().map(|(l, _)| *l).collect();
    let pct = |p: f64| crate::load::percentile(&latencies, p).as_secs_f64() * 1000.0;
    println!(
        "\nSQLite, {streams} streams requested, {connected} connected in {:.1} s\n",
        connected_in.as_secs_f64()
    );
    println!("| measure | figure | target |");
    println!("|---|---|---|");
    println!("| daemon RSS before / after connecting | {} KiB / {} KiB | |", before, after);
    println!("| server memory per stream | {per_stream:.1} KiB | ≤ 32 KiB |");
    println!(
        "| notifications sent | {total} in {:.1} s ({:.0}/s), {accepted} accepted | 1,000/s |",
        sending.as_secs_f64(),
        total as f64 / sending.as_secs_f64()
    );
    println!("| notification.created received | {} | |", latencies.len());
    let answer = |p: f64| crate::load::percentile(&answered, p).as_secs_f64() * 1000.0;
    println!(
        "| dispatch → 202 (the POST alone) | p50 {:.2} ms, p99 {:.2} ms | |",
        answer(50.0),
        answer(99.0)
    );
    println!(
        "| dispatch → notification.created | p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms | p99 ≤ 5 ms |",
        pct(50.0),
        pct(99.0),
        pct(100.0)
    );
    // Where the slowest events were sent, for telling a stall from a spread-out tail.
    let slow: Vec<String> = timed
        .iter()
        .rev()
        .take(5)
        .map(|(l, at)| {
            format!(
                "{:.1} ms at +{:.3} s",
                l.as_secs_f64() * 1000.0,
                at.duration_since(started).as_secs_f64()
            )
        })
        .collect();
    println!("\nslowest events: {}", slow.join(", "));
    Ok(())
}
