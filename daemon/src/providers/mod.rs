//! The provider of each channel, chosen by configuration, and how their failures are classified:
//! transient (retry on the schedule) or permanent (fail now). Providers take an
//! [`OutgoingMessage`]: the delivery workers make one from a queued notification, OTP sends from
//! the code's message.

mod email;
mod http;

use std::time::Duration;

use herald_common::api::{notifications::Channel, suppressions::SuppressionReason};

use self::email::EmailSender;
use crate::{
    config::{Config, SmsProvider, WhatsappProvider},
    dkim::DkimSigner,
    secret::ServerSecret,
};

/// A message to hand to a channel's provider.
#[derive(Clone, Copy, Debug)]
pub struct OutgoingMessage<'a> {
    /// The notification's or OTP transaction's id: the email's `Message-ID` and `.eml` name.
    pub id: &'a str,
    pub channel: Channel,
    pub recipient: &'a str,
    pub recipient_masked: &'a str,
    /// The `from` address (email); `None`: the configured default sender.
    pub sender: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub body: &'a str,
    pub html_body: Option<&'a str>,
    /// The one-click unsubscribe link (`{public_url}/u/{token}`) of an email with a category:
    /// it goes out as `List-Unsubscribe` with `List-Unsubscribe-Post` (RFC 8058). `None` for
    /// transactional mail (no category) and OTPs.
    pub unsubscribe_url: Option<&'a str>,
}

/// A provider accepted the message.
#[derive(Debug)]
pub struct Sent {
    pub provider_message_id: Option<String>,
}

#[derive(Debug)]
pub enum SendError {
    /// Worth retrying: a timeout, a 4xx SMTP reply, a rate limit, a provider outage.
    Transient { reason: String, retry_after: Option<Duration> },
    /// Retrying would not help: a 5xx SMTP reply for the recipient, an invalid number.
    Permanent { reason: String },
    /// Retrying would not help, and neither would any later send: the address does not exist
    /// (a mailbox-related 5xx SMTP reply) or the recipient opted out at the carrier (Twilio
    /// 21610). The recipient joins the suppression list for `suppress` (CONTRACT §9).
    Unreachable { reason: String, suppress: SuppressionReason },
}

impl SendError {
    /// The failure's text.
    pub fn reason(&self) -> &str {
        match self {
            SendError::Transient { reason, .. }
            | SendError::Permanent { reason }
            | SendError::Unreachable { reason, .. } => reason,
        }
    }

    /// The same error with the raw recipient replaced by its mask: providers quote recipients in
    /// their errors (`<ann@example.com>: Recipient address rejected`), and failure reasons are
    /// shown in the API and the logs, where raw recipients never appear.
    pub fn redact(self, recipient: &str, masked: &str) -> SendError {
        let scrub = |reason: String| {
            let mut reason = replace_ignoring_ascii_case(&reason, recipient, masked);
            if let Some(digits) = recipient.strip_prefix('+') {
                reason = reason.replace(digits, masked.trim_start_matches('+'));
            }
            reason
        };
        match self {
            SendError::Transient { reason, retry_after } => {
                SendError::Transient { reason: scrub(reason), retry_after }
            }
            SendError::Permanent { reason } => SendError::Permanent { reason: scrub(reason) },
            SendError::Unreachable { reason, suppress } => {
                SendError::Unreachable { reason: scrub(reason), suppress }
            }
        }
    }
}

/// `text` with every occurrence of `needle` (compared ignoring ASCII case: providers may quote
/// an address in another case) replaced by `with`.
pub(crate) fn replace_ignoring_ascii_case(text: &str, needle: &str, with: &str) -> String {
    if needle.is_empty() {
        return text.to_owned();
    }
    let (haystack, needle_lower) = (text.to_ascii_lowercase(), needle.to_ascii_lowercase());
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    // ASCII lower-casing keeps byte offsets, so positions found in the copy apply to `text`.
    while let Some(found) = haystack[rest..].find(&needle_lower) {
        out.push_str(&text[rest..rest + found]);
        out.push_str(with);
        rest += found + needle.len();
    }
    out.push_str(&text[rest..]);
    out
}

/// The route of Twilio's status callbacks (`api::receipts::twilio`), which every SMS sent
/// through Twilio names as its `StatusCallback`, after the public URL.
pub const TWILIO_STATUS_CALLBACK_PATH: &str = "/api/v1/receipts/twilio";

enum Sms {
    Log,
    Twilio(http::Twilio),
}

enum Whatsapp {
    Log,
    Meta(http::Whatsapp),
}

pub struct Providers {
    email: EmailSender,
    sms: Sms,
    whatsapp: Whatsapp,
}

impl Providers {
    /// The providers `config` names; email's return paths are signed with `secret`.
    pub fn from_config(config: &Config, secret: &ServerSecret) -> anyhow::Result<Self> {
        let client = http::client();
        let sms = match &config.sms {
            SmsProvider::Log => {
                tracing::warn!("HERALD_SMS_PROVIDER=log: SMS are logged, not sent");
                Sms::Log
            }
            SmsProvider::Twilio { base_url, account_sid, auth_token, from } => Sms::Twilio(http::Twilio {
                http: client.clone(),
                base_url: base_url.clone(),
                account_sid: account_sid.clone(),
                auth_token: auth_token.clone(),
                from: from.clone(),
                status_callback: format!("{}{TWILIO_STATUS_CALLBACK_PATH}", config.public_url),
            }),
        };
        let whatsapp = match &config.whatsapp {
            WhatsappProvider::Log => {
                tracing::warn!("HERALD_WHATSAPP_PROVIDER=log: WhatsApp messages are logged, not sent");
                Whatsapp::Log
            }
            WhatsappProvider::Meta { base_url, api_version, phone_number_id, token } => {
                Whatsapp::Meta(http::Whatsapp {
                    http: client,
                    base_url: base_url.clone(),
                    api_version: api_version.clone(),
                    phone_number_id: phone_number_id.clone(),
                    token: token.clone(),
                })
            }
        };
        Ok(Self { email: EmailSender::new(config, secret)?, sms, whatsapp })
    }

    /// Hands `message` to its channel's provider; email from a tenant's own domain is signed
    /// with `signer`. A failure's text never holds the raw recipient (it is masked).
    pub async fn send(
        &self,
        message: &OutgoingMessage<'_>,
        signer: Option<&DkimSigner>,
    ) -> Result<Sent, SendError> {
        let sent = match message.channel {
            Channel::Email => self.email.send(message, signer).await,
            Channel::Sms => match &self.sms {
                Sms::Twilio(twilio) => twilio.send(message.recipient, message.body).await,
                Sms::Log => Ok(logged(message)),
            },
            Channel::Whatsapp => match &self.whatsapp {
                Whatsapp::Meta(meta) => meta.send(message.recipient, message.body).await,
                Whatsapp::Log => Ok(logged(message)),
            },
            Channel::InApp => Err(SendError::Permanent { reason: "in_app has no provider".to_owned() }),
        };
        sent.map_err(|e| e.redact(message.recipient, message.recipient_masked))
    }
}

/// The `log` provider: records that the message would have been sent (with the recipient
/// masked and without the body), for development.
fn logged(job: &OutgoingMessage<'_>) -> Sent {
    tracing::info!(
        channel = %job.channel,
        recipient = %job.recipient_masked,
        chars = job.body.chars().count(),
        "log provider: message not sent (configure a real provider to send)"
    );
    Sent { provider_message_id: Some(format!("log-{}", job.id)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_are_masked_in_any_case() {
        let error = SendError::Permanent { reason: "550 <ANN@Example.com>: unknown; ann@example.com".into() };
        let SendError::Permanent { reason } = error.redact("ann@example.com", "a*n@example.com") else {
            panic!()
        };
        assert_eq!(reason, "550 <a*n@example.com>: unknown; a*n@example.com");
        let error = SendError::Transient {
            reason: "The 'To' number 14155550100 is invalid".into(),
            retry_after: None,
        };
        let SendError::Transient { reason, .. } = error.redact("+14155550100", "+14*******00") else {
            panic!()
        };
        assert_eq!(reason, "The 'To' number 14*******00 is invalid");
    }
}
