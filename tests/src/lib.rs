//! The integration-test harness: starts the real daemon on `127.0.0.1:0` with a temporary SQLite
//! file or a fresh PostgreSQL schema, an identity provider serving a JWKS with rotating keys on
//! loopback, the typed client from `herald-common`, and a polling helper.

pub mod backend;
pub mod browser;
pub mod daemon;
pub mod idp;
pub mod peers;
pub mod sse;

pub use backend::Backend;
pub use daemon::TestDaemon;
pub use idp::TestIdp;

use std::{future::Future, time::Duration};

/// Polls `check` every 20 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A user id a test chose: valid by construction (a test of invalid ones goes around the typed
/// client, which takes only valid ones).
pub fn user_id(text: &str) -> herald_common::ids::UserId {
    herald_common::ids::UserId::parse(text).unwrap_or_else(|e| panic!("`{text}` is not a user id: {e}"))
}

/// The Python that runs the Python peers: `HERALD_TEST_PYTHON` (which `scripts/test` points at
/// its `.venv`, with `tests/requirements.txt` installed), else `python3`.
pub fn python() -> String {
    std::env::var("HERALD_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// A loopback port nothing listens on right now, for a server that must be told its port
/// before it starts (the daemon's bounce listener, chromedriver, Postfix).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// Installs the TLS crypto provider once (reqwest and sqlx use rustls with aws-lc-rs).
pub fn init_crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Removes a webhook endpoint as `DELETE /api/v1/webhooks/{id}` does, then purges it as the
/// daemon's purge task does, `group` messages at a time, until no removed endpoint is left;
/// whether the tenant had it.
pub async fn remove_webhook_endpoint(
    store: &herald_daemon::store::Store,
    tenant_id: &herald_common::ids::TenantId,
    id: &herald_common::ids::WebhookEndpointId,
    group: i64,
) -> bool {
    let removed = store.remove_webhook_endpoint(tenant_id.clone(), id.clone(), 1).await.expect("removed");
    while store.purge_removed_webhook_endpoint(group).await.expect("purged").is_some() {}
    removed
}
