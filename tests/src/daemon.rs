//! The daemon under test, in-process on `127.0.0.1:0`.

use std::{net::SocketAddr, time::Duration};

use herald_common::{api::admin::Bootstrapped, client::Client};
use herald_daemon::{admin, config::Layers, state::AppState};
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{Backend, TestIdp};

pub struct TestDaemon {
    pub backend: Backend,
    pub addr: SocketAddr,
    pub url: String,
    pub state: AppState,
    pub idp: TestIdp,
    /// An unauthenticated client.
    pub client: Client,
    shutdown: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    pub dir: TempDir,
    pub database_url: String,
    /// The settings it was started with (a restart keeps them).
    extra: Vec<(String, String)>,
}

/// The configuration every test daemon starts from, as `HERALD_*` variables.
pub fn base_env(dir: &std::path::Path, database_url: &str, idp: &TestIdp) -> Vec<(String, String)> {
    [
        ("HERALD_LISTEN", "127.0.0.1:0".to_owned()),
        ("HERALD_DATABASE_URL", database_url.to_owned()),
        ("HERALD_DATA_DIR", dir.join("data").display().to_string()),
        ("HERALD_SECRET", "test-secret-test-secret-test-secret-0123".to_owned()),
        ("HERALD_OPERATOR_JWKS_URL", idp.jwks_url()),
        ("HERALD_OPERATOR_ISSUER", crate::idp::ISSUER.to_owned()),
        ("HERALD_OPERATOR_AUDIENCE", crate::idp::AUDIENCE.to_owned()),
        ("HERALD_OPERATOR_JWKS_REFRESH_SECONDS", "0".to_owned()),
        ("HERALD_LOG", "error".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

impl TestDaemon {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, Vec::new()).await
    }

    /// Starts a daemon with extra (or overriding) `HERALD_*` settings.
    pub async fn start_with(backend: Backend, extra: Vec<(&str, String)>) -> Self {
        crate::init_crypto();
        let dir = tempfile::tempdir().expect("temp dir");
        let database_url = backend.fresh_database_url(dir.path()).await;
        let extra = extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Self::start_on(backend, dir, database_url, extra, None, TestIdp::start().await).await
    }

    /// Another daemon on this one's database (several daemons, one PostgreSQL).
    pub async fn start_sharing(&self, extra: Vec<(&str, String)>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Self::start_on(self.backend, dir, self.database_url.clone(), extra, None, TestIdp::start().await)
            .await
    }

    /// Stops the daemon gracefully and starts it again on the same address, database, data
    /// folder and identity provider, as a restart of the process would.
    pub async fn restart(mut self) -> Self {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the daemon stops within 10 s");
        }
        let (backend, addr, extra, database_url) =
            (self.backend, self.addr, std::mem::take(&mut self.extra), self.database_url.clone());
        // The fields that outlive the old daemon move to the new one.
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        let idp = std::mem::replace(&mut self.idp, TestIdp::start().await);
        Self::start_on(backend, dir, database_url, extra, Some(addr), idp).await
    }

    async fn start_on(
        backend: Backend,
        dir: TempDir,
        database_url: String,
        extra: Vec<(String, String)>,
        addr: Option<SocketAddr>,
        idp: TestIdp,
    ) -> Self {
        let mut env = base_env(dir.path(), &database_url, &idp);
        env.extend(extra.iter().cloned());
        let config = Layers::new().env(env).build(false).expect("test configuration");
        herald_daemon::telemetry::init_logging(&config);
        let addr = addr.unwrap_or_else(|| "127.0.0.1:0".parse().expect("addr"));
        let listener = bind_retrying(addr).await;
        let addr = listener.local_addr().expect("addr");
        let state = herald_daemon::build_state(config, addr).await.expect("daemon state");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(herald_daemon::serve(state.clone(), listener, shutdown.clone()));
        let url = format!("http://{addr}");
        Self {
            backend,
            addr,
            client: Client::new(&url),
            url,
            state,
            idp,
            shutdown,
            task: Some(task),
            dir,
            database_url,
            extra,
        }
    }

    /// Where the daemon's bounce listener listens (started with `HERALD_BOUNCE_LISTEN`, which
    /// may name port 0), once it is bound.
    pub async fn bounce_listener_addr(&self) -> SocketAddr {
        crate::eventually("the bounce listener to be bound", Duration::from_secs(20), || async {
            self.state.bounce_listener_addr.get().copied()
        })
        .await
    }

    /// A new tenant with an application and a key holding every scope.
    pub async fn bootstrap(&self) -> Bootstrapped {
        admin::bootstrap(&self.state.store, &self.state.secret, "Test").await.expect("bootstrap")
    }

    /// A client presenting `token`.
    pub fn with_token(&self, token: &str) -> Client {
        self.client.with_token(token)
    }

    /// Waits (at most `within`) for the daemon to stop by itself, and returns how it ended.
    pub async fn exited(mut self, within: Duration) -> anyhow::Result<()> {
        let task = self.task.take().expect("the daemon runs");
        tokio::time::timeout(within, task)
            .await
            .expect("the daemon stops by itself in time")
            .expect("daemon task")
    }

    /// Stops the daemon gracefully and waits for it (at most 10 s).
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the daemon stops within 10 s")
                .expect("daemon task")
                .expect("daemon result");
        }
    }
}

/// Binds `addr`; a port just released by a daemon that stopped may take a moment to be free.
async fn bind_retrying(addr: SocketAddr) -> tokio::net::TcpListener {
    for _ in 0..50 {
        if let Ok(listener) = herald_daemon::bind(addr) {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    herald_daemon::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"))
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
