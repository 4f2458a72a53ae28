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
