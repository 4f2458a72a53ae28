//! A webhook receiver on loopback: `peers/webhook_receiver.py` in a child process, which verifies
//! every request with the official Standard Webhooks library (`standardwebhooks` from PyPI), so
//! the daemon's signatures meet an independent implementation. Endpoints are paths
//! (`/e/<label>`); per-label secrets and answers live in `secrets.json` and `rules.json` in its
//! directory, re-read at every request; what it received is read back from `received.jsonl`.

use std::{io::ErrorKind, time::Duration};

use serde::Deserialize;
use serde_json::{Map, Value};
use tempfile::TempDir;
use tokio::process::Child;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/webhook_receiver.py");

/// One request the receiver got.
#[derive(Clone, Debug, Deserialize)]
pub struct Received {
    pub label: String,
    pub webhook_id: String,
    pub webhook_timestamp: String,
    pub signature: String,
    pub content_type: String,
    pub body: Value,
    /// The status it answered.
    pub answered: u16,
    /// When it got it (Unix milliseconds).
    pub at_ms: i64,
    /// For each secret of the label, whether the library verified the request with it.
    pub verified: Vec<bool>,
    pub errors: Vec<String>,
}

impl Received {
    /// The event's `type`.
    pub fn event_type(&self) -> &str {
        self.body["type"].as_str().unwrap_or_default()
    }
}

pub struct WebhookReceiver {
    pub port: u16,
    pub dir: TempDir,
    child: Child,
}

impl WebhookReceiver {
    pub async fn start() -> WebhookReceiver {
        let dir = tempfile::tempdir().expect("temp dir for the webhook receiver");
        let (child, port) = super::start_python_peer(
            SCRIPT,
            dir.path(),
            "webhook receiver",
            "it needs the `standardwebhooks` package of tests/requirements.txt (scripts/test installs it)",
        )
        .await;
        WebhookReceiver { port, dir, child }
    }

    /// The URL of the endpoint `label`.
    pub fn url(&self, label: &str) -> String {
        format!("http://127.0.0.1:{}/e/{label}", self.port)
    }

    /// The same endpoint under a host name (`localhost`), which resolves to a loopback address.
    pub fn url_by_name(&self, label: &str) -> String {
        format!("http://localhost:{}/e/{label}", self.port)
    }

    /// The secrets every request to `label` must verify with (all of them).
    pub fn set_secrets(&self, label: &str, secrets: &[&str]) {
        self.update("secrets.json", label, Value::from(secrets.to_vec()));
    }

    /// The answers to `label`'s requests, in order, the last one repeating (see the script).
    pub fn set_answers(&self, label: &str, answers: &[&str]) {
        self.update("rules.json", label, Value::from(answers.to_vec()));
    }

    fn update(&self, file: &str, label: &str, value: Value) {
        if label.is_empty() {
            return;
        }
        let path = self.dir.path().join(file);
        let mut map: Map<String, Value> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).expect("a JSON object"),
            Err(e) if e.kind() == ErrorKind::NotFound => Map::new(),
            Err(e) => panic!("read {file}: {e}"),
        };
        map.insert(label.to_owned(), value);
        let tmp = self.dir.path().join(format!("{file}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec(&map).expect("serialize")).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
    }

    /// Every request so far, in arrival order. Panics if any request to a label with secrets
    /// failed the library's verification with one of them, or had none to verify with: every
    /// delivery in the tests is checked by the official library.
    pub fn all(&self) -> Vec<Received> {
        let text = match std::fs::read_to_string(self.dir.path().join("received.jsonl")) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Vec::new(),
            Err(e) => panic!("read received.jsonl: {e}"),
        };
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => return Vec::new(),
        };
        let received: Vec<Received> = complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line ({e}): {l}")))
            .collect();
        for r in &received {
            assert!(
                !r.verified.is_empty() && r.verified.iter().all(|v| *v),
                "a delivery to `{}` did not verify with the standardwebhooks library ({:?}): {r:?}",
                r.label,
                r.errors
            );
            assert_eq!(r.content_type, "application/json");
        }
        received
    }

    /// The requests to `label`.
    pub fn received(&self, label: &str) -> Vec<Received> {
        self.all().into_iter().filter(|r| r.label == label).collect()
    }

    /// Polls until `label` has at least `count` requests, or panics after `timeout`.
    pub async fn wait_for(&self, label: &str, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.received(label);
            if got.len() >= count {
                return got;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {count} request(s) to `{label}`; got {got:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
