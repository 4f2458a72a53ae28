//! SSE clients for the stream tests: Rust's `eventsource-stream` over reqwest, and a Python
//! client built on `httpx-sse` (tests/peers/sse_client.py), neither written here.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    sync::mpsc,
    task::JoinHandle,
};

#[derive(Clone, Debug, PartialEq)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: serde_json::Value,
}

/// A connected stream; events arrive on a channel, in order.
pub struct SseClient {
    events: mpsc::UnboundedReceiver<SseEvent>,
    task: JoinHandle<()>,
}

impl Drop for SseClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a refused connection answered.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub body: String,
}

impl SseClient {
    /// Connects to the user stream with `eventsource-stream`. A non-2xx answer is `Err`
    /// (nothing is streamed).
    pub async fn connect(
        base_url: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> Result<SseClient, Refused> {
        Self::connect_to(base_url, "/api/v1/in-app/stream", token, last_event_id).await
    }

    /// Connects to the stream at `path`.
    pub async fn connect_to(
        base_url: &str,
        path: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> Result<SseClient, Refused> {
        let mut request = reqwest::Client::new()
            .get(format!("{base_url}{path}"))
            .bearer_auth(token)
            .header("Accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.map_err(|e| Refused { status: 0, body: e.to_string() })?;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            return Err(Refused { status, body: response.text().await.unwrap_or_default() });
        }
        let (sender, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = response.bytes_stream().eventsource();
            while let Some(Ok(event)) = stream.next().await {
                let data = serde_json::from_str(&event.data).unwrap_or(serde_json::Value::String(event.data));
                let id = Some(event.id).filter(|id| !id.is_empty());
                if sender.send(SseEvent { event: event.event, id, data }).is_err() {
                    break;
                }
            }
        });
        Ok(SseClient { events, task })
    }

    /// Connects with the Python client.
    pub async fn connect_python(
        base_url: &str,
        token: &str,
        last_event_id: Option<&str>,
    ) -> Result<SseClient, Refused> {
        let python = crate::python();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/sse_client.py");
        let mut command = tokio::process::Command::new(&python);
        command.arg(script).arg(format!("{base_url}/api/v1/in-app/stream")).arg(token);
        if let Some(id) = last_event_id {
            command.args(["--last-event-id", id]);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("run the Python SSE client (scripts/test installs httpx-sse)");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the Python SSE client answers within 20 s")
            .expect("read")
            .unwrap_or_else(|| panic!("the Python SSE client printed nothing: is httpx-sse installed?"));
        let first: serde_json::Value = serde_json::from_str(&first).expect("a JSON line");
        if let Some(status) = first.get("status") {
            return Err(Refused {
                status: status.as_u64().unwrap_or(0) as u16,
                body: first["body"].as_str().unwrap_or_default().to_owned(),
            });
        }
        let (sender, events) = mpsc::unbounded_channel();
        let to_event = |v: &serde_json::Value| SseEvent {
            event: v["event"].as_str().unwrap_or_default().to_owned(),
            id: v["id"].as_str().map(str::to_owned),
            data: v["data"].clone(),
        };
        let _ = sender.send(to_event(&first));
        let task = tokio::spawn(async move {
            let _child = child;
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                    && sender.send(to_event(&v)).is_err()
                {
                    break;
                }
            }
        });
        Ok(SseClient { events, task })
    }

    /// The next event within `timeout`, or `None` if the stream ended or nothing came.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        tokio::time::timeout(timeout, self.events.recv()).await.ok().flatten()
    }

    /// The next event that is not a heartbeat.
    pub async fn next_non_heartbeat(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next(left).await?;
            if event.event != "heartbeat" {
                return Some(event);
            }
        }
    }
}
