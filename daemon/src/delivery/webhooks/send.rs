//! One message's attempt: the dispatcher's HTTP client, the request in the Standard Webhooks
//! format (headers, signature), what the answer decides (success, a retry with jitter and
//! `Retry-After`, `410 Gone`), and the attempt handed to the recorder.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use axum::body::Bytes;
use herald_common::ids::{MessageId, WebhookEndpointId};
use rand::RngExt;
use reqwest::{StatusCode, header};
use tokio::sync::mpsc;

use super::{Ended, Outcome, millis, recorder::Recorder};
use crate::{
    retry::RetryPolicy,
    service::webhooks::{self as service, network},
    state::AppState,
    store::{ClaimedMessage, DueEndpoint, Verdict, WebhookAttemptRecord},
};

/// The longest `Retry-After` honoured (beyond it, the schedule's own delay applies).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// The most of an endpoint's answer that is read (and dropped).
const MAX_ANSWER: usize = 64 * 1024;

/// The HTTP client of the dispatcher: no redirects, the configured timeout, pooled connections,
/// and the private-network rule applied to every name it resolves.
///
/// The pool keeps every idle connection (for 90 s), with no limit per host: endpoints of one
/// host share the host's connections, and the concurrency bounds each endpoint's. A limit of
/// one endpoint's concurrency closed the others' connections after each answer (four endpoints
/// of one host: 14,000 connections opened for 80,000 deliveries, a quarter of the throughput).
pub fn http_client(state: &AppState) -> reqwest::Result<reqwest::Client> {
    let config = &state.config.webhooks;
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(config.timeout)
        .connect_timeout(config.timeout.min(Duration::from_secs(10)))
        .pool_idle_timeout(Duration::from_secs(90))
        .user_agent(concat!("Herald-Webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(network::GuardedResolver(service::network_rule(state))))
        .build()
}

/// Tells the dispatcher a send's slot is free again and how its request went, then that its
/// attempt is recorded, whichever way the send ended (a panic too).
pub(super) struct Done {
    pub(super) endpoint: WebhookEndpointId,
    pub(super) answered: bool,
    /// When the send began: how long its request took goes back with its answer.
    pub(super) started: std::time::Instant,
    pub(super) done: mpsc::UnboundedSender<(WebhookEndpointId, Ended)>,
}

impl Done {
    fn answered(&mut self, outcome: Outcome) {
        if !std::mem::replace(&mut self.answered, true) {
            let took = self.started.elapsed();
            let _ = self.done.send((self.endpoint.clone(), Ended::Answered(outcome, took)));
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.answered(Outcome::Unknown);
        let _ = self.done.send((self.endpoint.clone(), Ended::Recorded));
    }
}

/// What every send of the dispatcher shares.
pub(super) struct Sender {
    pub(super) state: AppState,
    pub(super) client: reqwest::Client,
    pub(super) policy: RetryPolicy,
    pub(super) recorder: Recorder,
    pub(super) meters: Meters,
}

/// The dispatcher's metrics, looked up once (a lookup by name and labels at each send was a
/// few per cent of its CPU).
pub(super) struct Meters {
    succeeded: metrics::Counter,
    retrying: metrics::Counter,
    failed: metrics::Counter,
    gone: metrics::Counter,
    attempt_seconds: metrics::Histogram,
    first_attempt_delay: metrics::Histogram,
}

impl Meters {
    pub(super) fn new() -> Self {
        let attempts =
            |outcome: &'static str| metrics::counter!("herald_webhook_attempts_total", "outcome" => outcome);
        Self {
            succeeded: attempts("succeeded"),
            retrying: attempts("retrying"),
            failed: attempts("failed"),
            gone: attempts("gone"),
            attempt_seconds: metrics::histogram!("herald_webhook_attempt_seconds"),
            first_attempt_delay: metrics::histogram!("herald_webhook_first_attempt_delay_seconds"),
        }
    }

    /// The attempts counter of what an attempt decided.
    fn attempts(&self, verdict: &Verdict) -> &metrics::Counter {
        match verdict {
            Verdict::Succeeded => &self.succeeded,
            Verdict::RetryAt(_) => &self.retrying,
            Verdict::GiveUp => &self.failed,
            Verdict::Disable(_) => &self.gone,
        }
    }
}

/// An endpoint as claimed, with its URL parsed once for the messages of the claim, and refused
/// if it names a private address as a literal (which no resolver sees; the configured rule does
/// not change while the daemon runs, so one check holds for every attempt of the claim).
pub(super) struct Target {
    endpoint: DueEndpoint,
    url: Result<reqwest::Url, String>,
}

impl Target {
    pub(super) fn new(endpoint: DueEndpoint, rule: &network::NetworkRule) -> Self {
        let url = match reqwest::Url::parse(&endpoint.url) {
            Err(_) => Err("the endpoint's URL cannot be parsed".to_owned()),
            Ok(url) => match network::NetworkRule::literal(url.host_str().unwrap_or_default()) {
                Some(ip) if !rule.permits(ip) => Err(format!("refused: {ip} is a private address")),
                _ => Ok(url),
            },
        };
        Self { endpoint, url }
    }
}

/// One message's attempt.
pub(super) struct Send {
    pub(super) sender: Arc<Sender>,
    pub(super) endpoint: Arc<Target>,
    pub(super) lease: Arc<str>,
    pub(super) done: Done,
}

/// What an attempt found.
struct Answer {
    http_status: Option<u16>,
    error: Option<String>,
    retry_after: Option<Duration>,
    succeeded: bool,
    gone: bool,
}

impl Send {
    /// (No span per send: making one cost more than signing the body.)
    pub(super) async fn run(self, mut message: ClaimedMessage) {
        let sender = &*self.sender;
        let state = &sender.state;
        let endpoint = &self.endpoint.endpoint;
        let message_id = MessageId::of_row(message.created_at, message.id);
        let (body, rendered) = match message.body.take() {
            Some(body) => (Some(Bytes::from(body)), false),
            None => match service::render_body(
                &state.config.spf_include,
                message.event_type,
                &message.data,
                message.occurred_at,
            ) {
                Ok(body) => (Some(Bytes::from(body)), true),
                Err(e) => {
                    tracing::error!(
                        endpoint_id = %endpoint.id, event_type = %message.event_type, error = %e,
                        "cannot render a webhook event; the message fails"
                    );
                    (None, false)
                }
            },
        };
        let started = Instant::now();
        let answer = match &body {
            Some(body) => self.post(&message_id, body.clone()).await,
            None => Answer {
                http_status: None,
                error: Some("the event cannot be rendered".to_owned()),
                retry_after: None,
                succeeded: false,
                gone: false,
            },
        };
        let duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let now = state.clock.now_millis();
        let attempt = u32::try_from(message.attempts + 1).unwrap_or(u32::MAX);
        let verdict = if answer.succeeded {
            Verdict::Succeeded
        } else if answer.gone {
            Verdict::Disable("the endpoint answered 410 Gone".to_owned())
        } else if body.is_none() {
            Verdict::GiveUp
        } else {
            let jitter = rand::rng().random::<f64>();
            match sender.policy.next_delay(attempt, None, jitter) {
                Some(delay) => {
                    let wait =
                        answer.retry_after.map_or(delay, |asked| delay.max(asked.min(MAX_RETRY_AFTER)));
                    Verdict::RetryAt(now + millis(wait))
                }
                None => Verdict::GiveUp,
            }
        };
        let meters = &sender.meters;
        meters.attempts(&verdict).increment(1);
        meters.attempt_seconds.record(started.elapsed().as_secs_f64());
        if message.attempts == 0 {
            let latency = (now - message.occurred_at).max(0) as f64 / 1000.0;
            meters.first_attempt_delay.record(latency);
        }
        // The body is kept for the attempts to come, so that each sends the same bytes; after a
        // success there are none (rendering is a function of the event: another endpoint's
        // message renders the same bytes), and keeping it would rewrite the event for nothing.
        let keep = rendered && !answer.succeeded;
        let mut done = self.done;
        done.answered(match (&body, answer.succeeded) {
            (None, _) => Outcome::Unknown,
            (Some(_), true) => Outcome::Succeeded,
            (Some(_), false) => Outcome::Failed,
        });
        let record = WebhookAttemptRecord {
            endpoint_id: endpoint.id.clone(),
            message_id: message.id,
            subject_id: message.subject_id.clone(),
            lease: self.lease.to_string(),
            event_id: message.event_id,
            body: body.filter(|_| keep).map(|body| String::from_utf8_lossy(&body).into_owned()),
            at: now,
            http_status: answer.http_status,
            error: answer.error,
            duration_ms,
            verdict,
            disable_after_ms: millis(state.config.webhooks.disable_after),
            retried: message.attempts > 0,
        };
        sender.recorder.record(record).await;
        drop(done);
    }

    /// POSTs the message once.
    async fn post(&self, message_id: &MessageId, body: Bytes) -> Answer {
        let failed = |error: String| Answer {
            http_status: None,
            error: Some(error),
            retry_after: None,
            succeeded: false,
            gone: false,
        };
        let url = match &self.endpoint.url {
            Ok(url) => url.clone(),
            Err(refused) => return failed(refused.clone()),
        };
        // The real time, not the service clock: receivers check it against theirs.
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(0))
            .unwrap_or(0);
        let state = &self.sender.state;
        let signature = service::signature_header(
            &state.secret,
            &self.endpoint.endpoint,
            state.clock.now_millis(),
            message_id.as_str(),
            timestamp,
            &body,
        );
        let request = self
            .sender
            .client
            .post(url)
            .header("webhook-id", message_id.as_str())
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
        match request.send().await {
            Ok(mut response) => {
                let status = response.status();
                let retry_after = retry_after(response.headers());
                // Read a little of the answer so the connection can be reused; never stored.
                let mut read = 0;
                while read < MAX_ANSWER {
                    match response.chunk().await {
                        Ok(Some(chunk)) => read += chunk.len(),
                        _ => break,
                    }
                }
                Answer {
                    http_status: Some(status.as_u16()),
                    error: (!status.is_success()).then(|| format!("HTTP {status}")),
                    retry_after,
                    succeeded: status.is_success(),
                    gone: status == StatusCode::GONE,
                }
            }
            Err(e) => failed(describe(&e.without_url())),
        }
    }
}

/// A transport failure in words: timeout, refused connection, refused address… (without the
/// URL, which may carry a token of the integrator's).
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out".to_owned();
    }
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        source = e.source();
    }
    text.chars().take(500).collect()
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &header::HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let format = time::format_description::well_known::Rfc2822;
    let at = time::OffsetDateTime::parse(value, &format).ok()?;
    let wait = at - time::OffsetDateTime::now_utc();
    Some(Duration::from_secs(u64::try_from(wait.whole_seconds()).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let mut headers = header::HeaderMap::new();
        headers.insert(header::RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        headers.insert(header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
