//! The protocol peers the daemon's delivery providers talk to in tests, on loopback: an SMTP
//! server (aiosmtpd, in a Python child process, so email meets an independent implementation),
//! HTTP servers shaped like Twilio's Messaging API and the WhatsApp Cloud API, and a DNS server
//! (hickory-server) for sending-domain checks. Each records what it received and can be told to
//! fail, permanently or for the next few requests. Two proxies stand between a client and the
//! daemon: one cuts the network, the other refuses chosen requests as a busy daemon would. Two
//! mail servers deliver reports to the daemon's bounce listener: Python's smtplib and a private
//! Postfix instance. A webhook receiver verifies every request with the official Standard
//! Webhooks library.

pub mod dns;
pub mod mta;
pub mod proxy;
pub mod refusing;
pub mod smtp;
pub mod twilio;
pub mod webhook_receiver;
pub mod whatsapp;

pub use dns::{DkimVerdict, DnsServer, verify_dkim};
pub use mta::{Delivery, Postfix};
pub use proxy::CutProxy;
pub use refusing::{RefusingProxy, Seen};
pub use smtp::{ReceivedMail, SmtpSink};
pub use twilio::{TwilioMessage, TwilioServer, TwilioSigner};
pub use webhook_receiver::{Received, WebhookReceiver};
pub use whatsapp::{WhatsAppMessage, WhatsAppServer};

/// Starts the Python peer `script` with `--dir DIR --host 127.0.0.1 --port 0` (its stderr into
/// `DIR/stderr.log`) and waits for the `READY <port>` line it prints once it listens. `what`
/// names it and `hint` says what it needs, in the panic when it does not come up.
pub(crate) async fn start_python_peer(
    script: &str,
    dir: &std::path::Path,
    what: &str,
    hint: &str,
) -> (tokio::process::Child, u16) {
    use tokio::io::AsyncBufReadExt;
    const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);
    let python = crate::python();
    let stderr_path = dir.join("stderr.log");
    let stderr =
        std::fs::File::create(&stderr_path).unwrap_or_else(|e| panic!("create the {what}'s stderr.log: {e}"));
    let mut child = tokio::process::Command::new(&python)
        .arg(script)
        .arg("--dir")
        .arg(dir)
        .args(["--host", "127.0.0.1", "--port", "0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(stderr))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} {script}: {e}; {hint}"));
    let stdout = child.stdout.take().expect("the peer's stdout is piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read the peer's stdout") {
            if let Some(port) = line.strip_prefix("READY ") {
                return Some(
                    port.trim()
                        .parse::<u16>()
                        .unwrap_or_else(|e| panic!("the {what} printed a bad port in {line:?}: {e}")),
                );
            }
        }
        None
    })
    .await;
    let stderr_text = || {
        std::fs::read(&stderr_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_else(|e| format!("(cannot read {}: {e})", stderr_path.display()))
    };
    match ready {
        Ok(Some(port)) => (child, port),
        Ok(None) => panic!(
            "the {what} ({python} {script}) exited before printing READY; {hint}\nits stderr:\n{}",
            stderr_text()
        ),
        Err(_) => panic!(
            "the {what} ({python} {script}) did not print READY within {READY_TIMEOUT:?}; {hint}\nits stderr:\n{}",
            stderr_text()
        ),
    }
}
