//! The load generator: `concurrency` keep-alive connections, each sending its requests one after
//! another, until `total` have been sent. Latency is measured per request, client side.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use reqwest::Method;

pub struct Report {
    pub ok: usize,
    pub errors: usize,
    pub elapsed: Duration,
    pub latencies: Vec<Duration>,
}

impl Report {
    pub fn per_second(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    pub fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Builds request `i`; returns the method, path and optional JSON body.
pub type MakeRequest = Arc<dyn Fn(usize) -> (Method, String, Option<serde_json::Value>) + Send + Sync>;

/// Runs the load; `on_success(i, at)` is told when request `i` succeeded.
pub async fn run(
    base: &str,
    token: Option<&str>,
    total: usize,
    concurrency: usize,
    make: MakeRequest,
    on_success: Arc<dyn Fn(usize, Instant) + Send + Sync>,
) -> Report {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, make, on_success) = (next.clone(), make.clone(), on_success.clone());
        let base = base.to_owned();
        let token = token.map(str::to_owned);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut connection = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let (method, path, body) = make(i);
                let body = body.map(|b| serde_json::to_vec(&b).unwrap_or_default());
                let sent = Instant::now();
                if connection.is_none() {
                    connection = crate::http::Connection::open(&base).await.ok();
                }
                let Some(conn) = connection.as_mut() else {
                    errors += 1;
                    continue;
                };
                match conn.send(method.as_str(), &path, token.as_deref(), body.as_deref()).await {
                    Ok((status, _)) if (200..300).contains(&status) => {
                        let done = Instant::now();
                        latencies.push(done - sent);
                        on_success(i, done);
                    }
                    Ok(_) => errors += 1,
                    Err(_) => {
                        // The connection is in an unknown state: open a new one next time.
                        connection = None;
                        errors += 1;
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    let mut errors = 0;
    for worker in workers {
        if let Ok((l, e)) = worker.await {
            latencies.extend(l);
            errors += e;
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    Report { ok: latencies.len(), errors, elapsed, latencies }
}

/// What a paced run got back: requests answered 2xx and every request's answer time, sorted.
pub struct Paced {
    pub accepted: usize,
    pub answered: Vec<Duration>,
    /// How long handing out the requests took (≈ total / rate when the pace was kept).
    pub sending: Duration,
    /// The slowest answer: when its request was taken up (from the start) and how long it took.
    pub slowest: (Duration, Duration),
}

/// Sends `total` POSTs to `path` at a steady `rate` a second, each handed to a pool of 32
/// keep-alive connections so a slow answer never holds back the next. `body(i)` builds request
/// `i`; `on_send(i)` is told just before it is handed out.
pub async fn paced(
    base: &str,
    token: &str,
    path: &'static str,
    rate: usize,
    total: usize,
    body: impl Fn(usize) -> serde_json::Value,
    on_send: impl Fn(usize),
) -> Paced {
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let started = Instant::now();
    let (jobs, queue) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let mut senders = Vec::new();
    for _ in 0..32 {
        let (queue, base, token) = (queue.clone(), base.to_owned(), token.to_owned());
        senders.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut slowest = (Duration::ZERO, Duration::ZERO);
            let mut accepted = 0usize;
            let mut conn = crate::http::Connection::open(&base).await.ok();
            loop {
                let Some(body) = queue.lock().await.recv().await else { break };
                let at = Instant::now();
                let Some(c) = conn.as_mut() else { continue };
                match c.send("POST", path, Some(&token), Some(&body)).await {
                    Ok((status, _)) => accepted += usize::from((200..300).contains(&status)),
                    Err(_) => conn = crate::http::Connection::open(&base).await.ok(),
                }
                let took = at.elapsed();
                if took > slowest.1 {
                    slowest = (at.duration_since(started), took);
                }
                answered.push(took);
            }
            (accepted, answered, slowest)
        }));
    }
    let mut interval = tokio::time::interval(period);
    for index in 0..total {
        interval.tick().await;
        on_send(index);
        let _ = jobs.send(body(index).to_string().into_bytes());
    }
    drop(jobs);
    let sending = started.elapsed();
    let mut accepted = 0;
    let mut answered = Vec::with_capacity(total);
    let mut slowest = (Duration::ZERO, Duration::ZERO);
    for sender in senders {
        if let Ok((ok, took, worst)) = sender.await {
            accepted += ok;
            answered.extend(took);
            if worst.1 > slowest.1 {
                slowest = worst;
            }
        }
    }
    answered.sort();
    Paced { accepted, answered, sending, slowest }
}
