//! One SMTP session of the bounce listener: the part of RFC 5321 a mail server uses to deliver
//! a report (EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT; PIPELINING), no TLS, no AUTH. It
//! refuses a recipient that is not a signed return path at `RCPT`, so no message is read for
//! one; bounds the length of a line, the size of a message, the recipients of a transaction,
//! the protocol errors of a session, the time a line may take and the time of the whole
//! session. What to accept and what to do with a message is the [`Intake`]'s.

use std::{future::Future, time::Duration};

use herald_common::ids::TransactionId;
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

/// What a session may take.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Bytes of a command line, its CRLF included.
    pub command_line: usize,
    /// Bytes of a message (DATA), dot-unstuffed; advertised as `SIZE`.
    pub message: usize,
    /// Accepted recipients of one transaction.
    pub recipients: usize,
    /// Protocol errors (5xx replies) before the session is closed.
    pub errors: usize,
    /// How long one line may take to arrive.
    pub idle: Duration,
    /// How long the whole session may last.
    pub session: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // RFC 5321 §4.5.3.1.4 says 512; a little more for long MAIL parameters.
            command_line: 2048,
            // A report quotes at most the message Herald sent, whose body is under 256 KiB.
            message: 2 * 1024 * 1024,
            recipients: 50,
            errors: 20,
            // RFC 5321 §4.5.3.2.7 suggests 5 minutes; a mail server delivering a report has it
            // ready, so a minute is plenty, and a stalled client frees its slot sooner.
            idle: Duration::from_secs(60),
            session: Duration::from_secs(600),
        }
    }
}

/// What the intake says about a `RCPT TO` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recipient {
    /// A return path Herald signed, naming this transaction.
    Accepted(TransactionId),
    /// A return path of the bounce domain whose token Herald did not sign.
    Forged,
    /// Any other address.
    Unknown,
}

/// Where a session's decisions and messages go.
pub trait Intake: Sync {
    /// Whether mail to `address` is accepted.
    fn recipient(&self, address: &str) -> Recipient;
    /// Takes `message` for the transactions it was addressed to; `false` if it cannot now (the
    /// mail server is told to try again later).
    fn deliver(&self, to: &[TransactionId], message: &[u8]) -> impl Future<Output = bool> + Send;
}

/// A line as read.
enum Line {
    Complete,
    /// Longer than allowed: its bytes were read and dropped.
    TooLong,
    /// The client closed the connection.
    Closed,
}

/// Why a session stops reading.
enum Stop {
    TimedOut,
    ShuttingDown,
    Closed,
}

struct Conn<'a, S> {
    io: BufReader<S>,
    limits: &'a Limits,
    deadline: Instant,
    stop: &'a CancellationToken,
    line: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<'_, S> {
    async fn reply(&mut self, text: &str) -> std::io::Result<()> {
        let stream = self.io.get_mut();
        stream.write_all(text.as_bytes()).await?;
        stream.write_all(b"\r\n").await?;
        stream.flush().await
    }

    /// Reads the next line into `self.line` (terminator included), within the idle time and
    /// the session's deadline.
    async fn read_line(&mut self, max: usize) -> Result<Line, Stop> {
        let deadline = self.deadline.min(Instant::now() + self.limits.idle);
        tokio::select! {
            _ = self.stop.cancelled() => Err(Stop::ShuttingDown),
            read = tokio::time::timeout_at(deadline, read_line(&mut self.io, max, &mut self.line)) => match read {
                Err(_) => Err(Stop::TimedOut),
                Ok(Err(_)) => Err(Stop::Closed),
                Ok(Ok(line)) => Ok(line),
            },
        }
    }
}

/// Reads up to and including the next `\n` into `out`, keeping at most `max` bytes: a longer
/// line is read to its end and dropped.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    out: &mut Vec<u8>,
) -> std::io::Result<Line> {
    out.clear();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(Line::Closed);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            if out.len() + take > max {
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(&buf[..take]);
            }
        }
        reader.consume(take);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Complete });
        }
    }
}

/// The path of `MAIL FROM:<path> params` or `RCPT TO:<path> params` after `keyword`
/// (`FROM:`/`TO:`, any case), without angle brackets or a source route; `None` if malformed.
fn path_argument<'a>(argument: &'a str, keyword: &str) -> Option<(&'a str, &'a str)> {
    let head = argument.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    let rest = argument[keyword.len()..].trim_start();
    let (path, params) = match rest.strip_prefix('<') {
        Some(inner) => inner.split_once('>')?,
        // Some clients leave the brackets out.
        None => rest.split_once(' ').unwrap_or((rest, "")),
    };
    // `<@relay1,@relay2:user@domain>`: the route is obsolete and ignored (RFC 5321 §4.1.1.3).
    let path = match path.strip_prefix('@') {
        Some(_) => path.split_once(':').map_or(path, |(_, mailbox)| mailbox),
        None => path,
    };
    Some((path, params.trim()))
}

/// The `SIZE=` parameter of a `MAIL` command, if any.
fn declared_size(params: &str) -> Option<usize> {
    params.split_whitespace().find_map(|p| {
        let (name, value) = p.split_once('=')?;
        name.eq_ignore_ascii_case("SIZE").then(|| value.parse().ok()).flatten()
    })
}

/// Serves one session on `stream` as `hostname` until the client quits, a limit is reached, or
/// `stop` is cancelled.
pub async fn serve<S, I>(
    stream: S,
    intake: &I,
    hostname: &str,
    limits: &Limits,
    stop: &CancellationToken,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
    I: Intake,
{
    let mut conn = Conn {
        io: BufReader::new(stream),
        limits,
        deadline: Instant::now() + limits.session,
        stop,
        line: Vec::with_capacity(256),
    };
    conn.reply(&format!("220 {hostname} ESMTP Herald bounce listener")).await?;
    let mut greeted = false;
    // The current transaction: `Some` after MAIL, with the recipients accepted so far.
    let mut transaction: Option<Vec<TransactionId>> = None;
    let mut errors = 0;
    loop {
        if errors >= limits.errors {
            return conn.reply("421 4.7.0 Too many errors, closing the connection").await;
        }
        let line = match conn.read_line(limits.command_line).await {
            Ok(Line::Complete) => {
                String::from_utf8_lossy(&conn.line).trim_end_matches(['\r', '\n']).to_owned()
            }
            Ok(Line::TooLong) => {
                errors += 1;
                conn.reply("500 5.5.2 Line too long").await?;
                continue;
            }
            Ok(Line::Closed) | Err(Stop::Closed) => return Ok(()),
            Err(Stop::TimedOut) => return conn.reply("421 4.4.2 Timeout, closing the connection").await,
            Err(Stop::ShuttingDown) => return conn.reply("421 4.3.2 Shutting down, try again later").await,
        };
        let (verb, argument) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let argument = argument.trim();
        let reply = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => {
                greeted = true;
                transaction = None;
                let size = limits.message;
                format!(
                    "250-{hostname}\r\n250-SIZE {size}\r\n250-8BITMIME\r\n250-PIPELINING\r\n250 ENHANCEDSTATUSCODES"
                )
            }
            "HELO" => {
                greeted = true;
                transaction = None;
                format!("250 {hostname}")
            }
            "MAIL" if !greeted => "503 5.5.1 Send EHLO or HELO first".to_owned(),
            "MAIL" if transaction.is_some() => "503 5.5.1 A transaction is already open".to_owned(),
            "MAIL" => match path_argument(argument, "FROM:") {
                None => "501 5.5.4 Syntax: MAIL FROM:<address>".to_owned(),
                Some((_, params)) if declared_size(params).is_some_and(|size| size > limits.message) => {
                    "552 5.3.4 Message too big".to_owned()
                }
                Some(_) => {
                    transaction = Some(Vec::new());
                    "250 2.1.0 OK".to_owned()
                }
            },
            "RCPT" => match (&mut transaction, path_argument(argument, "TO:")) {
                (None, _) => "503 5.5.1 Send MAIL first".to_owned(),
                (Some(_), None) => "501 5.5.4 Syntax: RCPT TO:<address>".to_owned(),
                (Some(to), _) if to.len() >= limits.recipients => "452 4.5.3 Too many recipients".to_owned(),
                (Some(to), Some((address, _))) => match intake.recipient(address) {
                    Recipient::Accepted(id) => {
                        if !to.contains(&id) {
                            to.push(id);
                        }
                        "250 2.1.5 OK".to_owned()
                    }
                    Recipient::Forged => "550 5.7.1 Not a valid return path".to_owned(),
                    Recipient::Unknown => "550 5.1.1 No such recipient here".to_owned(),
                },
            },
            "DATA" => match transaction.take() {
                None => "503 5.5.1 Send MAIL first".to_owned(),
                Some(to) if to.is_empty() => "554 5.5.1 No valid recipients".to_owned(),
                Some(to) => {
                    conn.reply("354 End data with <CRLF>.<CRLF>").await?;
                    match read_message(&mut conn).await {
                        Err(Stop::Closed) => return Ok(()),
                        Err(Stop::TimedOut) => {
                            return conn.reply("421 4.4.2 Timeout, closing the connection").await;
                        }
                        Err(Stop::ShuttingDown) => {
                            return conn.reply("421 4.3.2 Shutting down, try again later").await;
                        }
                        Ok(None) => "552 5.3.4 Message too big".to_owned(),
                        Ok(Some(message)) => match intake.deliver(&to, &message).await {
                            true => "250 2.0.0 OK".to_owned(),
                            false => "451 4.3.0 Cannot take it now, try again later".to_owned(),
                        },
                    }
                }
            },
            "RSET" => {
                transaction = None;
                "250 2.0.0 OK".to_owned()
            }
            "NOOP" => "250 2.0.0 OK".to_owned(),
            "QUIT" => return conn.reply("221 2.0.0 Bye").await,
            "VRFY" => "252 2.5.0 Cannot verify, but will take the message".to_owned(),
            "HELP" => "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT".to_owned(),
            "STARTTLS" | "AUTH" | "BDAT" | "EXPN" | "ETRN" | "TURN" => {
                "502 5.5.1 Command not supported here".to_owned()
            }
            _ => "500 5.5.2 Command not recognized".to_owned(),
        };
        if reply.starts_with('5') {
            errors += 1;
        }
        conn.reply(&reply).await?;
    }
}

/// The message after `DATA`, dot-unstuffed, up to the line `.`; `None` if it is larger than
/// the limit (read to its end and dropped).
async fn read_message<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<'_, S>,
) -> Result<Option<Vec<u8>>, Stop> {
    let limit = conn.limits.message;
    let mut message = Vec::new();
    let mut too_big = false;
    loop {
        // A line may be as long as the message may be.
        match conn.read_line(limit + 2).await? {
            Line::Closed => return Err(Stop::Closed),
            Line::TooLong => {
                too_big = true;
                message = Vec::new();
            }
            Line::Complete => {
                let line = conn.line.as_slice();
                let content = line.strip_suffix(b"\n").unwrap_or(line);
                let content = content.strip_suffix(b"\r").unwrap_or(content);
                if content == b"." {
                    return Ok((!too_big).then_some(message));
                }
                let unstuffed = line.strip_prefix(b".").unwrap_or(line);
                if !too_big && message.len() + unstuffed.len() > limit {
                    too_big = true;
                    message = Vec::new();
                }
                if !too_big {
                    message.extend_from_slice(unstuffed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
