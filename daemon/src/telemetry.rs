//! Logs and metrics. Logs go to stderr as text or JSON (`HERALD_LOG_FORMAT`), filtered by
//! `HERALD_LOG`; every request's span carries its `x-request-id`. Metrics are Prometheus text at
//! `/metrics`: requests by route, method and status, and a latency histogram by route.

use std::{sync::OnceLock, time::Instant};

use axum::{
    extract::{MatchedPath, Request},
    middleware::Next,
    response::Response,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::config::{Config, LogFormat};

/// Installs the global log subscriber (once per process; later calls are ignored, so tests can
/// start many daemons).
pub fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal: `heraldd > file` gets no escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match config.log_format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// The process-wide Prometheus recorder (a process has one metrics registry; several daemons in
/// one test process share it).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("herald_http_request_duration_seconds".to_owned()),
                    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Counts and times each request by its route template (never the raw path, so ids do not
/// explode the label space).
pub async fn track_requests(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("herald_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("herald_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
