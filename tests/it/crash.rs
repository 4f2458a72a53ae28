//! Crash safety: a daemon killed with SIGKILL in the middle of a burst of dispatches loses
//! nothing it acknowledged, on each backend (the burst's dispatches are written in groups). After a restart every notification that got a 202 ends `sent`,
//! `delivered` or `failed`, and a message delivered twice (at-least-once) carries the same
//! Message-ID both times. Likewise for event webhooks: killed while it delivers them, the daemon
//! loses no committed event and invents none, and a duplicate carries the same `webhook-id`.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use herald_common::{
    api::{
        notifications::{Channel, DeliveryStatus, NotificationIn},
        suppressions::{Suppression, SuppressionIn},
        webhooks::{EventType, WebhookEndpointIn},
    },
    client::Client,
};
use herald_tests::{
    Backend, both_backends,
    peers::{SmtpSink, WebhookReceiver},
};

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

/// Events made in the webhook crash test, and how many are acknowledged before the kill.
const EVENTS: usize = 300;
const KILL_AFTER_EVENTS: usize = 150;

/// SIGKILL while events are being delivered; after a restart every committed event arrives at
/// least once, a duplicate carries the same `webhook-id`, and nothing arrives that was not
/// committed.
async fn sigkill_while_delivering_loses_and_invents_nothing(backend: Backend) {
    herald_tests::init_crypto();
    let receiver = WebhookReceiver::start().await;
    // Slow answers keep messages in flight when the kill comes.
    receiver.set_answers("crash", &["slow:50"]);
    let dir = tempfile::tempdir().unwrap();
    let database_url = backend.fresh_database_url(dir.path()).await;
    let configure = |command: &mut tokio::process::Command| {
        command
            .env("HERALD_DATABASE_URL", &database_url)
            .env("HERALD_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8")
            .env("HERALD_WEBHOOK_RETRY_SCHEDULE", "100ms,100ms,100ms")
            .env("HERALD_WEBHOOK_TIMEOUT", "1s")
            .env("HERALD_LOG", "warn,herald_daemon=info");
    };
    let (boot, (child, addr, _logs)) = bootstrap_and_serve(dir.path(), &configure).await;
    let client = Client::new(format!("http://{addr}")).with_token(&boot.api_key);
    let created = client
        .add_webhook(&WebhookEndpointIn {
            url: receiver.url("crash"),
            event_types: Some(vec![EventType::SuppressionCreated]),
            ..Default::default()
        })
        .await
        .unwrap();
    receiver.set_secrets("crash", &[&created.secret]);

    let accepted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let pid = child.id().unwrap();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = Vec::new();
    for i in 0..EVENTS {
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        let (client, accepted, acknowledged) = (client.clone(), accepted.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let entry = SuppressionIn {
                channel: Channel::Email,
                recipient: format!("crash{i}@example.com"),
                category: None,
                reason: None,
            };
            if let Ok(entry) = client.post::<_, Suppression>("/api/v1/suppressions", &entry).await {
                accepted.lock().unwrap().push(entry.suppression_id.to_string());
                if acknowledged.fetch_add(1, Ordering::SeqCst) + 1 == KILL_AFTER_EVENTS {
                    std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    assert!(accepted.len() >= KILL_AFTER_EVENTS);
    let mut child = child;
    child.wait().await.unwrap();
    let before_restart = receiver.received("crash").len();

    let (_child, addr, _logs) = serve_configured(dir.path(), &configure).await;
    let client = Client::new(format!("http://{addr}")).with_token(&boot.api_key);

    // Every acknowledged event arrives (a lease held by the dead daemon runs out first).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let by_subject = loop {
        let mut by_subject: HashMap<String, HashSet<String>> = HashMap::new();
        for r in receiver.received("crash") {
            let subject = r.body["data"]["suppression_id"].as_str().unwrap().to_owned();
            by_subject.entry(subject).or_default().insert(r.webhook_id.clone());
        }
        if accepted.iter().all(|id| by_subject.contains_key(id)) {
            break by_subject;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} acknowledged events never arrived",
            accepted.iter().filter(|id| !by_subject.contains_key(*id)).count()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Duplicates carry one webhook-id; nothing was invented (each event's suppression exists).
    for (subject, ids) in &by_subject {
        assert_eq!(ids.len(), 1, "{subject} arrived under several webhook-ids: {ids:?}");
        let id = herald_common::ids::SuppressionId::parse(subject).unwrap();
        let path = format!("/api/v1/suppressions/{id}");
        client.get::<Suppression>(&path).await.unwrap_or_else(|e| panic!("{subject} was invented: {e}"));
    }
    let total = receiver.received("crash").len();
    eprintln!(
        "webhook crash test ({backend:?}): {} acknowledged, {} events, {before_restart} requests before the kill, \
         {} duplicates",
        accepted.len(),
        by_subject.len(),
        total - by_subject.len()
    );
}
both_backends!(
    sigkill_while_delivering_loses_and_invents_nothing_on_each_backend,
    sigkill_while_delivering_loses_and_invents_nothing
);
