//! A minimal SMTP sink for benchmarks: accepts every message as fast as it can and records when
//! each `bench-N` subject arrived. (The tests use a full SMTP server; here the sink must not be
//! the bottleneck.)

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::TcpListener,
};

/// When each `bench-N` first arrived, and how many messages arrived in all (more than the
/// distinct subjects means some were delivered twice).
#[derive(Clone, Default)]
pub struct Received(Arc<Mutex<HashMap<usize, Instant>>>, Arc<std::sync::atomic::AtomicUsize>);

impl Received {
    /// Distinct messages received.
    pub fn count(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Messages received more than once (a second delivery of one `bench-N`).
    pub fn duplicates(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(self.count())
    }

    pub fn at(&self, index: usize) -> Option<Instant> {
        self.0.lock().ok()?.get(&index).copied()
    }
}

pub async fn start() -> anyhow::Result<(u16, Received)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let received = Received::default();
    let sink = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sink = sink.clone();
            tokio::spawn(async move {
                let _ = session(stream, sink).await;
            });
        }
    });
    Ok((port, received))
}

async fn session(stream: tokio::net::TcpStream, sink: Received) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 bench ESMTP\r\n").await?;
    let mut in_data = false;
    let mut subject: Option<usize> = None;
    while let Some(line) = lines.next_line().await? {
        if in_data {
            if line == "." {
                in_data = false;
                if let (Some(index), Ok(mut map)) = (subject.take(), sink.0.lock()) {
                    map.entry(index).or_insert_with(Instant::now);
                    sink.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                write.write_all(b"250 2.0.0 queued\r\n").await?;
            } else if let Some(rest) = line.strip_prefix("Subject: bench-") {
                subject = rest.trim().parse().ok();
            }
            continue;
        }
        let verb = line.get(..4).unwrap_or_default().to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" => b"250-bench\r\n250 8BITMIME\r\n",
            "DATA" => {
                in_data = true;
                b"354 go ahead\r\n"
            }
            "QUIT" => {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            _ => b"250 ok\r\n",
        };
        write.write_all(reply).await?;
    }
    Ok(())
}
