//! The session's protocol, over an in-memory pipe, with an intake that accepts one address.

use std::sync::Mutex;

use herald_common::ids::NotificationId;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

use super::*;

struct FakeIntake {
    good: TransactionId,
    delivered: Mutex<Vec<(Vec<TransactionId>, Vec<u8>)>>,
    /// What `deliver` answers.
    takes: bool,
}

impl Intake for FakeIntake {
    fn recipient(&self, address: &str) -> Recipient {
        match address {
            "bounces+good@bounce.test" => Recipient::Accepted(self.good.clone()),
            "bounces+other@bounce.test" => {
                Recipient::Accepted(TransactionId::Notification(NotificationId::new()))
            }
            a if a.starts_with("bounces+") => Recipient::Forged,
            _ => Recipient::Unknown,
        }
    }

    async fn deliver(&self, to: &[TransactionId], message: &[u8]) -> bool {
        self.delivered.lock().unwrap().push((to.to_vec(), message.to_vec()));
        self.takes
    }
}

fn intake(takes: bool) -> FakeIntake {
    FakeIntake {
        good: TransactionId::Notification(NotificationId::new()),
        delivered: Mutex::default(),
        takes,
    }
}

struct Client {
    read: BufReader<ReadHalf<DuplexStream>>,
    write: WriteHalf<DuplexStream>,
}

impl Client {
    async fn send(&mut self, text: &str) {
        self.write.write_all(text.as_bytes()).await.unwrap();
    }

    /// The next reply, its lines joined by `|`.
    async fn reply(&mut self) -> String {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if self.read.read_line(&mut line).await.unwrap() == 0 {
                return format!("{}<closed>", lines.join("|"));
            }
            let line = line.trim_end().to_owned();
            let last = line.as_bytes().get(3) != Some(&b'-');
            lines.push(line);
            if last {
                return lines.join("|");
            }
        }
    }

    /// Sends `command` and returns its reply.
    async fn say(&mut self, command: &str) -> String {
        self.send(&format!("{command}\r\n")).await;
        self.reply().await
    }
}

/// Runs a session against `intake` with `limits`; returns the client (greeting read) and the
/// session's task.
async fn connect(
    intake: std::sync::Arc<FakeIntake>,
    limits: Limits,
    stop: CancellationToken,
) -> (Client, tokio::task::JoinHandle<std::io::Result<()>>) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move { serve(server, &*intake, "bounce.test", &limits, &stop).await });
    let (read, write) = tokio::io::split(client);
    let mut client = Client { read: BufReader::new(read), write };
    assert_eq!(client.reply().await, "220 bounce.test ESMTP Herald bounce listener");
    (client, task)
}

fn codes(reply: &str) -> &str {
    &reply[..3]
}

#[tokio::test]
async fn a_report_is_taken_for_each_signed_return_path() {
    let intake = std::sync::Arc::new(intake(true));
    let (mut c, task) = connect(intake.clone(), Limits::default(), CancellationToken::new()).await;
    assert_eq!(codes(&c.say("MAIL FROM:<>").await), "503", "EHLO first");
    let ehlo = c.say("EHLO mta.example.net").await;
    assert_eq!(ehlo, "250-bounce.test|250-SIZE 2097152|250-8BITMIME|250-PIPELINING|250 ENHANCEDSTATUSCODES");
    assert_eq!(c.say("RCPT TO:<bounces+good@bounce.test>").await, "503 5.5.1 Send MAIL first");
    assert_eq!(c.say("MAIL FROM:<> SIZE=1000").await, "250 2.1.0 OK");
    assert_eq!(codes(&c.say("MAIL FROM:<>").await), "503", "no nested MAIL");
    assert_eq!(c.say("RCPT TO:<bounces+forged@bounce.test>").await, "550 5.7.1 Not a valid return path");
    assert_eq!(c.say("RCPT TO:<postmaster@bounce.test>").await, "550 5.1.1 No such recipient here");
    assert_eq!(c.say("RCPT TO:<bounces+good@bounce.test>").await, "250 2.1.5 OK");
    assert_eq!(c.say("rcpt to: <@relay.example:bounces+good@bounce.test>").await, "250 2.1.5 OK");
    assert_eq!(c.say("RCPT TO:<bounces+other@bounce.test> NOTIFY=NEVER").await, "250 2.1.5 OK");
    assert_eq!(c.say("DATA").await, "354 End data with <CRLF>.<CRLF>");
    c.send("Subject: report\r\n\r\n..leading dot\r\nlast line\r\n.\r\n").await;
    assert_eq!(c.reply().await, "250 2.0.0 OK");
    {
        let delivered = intake.delivered.lock().unwrap();
        assert_eq!(delivered.len(), 1);
        // The same return path twice counts once; the dot is unstuffed.
        assert_eq!(delivered[0].0.len(), 2);
        assert_eq!(delivered[0].0[0], intake.good);
        assert_eq!(delivered[0].1, b"Subject: report\r\n\r\n.leading dot\r\nlast line\r\n");
    }
    // A second transaction on the same connection, pipelined, with bare LF line ends.
    c.send("MAIL FROM:<>\nRCPT TO:<BOUNCES+GOOD@bounce.test>\nRSET\nNOOP\n").await;
    assert_eq!(c.reply().await, "250 2.1.0 OK");
    assert_eq!(codes(&c.reply().await), "550", "the intake sees the address as written");
    assert_eq!(c.reply().await, "250 2.0.0 OK");
    assert_eq!(c.reply().await, "250 2.0.0 OK");
    assert_eq!(c.say("DATA").await, "503 5.5.1 Send MAIL first", "RSET ended the transaction");
    assert_eq!(c.say("QUIT").await, "221 2.0.0 Bye");
    task.await.unwrap().unwrap();
    assert_eq!(intake.delivered.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn nothing_is_read_without_a_valid_recipient() {
    let intake = std::sync::Arc::new(intake(true));
    let (mut c, _task) = connect(intake.clone(), Limits::default(), CancellationToken::new()).await;
    c.say("HELO mta").await;
    c.say("MAIL FROM:<x@example.net>").await;
    assert_eq!(codes(&c.say("RCPT TO:<bounces+forged@bounce.test>").await), "550");
    assert_eq!(c.say("DATA").await, "554 5.5.1 No valid recipients");
    // The message lines that follow are read as commands and refused, never delivered.
    assert_eq!(c.say("Subject: hi").await, "500 5.5.2 Command not recognized");
    assert!(intake.delivered.lock().unwrap().is_empty());
    assert_eq!(c.say("STARTTLS").await, "502 5.5.1 Command not supported here");
    assert_eq!(codes(&c.say("MAIL FROM:<> SIZE=99999999").await), "552", "over the declared SIZE");
    assert_eq!(codes(&c.say("MAIL TO:<x@y>").await), "501");
}

#[tokio::test]
async fn the_limits_hold() {
    let limits = Limits { command_line: 64, message: 100, recipients: 2, errors: 4, ..Limits::default() };
    let intake = std::sync::Arc::new(intake(true));
    let (mut c, task) = connect(intake.clone(), limits, CancellationToken::new()).await;
    c.say("EHLO mta").await;
    assert_eq!(c.say(&format!("NOOP {}", "x".repeat(100))).await, "500 5.5.2 Line too long");
    assert_eq!(c.say("NOOP").await, "250 2.0.0 OK", "the long line was read to its end");
    c.say("MAIL FROM:<>").await;
    assert_eq!(c.say("RCPT TO:<bounces+good@bounce.test>").await, "250 2.1.5 OK");
    assert_eq!(c.say("RCPT TO:<bounces+other@bounce.test>").await, "250 2.1.5 OK");
    assert_eq!(c.say("RCPT TO:<bounces+good@bounce.test>").await, "452 4.5.3 Too many recipients");
    c.say("DATA").await;
    c.send(&format!("{}\r\n{}\r\n.\r\n", "a".repeat(60), "b".repeat(60))).await;
    assert_eq!(c.reply().await, "552 5.3.4 Message too big");
    assert!(intake.delivered.lock().unwrap().is_empty());
    // Errors add up (the too-long line and the 552 count, the 452 does not): two more close it.
    assert_eq!(codes(&c.say("BOGUS").await), "500");
    assert_eq!(codes(&c.say("BOGUS").await), "500");
    assert_eq!(c.reply().await, "421 4.7.0 Too many errors, closing the connection");
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_idle_client_is_closed_and_a_stopping_listener_says_so() {
    let intake = std::sync::Arc::new(intake(true));
    let (mut c, task) = connect(intake.clone(), Limits::default(), CancellationToken::new()).await;
    c.say("EHLO mta").await;
    // Nothing for longer than the idle limit (paused time moves on by itself).
    assert_eq!(c.reply().await, "421 4.4.2 Timeout, closing the connection");
    task.await.unwrap().unwrap();

    let stop = CancellationToken::new();
    let (mut c, task) = connect(intake.clone(), Limits::default(), stop.clone()).await;
    c.say("EHLO mta").await;
    stop.cancel();
    assert_eq!(c.reply().await, "421 4.3.2 Shutting down, try again later");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_report_the_store_cannot_take_is_deferred() {
    let intake = std::sync::Arc::new(intake(false));
    let (mut c, _task) = connect(intake.clone(), Limits::default(), CancellationToken::new()).await;
    c.say("EHLO mta").await;
    c.say("MAIL FROM:<>").await;
    c.say("RCPT TO:<bounces+good@bounce.test>").await;
    c.say("DATA").await;
    c.send("Subject: report\r\n\r\nbody\r\n.\r\n").await;
    assert_eq!(c.reply().await, "451 4.3.0 Cannot take it now, try again later");
}

#[test]
fn paths_are_read_as_mail_servers_write_them() {
    assert_eq!(path_argument("FROM:<>", "FROM:"), Some(("", "")));
    assert_eq!(
        path_argument("from: <a@b> SIZE=10 BODY=8BITMIME", "FROM:"),
        Some(("a@b", "SIZE=10 BODY=8BITMIME"))
    );
    assert_eq!(path_argument("TO:a@b", "TO:"), Some(("a@b", "")));
    assert_eq!(path_argument("TO:<@r1,@r2:a@b>", "TO:"), Some(("a@b", "")));
    assert_eq!(path_argument("TO:<a@b", "TO:"), None);
    assert_eq!(path_argument("T", "TO:"), None);
    assert_eq!(declared_size("SIZE=10 BODY=8BITMIME"), Some(10));
    assert_eq!(declared_size("body=7bit size=99"), Some(99));
    assert_eq!(declared_size("SIZE=x"), None);
}

#[test]
fn the_delivery_docs_state_the_limits() {
    let docs = include_str!("../../../../docs/DELIVERY.md");
    let limits = Limits::default();
    for stated in [
        format!("| Command line | {},{:03} bytes |", limits.command_line / 1000, limits.command_line % 1000),
        format!("| Message | {} MiB", limits.message / (1024 * 1024)),
        format!("| Recipients per transaction | {} |", limits.recipients),
        format!("| Errors (5xx answers) per session | {} |", limits.errors),
        format!("| Time for one line | {} s |", limits.idle.as_secs()),
        format!("| Time for a session | {} min |", limits.session.as_secs() / 60),
        format!("| Sessions at once | {} |", crate::bounce_listener::MAX_SESSIONS),
    ] {
        assert!(docs.contains(&stated), "docs/DELIVERY.md states `{stated}`");
    }
}
