//! An HTTP proxy on loopback in front of the daemon that refuses chosen requests as a busy Herald
//! would (429 or 503 with `Retry-After`) and records when each GET came, so that a test can hold
//! a client to the wait the server asked for. Everything else passes through, streams included.
//!
//! A refused request still goes to the daemon: only its answer's status and body are replaced.
//! The daemon's CORS headers stay, so a browser page of another origin reads `Retry-After` only
//! because the daemon exposes it, as it would from a real refusal.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use tokio::time::Instant;

/// A GET the proxy saw: its path (without the query), the status it answered, and when it came.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub status: u16,
    pub at: Instant,
}

struct Shared {
    target: String,
    retry_after: u64,
    http: reqwest::Client,
    /// Path → the statuses its next GETs get, in order.
    refusals: Mutex<HashMap<String, VecDeque<StatusCode>>>,
    seen: Mutex<Vec<Seen>>,
}

pub struct RefusingProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl RefusingProxy {
    /// Forwards to `target`. The first GETs of each path in `refusals` are answered with the
    /// statuses listed for it, in order, each with `Retry-After: retry_after` (seconds).
    pub async fn start(target: SocketAddr, refusals: &[(&str, StatusCode)], retry_after: u64) -> Self {
        let mut planned: HashMap<String, VecDeque<StatusCode>> = HashMap::new();
        for (path, status) in refusals {
            planned.entry((*path).to_owned()).or_default().push_back(*status);
        }
        let shared = Arc::new(Shared {
            target: format!("http://{target}"),
            retry_after,
            http: reqwest::Client::new(),
            refusals: Mutex::new(planned),
            seen: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(forward).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The GETs of `path` so far, in the order they came.
    pub fn seen(&self, path: &str) -> Vec<Seen> {
        self.shared.seen.lock().expect("the log").iter().filter(|s| s.path == path).cloned().collect()
    }
}

/// Headers that belong to one hop, not to the request or answer passed on.
fn strip_hop(headers: &mut HeaderMap) {
    for name in [header::HOST, header::CONNECTION, header::TRANSFER_ENCODING, header::CONTENT_LENGTH] {
        headers.remove(name);
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let at = Instant::now();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let refusal = if parts.method == Method::GET {
        shared.refusals.lock().expect("the refusals").get_mut(&path).and_then(VecDeque::pop_front)
    } else {
        None
    };
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut headers = parts.headers;
    strip_hop(&mut headers);
    let url = format!("{}{}", shared.target, parts.uri.path_and_query().map_or("/", |p| p.as_str()));
    let answer = match shared.http.request(parts.method.clone(), url).headers(headers).body(body).send().await
    {
        Ok(answer) => answer,
        Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
    };
    let status = refusal.unwrap_or(answer.status());
    if parts.method == Method::GET {
        shared.seen.lock().expect("the log").push(Seen { path, status: status.as_u16(), at });
    }
    let mut headers = answer.headers().clone();
    strip_hop(&mut headers);
    let body = match refusal {
        // The daemon's answer (a stream, perhaps) ends here, dropped with `answer`.
        Some(status) => {
            let code = if status == StatusCode::TOO_MANY_REQUESTS { "rate_limited" } else { "unavailable" };
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
            headers.insert(header::RETRY_AFTER, HeaderValue::from(shared.retry_after));
            let problem = serde_json::json!({
                "type": format!("https://herald.dev/errors/{code}"), "title": "Refused", "code": code,
                "status": status.as_u16(), "detail": "Refused by the test proxy.",
            });
            Body::from(problem.to_string())
        }
        None => Body::from_stream(answer.bytes_stream()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
