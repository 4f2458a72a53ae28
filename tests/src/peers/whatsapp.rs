//! A WhatsApp Cloud API on loopback, for the daemon's WhatsApp provider: the Graph API's
//! `/{version}/{phone_number_id}/messages` endpoint with bearer-token authentication, text
//! messages, and Graph-style error JSON. Magic recipients produce failures:
//!
//! - `15005550001`: 400, code 131026 (undeliverable), a permanent failure;
//! - `15005550009`: 500, code 131000, a transient one;
//! - `15005550429`: 429, code 130429, with `Retry-After: 1`.
//!
//! [`WhatsAppServer::fail_next`] makes any recipient fail transiently a set number of times, so
//! a test can watch a retry succeed.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::Engine;
use serde_json::{Value, json};

pub const UNDELIVERABLE_NUMBER: &str = "15005550001";
pub const FAILING_NUMBER: &str = "15005550009";
pub const RATE_LIMITED_NUMBER: &str = "15005550429";

/// A send request that passed authentication, and how it was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WhatsAppMessage {
    /// The `wamid.…` id of the accepted message; `None` when the request failed.
    pub id: Option<String>,
    /// The Graph API version from the path, such as `v21.0`.
    pub version: String,
    /// Empty when the body lacked the field.
    pub to: String,
    /// `text.body`; empty when the body lacked it.
    pub body: String,
    pub status_code: u16,
}

struct Shared {
    phone_number_id: String,
    token: String,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Recipient (digits) → how many more requests to answer with 503.
    fail_next: HashMap<String, usize>,
    messages: Vec<WhatsAppMessage>,
}

#[derive(Clone)]
pub struct WhatsAppServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl WhatsAppServer {
    /// Serves on `127.0.0.1` with a free port, for the business number `phone_number_id`,
    /// accepting the access token `token`.
    pub async fn start(phone_number_id: &str, token: &str) -> WhatsAppServer {
        let shared = Arc::new(Shared {
            phone_number_id: phone_number_id.to_owned(),
            token: token.to_owned(),
            inner: Mutex::new(Inner::default()),
        });
        let app = Router::new()
            .route("/{version}/{phone_number_id}/messages", post(send_message))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind whatsapp");
        let addr = listener.local_addr().expect("whatsapp addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        WhatsAppServer { addr, shared }
    }

    /// The API base, without a trailing slash (Meta's is `https://graph.facebook.com`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the next `n` requests to `to` with 503 (code 131016), whatever the number. A
    /// leading `+` is ignored, as the API takes digits only.
    pub fn fail_next(&self, to: &str, n: usize) {
        let to = to.strip_prefix('+').unwrap_or(to);
        self.shared.inner.lock().expect("whatsapp state").fail_next.insert(to.to_owned(), n);
    }

    /// Every authenticated request so far, in arrival order.
    pub fn messages(&self) -> Vec<WhatsAppMessage> {
        self.shared.inner.lock().expect("whatsapp state").messages.clone()
    }

    /// Polls every 20 ms until at least `count` requests have been recorded and returns them
    /// all, or panics after `timeout`.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<WhatsAppMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let messages = self.messages();
            if messages.len() >= count {
                return messages;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {count} request(s) at the WhatsApp \
                     peer; it has {}",
                    messages.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn send_message(
    State(shared): State<Arc<Shared>>,
    Path((version, phone_number_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers, &shared.token) {
        return error(StatusCode::UNAUTHORIZED, 190, "Invalid OAuth access token.", None);
    }
    // Checked by hand rather than with the `Json` extractor, so that a malformed body gets the
    // Graph API's error shape instead of axum's plain-text rejection.
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let to = request["to"].as_str().unwrap_or("");
    let text = request["text"]["body"].as_str().unwrap_or("");

    let invalid = |details: &str| error(StatusCode::BAD_REQUEST, 100, "Invalid parameter", Some(details));
    let response = if phone_number_id != shared.phone_number_id {
        // What the Graph API says about an id the token cannot post to.
        let message = format!(
            "Unsupported post request. Object with ID '{phone_number_id}' does not exist, cannot \
             be loaded due to missing permissions, or does not support this operation."
        );
        graph_error(StatusCode::BAD_REQUEST, "GraphMethodException", 100, &message, None)
    } else if request.is_null() {
        invalid("The request body is not valid JSON.")
    } else if request["messaging_product"] != "whatsapp" {
        invalid("The parameter messaging_product is required and must be \"whatsapp\".")
    } else if request["type"] != "text" {
        invalid("Only messages of type \"text\" are supported here.")
    } else if to.is_empty() || !to.bytes().all(|b| b.is_ascii_digit()) {
        invalid("The parameter to must be a phone number of digits only.")
    } else if text.is_empty() {
        invalid("The parameter text['body'] is required.")
    } else if take_failure(&shared, to) {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            131016,
            "Service unavailable",
            Some("A service is temporarily unavailable."),
        )
    } else if to == UNDELIVERABLE_NUMBER {
        error(StatusCode::BAD_REQUEST, 131026, "Message undeliverable", Some("Unable to deliver message."))
    } else if to == FAILING_NUMBER {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            131000,
            "Something went wrong",
            Some("Message failed to send because of an unknown error."),
        )
    } else if to == RATE_LIMITED_NUMBER {
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            130429,
            "Rate limit hit",
            Some("Cloud API message throughput has been reached."),
        );
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    } else {
        // Real ids are base64 of an opaque blob that includes the recipient.
        let mut blob = to.as_bytes().to_vec();
        blob.extend_from_slice(uuid::Uuid::now_v7().as_bytes());
        let id = format!("wamid.{}", base64::engine::general_purpose::STANDARD.encode(&blob));
        let response = Json(json!({
            "messaging_product": "whatsapp",
            "contacts": [{ "input": to, "wa_id": to }],
            "messages": [{ "id": id }],
        }))
        .into_response();
        record(&shared, Some(id), &version, to, text, &response);
        return response;
    };
    record(&shared, None, &version, to, text, &response);
    response
}

/// Whether the request carries `Authorization: Bearer <token>`.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .is_some_and(|(scheme, presented)| scheme.eq_ignore_ascii_case("bearer") && presented.trim() == token)
}

/// Consumes one pending `fail_next` failure for `to`, if any.
fn take_failure(shared: &Shared, to: &str) -> bool {
    let mut inner = shared.inner.lock().expect("whatsapp state");
    match inner.fail_next.get_mut(to) {
        Some(remaining) if *remaining > 0 => {
            *remaining -= 1;
            true
        }
        _ => false,
    }
}

fn record(shared: &Shared, id: Option<String>, version: &str, to: &str, body: &str, response: &Response) {
    shared.inner.lock().expect("whatsapp state").messages.push(WhatsAppMessage {
        id,
        version: version.to_owned(),
        to: to.to_owned(),
        body: body.to_owned(),
        status_code: response.status().as_u16(),
    });
}

/// The Graph API's error body, with the type the Cloud API uses for nearly all its errors.
fn error(status: StatusCode, code: u32, message: &str, details: Option<&str>) -> Response {
    graph_error(status, "OAuthException", code, message, details)
}

/// The Graph API's error body; `details` goes into `error_data` as the Cloud API does.
fn graph_error(status: StatusCode, kind: &str, code: u32, message: &str, details: Option<&str>) -> Response {
    let mut error = json!({
        "message": message,
        "type": kind,
        "code": code,
        "fbtrace_id": fbtrace_id(),
    });
    if let Some(details) = details {
        error["error_data"] = json!({ "messaging_product": "whatsapp", "details": details });
    }
    (status, Json(json!({ "error": error }))).into_response()
}

/// An opaque id like the ones Meta attaches to every error.
fn fbtrace_id() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(uuid::Uuid::now_v7().as_bytes())
}
