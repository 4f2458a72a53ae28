//! The SMS (Twilio-compatible) and WhatsApp (Cloud API) clients: plain HTTPS requests whose
//! error bodies are kept, with their codes, as the failure reason.

use std::time::Duration;

use herald_common::api::suppressions::SuppressionReason;
use reqwest::{StatusCode, header::RETRY_AFTER};
use serde::Deserialize;
use serde_json::json;

use super::{SendError, Sent};
use crate::config::Secret;

/// Provider requests give up after this long (and count as transient failures).
pub const TIMEOUT: Duration = Duration::from_secs(30);

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(TIMEOUT)
        .pool_max_idle_per_host(64)
        .build()
        .unwrap_or_default()
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn transport_error(provider: &str, error: &reqwest::Error) -> SendError {
    let what = if error.is_timeout() { "timed out" } else { "could not be reached" };
    SendError::Transient { reason: format!("{provider} {what}: {error}"), retry_after: None }
}

/// Whether an HTTP failure is worth retrying: rate limits, server errors, and credentials
/// problems (a fix to the configuration should let queued messages through).
fn transient_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        || status == StatusCode::UNAUTHORIZED
        || status == StatusCode::FORBIDDEN
        || status == StatusCode::REQUEST_TIMEOUT
}

pub struct Twilio {
    pub http: reqwest::Client,
    pub base_url: String,
    pub account_sid: String,
    pub auth_token: Secret,
    pub from: String,
    /// Where Twilio posts the message's later statuses (`StatusCallback`).
    pub status_callback: String,
}

#[derive(Deserialize)]
struct TwilioMessage {
    sid: Option<String>,
}

/// Twilio's "the recipient has unsubscribed" (texted STOP): every later send fails the same.
pub const TWILIO_UNSUBSCRIBED: i64 = 21610;

#[derive(Deserialize)]
struct TwilioError {
    code: Option<i64>,
    message: Option<String>,
}

impl Twilio {
    pub async fn send(&self, to: &str, body: &str) -> Result<Sent, SendError> {
        let url = format!("{}/2010-04-01/Accounts/{}/Messages.json", self.base_url, self.account_sid);
        let response = self
            .http
            .post(url)
            .basic_auth(&self.account_sid, Some(self.auth_token.expose()))
            .form(&[
                ("To", to),
                ("From", self.from.as_str()),
                ("Body", body),
                ("StatusCallback", self.status_callback.as_str()),
            ])
            .send()
            .await
            .map_err(|e| transport_error("Twilio", &e))?;
        let status = response.status();
        let wait = retry_after(&response);
        let text = response.text().await.map_err(|e| transport_error("Twilio", &e))?;
        if status.is_success() {
            let sid = serde_json::from_str::<TwilioMessage>(&text).ok().and_then(|m| m.sid);
            return Ok(Sent { provider_message_id: sid });
        }
        let error = serde_json::from_str::<TwilioError>(&text).ok();
        let code = error.as_ref().and_then(|e| e.code);
        let reason = match error {
            Some(TwilioError { code: Some(code), message }) => {
                format!("Twilio error {code}: {} (HTTP {})", message.unwrap_or_default(), status.as_u16())
            }
            _ => format!("Twilio answered HTTP {}: {}", status.as_u16(), truncate(&text)),
        };
        if code == Some(TWILIO_UNSUBSCRIBED) {
            return Err(SendError::Unreachable { reason, suppress: SuppressionReason::CarrierOptOut });
        }
        Err(classify(status, reason, wait))
    }
}

pub struct Whatsapp {
    pub http: reqwest::Client,
    pub base_url: String,
    pub api_version: String,
    pub phone_number_id: String,
    pub token: Secret,
}

#[derive(Deserialize)]
struct CloudApiSent {
    #[serde(default)]
    messages: Vec<CloudApiMessage>,
}

#[derive(Deserialize)]
struct CloudApiMessage {
    id: String,
}

#[derive(Deserialize)]
struct CloudApiErrorBody {
    error: CloudApiError,
}

#[derive(Deserialize)]
struct CloudApiError {
    message: Option<String>,
    code: Option<i64>,
}

/// Cloud API error codes that mean "later", not "never" (rate limits, temporary outages).
const WHATSAPP_TRANSIENT_CODES: &[i64] = &[1, 2, 4, 80007, 130429, 131000, 131016, 131048, 131056, 133004];

impl Whatsapp {
    pub async fn send(&self, to: &str, body: &str) -> Result<Sent, SendError> {
        let url = format!("{}/{}/{}/messages", self.base_url, self.api_version, self.phone_number_id);
        let payload = json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to.trim_start_matches('+'),
            "type": "text",
            "text": {"preview_url": false, "body": body},
        });
        let response = self
            .http
            .post(url)
            .bearer_auth(self.token.expose())
            .json(&payload)
            .send()
            .await
            .map_err(|e| transport_error("the WhatsApp Cloud API", &e))?;
        let status = response.status();
        let wait = retry_after(&response);
        let text = response.text().await.map_err(|e| transport_error("the WhatsApp Cloud API", &e))?;
        if status.is_success() {
            let id = serde_json::from_str::<CloudApiSent>(&text)
                .ok()
                .and_then(|sent| sent.messages.into_iter().next())
                .map(|m| m.id);
            return Ok(Sent { provider_message_id: id });
        }
        let parsed = serde_json::from_str::<CloudApiErrorBody>(&text).ok();
        let code = parsed.as_ref().and_then(|p| p.error.code);
        let reason = match parsed {
            Some(CloudApiErrorBody { error }) => format!(
                "WhatsApp error {}: {} (HTTP {})",
                error.code.map(|c| c.to_string()).unwrap_or_else(|| "?".to_owned()),
                error.message.unwrap_or_default(),
                status.as_u16()
            ),
            None => format!("WhatsApp answered HTTP {}: {}", status.as_u16(), truncate(&text)),
        };
        if code.is_some_and(|c| WHATSAPP_TRANSIENT_CODES.contains(&c)) {
            return Err(SendError::Transient { reason, retry_after: wait });
        }
        Err(classify(status, reason, wait))
    }
}

fn classify(status: StatusCode, reason: String, retry_after: Option<Duration>) -> SendError {
    if transient_status(status) {
        SendError::Transient { reason, retry_after }
    } else {
        SendError::Permanent { reason }
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(300).collect()
}
