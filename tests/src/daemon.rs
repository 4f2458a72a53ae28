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
        Self::start_on(backend, dir, database_url, extra).await
    }

    /// Another daemon on this one's database (several daemons, one PostgreSQL).
    pub async fn start_sharing(&self, extra: Vec<(&str, String)>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_on(self.backend, dir, self.database_url.clone(), extra).await
    }

    async fn start_on(
        backend: Backend,
        dir: TempDir,
        database_url: String,
        extra: Vec<(&str, String)>,
    ) -> Self {
        let idp = TestIdp::start().await;
        let mut env = base_env(dir.path(), &database_url, &idp);
        env.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let config = Layers::new().env(env).build(false).expect("test configuration");
        herald_daemon::telemetry::init_logging(&config);
        let listener = herald_daemon::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
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
        }
    }

    /// A new tenant with an application and a key holding every scope.
    pub async fn bootstrap(&self) -> Bootstrapped {
        admin::bootstrap(&self.state.store, &self.state.secret, "Test").await.expect("bootstrap")
    }

    /// A client presenting `token`.
    pub fn with_token(&self, token: &str) -> Client {
        self.client.with_token(token)
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

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
