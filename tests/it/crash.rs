//! Crash safety: a daemon killed with SIGKILL in the middle of a burst of dispatches loses
//! nothing it acknowledged, on each backend (the burst's dispatches are written in groups). After a restart every notification that got a 202 ends `sent`,
//! `delivered` or `failed`, and a message delivered twice (at-least-once) carries the same
//! Message-ID both times.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use herald_common::{
    api::notifications::{Channel, DeliveryStatus, NotificationIn},
    client::Client,
};
use herald_tests::{Backend, both_backends, peers::SmtpSink};

use crate::process::{bootstrap_and_serve, serve_configured};

const TOTAL: usize = 2000;
const KILL_AFTER: usize = 1000;

async fn sigkill_mid_burst_loses_nothing(backend: Backend) {
    herald_tests::init_crypto();
    let sink = SmtpSink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let database_url = backend.fresh_database_url(dir.path()).await;
    let configure = |command: &mut tokio::process::Command| {
        command
            .env("HERALD_DATABASE_URL", &database_url)
            .env("HERALD_SMTP_URL", sink.url())
            .env("HERALD_DELIVERY_LEASE_SECONDS", "2")
            .env("HERALD_RETRY_SCHEDULE", "100ms,100ms,100ms")
            .env("HERALD_LOG", "warn,herald_daemon=info,herald_daemon::delivery=warn");
    };
    let (boot, (child, addr, _logs)) = bootstrap_and_serve(dir.path(), &configure).await;
    let client = Client::new(format!("http://{addr}")).with_token(&boot.api_key);

    // Dispatch with 32 requests in flight; SIGKILL once KILL_AFTER have been acknowledged.
    let accepted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let pid = child.id().unwrap();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..TOTAL {
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        let (client, accepted, acknowledged) = (client.clone(), accepted.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let mut n = NotificationIn::new(
                Channel::Email,
                format!("crash{}@example.com", i % 50),
                format!("body {i}"),
            );
            n.subject = Some(format!("crash-{i}"));
            if let Ok(ok) = client.send_notification(&n, None).await {
                accepted.lock().unwrap().push((i, ok.notification_id.to_string()));
                if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER {
                    std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    assert!(accepted.len() >= KILL_AFTER, "{} accepted before the kill", accepted.len());
    let mut child = child;
    child.wait().await.unwrap();

    // Restart on the same database: everything acknowledged reaches a final state.
    let (_child, addr, _logs) = serve_configured(dir.path(), &configure).await;
    let client = Client::new(format!("http://{addr}")).with_token(&boot.api_key);
    let mut pending: HashSet<String> = accepted.iter().map(|(_, id)| id.clone()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !pending.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "{} notifications never settled", pending.len());
        let batch: Vec<String> = pending.iter().take(200).cloned().collect();
        for id in batch {
            let typed = herald_common::ids::NotificationId::parse(&id).unwrap();
            let n = client.notification(&typed).await.expect("every acknowledged notification exists");
            if matches!(
                n.delivery_status,
                DeliveryStatus::Sent | DeliveryStatus::Delivered | DeliveryStatus::Failed
            ) {
                assert_eq!(n.delivery_status, DeliveryStatus::Sent, "{id}: {:?}", n.failure_reason);
                pending.remove(&id);
            }
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Every acknowledged message arrived; any sent twice carries one Message-ID.
    let mut ids_by_subject: HashMap<String, HashSet<String>> = HashMap::new();
    for mail in sink.messages() {
        let subject = mail.raw.lines().find_map(|l| l.strip_prefix("Subject: ")).unwrap().trim().to_owned();
        ids_by_subject.entry(subject).or_default().insert(mail.message_id.clone().unwrap());
    }
    for (i, id) in &accepted {
        let ids = ids_by_subject
            .get(&format!("crash-{i}"))
            .unwrap_or_else(|| panic!("crash-{i} was never delivered"));
        assert_eq!(ids.len(), 1, "crash-{i} was delivered with several Message-IDs: {ids:?}");
        assert!(ids.contains(&format!("<{id}@localhost>")));
    }
    let duplicates = sink.messages().len() - ids_by_subject.len();
    eprintln!(
        "crash test ({backend:?}): {TOTAL} sent, {} acknowledged, {duplicates} delivered more than once",
        accepted.len()
    );
}
both_backends!(sigkill_mid_burst_loses_nothing_on_each_backend, sigkill_mid_burst_loses_nothing);
