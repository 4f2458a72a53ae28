//! heraldd: the Herald notification delivery daemon, as a library. [`run`] serves on a listener
//! the caller has bound (tests bind `127.0.0.1:0`) until the shutdown token is cancelled.
#![cfg_attr(not(test), warn(clippy::unwrap_used, clippy::expect_used))]

pub mod admin;
pub mod api;
pub mod auth;
pub mod bounce_listener;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod dkim;
pub mod dns;
pub mod error;
pub mod hub;
pub mod providers;
pub mod retry;
pub mod secret;
pub mod service;
pub mod state;
pub mod store;
pub mod stream;
pub mod tasks;
pub mod telemetry;
pub mod unsubscribe;
pub mod verp;
pub mod views;

#[cfg(test)]
mod module_graph;

use std::{
    net::SocketAddr,
    sync::{Arc, OnceLock},
};

use anyhow::Context;
use tokio::net::{TcpListener, TcpSocket};
use tokio_util::sync::CancellationToken;

use crate::{
    auth::{dev_idp::DevIdp, operator::OperatorVerifier},
    config::{Config, OperatorIdp},
    secret::ServerSecret,
    state::AppState,
    store::Store,
    tasks::Supervisor,
};

/// Binds `addr` with a deep accept backlog (the default 128 drops connections when thousands of
/// clients connect at once).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Opens the store and everything else a daemon needs. `local_addr` is where the daemon is
/// reachable, used to point the operator verifier at the built-in identity provider in `--dev`.
pub async fn build_state(config: Config, local_addr: SocketAddr) -> anyhow::Result<AppState> {
    let secret = ServerSecret::load(config.secret.as_ref(), &config.data_dir)?;
    let store = Store::open(&config).await.context("cannot open the database")?;
    let dev_idp = if config.dev && config.operator_idp.is_none() {
        Some(Arc::new(DevIdp::load(&config.data_dir)?))
    } else {
        None
    };
    let idp = match (&config.operator_idp, &dev_idp) {
        (Some(idp), _) => Some(idp.clone()),
        (None, Some(_)) => {
            let host = match local_addr.ip() {
                ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_owned(),
                ip if ip.is_unspecified() => "[::1]".to_owned(),
                ip if ip.is_ipv6() => format!("[{ip}]"),
                ip => ip.to_string(),
            };
            Some(OperatorIdp {
                jwks_url: format!("http://{host}:{}{}", local_addr.port(), auth::dev_idp::JWKS_PATH),
                issuer: auth::dev_idp::ISSUER.to_owned(),
                audience: auth::dev_idp::AUDIENCE.to_owned(),
            })
        }
        (None, None) => None,
    };
    let operator = idp.map(|idp| {
        Arc::new(OperatorVerifier::new(
            idp,
            config.operator_algorithms.clone(),
            config.operator_jwks_refresh,
            config.operator_jwks_max_age,
        ))
    });
    let providers = Arc::new(providers::Providers::from_config(&config, &secret)?);
    let retry_policy = retry::RetryPolicy::new(config.retry_schedule.clone());
    let resolver = dns::Resolver::new(&config.dns_nameservers, config.dns_timeout)?;
    Ok(AppState {
        config: Arc::new(config),
        store,
        secret,
        operator,
        dev_idp,
        metrics: telemetry::metrics_handle(),
        providers,
        retry_policy,
        resolver,
        signers: Arc::default(),
        delivery_wake: Arc::new(tokio::sync::Notify::new()),
        webhook_purge: Arc::new(tokio::sync::Notify::new()),
        clock: Arc::new(clock::Clock::default()),
        tasks: Arc::default(),
        daemon_id: format!("dmn_{}", crate::secret::random_token(12)).into(),
        shutdown: CancellationToken::new(),
        openapi: Arc::new(OnceLock::new()),
        bounce_listener_addr: Arc::new(OnceLock::new()),
    })
}

/// Starts the background tasks under a supervisor that stops them with `background`; the bounce
/// listener serves on `bounce_listener` if it is configured.
fn start_tasks(
    state: &AppState,
    background: CancellationToken,
    bounce_listener: Option<Arc<TcpListener>>,
) -> Supervisor {
    let mut supervisor = Supervisor::new(state.tasks.clone(), background);
    macro_rules! task {
        ($name:literal, $run:expr) => {{
            let state = state.clone();
            supervisor.spawn($name, move |token| Box::pin($run(state.clone(), token)));
        }};
    }
    task!("delivery-workers", delivery::run_workers);
    task!("webhook-dispatcher", delivery::webhooks::run_webhooks);
    task!("webhook-fan-out", delivery::webhooks::run_fan_out);
    if state.store.engine() == store::Engine::Postgres {
        task!("webhook-statistics", delivery::webhooks::run_statistics);
    }
    task!("webhook-settle", delivery::webhooks::run_settle);
    task!("webhook-purge", delivery::webhooks::run_purge);
    task!("housekeeping", service::housekeeping);
    task!("domain-checks", service::domains::run_checks);
    task!("stream-registration", stream::renew_daemon);
    task!(
        "change-listener",
        |state: AppState, token| async move { state.store.listen_for_changes(token).await }
    );
    task!("activity-counters", |state: AppState, token| async move {
        state.store.maintain_activity_counts(token).await
    });
    if let Some(listener) = bounce_listener {
        let state = state.clone();
        supervisor.spawn("bounce-listener", move |token| {
            Box::pin(bounce_listener::run(state.clone(), listener.clone(), token))
        });
    }
    let store = state.store.clone();
    supervisor.watch("store-writer", move || {
        let store = store.clone();
        Box::pin(async move { store.writer_failed().await })
    });
    supervisor
}

/// Serves `state` on `listener` until `shutdown` is cancelled; requests in flight finish first.
/// Fails (after stopping as gracefully) if a background task had to be given up on.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Bound first, so a taken port stops the start with its own error.
    let bounce_listener = bounce_listener::bind(&state)?;
    if let Some(listener) = &bounce_listener {
        let _ = state.bounce_listener_addr.set(listener.local_addr()?);
    }
    // Registered before any task starts, so a database that refuses it leaves nothing running.
    stream::register_daemon(&state).await?;
    let app = api::router(state.clone());
    let background = CancellationToken::new();
    let supervisor = start_tasks(&state, background.clone(), bounce_listener);
    let failed = supervisor.failed();
    let supervising = tokio::spawn(supervisor.run());
    // Streams end when the daemon is asked to stop, so graceful shutdown never waits on them.
    let streams_end = state.shutdown.clone();
    let stop = shutdown.clone();
    let task_failed = failed.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = task_failed.cancelled() => {}
        }
        streams_end.cancel();
    });
    tracing::info!(addr = %listener.local_addr()?, database = state.config.database.engine(), "heraldd listening");
    // `into_make_service`: serving the `Router` itself rebuilds every route for each connection
    // (`Router::with_state` per connection), ~80 KiB each; this clones one `Arc` instead.
    let stopping = {
        let (shutdown, failed) = (shutdown.clone(), failed.clone());
        async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = failed.cancelled() => {}
            }
        }
    };
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(stopping)
        .await
        .context("server error")?;
    // Requests are done: stop the tasks (the workers finish the sends in flight), then the store.
    background.cancel();
    let given_up = supervising.await.ok().flatten();
    if let Err(e) = state.store.close_stream_daemon(&state.daemon_id).await {
        tracing::warn!(error = %e, "cannot remove this daemon's streams from the database");
    }
    state.store.close().await;
    if let Some(task) = given_up {
        anyhow::bail!("stopped because the background task `{task}` kept failing");
    }
    tracing::info!("heraldd stopped");
    Ok(())
}

/// Builds the state and serves until `shutdown`.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let state = build_state(config, listener.local_addr()?).await?;
    serve(state, listener, shutdown).await
}
