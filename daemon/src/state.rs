//! What every handler and background task shares.

use std::sync::{Arc, OnceLock};

use metrics_exporter_prometheus::PrometheusHandle;

use crate::{
    auth::{dev_idp::DevIdp, operator::OperatorVerifier},
    config::Config,
    dkim::keys::SignerCache,
    providers::Providers,
    retry::RetryPolicy,
    secret::ServerSecret,
    store::Store,
    tasks::Tasks,
};

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub secret: ServerSecret,
    /// `None` when no operator identity provider is configured (operator tokens are refused).
    pub operator: Option<Arc<OperatorVerifier>>,
    /// The built-in identity provider of `--dev`.
    pub dev_idp: Option<Arc<DevIdp>>,
    pub metrics: PrometheusHandle,
    pub providers: Arc<Providers>,
    pub retry_policy: RetryPolicy,
    /// DNS lookups for sending-domain checks.
    pub resolver: crate::dns::Resolver,
    /// DKIM signers of sending domains, cached briefly.
    pub signers: Arc<SignerCache>,
    /// The time as service logic sees it (tests move it).
    pub clock: Arc<crate::clock::Clock>,
    /// The background tasks' states (`/readyz`).
    pub tasks: Arc<Tasks>,
    /// This daemon's id among those sharing the database (`open_streams.daemon_id`).
    pub daemon_id: Arc<str>,
    /// Cancelled when the daemon stops: open streams end so shutdown does not wait on them.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Wakes the delivery workers when a dispatch commits.
    pub delivery_wake: Arc<tokio::sync::Notify>,
    /// Wakes the purge of removed webhook endpoints (`delivery/webhooks/purge.rs`).
    pub webhook_purge: Arc<tokio::sync::Notify>,
    /// The OpenAPI document, rendered once when the router is built.
    pub openapi: Arc<OnceLock<String>>,
    /// Where the bounce listener listens, once `serve` has bound it (`HERALD_BOUNCE_LISTEN` may
    /// name port 0).
    pub bounce_listener_addr: Arc<OnceLock<std::net::SocketAddr>>,
}
