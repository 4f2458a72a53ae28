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
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .http1_only()
        .build()
        .expect("an HTTP client");
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, next, make, on_success) =
            (client.clone(), next.clone(), make.clone(), on_success.clone());
        let base = base.to_owned();
        let token = token.map(str::to_owned);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let (method, path, body) = make(i);
                let mut request = client.request(method, format!("{base}{path}"));
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                if let Some(body) = &body {
                    request = request.json(body);
                }
                let sent = Instant::now();
                match request.send().await {
                    Ok(response) if response.status().is_success() => {
                        let _ = response.bytes().await;
                        let done = Instant::now();
                        latencies.push(done - sent);
                        on_success(i, done);
                    }
                    _ => errors += 1,
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
