//! Email over SMTP with lettre's SMTP client on connections of our own pool (plain, STARTTLS or
//! implicit TLS, credentials from the URL), or, without `HERALD_SMTP_URL`, written as `.eml` files
//! into `<data_dir>/outbox/` for development.
//!
//! The pool is ours rather than lettre's for one reason: lettre writes a message and its final
//! `.` line in two writes, and on a socket without `TCP_NODELAY` Nagle's algorithm holds the
//! second until the server's delayed ACK, about 40 ms per message on Linux, which capped a
//! connection at ~25 messages a second. Our connections set `TCP_NODELAY`. Every message carries `Message-ID: <notification id@sender domain>`, so a
//! message sent twice (at-least-once delivery after a crash) can be recognised downstream.
//!
//! The envelope sender (`MAIL FROM`) is not the visible `From` but the message's signed VERP
//! return path `bounces+<token>@<bounce domain>` (see `crate::verp`), so that the reports mail
//! servers send back about it reach the bounce listener and name it.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use lettre::{
    Message,
    address::Envelope,
    message::{
        Mailbox, MultiPart, SinglePart,
        header::{Header, HeaderName, HeaderValue},
    },
    transport::smtp::{
        authentication::{Credentials, Mechanism},
        client::{AsyncSmtpConnection, AsyncTokioStream, TlsParameters},
        extension::ClientId,
    },
};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};

#[allow(deprecated)] // lettre's TLS-capable stream, public but marked "not meant to be public"
type LettreStream = lettre::transport::smtp::client::AsyncNetworkStream;

/// A TLS stream lettre set up on our socket, handed back to lettre as a plain stream (for
/// implicit TLS, where the TLS handshake comes before the SMTP greeting).
#[derive(Debug)]
struct TlsSocket {
    inner: Compat<LettreStream>,
    peer: std::net::SocketAddr,
}

impl tokio::io::AsyncRead for TlsSocket {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsSocket {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl AsyncTokioStream for TlsSocket {
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(self.peer)
    }
}

use herald_common::{api::suppressions::SuppressionReason, ids::TransactionId};

use super::{OutgoingMessage, SendError, Sent};
use crate::{config::Config, dkim::DkimSigner, secret::ServerSecret, unsubscribe::ONE_CLICK, verp};

enum Transport {
    Smtp(SmtpPool),
    Outbox(PathBuf),
}

/// How long a connect or a send may take; then the attempt fails transiently.
const SMTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections older than this are not reused.
const IDLE_LIMIT: Duration = Duration::from_secs(30);

enum TlsMode {
    None,
    /// STARTTLS when the server offers it.
    Opportunistic(TlsParameters),
    /// STARTTLS or fail.
    Required(TlsParameters),
    /// TLS from the first byte (SMTPS).
    Wrapper(TlsParameters),
}

/// Whether a permanent SMTP reply says the address does not exist (a hard bounce, CONTRACT §9),
/// rather than refusing this message or this sender: the mailbox replies of RFC 5321 (550
/// unavailable, 551 not local, 553 name not allowed), or an enhanced status `5.1.x` (bad
/// destination address, RFC 3463) whatever the code. An authentication or policy refusal (530,
/// 535, 554 5.7.x) is the sender's problem and suppresses no one.
fn is_hard_bounce(code: Option<lettre::transport::smtp::response::Code>, text: &str) -> bool {
    let mailbox = code.is_some_and(|c| matches!(c.to_string().as_str(), "550" | "551" | "553"));
    let policy = text.split_whitespace().any(|w| w.starts_with("5.7."));
    let bad_address = text.split_whitespace().any(|w| w.starts_with("5.1.") && w.len() > 4);
    bad_address || (mailbox && !policy)
}

/// Why an SMTP send failed: an SMTP reply (classified by its code) or the connection.
enum SmtpFailure {
    Reply(lettre::transport::smtp::Error),
    Connection(String),
}

struct SmtpPool {
    host: String,
    port: u16,
    tls: TlsMode,
    credentials: Option<Credentials>,
    hello: ClientId,
    max_idle: usize,
    idle: std::sync::Mutex<Vec<(AsyncSmtpConnection, std::time::Instant)>>,
}

impl SmtpPool {
    async fn connect(&self) -> Result<AsyncSmtpConnection, SmtpFailure> {
        let failed = |e: &dyn std::fmt::Display| SmtpFailure::Connection(e.to_string());
        let tcp = tokio::time::timeout(
            SMTP_TIMEOUT,
            tokio::net::TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| SmtpFailure::Connection("connecting timed out".to_owned()))?
        .map_err(|e| failed(&e))?;
        tcp.set_nodelay(true).map_err(|e| failed(&e))?;
        let peer = tcp.peer_addr().map_err(|e| failed(&e))?;
        let connected = async {
            let mut conn = match &self.tls {
                TlsMode::Wrapper(params) => {
                    #[allow(deprecated)]
                    let mut stream = LettreStream::use_existing_tokio1(Box::new(tcp));
                    stream.upgrade_tls(params.clone()).await?;
                    let socket = TlsSocket { inner: stream.compat(), peer };
                    AsyncSmtpConnection::connect_with_transport(Box::new(socket), &self.hello).await?
                }
                _ => AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &self.hello).await?,
            };
            match &self.tls {
                TlsMode::Required(params) => conn.starttls(params.clone(), &self.hello).await?,
                TlsMode::Opportunistic(params) if conn.can_starttls() => {
                    conn.starttls(params.clone(), &self.hello).await?
                }
                _ => {}
            }
            if let Some(credentials) = &self.credentials {
                conn.auth(&[Mechanism::Plain, Mechanism::Login], credentials).await?;
            }
            Ok::<_, lettre::transport::smtp::Error>(conn)
        };
        tokio::time::timeout(SMTP_TIMEOUT, connected)
            .await
            .map_err(|_| SmtpFailure::Connection("the SMTP greeting timed out".to_owned()))?
            .map_err(SmtpFailure::Reply)
    }

    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_LIMIT {
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, conn: AsyncSmtpConnection) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push((conn, std::time::Instant::now()));
        }
    }

    async fn send_on(
        &self,
        mut conn: AsyncSmtpConnection,
        envelope: &Envelope,
        bytes: &[u8],
    ) -> Result<(), SmtpFailure> {
        match tokio::time::timeout(SMTP_TIMEOUT, conn.send(envelope, bytes)).await {
            Ok(Ok(_)) => {
                self.put_idle(conn);
                Ok(())
            }
            // After any failure the connection's state is unknown: it is dropped.
            Ok(Err(e)) => Err(SmtpFailure::Reply(e)),
            Err(_) => Err(SmtpFailure::Connection("the SMTP transaction timed out".to_owned())),
        }
    }

    async fn send(&self, envelope: &Envelope, bytes: &[u8]) -> Result<(), SmtpFailure> {
        if let Some(conn) = self.take_idle() {
            match self.send_on(conn, envelope, bytes).await {
                // A pooled connection the server has closed meanwhile: try once on a new one.
                Err(SmtpFailure::Reply(e)) if !e.is_permanent() && !e.is_transient() => {}
                Err(SmtpFailure::Connection(_)) => {}
                other => return other,
            }
        }
        let conn = self.connect().await?;
        self.send_on(conn, envelope, bytes).await
    }
}

/// `List-Unsubscribe: <{url}>` (RFC 2369): where a recipient leaves the category.
#[derive(Clone)]
struct ListUnsubscribe(String);

impl Header for ListUnsubscribe {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("List-Unsubscribe")
    }

    fn parse(text: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self(text.to_owned()))
    }

    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), self.0.clone())
    }
}

/// `List-Unsubscribe-Post: List-Unsubscribe=One-Click` (RFC 8058): the link unsubscribes with
/// one POST, no page in between, so a mail client may offer its own button.
#[derive(Clone)]
struct ListUnsubscribePost;

impl Header for ListUnsubscribePost {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("List-Unsubscribe-Post")
    }

    fn parse(text: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        if text.trim() == ONE_CLICK { Ok(Self) } else { Err("not a one-click field".into()) }
    }

    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), ONE_CLICK.to_owned())
    }
}

pub struct EmailSender {
    transport: Transport,
    default_from: Mailbox,
    /// Signs the VERP return paths.
    secret: ServerSecret,
    bounce_domain: String,
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
    pub fn new(config: &Config, secret: &ServerSecret) -> anyhow::Result<Self> {
        let default_from: Mailbox = config
            .email_from
            .parse()
            .map_err(|e| anyhow::anyhow!("HERALD_EMAIL_FROM is not a valid mailbox: {e}"))?;
        let transport = match &config.smtp {
            Some(smtp) => {
                let url = parse_smtp_url(smtp.url.expose())?;
                let tls = || TlsParameters::new(url.host.clone()).context("cannot set up TLS for SMTP");
                let tls = match url.scheme.as_str() {
                    "smtps" => TlsMode::Wrapper(tls()?),
                    "smtp+starttls" => TlsMode::Required(tls()?),
                    "smtp" => TlsMode::Opportunistic(tls()?),
                    _ => TlsMode::None,
                };
                Transport::Smtp(SmtpPool {
                    host: url.host,
                    port: url.port,
                    tls,
                    credentials: url
                        .user
                        .map(|user| Credentials::new(user, url.password.unwrap_or_default())),
                    hello: ClientId::default(),
                    max_idle: config.delivery_workers,
                    idle: std::sync::Mutex::new(Vec::new()),
                })
            }
            None => {
                let dir = config.data_dir.join("outbox");
                std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
                Transport::Outbox(dir)
            }
        };
        // Every return path is in the bounce domain: one that cannot be an address's domain
        // would fail every email, so it stops the start instead.
        let sample = TransactionId::Notification(herald_common::ids::NotificationId::new());
        verp::return_path(secret, &config.bounce_domain, &sample).parse::<lettre::Address>().map_err(
            |e| {
                anyhow::anyhow!(
                    "HERALD_BOUNCE_DOMAIN `{}` cannot be an email domain: {e}",
                    config.bounce_domain
                )
            },
        )?;
        Ok(Self {
            transport,
            default_from,
            secret: secret.clone(),
            bounce_domain: config.bounce_domain.clone(),
        })
    }

    /// The envelope of `message` about transaction `id`: its recipients, from the signed
    /// return path.
    fn envelope(&self, id: &str, message: &Message) -> Result<Envelope, SendError> {
        let permanent = |e: &dyn std::fmt::Display| SendError::Permanent {
            reason: format!("cannot make the return path: {e}"),
        };
        let id = TransactionId::parse(id).map_err(|e| permanent(&e))?;
        let return_path = verp::return_path(&self.secret, &self.bounce_domain, &id)
            .parse::<lettre::Address>()
            .map_err(|e| permanent(&e))?;
        Envelope::new(Some(return_path), message.envelope().to().to_vec()).map_err(|e| permanent(&e))
    }

    fn message(&self, job: &OutgoingMessage<'_>) -> Result<(Message, String), SendError> {
        let permanent =
            |what: &str, e: &dyn std::fmt::Display| SendError::Permanent { reason: format!("{what}: {e}") };
        let from = match job.sender {
            Some(sender) => sender.parse::<Mailbox>().map_err(|e| permanent("invalid sender", &e))?,
            None => self.default_from.clone(),
        };
        let to = job.recipient.parse::<Mailbox>().map_err(|e| permanent("invalid recipient", &e))?;
        let message_id = format!("<{}@{}>", job.id, from.email.domain());
        let mut builder = Message::builder().from(from).to(to).message_id(Some(message_id.clone()));
        if let Some(subject) = job.subject {
            builder = builder.subject(subject);
        }
        if let Some(url) = job.unsubscribe_url {
            builder = builder.header(ListUnsubscribe(format!("<{url}>"))).header(ListUnsubscribePost);
        }
        let message = match job.html_body {
            Some(html) => {
                builder.multipart(MultiPart::alternative_plain_html(job.body.to_owned(), html.to_owned()))
            }
            None => builder.singlepart(SinglePart::plain(job.body.to_owned())),
        }
        .map_err(|e| permanent("cannot build the message", &e))?;
        Ok((message, message_id))
    }

    pub async fn send(
        &self,
        job: &OutgoingMessage<'_>,
        signer: Option<&DkimSigner>,
    ) -> Result<Sent, SendError> {
        let (message, message_id) = self.message(job)?;
        let envelope = self.envelope(job.id, &message)?;
        let bytes = match signer {
            Some(signer) => {
                signer.sign(&message.formatted(), herald_common::Timestamp::now().seconds()).map_err(|e| {
                    SendError::Permanent { reason: format!("cannot DKIM-sign as `{}`: {e}", signer.domain()) }
                })?
            }
            None => message.formatted(),
        };
        match &self.transport {
            Transport::Smtp(pool) => match pool.send(&envelope, &bytes).await {
                Ok(()) => Ok(Sent { provider_message_id: Some(message_id) }),
                Err(SmtpFailure::Reply(e)) if e.is_permanent() => {
                    let reason = format!("SMTP {e}");
                    Err(if is_hard_bounce(e.status(), &reason) {
                        SendError::Unreachable { reason, suppress: SuppressionReason::HardBounce }
                    } else {
                        SendError::Permanent { reason }
                    })
                }
                Err(SmtpFailure::Reply(e)) => {
                    Err(SendError::Transient { reason: format!("SMTP {e}"), retry_after: None })
                }
                Err(SmtpFailure::Connection(e)) => Err(SendError::Transient {
                    reason: format!("SMTP connection failed: {e}"),
                    retry_after: None,
                }),
            },
            Transport::Outbox(dir) => {
                let path = dir.join(format!("{}.eml", job.id));
                let partial = dir.join(format!(".{}.eml.partial", job.id));
                // Outbox files can hold OTP codes: readable by the daemon's user only.
                let written = write_private(&partial, bytes).await;
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

async fn write_private(path: &std::path::Path, contents: Vec<u8>) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(path).await?;
    file.write_all(&contents).await?;
    file.flush().await
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

    #[test]
    fn a_bounce_domain_that_cannot_be_an_email_domain_stops_the_start() {
        let secret = ServerSecret::new(crate::config::Secret::new("email-test-secret-email-test-secret-01"));
        let dir = std::env::temp_dir().join(format!("herald-email-{}", herald_common::ids::new_body()));
        let sender = |domain: &str| {
            let vars = [("HERALD_BOUNCE_DOMAIN", domain), ("HERALD_DATA_DIR", dir.to_str().unwrap())];
            let config = crate::config::Layers::new()
                .env(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .build(false)
                .unwrap();
            EmailSender::new(&config, &secret).map(|_| ())
        };
        assert!(sender("bounce.example.com").is_ok());
        let refused = sender("bounce..example").unwrap_err().to_string();
        assert!(
            refused.contains("HERALD_BOUNCE_DOMAIN `bounce..example` cannot be an email domain"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
