//! Email over SMTP with lettre (a pooled connection, plain/STARTTLS/TLS, credentials from the
//! URL), or, without `HERALD_SMTP_URL`, written as `.eml` files into `<data_dir>/outbox/` for
//! development. Every message carries `Message-ID: <notification id@sender domain>`, so a
//! message sent twice (at-least-once delivery after a crash) can be recognised downstream.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, MultiPart, SinglePart},
    transport::smtp::{
        PoolConfig,
        authentication::Credentials,
        client::{Tls, TlsParameters},
    },
};

use super::{SendError, Sent};
use crate::{config::Config, store::ClaimedDelivery};

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Outbox(PathBuf),
}

pub struct EmailSender {
    transport: Transport,
    default_from: Mailbox,
}

/// The parts of an SMTP URL.
#[derive(Debug, PartialEq, Eq)]
struct SmtpUrl {
    scheme: String,
    host: String,
    port: u16,
    user: Option<String>,
    password: Option<String>,
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        // Decode on bytes, not string slices: a `%` may be followed by a multi-byte character.
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) =
                std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_smtp_url(url: &str) -> anyhow::Result<SmtpUrl> {
    let (scheme, rest) = url.split_once("://").context("HERALD_SMTP_URL must look like smtp://host:port")?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority),
    };
    let default_port = match scheme {
        "smtps" => 465,
        "smtp+starttls" => 587,
        "smtp" | "smtp+plain" => 25,
        other => bail!("HERALD_SMTP_URL: unknown scheme `{other}`"),
    };
    let (host, port) = match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            (host.to_owned(), port.parse::<u16>().context("HERALD_SMTP_URL: the port is not a number")?)
        }
        _ => (host_port.to_owned(), default_port),
    };
    let (user, password) = match userinfo {
        Some(info) => match info.split_once(':') {
            Some((u, p)) => (Some(percent_decode(u)), Some(percent_decode(p))),
            None => (Some(percent_decode(info)), None),
        },
        None => (None, None),
    };
    Ok(SmtpUrl {
        scheme: scheme.to_owned(),
        host: host.trim_matches(['[', ']']).to_owned(),
        port,
        user,
        password,
    })
}

impl EmailSender {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let default_from: Mailbox = config
            .email_from
            .parse()
            .map_err(|e| anyhow::anyhow!("HERALD_EMAIL_FROM is not a valid mailbox: {e}"))?;
        let transport = match &config.smtp {
            Some(smtp) => {
                let url = parse_smtp_url(smtp.url.expose())?;
                let tls = || TlsParameters::new(url.host.clone()).context("cannot set up TLS for SMTP");
                let tls = match url.scheme.as_str() {
                    "smtps" => Tls::Wrapper(tls()?),
                    "smtp+starttls" => Tls::Required(tls()?),
                    "smtp" => Tls::Opportunistic(tls()?),
                    _ => Tls::None,
                };
                let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(url.host.clone())
                    .port(url.port)
                    .tls(tls)
                    .timeout(Some(Duration::from_secs(30)))
                    .pool_config(PoolConfig::new().max_size(16));
                if let Some(user) = url.user {
                    builder = builder.credentials(Credentials::new(user, url.password.unwrap_or_default()));
                }
                Transport::Smtp(builder.build())
            }
            None => {
                let dir = config.data_dir.join("outbox");
                std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                Transport::Outbox(dir)
            }
        };
        Ok(Self { transport, default_from })
    }

    fn message(&self, job: &ClaimedDelivery) -> Result<(Message, String), SendError> {
        let permanent =
            |what: &str, e: &dyn std::fmt::Display| SendError::Permanent { reason: format!("{what}: {e}") };
        let from = match &job.sender {
            Some(sender) => sender.parse::<Mailbox>().map_err(|e| permanent("invalid sender", &e))?,
            None => self.default_from.clone(),
        };
        let to = job.recipient.parse::<Mailbox>().map_err(|e| permanent("invalid recipient", &e))?;
        let message_id = format!("<{}@{}>", job.id, from.email.domain());
        let mut builder = Message::builder().from(from).to(to).message_id(Some(message_id.clone()));
        if let Some(subject) = &job.subject {
            builder = builder.subject(subject);
        }
        let message = match &job.html_body {
            Some(html) => {
                builder.multipart(MultiPart::alternative_plain_html(job.body.clone(), html.clone()))
            }
            None => builder.singlepart(SinglePart::plain(job.body.clone())),
        }
        .map_err(|e| permanent("cannot build the message", &e))?;
        Ok((message, message_id))
    }

    pub async fn send(&self, job: &ClaimedDelivery) -> Result<Sent, SendError> {
        let (message, message_id) = self.message(job)?;
        match &self.transport {
            Transport::Smtp(transport) => match transport.send(message).await {
                Ok(_) => Ok(Sent { provider_message_id: Some(message_id) }),
                Err(e) if e.is_permanent() => Err(SendError::Permanent { reason: format!("SMTP {e}") }),
                Err(e) => Err(SendError::Transient { reason: format!("SMTP {e}"), retry_after: None }),
            },
            Transport::Outbox(dir) => {
                let path = dir.join(format!("{}.eml", job.id));
                let partial = dir.join(format!(".{}.eml.partial", job.id));
                let written = tokio::fs::write(&partial, message.formatted()).await;
                match written.and(tokio::fs::rename(&partial, &path).await) {
                    Ok(()) => Ok(Sent { provider_message_id: Some(message_id) }),
                    Err(e) => Err(SendError::Transient {
                        reason: format!("cannot write {}: {e}", path.display()),
                        retry_after: None,
                    }),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls_parse_with_defaults_and_credentials() {
        let u = parse_smtp_url("smtp://127.0.0.1:2525").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.user), ("127.0.0.1", 2525, None));
        let u = parse_smtp_url("smtps://me%40x.com:p%3Ass@mail.example.com").unwrap();
        assert_eq!((u.port, u.user.as_deref(), u.password.as_deref()), (465, Some("me@x.com"), Some("p:ss")));
        assert_eq!(parse_smtp_url("smtp+starttls://h").unwrap().port, 587);
        assert!(parse_smtp_url("smtp://h:notaport").is_err());
        assert!(parse_smtp_url("http://h").is_err());
        assert_eq!(percent_decode("a%é%41%"), "a%éA%");
    }
}
