//! A typed HTTP client for Herald's API, shared by the CLI, the TUI and the tests. One file per
//! resource adds its methods to [`Client`]; they take the contract's types (typed ids, channels,
//! statuses, timestamps), never bare strings. Every request goes through [`execute`], which
//! tells `tracing` what went out and what came back ([`log`]: the CLI's `-v`).

mod activity;
pub use activity::ActivityQuery;
mod follow;
pub use follow::{ConnectionState, FollowOptions, Followed, Follower};
mod applications;
mod domains;
mod health;
mod inbox;
pub use inbox::InboxQuery;
mod log;
pub use log::TARGET as LOG_TARGET;
mod notifications;
mod otp;
mod users;
mod webhooks;

pub use reqwest::Error as TransportError;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::{Serialize, de::DeserializeOwned};

use crate::Problem;

/// What a call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Herald answered with a problem+json error.
    #[error("{problem}")]
    Problem {
        problem: Box<Problem>,
        /// `Retry-After`, in seconds, when the answer had one (429, 409 in flight, 503).
        retry_after: Option<u64>,
    },
    /// Herald answered something that is not JSON of the expected shape.
    #[error("unexpected response (HTTP {status}): {body}")]
    Unexpected { status: u16, body: String },
    /// The request did not get an answer.
    #[error("cannot reach Herald")]
    Transport(#[from] reqwest::Error),
}

impl ClientError {
    /// The problem body, when Herald sent one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ClientError::Problem { problem, .. } => Some(problem),
            _ => None,
        }
    }

    /// How long the server asked to wait before trying again, if it did.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            ClientError::Problem { retry_after, .. } => retry_after.map(std::time::Duration::from_secs),
            _ => None,
        }
    }
}

/// A JSON answer and whether it is the replay of an earlier request with the same
/// `Idempotency-Key` (`Idempotent-Replayed: true`).
#[derive(Clone, Debug)]
pub struct Answer<T> {
    pub value: T,
    pub replayed: bool,
}

/// A Herald API client bound to a base URL and, optionally, one bearer credential (an API key,
/// an operator token or a user token).
#[derive(Clone, Debug)]
pub struct Client {
    base_url: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(base_url: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self { base_url: base_url.into().trim_end_matches('/').to_owned(), token: None, http }
    }

    /// The same client presenting `token` as `Authorization: Bearer`.
    pub fn with_token(&self, token: impl Into<String>) -> Self {
        Self { token: Some(token.into()), ..self.clone() }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// A request builder for `path` (starting with `/`), carrying the credential.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.http.request(method, format!("{}{}", self.base_url, path));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        Self::send(self.request(Method::GET, path)).await
    }

    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        Self::send(self.request(Method::POST, path).json(body)).await
    }

    /// Deletes `path`: success is any 2xx (usually 204 without a body).
    pub async fn delete(&self, path: &str) -> Result<(), ClientError> {
        let response = execute(self.request(Method::DELETE, path)).await?;
        if response.status().is_success() {
            return Ok(());
        }
        let status = response.status();
        let bytes = response.bytes().await?;
        decode::<serde_json::Value>(status, &bytes).map(|_| ())
    }

    /// Sends a request and decodes a JSON success, or the problem of a failure.
    pub async fn send<T: DeserializeOwned>(request: RequestBuilder) -> Result<T, ClientError> {
        Self::answer(request).await.map(|answer| answer.value)
    }

    /// As [`Client::send`], also saying whether the answer is an idempotent replay.
    pub async fn answer<T: DeserializeOwned>(request: RequestBuilder) -> Result<Answer<T>, ClientError> {
        let response = execute(request).await?;
        let status = response.status();
        let header =
            |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let replayed = header("idempotent-replayed").is_some_and(|v| v == "true");
        let retry_after = header("retry-after").and_then(|v| v.parse().ok());
        let bytes = response.bytes().await?;
        match decode(status, &bytes) {
            Ok(value) => Ok(Answer { value, replayed }),
            Err(ClientError::Problem { problem, .. }) => Err(ClientError::Problem { problem, retry_after }),
            Err(other) => Err(other),
        }
    }
}

/// Sends a request, through the log of requests.
async fn execute(request: RequestBuilder) -> Result<Response, reqwest::Error> {
    let (http, request) = request.build_split();
    log::execute(&http, request?).await
}

fn decode<T: DeserializeOwned>(status: StatusCode, bytes: &[u8]) -> Result<T, ClientError> {
    if status.is_success() {
        if let Ok(value) = serde_json::from_slice(bytes) {
            return Ok(value);
        }
    } else if let Ok(problem) = serde_json::from_slice::<Problem>(bytes) {
        return Err(ClientError::Problem { problem: Box::new(problem), retry_after: None });
    }
    Err(ClientError::Unexpected {
        status: status.as_u16(),
        body: String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned(),
    })
}
