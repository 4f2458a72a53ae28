//! An SMTP server on loopback: `peers/smtp_sink.py` (aiosmtpd) in a child process, so the
//! daemon's email provider talks to a real, independent SMTP implementation rather than to one
//! written alongside it. The sink stores what it accepts in a temporary directory, which this
//! module reads back; per-recipient rules (reject with 550 or 451, delay the DATA reply) live in
//! `rules.json` there, which the sink re-reads at every RCPT.

use std::{io::ErrorKind, path::PathBuf, time::Duration};

use serde::Deserialize;
use serde_json::{Map, Value};
use tempfile::TempDir;
use tokio::process::Child;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/smtp_sink.py");

/// One message the sink accepted, as it recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMail {
    /// 1, 2, 3… in arrival order.
    pub n: usize,
    /// The envelope sender (`MAIL FROM`); empty for the null sender `<>`.
    pub mail_from: String,
    /// The envelope recipients the sink accepted; rejected ones are not here.
    pub rcpt_tos: Vec<String>,
    /// The `Message-ID` header as written, angle brackets included.
    pub message_id: Option<String>,
    /// The username the client authenticated with, if it did.
    pub auth_user: Option<String>,
    /// The message as received (lossily decoded if it is not UTF-8).
    pub raw: String,
    /// The file holding the exact bytes received.
    pub path: PathBuf,
}

/// A line of `messages.jsonl`.
#[derive(Deserialize)]
struct Line {
    n: usize,
    mail_from: String,
    rcpt_tos: Vec<String>,
    message_id: Option<String>,
    #[serde(default)]
    auth_user: Option<String>,
}

pub struct SmtpSink {
    pub port: u16,
    /// Holds `messages/<n>.eml`, `messages.jsonl`, `rules.json` and the sink's stderr.
    pub dir: TempDir,
    child: Child,
}

impl SmtpSink {
    /// Starts the sink on `127.0.0.1` with a free port and waits until it listens.
    pub async fn start() -> SmtpSink {
        let dir = tempfile::tempdir().expect("temp dir for the SMTP sink");
        // Its stderr goes into a file rather than inherited: it keeps test output quiet, and
        // when the sink does not come up its contents go into the panic message.
        let (child, port) =
            super::start_python_peer(SCRIPT, dir.path(), "SMTP sink", run_through_scripts_test()).await;
        SmtpSink { port, dir, child }
    }

    /// The address to give the daemon's email provider: plain SMTP, no TLS.
    pub fn url(&self) -> String {
        format!("smtp+plain://127.0.0.1:{}", self.port)
    }

    /// Sets the rule for recipient `addr` (matched case-insensitively), keeping the others:
    /// `"accept"`, `"550"` (user unknown), `"451"` (temporary failure) or `"slow:<ms>"` (accept,
    /// then wait that long before answering the DATA). The next RCPT sees it.
    pub fn set_rule(&self, addr: &str, rule: &str) {
        let mut rules = self.rules();
        rules.insert(addr.to_lowercase(), Value::String(rule.to_owned()));
        self.write_rules(&rules);
    }

    /// Removes every rule: all recipients are accepted again.
    pub fn clear_rules(&self) {
        match std::fs::remove_file(self.rules_path()) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => panic!("remove the SMTP sink's rules.json: {e}"),
        }
    }

    /// Every message accepted so far, in arrival order.
    pub fn messages(&self) -> Vec<ReceivedMail> {
        let jsonl = match std::fs::read_to_string(self.dir.path().join("messages.jsonl")) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Vec::new(),
            Err(e) => panic!("read the SMTP sink's messages.jsonl: {e}"),
        };
        // Only newline-terminated lines: the sink may be in the middle of appending the last one.
        let complete = match jsonl.rfind('\n') {
            Some(end) => &jsonl[..end],
            None => return Vec::new(),
        };
        complete
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                let line: Line = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("bad line in messages.jsonl ({e}): {line}"));
                // The sink writes the .eml before the line, so it is complete by now.
                let eml = self.dir.path().join("messages").join(format!("{}.eml", line.n));
                let raw = std::fs::read(&eml).unwrap_or_else(|e| panic!("read {}: {e}", eml.display()));
                ReceivedMail {
                    n: line.n,
                    mail_from: line.mail_from,
                    rcpt_tos: line.rcpt_tos,
                    message_id: line.message_id,
                    auth_user: line.auth_user,
                    raw: String::from_utf8_lossy(&raw).into_owned(),
                    path: eml,
                }
            })
            .collect()
    }

    /// Polls every 20 ms until at least `count` messages have arrived and returns them all, or
    /// panics after `timeout`.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<ReceivedMail> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let messages = self.messages();
            if messages.len() >= count {
                return messages;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {count} message(s) at the SMTP sink; \
                     it has {}",
                    messages.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn rules_path(&self) -> PathBuf {
        self.dir.path().join("rules.json")
    }

    fn rules(&self) -> Map<String, Value> {
        match std::fs::read(self.rules_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes).expect("rules.json holds a JSON object"),
            Err(e) if e.kind() == ErrorKind::NotFound => Map::new(),
            Err(e) => panic!("read the SMTP sink's rules.json: {e}"),
        }
    }

    /// Writes a temporary file and renames it over `rules.json`, so the sink never reads a
    /// half-written one.
    fn write_rules(&self, rules: &Map<String, Value>) {
        let tmp = self.dir.path().join("rules.json.tmp");
        let json = serde_json::to_vec_pretty(rules).expect("serialize rules");
        std::fs::write(&tmp, json).expect("write rules.json.tmp");
        std::fs::rename(&tmp, self.rules_path()).expect("rename rules.json.tmp to rules.json");
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        // Before the fields drop, so the directory goes away after the process, not under it.
        let _ = self.child.start_kill();
    }
}

fn run_through_scripts_test() -> &'static str {
    "the SMTP sink needs Python with aiosmtpd: run the tests through scripts/test, which \
     installs tests/requirements.txt into .venv and points HERALD_TEST_PYTHON at it"
}
