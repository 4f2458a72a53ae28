//! Following a live stream (`/api/v1/activity/stream`, `/api/v1/in-app/stream`): connect, read
//! typed events, and when the connection drops, reconnect with backoff and `Last-Event-ID`, so
//! a follower sees every event once and in order across lost connections and daemon restarts.
//! The CLI's `--follow` and `stream`, and the dashboard, all follow through [`Follower`], made by
//! [`Client::follow_activity`] or [`Client::follow_inbox`].

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use reqwest::{Method, StatusCode, header};
use tokio::{sync::mpsc, task::JoinHandle};

use super::{Client, decode, execute};
use crate::{
    Problem,
    stream::{DecodeError, ResyncReason, StreamEvent},
};

/// A stream's connection, as a follower sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// The first attempt is under way.
    Connecting,
    /// Connected: the server accepted the stream, which fixed where it starts, so every change
    /// from here on arrives as an event. A page loaded after this misses nothing in between.
    Live,
    /// Lost (`reason`); attempt `attempt` starts after `retry_in`.
    Reconnecting { attempt: u32, retry_in: Duration, reason: String },
    /// Refused for good (a 401, 403 or 404 that reconnecting would not fix); the follower ended.
    Failed(String),
}

impl ConnectionState {
    /// The backoff before reconnection attempt `attempt` (1-based): 500 ms doubling to 30 s.
    pub fn backoff(attempt: u32) -> Duration {
        let millis = 500u64.saturating_mul(1 << attempt.saturating_sub(1).min(6));
        Duration::from_millis(millis.min(30_000))
    }

    /// A short description for a person.
    pub fn label(&self) -> String {
        match self {
            ConnectionState::Connecting => "connecting…".to_owned(),
            ConnectionState::Live => "live".to_owned(),
            ConnectionState::Reconnecting { attempt, retry_in, .. } => {
                format!("reconnecting (attempt {attempt}, in {:.1}s)", retry_in.as_secs_f32())
            }
            ConnectionState::Failed(reason) => format!("failed: {reason}"),
        }
    }
}

/// What a follower reports, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Followed {
    State(ConnectionState),
    /// An event, with its `id:` line (or the last id seen, for events without one).
    Event {
        id: Option<String>,
        event: StreamEvent,
    },
}

/// Options of a follow.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// Resume after this event id.
    pub last_event_id: Option<String>,
    /// A connection silent for this long is taken as dead (heartbeats come every 15 s).
    pub silence: Duration,
    /// Give up after this many failed attempts in a row (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for FollowOptions {
    fn default() -> Self {
        Self { last_event_id: None, silence: Duration::from_secs(45), max_attempts: None }
    }
}

/// A running follow; dropping it stops it.
pub struct Follower {
    receiver: mpsc::Receiver<Followed>,
    task: JoinHandle<()>,
}

impl Follower {
    /// The next report, or `None` once the follow has ended ([`ConnectionState::Failed`]).
    pub async fn next(&mut self) -> Option<Followed> {
        self.receiver.recv().await
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why one connection ended.
enum Ended {
    /// Reconnect after the backoff.
    Retry(String),
    /// Reconnect after (at least) this long: the server asked.
    RetryAfter(String, Duration),
    /// Do not reconnect.
    Fatal(String),
    /// The consumer went away.
    Closed,
}

impl Client {
    /// Follows the operators' live feed, `GET /api/v1/activity/stream` (an operator token or an
    /// API key with `activity:read`): `activity.created` and `activity.updated` events.
    pub fn follow_activity(&self, options: FollowOptions) -> Follower {
        self.follow("/api/v1/activity/stream", options)
    }

    /// Follows an end user's inbox stream, `GET /api/v1/in-app/stream` (a user token):
    /// `connection.ready`, `notification.created`, `notification.updated` and `stream.resync`.
    pub fn follow_inbox(&self, options: FollowOptions) -> Follower {
        self.follow("/api/v1/in-app/stream", options)
    }

    /// Follows the stream at `path` (with this client's credential) until the returned
    /// [`Follower`] is dropped or the server refuses it for good.
    fn follow(&self, path: &'static str, options: FollowOptions) -> Follower {
        let (sender, receiver) = mpsc::channel(1024);
        let task = tokio::spawn(run(self.clone(), path, options, sender));
        Follower { receiver, task }
    }
}

async fn run(client: Client, path: &'static str, options: FollowOptions, out: mpsc::Sender<Followed>) {
    let mut last_id = options.last_event_id.clone();
    let mut attempt = 0u32;
    if out.send(Followed::State(ConnectionState::Connecting)).await.is_err() {
        return;
    }
    loop {
        let ended = connect(&client, path, &options, &mut last_id, &mut attempt, &out).await;
        let (reason, at_least) = match ended {
            Ended::Closed => return,
            Ended::Fatal(reason) => {
                let _ = out.send(Followed::State(ConnectionState::Failed(reason))).await;
                return;
            }
            Ended::Retry(reason) => (reason, Duration::ZERO),
            Ended::RetryAfter(reason, wait) => (reason, wait),
        };
        attempt += 1;
        if options.max_attempts.is_some_and(|max| attempt > max) {
            let _ = out.send(Followed::State(ConnectionState::Failed(reason))).await;
            return;
        }
        let retry_in = ConnectionState::backoff(attempt).max(at_least);
        let state = ConnectionState::Reconnecting { attempt, retry_in, reason };
        if out.send(Followed::State(state)).await.is_err() {
            return;
        }
        tokio::time::sleep(retry_in).await;
    }
}

/// One connection: connects, reports events until it ends, and says why it ended.
async fn connect(
    client: &Client,
    path: &str,
    options: &FollowOptions,
    last_id: &mut Option<String>,
    attempt: &mut u32,
    out: &mpsc::Sender<Followed>,
) -> Ended {
    let mut request = client.request(Method::GET, path).header(header::ACCEPT, "text/event-stream");
    if let Some(id) = last_id.as_deref() {
        request = request.header("Last-Event-ID", id);
    }
    let response = match tokio::time::timeout(options.silence, execute(request)).await {
        Err(_) => return Ended::Retry("no answer".to_owned()),
        Ok(Err(e)) => return Ended::Retry(transport_reason(&e)),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if !status.is_success() {
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.unwrap_or_default();
        let reason = match decode::<serde_json::Value>(status, &body) {
            Err(super::ClientError::Problem { problem, .. }) => describe(&problem),
            _ => format!("HTTP {}", status.as_u16()),
        };
        return match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => Ended::Fatal(reason),
            s if s.is_client_error()
                && s != StatusCode::TOO_MANY_REQUESTS
                && s != StatusCode::REQUEST_TIMEOUT =>
            {
                Ended::Fatal(reason)
            }
            _ => match retry_after {
                Some(wait) => Ended::RetryAfter(reason, wait),
                None => Ended::Retry(reason),
            },
        };
    }
    if out.send(Followed::State(ConnectionState::Live)).await.is_err() {
        return Ended::Closed;
    }
    *attempt = 0;
    let mut events = response.bytes_stream().eventsource();
    loop {
        let next = match tokio::time::timeout(options.silence, events.next()).await {
            Err(_) => return Ended::Retry(format!("no data for {} s", options.silence.as_secs())),
            Ok(None) => return Ended::Retry("the server ended the stream".to_owned()),
            Ok(Some(Err(e))) => return Ended::Retry(format!("the stream broke: {e}")),
            Ok(Some(Ok(event))) => event,
        };
        let event = match StreamEvent::decode(&next.event, &next.data) {
            Ok(event) => event,
            // A newer daemon's event: skip it (its id still counts for resuming).
            Err(DecodeError::UnknownEvent(_)) => {
                remember(last_id, &next.id);
                continue;
            }
            Err(e) => return Ended::Fatal(e.to_string()),
        };
        remember(last_id, &next.id);
        if let StreamEvent::Resync(resync) = &event {
            // The ids before the gap cannot be replayed: start afresh (a slow consumer may go on
            // from where it was).
            if resync.reason != ResyncReason::SlowConsumer {
                *last_id = None;
            }
        }
        let id = (!next.id.is_empty()).then(|| next.id.clone());
        if out.send(Followed::Event { id, event }).await.is_err() {
            return Ended::Closed;
        }
    }
}

fn remember(last_id: &mut Option<String>, id: &str) {
    if !id.is_empty() {
        *last_id = Some(id.to_owned());
    }
}

fn describe(problem: &Problem) -> String {
    match &problem.detail {
        Some(detail) => format!("{} ({}): {detail}", problem.code.as_str(), problem.status),
        None => format!("{} ({})", problem.code.as_str(), problem.status),
    }
}

fn transport_reason(error: &reqwest::Error) -> String {
    if error.is_connect() {
        "cannot connect".to_owned()
    } else if error.is_timeout() {
        "timed out".to_owned()
    } else {
        format!("{error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(ConnectionState::backoff(1), Duration::from_millis(500));
        assert_eq!(ConnectionState::backoff(2), Duration::from_secs(1));
        assert_eq!(ConnectionState::backoff(7), Duration::from_secs(30));
        assert_eq!(ConnectionState::backoff(40), Duration::from_secs(30));
        assert_eq!(ConnectionState::Live.label(), "live");
        let state = ConnectionState::Reconnecting {
            attempt: 2,
            retry_in: Duration::from_secs(1),
            reason: "x".into(),
        };
        assert_eq!(state.label(), "reconnecting (attempt 2, in 1.0s)");
    }
}
