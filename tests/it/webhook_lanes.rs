//! Each endpoint's lane (CONTRACT §10) on both backends: a slow endpoint holds only its own
//! slots, a failing one is probed rather than flooded, and endpoints of one host reuse their
//! connections. Every delivery goes to the receiver peer, which verifies it with the official
//! `standardwebhooks` library.

use std::{collections::HashSet, time::Duration};

use herald_common::api::{
    notifications::{Channel, NotificationIn},
    webhooks::{EventType, WebhookEndpointIn},
};
use herald_tests::{Backend, both_backends, eventually, peers::CutProxy};

use crate::webhooks::{WAIT, endpoint, start_with, suppress};

async fn a_slow_endpoint_does_not_delay_another(backend: Backend) {
    let extra = vec![
        ("HERALD_WEBHOOK_TIMEOUT", "3s".to_owned()),
        ("HERALD_WEBHOOK_ENDPOINT_CONCURRENCY", "4".to_owned()),
    ];
    let (_d, _boot, key, receiver) = start_with(backend, extra).await;
    endpoint(&key, &receiver, "slow", None).await;
    endpoint(&key, &receiver, "fast", None).await;
    receiver.set_answers("slow", &["slow:2500"]);
    let started = std::time::Instant::now();
    for i in 0..30 {
        suppress(&key, Channel::Email, &format!("s{i}@example.com")).await;
    }
    receiver.wait_for("fast", 30, WAIT).await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2_400), "the fast endpoint took {took:?}, held up by the slow one");
    assert!(receiver.received("slow").len() <= 4, "at most the concurrency in flight to the slow one");
}
both_backends!(
    a_slow_endpoint_does_not_delay_another_on_each_backend,
    a_slow_endpoint_does_not_delay_another
);

/// A dead endpoint is probed, not flooded: after five failures in a row it gets one message at a
/// time, a second apart, and its other messages wait with their attempts unspent; the first
/// success opens it again and every event arrives.
async fn a_failing_endpoint_is_probed_not_flooded(backend: Backend) {
    let extra = vec![("HERALD_WEBHOOK_ENDPOINT_CONCURRENCY", "4".to_owned())];
    let (_d, _boot, key, receiver) = start_with(backend, extra).await;
    endpoint(&key, &receiver, "dead", None).await;
    receiver.set_answers("dead", &["500"]);
    for i in 0..40 {
        suppress(&key, Channel::Email, &format!("p{i}@example.com")).await;
    }
    // Two slots' worth fail (4 in flight, 4 waiting), then a probe a second.
    receiver.wait_for("dead", 8, WAIT).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let tried = receiver.received("dead").len();
    // Flooded, the 40 messages' four attempts each (100 ms apart) would all have been made.
    assert!(tried <= 8 + 4, "{tried} requests to a dead endpoint in 2.5 s");
    receiver.set_answers("dead", &["ok"]);
    let delivered = eventually("every event to arrive once the endpoint answers", WAIT, || async {
        let ids: HashSet<String> = receiver
            .received("dead")
            .into_iter()
            .filter(|r| r.answered < 300)
            .map(|r| r.webhook_id)
            .collect();
        (ids.len() == 40).then_some(ids)
    })
    .await;
    assert_eq!(delivered.len(), 40);
}
both_backends!(
    a_failing_endpoint_is_probed_not_flooded_on_each_backend,
    a_failing_endpoint_is_probed_not_flooded
);

/// Endpoints on one host share the client's pool, and it keeps every connection their sends
/// opened: a burst to four endpoints of one receiver (behind a proxy that counts connections)
/// opens about their slots' worth, not one per few requests. (Keeping only one endpoint's
/// concurrency idle per host closed the rest after each answer: 74 to 181 connections here,
/// 14,000 for 80,000 deliveries in the bench.) The bound is twice the slots: a send that finds
/// no idle connection starts one while it waits, and takes whichever comes first, so the pool
/// can hold a few more than are ever in flight.
async fn endpoints_of_one_host_reuse_their_connections(backend: Backend) {
    const ENDPOINTS: usize = 4;
    const CONCURRENCY: usize = 4;
    const EVENTS: usize = 200;
    let extra = vec![("HERALD_WEBHOOK_ENDPOINT_CONCURRENCY", CONCURRENCY.to_string())];
    let (_d, _boot, key, receiver) = start_with(backend, extra).await;
    let proxy = CutProxy::start(([127, 0, 0, 1], receiver.port).into()).await;
    let labels: Vec<String> = (0..ENDPOINTS).map(|i| format!("pooled{i}")).collect();
    for label in &labels {
        let created = key
            .add_webhook(&WebhookEndpointIn {
                url: format!("{}/e/{label}", proxy.url()),
                event_types: Some(vec![EventType::NotificationDelivered]),
                ..Default::default()
            })
            .await
            .unwrap();
        receiver.set_secrets(label, &[&created.secret]);
    }
    let sends = (0..EVENTS).map(|i| {
        let key = &key;
        async move {
            let mut message = NotificationIn::new(Channel::InApp, format!("user_{i}"), "Hello");
            message.title = Some("Hi".into());
            key.send_notification(&message, None).await.unwrap();
        }
    });
    futures_util::StreamExt::collect::<Vec<()>>(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter(sends),
        32,
    ))
    .await;
    for label in &labels {
        receiver.wait_for(label, EVENTS, WAIT).await;
    }
    let opened = proxy.connections();
    assert!(
        opened <= 2 * ENDPOINTS * CONCURRENCY,
        "{opened} connections opened for {} deliveries to {ENDPOINTS} endpoints of one host, at most {CONCURRENCY} at once each",
        ENDPOINTS * EVENTS
    );
}
both_backends!(
    endpoints_of_one_host_reuse_their_connections_on_each_backend,
    endpoints_of_one_host_reuse_their_connections
);
