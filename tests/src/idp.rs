//! An identity provider on loopback: a JWKS endpoint whose keys the test can rotate, and
//! operator tokens signed with them. It counts JWKS fetches so tests can see caching and
//! throttled refreshes.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{Json, Router, extract::State, routing::get};
use herald_common::{Scope, Timestamp, ids::TenantId};
use herald_daemon::auth::dev_idp::Es256Key;
use serde_json::{Value, json};

pub const ISSUER: &str = "https://idp.test.herald";
pub const AUDIENCE: &str = "herald-api";

struct Keys {
    /// Published keys; the last is the current signing key.
    published: Vec<Arc<Es256Key>>,
}

#[derive(Clone)]
pub struct TestIdp {
    pub addr: SocketAddr,
    keys: Arc<Mutex<Keys>>,
    fetches: Arc<AtomicUsize>,
}

impl TestIdp {
    pub async fn start() -> Self {
        let keys =
            Arc::new(Mutex::new(Keys { published: vec![Arc::new(Es256Key::generate().expect("key"))] }));
        let fetches = Arc::new(AtomicUsize::new(0));
        let app = Router::new().route("/jwks.json", get(jwks)).with_state((keys.clone(), fetches.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind idp");
        let addr = listener.local_addr().expect("idp addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, keys, fetches }
    }

    pub fn jwks_url(&self) -> String {
        format!("http://{}/jwks.json", self.addr)
    }

    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    fn current(&self) -> Arc<Es256Key> {
        self.keys.lock().expect("keys").published.last().cloned().expect("a key")
    }

    /// Publishes a new signing key; with `retire_old`, the previous keys disappear from the JWKS.
    pub fn rotate(&self, retire_old: bool) {
        let mut keys = self.keys.lock().expect("keys");
        if retire_old {
            keys.published.clear();
        }
        keys.published.push(Arc::new(Es256Key::generate().expect("key")));
    }

    /// Standard claims for an operator of `tenant_id` with `scopes`, valid for an hour.
    pub fn claims(tenant_id: &TenantId, scopes: &[Scope]) -> Value {
        let now = Timestamp::now().seconds();
        json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "operator@test", "tenant_id": tenant_id,
            "scope": Scope::join(scopes), "iat": now, "nbf": now, "exp": now + 3600,
        })
    }

    /// Signs `claims` with the current key.
    pub fn sign(&self, claims: &Value) -> String {
        self.current().sign(claims).expect("sign")
    }

    /// An operator token for `tenant_id` with `scopes`.
    pub fn operator_token(&self, tenant_id: &TenantId, scopes: &[Scope]) -> String {
        self.sign(&Self::claims(tenant_id, scopes))
    }
}

async fn jwks(State((keys, fetches)): State<(Arc<Mutex<Keys>>, Arc<AtomicUsize>)>) -> Json<Value> {
    fetches.fetch_add(1, Ordering::SeqCst);
    let keys = keys.lock().expect("keys");
    Json(json!({ "keys": keys.published.iter().map(|k| k.jwk()).collect::<Vec<_>>() }))
}
