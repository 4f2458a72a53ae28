//! `herald-bench receipts`: delivery receipts through Twilio's status callback, signed as Twilio
//! signs them (HMAC-SHA1 over the public URL and the sorted parameters, computed here
//! independently of the daemon's code).
//!
//! 1. The daemon sends `--messages` SMS (plus those of step 3) to the project's Twilio peer and
//!    records each `MessageSid`.
//! 2. **Ingestion**: `--messages` signed `delivered` callbacks at concurrency `--concurrency`, as
//!    fast as the daemon takes them (each must be answered 204).
//! 3. **Latency**: the operators' live feed is followed while `--rate` callbacks a second are
//!    sent for `--seconds`; for each, the time from sending the callback to the feed's
//!    `activity.updated` showing the item `delivered`.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use base64::Engine as _;
use herald_common::{
    api::activity::ActivityStatus,
    client::{Client, ConnectionState, FollowOptions, Followed},
    stream::StreamEvent,
};
use herald_tests::peers::TwilioServer;
use serde_json::json;

use crate::{BackendArg, backend_of, engine_name, http, load, smtp, start_daemon_with};

const ACCOUNT: &str = "ACbench0000000000000000000000000000";
const TOKEN: &str = "bench-twilio-auth-token";
/// The URL Twilio is told to call back: the signatures cover it, not the socket address.
const PUBLIC_URL: &str = "http://herald.bench.invalid";
const PATH: &str = "/api/v1/receipts/twilio";

pub struct Options {
    pub backend: BackendArg,
    pub messages: usize,
    pub concurrency: usize,
    pub rate: usize,
    pub seconds: u64,
    pub daemon: PathBuf,
}

/// Twilio's signature of a form POST to `url`: base64(HMAC-SHA1(token, url + each parameter's
/// name and value, sorted by name)).
fn twilio_signature(url: &str, params: &[(&str, &str)]) -> String {
    let mut sorted = params.to_vec();
    sorted.sort();
    let mut data = url.to_owned();
    for (name, value) in sorted {
        data.push_str(name);
        data.push_str(value);
    }
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, TOKEN.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(aws_lc_rs::hmac::sign(&key, data.as_bytes()).as_ref())
}

/// A signed `delivered` callback for `sid`: the form body and its signature.
fn callback(sid: &str) -> (Vec<u8>, String) {
    let params = [
        ("AccountSid", ACCOUNT),
        ("MessageSid", sid),
        ("MessageStatus", "delivered"),
        ("SmsSid", sid),
        ("SmsStatus", "delivered"),
        ("ApiVersion", "2010-04-01"),
    ];
    let body = params.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    (body.into_bytes(), twilio_signature(&format!("{PUBLIC_URL}{PATH}"), &params))
}

/// Sends callbacks `jobs` (index, sid), each at `at(index)` if given, over `concurrency`
/// keep-alive connections; the latency of each 204 by index, and the failures.
async fn post_callbacks(
    url: &str,
    jobs: Vec<(usize, String)>,
    concurrency: usize,
    at: Option<Arc<dyn Fn(usize) -> Instant + Send + Sync>>,
    sent: Option<Arc<Mutex<HashMap<String, Instant>>>>,
) -> (Vec<Duration>, usize) {
    let queue = Arc::new(Mutex::new(jobs.into_iter()));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (queue, url, at, sent) = (queue.clone(), url.to_owned(), at.clone(), sent.clone());
        workers.push(tokio::spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), 0usize);
            let Ok(mut conn) = http::Connection::open(&url).await else { return (latencies, usize::MAX) };
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.next());
                let Some((index, sid)) = next else { break };
                if let Some(at) = &at {
                    tokio::time::sleep_until(at(index).into()).await;
                }
                let (body, signature) = callback(&sid);
                let began = Instant::now();
                if let Some(sent) = &sent
                    && let Ok(mut sent) = sent.lock()
                {
                    sent.insert(sid.clone(), began);
                }
                let headers = [("X-Twilio-Signature", signature.as_str())];
                match conn.send_form("POST", PATH, &headers, &body).await {
                    Ok((204, _)) => latencies.push(began.elapsed()),
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let (mut latencies, mut errors) = (Vec::new(), 0usize);
    for worker in workers {
        if let Ok((l, e)) = worker.await {
            latencies.extend(l);
            errors = errors.saturating_add(e);
        }
    }
    latencies.sort();
    (latencies, errors)
}

/// `load::percentile` in milliseconds.
fn ms(sorted: &[Duration], p: f64) -> f64 {
    load::percentile(sorted, p).as_secs_f64() * 1000.0
}

pub async fn run(o: Options) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let backend = backend_of(o.backend)?;
    let database_url = backend.fresh_database_url(dir.path()).await;
    let (smtp_port, _) = smtp::start().await?;
    let twilio = TwilioServer::start(ACCOUNT, TOKEN).await;
    let settings: Vec<(String, String)> = [
        ("HERALD_SMS_PROVIDER", "twilio".to_owned()),
        ("HERALD_TWILIO_BASE_URL", twilio.base_url()),
        ("HERALD_TWILIO_ACCOUNT_SID", ACCOUNT.to_owned()),
        ("HERALD_TWILIO_AUTH_TOKEN", TOKEN.to_owned()),
        ("HERALD_SMS_FROM", "+15550000000".to_owned()),
        ("HERALD_PUBLIC_URL", PUBLIC_URL.to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let d =
        start_daemon_with(&o.daemon, dir.path(), &database_url, smtp_port, false, &settings, None).await?;
    let key = d.boot.api_key.clone();
    let latency_count = o.rate * o.seconds as usize;
    let total = o.messages + latency_count;

    // The floor, then the SMS that the receipts will be about.
    let nothing: Arc<dyn Fn(usize, Instant) + Send + Sync> = Arc::new(|_, _| {});
    let health: load::MakeRequest = Arc::new(|_| (reqwest::Method::GET, "/healthz".into(), None));
    let floor = load::run(&d.url, None, o.messages, o.concurrency, health, nothing.clone()).await;
    let sms: load::MakeRequest = Arc::new(|i| {
        let body = json!({"channel": "sms", "recipient": format!("+1415{:07}", i), "body": "receipt bench"});
        (reqwest::Method::POST, "/api/v1/notifications".into(), Some(body))
    });
    let dispatched = load::run(&d.url, Some(&key), o.messages, o.concurrency, sms, nothing).await;
    if dispatched.errors > 0 {
        bail!("{} dispatches failed", dispatched.errors);
    }
    // The latency set, each notification's id kept by its recipient: the feed names transaction
    // ids, the callbacks message SIDs, and the Twilio peer links SIDs to recipients.
    let mut id_of_recipient = HashMap::with_capacity(latency_count);
    let mut conn = http::Connection::open(&d.url).await?;
    for i in o.messages..total {
        let recipient = format!("+1415{:07}", i);
        let body = json!({"channel": "sms", "recipient": recipient, "body": "receipt bench"}).to_string();
        let (status, answer) =
            conn.send("POST", "/api/v1/notifications", Some(&key), Some(body.as_bytes())).await?;
        if status != 202 {
            bail!("a dispatch answered {status}");
        }
        let answer: serde_json::Value = serde_json::from_slice(&answer)?;
        let id = answer["notification_id"].as_str().context("notification_id")?.to_owned();
        id_of_recipient.insert(recipient, id);
    }
    let sent = twilio.wait_for(total, Duration::from_secs(300)).await;
    let (mut sids, mut latency_sids, mut sids_of) = (Vec::new(), Vec::new(), HashMap::new());
    for message in sent {
        let Some(sid) = message.sid else { continue };
        match id_of_recipient.get(&message.to) {
            Some(id) => {
                sids_of.insert(id.clone(), sid.clone());
                latency_sids.push(sid);
            }
            None => sids.push(sid),
        }
    }
    if sids.len() + latency_sids.len() < total {
        bail!("the Twilio peer created {} messages of {total}", sids.len() + latency_sids.len());
    }
    // The attempts are recorded once Twilio answered; give the writer a moment to commit them.
    let client = Client::new(&d.url).with_token(&key);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let query = herald_common::client::ActivityQuery {
            status: Some(ActivityStatus::Sent),
            limit: Some(1),
            ..Default::default()
        };
        if client.activity(&query).await.map(|l| l.total_count as usize).unwrap_or(0) >= total {
            break;
        }
        if Instant::now() > deadline {
            bail!("the SMS were not all recorded as sent in 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Ingestion.
    let started = Instant::now();
    let jobs: Vec<(usize, String)> = sids.into_iter().enumerate().collect();
    let (latencies, errors) = post_callbacks(&d.url, jobs, o.concurrency, None, None).await;
    let elapsed = started.elapsed();

    println!("\n{}, Twilio status callbacks (signed), concurrency {}\n", engine_name(backend), o.concurrency);
    println!("| path | req/s | p50 ms | p99 ms | errors |");
    println!("|---|---|---|---|---|");
    println!("{}", crate::floor_row(&floor));
    println!(
        "| POST {PATH} (delivered, new status) | {:.0} | {:.2} | {:.2} | {errors} |",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        ms(&latencies, 50.0),
        ms(&latencies, 99.0)
    );

    // Receipt → activity.updated, at a steady rate.
    let sent_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut feed = client.follow_activity(FollowOptions::default());
    while feed.next().await.context("the feed ended")? != Followed::State(ConnectionState::Live) {}
    let begin = Instant::now() + Duration::from_millis(200);
    let rate = o.rate as f64;
    let at: Arc<dyn Fn(usize) -> Instant + Send + Sync> =
        Arc::new(move |i| begin + Duration::from_secs_f64(i as f64 / rate));
    let jobs: Vec<(usize, String)> = latency_sids.iter().cloned().enumerate().collect();
    let sending = tokio::spawn({
        let (url, sent_at) = (d.url.clone(), sent_at.clone());
        async move { post_callbacks(&url, jobs, 64, Some(at), Some(sent_at)).await }
    });
    let mut delays = Vec::with_capacity(latency_count);
    let until = Instant::now() + Duration::from_secs(o.seconds + 30);
    while delays.len() < latency_count && Instant::now() < until {
        let Ok(Some(next)) = tokio::time::timeout(Duration::from_secs(5), feed.next()).await else { break };
        let Followed::Event { event: StreamEvent::ActivityUpdated(item), .. } = next else { continue };
        if item.status != ActivityStatus::Delivered {
            continue;
        }
        let arrived = Instant::now();
        let Some(sid) = sids_of.get(item.transaction_id.as_str()) else { continue };
        if let Some(began) = sent_at.lock().ok().and_then(|s| s.get(sid).copied()) {
            delays.push(arrived - began);
        }
    }
    let (_, late_errors) = sending.await?;
    delays.sort();
    println!(
        "\nreceipt → activity.updated at {} receipts/s for {} s: {} of {latency_count} seen, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({late_errors} callback errors)",
        o.rate,
        o.seconds,
        delays.len(),
        ms(&delays, 50.0),
        ms(&delays, 99.0),
        ms(&delays, 100.0)
    );
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}
