//! A Twilio Programmable Messaging API on loopback, for the daemon's SMS provider: the
//! `Messages.json` create endpoint with Twilio's authentication, form body, status codes and
//! error JSON. Magic `To` numbers (modelled on Twilio's test credentials) produce failures:
//!
//! - `+15005550001`: 400, code 21211 (invalid number), a permanent failure;
//! - `+15005550009`: 503, code 20503, a transient one;
//! - `+15005550021`: 400, code 21610 (the recipient texted STOP), a permanent one;
//! - `+15005550429`: 429, code 20429, with `Retry-After: 1`.
//!
//! [`TwilioServer::fail_next`] makes any number fail transiently a set number of times, so a
//! test can watch a retry succeed. Each request's `StatusCallback` is recorded: where Twilio would
//! post the message's statuses.
//!
//! [`TwilioSigner`] signs those status callbacks with Twilio's own helper library (PyPI `twilio`),
//! as Twilio signs them, for the tests of Herald's intake.

use std::{
    collections::HashMap,
    net::SocketAddr,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Form, Json, Router,
    extract::{FromRequest, Path, Request, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use base64::Engine;
use serde_json::{Value, json};
use time::{OffsetDateTime, format_description::well_known::Rfc2822};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};

pub const INVALID_NUMBER: &str = "+15005550001";
pub const UNAVAILABLE_NUMBER: &str = "+15005550009";
pub const RATE_LIMITED_NUMBER: &str = "+15005550429";
/// Answered 400 with code 21610: the recipient texted STOP (Twilio refuses every later send).
pub const UNSUBSCRIBED_NUMBER: &str = "+15005550021";

const API_VERSION: &str = "2010-04-01";

/// A create-message request that passed authentication, and how it was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwilioMessage {
    /// The `SM…` SID of the created message; `None` when the request failed.
    pub sid: Option<String>,
    /// Empty when the form lacked the field.
    pub to: String,
    pub from: String,
    pub body: String,
    /// Where Twilio would post the message's statuses (`StatusCallback`); empty without one.
    pub status_callback: String,
    pub status_code: u16,
}

struct Shared {
    account_sid: String,
    auth_token: String,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `To` number → how many more requests to answer with 503.
    fail_next: HashMap<String, usize>,
    messages: Vec<TwilioMessage>,
}

#[derive(Clone)]
pub struct TwilioServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl TwilioServer {
    /// Serves on `127.0.0.1` with a free port, accepting `account_sid` with `auth_token`.
    pub async fn start(account_sid: &str, auth_token: &str) -> TwilioServer {
        let shared = Arc::new(Shared {
            account_sid: account_sid.to_owned(),
            auth_token: auth_token.to_owned(),
            inner: Mutex::new(Inner::default()),
        });
        let app = Router::new()
            .route("/2010-04-01/Accounts/{account_sid}/Messages.json", post(create_message))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind twilio");
        let addr = listener.local_addr().expect("twilio addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TwilioServer { addr, shared }
    }

    /// The daemon's settings to send SMS through this server, from `+15550000000`.
    pub fn daemon_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HERALD_SMS_PROVIDER", "twilio".into()),
            ("HERALD_TWILIO_BASE_URL", self.base_url()),
            ("HERALD_TWILIO_ACCOUNT_SID", self.shared.account_sid.clone()),
            ("HERALD_TWILIO_AUTH_TOKEN", self.shared.auth_token.clone()),
            ("HERALD_SMS_FROM", "+15550000000".into()),
        ]
    }

    /// The API base, without a trailing slash (Twilio's is `https://api.twilio.com`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the next `n` requests to `to` with 503 (code 20503), whatever the number.
    pub fn fail_next(&self, to: &str, n: usize) {
        self.shared.inner.lock().expect("twilio state").fail_next.insert(to.to_owned(), n);
    }

    /// Every authenticated request so far, in arrival order.
    pub fn messages(&self) -> Vec<TwilioMessage> {
        self.shared.inner.lock().expect("twilio state").messages.clone()
    }

    /// Polls every 20 ms until at least `count` requests have been recorded and returns them
    /// all, or panics after `timeout`.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<TwilioMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let messages = self.messages();
            if messages.len() >= count {
                return messages;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {count} request(s) at the Twilio \
                     peer; it has {}",
                    messages.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn create_message(
    State(shared): State<Arc<Shared>>,
    Path(account_sid): Path<String>,
    request: Request,
) -> Response {
    if !authorized(request.headers(), &shared.account_sid, &shared.auth_token) {
        return error(StatusCode::UNAUTHORIZED, 20003, "Authenticate");
    }
    // Parsed after the credentials are checked, as Twilio does: a bad form with bad
    // credentials is a 401, not a 400.
    let fields = match Form::<Vec<(String, String)>>::from_request(request, &()).await {
        Ok(Form(fields)) => fields,
        Err(rejection) => {
            let response = error(StatusCode::BAD_REQUEST, 20001, &format!("Invalid form body: {rejection}"));
            record(&shared, None, &[], &response);
            return response;
        }
    };
    let (to, from, body) = (field(&fields, "To"), field(&fields, "From"), field(&fields, "Body"));

    let response = if account_sid != shared.account_sid {
        // Valid credentials for another account's resource: Twilio says it does not exist.
        error(
            StatusCode::NOT_FOUND,
            20404,
            &format!(
                "The requested resource /{API_VERSION}/Accounts/{account_sid}/Messages.json \
                 was not found"
            ),
        )
    } else if to.is_empty() {
        error(StatusCode::BAD_REQUEST, 21604, "A 'To' phone number is required.")
    } else if from.is_empty() {
        error(StatusCode::BAD_REQUEST, 21603, "A 'From' phone number is required.")
    } else if body.is_empty() {
        error(StatusCode::BAD_REQUEST, 21602, "Message body is required.")
    } else if take_failure(&shared, to) {
        error(StatusCode::SERVICE_UNAVAILABLE, 20503, "Service unavailable")
    } else if to == INVALID_NUMBER {
        error(StatusCode::BAD_REQUEST, 21211, &format!("The 'To' number {to} is not a valid phone number."))
    } else if to == UNSUBSCRIBED_NUMBER {
        error(StatusCode::BAD_REQUEST, 21610, "Attempt to send to unsubscribed recipient")
    } else if to == UNAVAILABLE_NUMBER {
        error(StatusCode::SERVICE_UNAVAILABLE, 20503, "Service unavailable")
    } else if to == RATE_LIMITED_NUMBER {
        let mut response = error(StatusCode::TOO_MANY_REQUESTS, 20429, "Too Many Requests");
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        response
    } else {
        let sid = format!("SM{}", uuid::Uuid::now_v7().simple());
        let response =
            (StatusCode::CREATED, Json(message_resource(&shared.account_sid, &sid, to, from, body)))
                .into_response();
        record(&shared, Some(sid), &fields, &response);
        return response;
    };
    record(&shared, None, &fields, &response);
    response
}

/// The last value of form field `name`, or "" without one.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields.iter().rev().find(|(key, _)| key == name).map(|(_, value)| value.as_str()).unwrap_or("")
}

/// Whether the request carries HTTP basic credentials `account_sid:auth_token`.
fn authorized(headers: &HeaderMap, account_sid: &str, auth_token: &str) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let Some((scheme, encoded)) = value.split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    let Ok(decoded) = String::from_utf8(decoded) else {
        return false;
    };
    decoded.split_once(':') == Some((account_sid, auth_token))
}

/// Consumes one pending `fail_next` failure for `to`, if any.
fn take_failure(shared: &Shared, to: &str) -> bool {
    let mut inner = shared.inner.lock().expect("twilio state");
    match inner.fail_next.get_mut(to) {
        Some(remaining) if *remaining > 0 => {
            *remaining -= 1;
            true
        }
        _ => false,
    }
}

fn record(shared: &Shared, sid: Option<String>, fields: &[(String, String)], response: &Response) {
    shared.inner.lock().expect("twilio state").messages.push(TwilioMessage {
        sid,
        to: field(fields, "To").to_owned(),
        from: field(fields, "From").to_owned(),
        body: field(fields, "Body").to_owned(),
        status_callback: field(fields, "StatusCallback").to_owned(),
        status_code: response.status().as_u16(),
    });
}

/// Twilio's error body.
fn error(status: StatusCode, code: u32, message: &str) -> Response {
    (
        status,
        Json(json!({
            "code": code,
            "message": message,
            "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
            "status": status.as_u16(),
        })),
    )
        .into_response()
}

/// The message resource Twilio returns on creation.
fn message_resource(account_sid: &str, sid: &str, to: &str, from: &str, body: &str) -> Value {
    let now = OffsetDateTime::now_utc().format(&Rfc2822).expect("format an RFC 2822 date");
    let uri = format!("/{API_VERSION}/Accounts/{account_sid}/Messages/{sid}");
    json!({
        "account_sid": account_sid,
        "api_version": API_VERSION,
        "body": body,
        "date_created": now,
        "date_sent": null,
        "date_updated": now,
        "direction": "outbound-api",
        "error_code": null,
        "error_message": null,
        "from": from,
        "messaging_service_sid": null,
        "num_media": "0",
        "num_segments": "1",
        "price": null,
        "price_unit": "USD",
        "sid": sid,
        "status": "queued",
        "subresource_uris": { "media": format!("{uri}/Media.json") },
        "to": to,
        "uri": format!("{uri}.json"),
    })
}

/// Twilio's helper library computing `X-Twilio-Signature` (`peers/twilio_sign.py`), in a Python
/// child process that lives as long as this value.
pub struct TwilioSigner {
    io: tokio::sync::Mutex<(ChildStdin, Lines<BufReader<ChildStdout>>)>,
    _child: Child,
}

impl TwilioSigner {
    pub async fn start() -> TwilioSigner {
        const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/twilio_sign.py");
        let mut child = Command::new(crate::python())
            .arg(SCRIPT)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run the Twilio signer (scripts/test installs the twilio package)");
        let stdin = child.stdin.take().expect("the signer's stdin is piped");
        let stdout = child.stdout.take().expect("the signer's stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next_line().await.expect("read the signer's stdout");
        assert_eq!(
            ready.as_deref(),
            Some("READY"),
            "the Twilio signer did not start: is the twilio package installed (tests/requirements.txt)?"
        );
        TwilioSigner { io: tokio::sync::Mutex::new((stdin, lines)), _child: child }
    }

    /// `RequestValidator(auth_token).compute_signature(url, params)`.
    pub async fn sign(&self, auth_token: &str, url: &str, params: &[(&str, &str)]) -> String {
        let request = json!({"token": auth_token, "url": url, "params": params});
        let mut io = self.io.lock().await;
        let (stdin, lines) = &mut *io;
        stdin.write_all(format!("{request}\n").as_bytes()).await.expect("write to the signer");
        stdin.flush().await.expect("write to the signer");
        lines.next_line().await.expect("read the signer").expect("the signer answers every request")
    }
}
