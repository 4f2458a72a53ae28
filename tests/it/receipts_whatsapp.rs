//! WhatsApp Cloud API receipts end to end (CONTRACT §8), on both backends: the daemon sends
//! through the Cloud API peer (`peers::whatsapp`), keeps the `wamid` it got, and takes Meta's
//! webhooks, shaped like the examples of Meta's webhook reference and signed as Meta signs them
//! (`X-Hub-Signature-256`, HMAC-SHA256 of the raw body with the app secret, computed here; the
//! daemon's unit tests check its HMAC against a vector from Python's `hmac` and `openssl`).

use std::time::Duration;

use herald_common::{
    ErrorCode, Problem, Scope,
    api::{
        activity::{ActivityItem, ActivityStatus},
        notifications::{Channel, DeliveryStatus, NotificationIn, NotificationOut, ReceiptProvider},
    },
    client::{Client, ConnectionState, FollowOptions, Followed, Follower},
    ids::NotificationId,
    stream::StreamEvent,
};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::WhatsAppServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const APP_SECRET: &str = "meta-app-secret-for-tests";
const VERIFY_TOKEN: &str = "meta-verify-token-for-tests";
const PATH: &str = "/api/v1/receipts/whatsapp";

async fn daemon(backend: Backend, meta: &WhatsAppServer) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_WHATSAPP_PROVIDER", "meta".into()),
            ("HERALD_WHATSAPP_BASE_URL", meta.base_url()),
            ("HERALD_WHATSAPP_PHONE_NUMBER_ID", "1234567890".into()),
            ("HERALD_WHATSAPP_TOKEN", "meta-token".into()),
            ("HERALD_WHATSAPP_APP_SECRET", APP_SECRET.into()),
            ("HERALD_WHATSAPP_VERIFY_TOKEN", VERIFY_TOKEN.into()),
        ],
    )
    .await
}

/// `sha256=` and the hex HMAC-SHA256 of `body` keyed with `secret`, as Meta sends it.
fn sign(secret: &str, body: &[u8]) -> String {
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = aws_lc_rs::hmac::sign(&key, body);
    format!("sha256={}", tag.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A messages webhook holding `statuses`, as Meta's reference shows one.
fn webhook(statuses: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "object": "whatsapp_business_account",
        "entry": [{
            "id": "102290129340398",
            "changes": [{
                "value": {
                    "messaging_product": "whatsapp",
                    "metadata": {"display_phone_number": "15550783881", "phone_number_id": "1234567890"},
                    "statuses": statuses,
                },
                "field": "messages",
            }],
        }],
    }))
    .unwrap()
}

fn now_seconds() -> String {
    (herald_common::Timestamp::now().millis() / 1000).to_string()
}

/// One status of a message to `to` (E.164), with the conversation and pricing Meta adds.
fn status(wamid: &str, word: &str, to: &str) -> Value {
    json!({
        "id": wamid,
        "status": word,
        "timestamp": now_seconds(),
        "recipient_id": to.trim_start_matches('+'),
        "conversation": {"id": "4c8b8d2a1e0f4b7c9d3e2f1a0b9c8d7e", "origin": {"type": "service"}},
        "pricing": {"billable": true, "pricing_model": "PMP", "category": "service"},
    })
}

/// A `failed` status with one error, as Meta's reference shows it.
fn failed(wamid: &str, to: &str, code: u32, title: &str, details: &str) -> Value {
    json!({
        "id": wamid,
        "status": "failed",
        "timestamp": now_seconds(),
        "recipient_id": to.trim_start_matches('+'),
        "errors": [{
            "code": code,
            "title": title,
            "message": title,
            "error_data": {"details": details},
            "href": "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/",
        }],
    })
}

async fn post(d: &TestDaemon, body: Vec<u8>, signature: Option<String>) -> reqwest::Response {
    let mut request =
        d.client.request(Method::POST, PATH).header("content-type", "application/json").body(body);
    if let Some(signature) = signature {
        request = request.header("x-hub-signature-256", signature);
    }
    request.send().await.unwrap()
}

/// Posts `body` signed with the app secret and expects 200.
async fn deliver(d: &TestDaemon, body: Vec<u8>) {
    let signature = sign(APP_SECRET, &body);
    let response = post(d, body, Some(signature)).await;
    let status = response.status();
    assert_eq!(status, StatusCode::OK, "{}", response.text().await.unwrap_or_default());
}

const CHALLENGE: &str = "1158201444";

/// Meta's verification request, with `hub.mode` `mode` and `hub.verify_token` `token`.
async fn handshake(d: &TestDaemon, mode: &str, token: &str) -> reqwest::Response {
    let query = [("hub.mode", mode), ("hub.challenge", CHALLENGE), ("hub.verify_token", token)];
    d.client.request(Method::GET, PATH).query(&query).send().await.unwrap()
}

/// Expects 403 `invalid_signature`.
async fn refused_signature(response: reqwest::Response) {
    assert_eq!(problem(response, StatusCode::FORBIDDEN).await.code, ErrorCode::InvalidSignature);
}

async fn problem(response: reqwest::Response, status: StatusCode) -> Problem {
    assert_eq!(response.status(), status);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    response.json().await.unwrap()
}

/// Sends a WhatsApp message to `to` and waits until the Cloud API accepted it; returns its id
/// and the `wamid` the peer answered with.
async fn sent(key: &Client, meta: &WhatsAppServer, to: &str) -> (NotificationId, String) {
    let accepted = key
        .send_notification(&NotificationIn::new(Channel::Whatsapp, to, "Your table is ready"), None)
        .await
        .unwrap();
    let id = accepted.notification_id;
    let out = eventually(&format!("{id} to be sent"), Duration::from_secs(15), || async {
        let n = key.notification(&id).await.unwrap();
        (n.delivery_status == DeliveryStatus::Sent).then_some(n)
    })
    .await;
    let wamid = out.attempts[0].provider_message_id.clone().expect("the wamid is kept");
    let digits = to.trim_start_matches('+');
    let answered = meta.messages().into_iter().find(|m| m.to == digits).and_then(|m| m.id);
    assert_eq!(answered.as_deref(), Some(wamid.as_str()), "the attempt keeps messages[0].id");
    (id, wamid)
}

async fn lookup(key: &Client, id: &NotificationId) -> NotificationOut {
    key.notification(id).await.unwrap()
}

/// `herald_receipts_total{provider="whatsapp", outcome}` now (0 before the first).
async fn counted(d: &TestDaemon, outcome: &str) -> f64 {
    let text = d.client.request(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("herald_receipts_total{"))
        .filter(|l| l.contains("provider=\"whatsapp\"") && l.contains(&format!("outcome=\"{outcome}\"")))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Rows in the receipts table, read behind the daemon's back: what "nothing written" means.
async fn receipt_rows(d: &TestDaemon) -> i64 {
    d.backend.count(&d.database_url, "SELECT COUNT(*) FROM receipts").await
}

/// Reads the operators' stream until `id` is updated to `status`.
async fn updated_to(live: &mut Follower, id: &NotificationId, status: ActivityStatus) -> ActivityItem {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match tokio::time::timeout_at(deadline, live.next()).await {
            Ok(Some(Followed::Event { event: StreamEvent::ActivityUpdated(item), .. }))
                if item.transaction_id == id.as_str() && item.status == status =>
            {
                return item;
            }
            Ok(Some(_)) => {}
            other => panic!("no activity.updated to {status} for {id}: {other:?}"),
        }
    }
}

/// The receipts of one message move its item up the precedence, each kept in its history and
/// each change told on the operators' stream; a failure keeps its code and title and is
/// retryable as the code says; one payload may carry several statuses.
async fn statuses_land_on_their_items(backend: Backend) {
    let meta = WhatsAppServer::start("1234567890", "meta-token").await;
    let d = daemon(backend, &meta).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &Scope::ALL));
    let mut live = operator.follow_activity(FollowOptions::default());
    while live.next().await != Some(Followed::State(ConnectionState::Live)) {}
    let (changed, recorded, unknown) =
        (counted(&d, "changed").await, counted(&d, "recorded").await, counted(&d, "unknown").await);

    // Meta's own `sent` changes nothing but is kept; `delivered` moves the item.
    let to = "+4915112345678";
    let (id, wamid) = sent(&key, &meta, to).await;
    deliver(&d, webhook(vec![status(&wamid, "sent", to)])).await;
    assert_eq!(lookup(&key, &id).await.delivery_status, DeliveryStatus::Sent);
    deliver(&d, webhook(vec![status(&wamid, "delivered", to)])).await;
    let item = updated_to(&mut live, &id, ActivityStatus::Delivered).await;
    assert!(item.failure_reason.is_none() && !item.retryable);
    assert_eq!(lookup(&key, &id).await.delivery_status, DeliveryStatus::Delivered);

    // Another of the recipient's devices failed: kept in the history, the item stays delivered.
    deliver(
        &d,
        webhook(vec![failed(&wamid, to, 131026, "Message undeliverable", "Unable to deliver message.")]),
    )
    .await;
    let out = lookup(&key, &id).await;
    assert_eq!(
        (out.delivery_status, out.failure_reason.as_deref(), out.retryable),
        (DeliveryStatus::Delivered, None, false)
    );
    let history: Vec<(&str, DeliveryStatus, Option<&str>)> = out
        .receipts
        .iter()
        .map(|r| (r.provider_status.as_str(), r.status, r.error_code.as_deref()))
        .collect();
    assert_eq!(
        history,
        [
            ("sent", DeliveryStatus::Sent, None),
            ("delivered", DeliveryStatus::Delivered, None),
            ("failed", DeliveryStatus::Undelivered, Some("131026")),
        ]
    );
    assert!(out.receipts.iter().all(|r| r.provider == ReceiptProvider::Whatsapp));
    assert_eq!(
        out.receipts[2].detail.as_deref(),
        Some("WhatsApp error 131026: Message undeliverable (Unable to deliver message.)")
    );

    // Read outranks delivered.
    deliver(&d, webhook(vec![status(&wamid, "read", to)])).await;
    updated_to(&mut live, &id, ActivityStatus::Read).await;
    let detail = operator.activity_item(id.clone()).await.unwrap();
    assert_eq!(detail.item.status, ActivityStatus::Read);
    assert_eq!(detail.receipts.len(), 4, "the history on the activity item too");

    // A fresh message outside the 24-hour window: undelivered, with Meta's code and title, and
    // a plain retry would fail the same way.
    let outside = "+4915112345679";
    let (late, late_wamid) = sent(&key, &meta, outside).await;
    let details = "Message failed to send because more than 24 hours have passed since the customer last replied to this number.";
    deliver(&d, webhook(vec![failed(&late_wamid, outside, 131047, "Re-engagement message", details)])).await;
    let item = updated_to(&mut live, &late, ActivityStatus::Undelivered).await;
    assert!(!item.retryable, "131047 is not retryable");
    let reason = item.failure_reason.unwrap();
    assert_eq!(reason, format!("WhatsApp error 131047: Re-engagement message ({details})"));
    assert!(!reason.contains(outside.trim_start_matches('+')), "no phone number: {reason}");
    let refused = operator.retry(late.clone()).await.unwrap_err();
    assert_eq!(refused.problem().map(|p| p.code), Some(ErrorCode::NotRetryable));

    // A payload with several statuses: each one lands, and one for a message Herald never sent
    // among them is skipped.
    let (first, first_wamid) = sent(&key, &meta, "+4915112345680").await;
    let (second, second_wamid) = sent(&key, &meta, "+4915112345681").await;
    deliver(
        &d,
        webhook(vec![
            status(&first_wamid, "delivered", "+4915112345680"),
            status("wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJDQjZCMzlEQUE4OTJBMTE4RTUA", "delivered", "+16503879439"),
            status(&second_wamid, "delivered", "+4915112345681"),
            status(&second_wamid, "read", "+4915112345681"),
        ]),
    )
    .await;
    assert_eq!(lookup(&key, &first).await.delivery_status, DeliveryStatus::Delivered);
    let out = lookup(&key, &second).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Read);
    assert_eq!(out.receipts.len(), 2);

    // Counted: 6 changes (delivered, read, undelivered, delivered, delivered, read), 2 kept
    // without a change (sent, the failed after delivered), 1 unknown. Other tests of this
    // binary share the counters, so they may have grown more.
    assert!(counted(&d, "changed").await - changed >= 6.0);
    assert!(counted(&d, "recorded").await - recorded >= 2.0);
    assert!(counted(&d, "unknown").await - unknown >= 1.0);
    d.stop().await;
}
both_backends!(statuses_land_on_their_items_on_each_backend, statuses_land_on_their_items);

/// Unsigned, forged or malformed webhooks change nothing and are refused with our problems; a
/// signed webhook about nothing Herald sent is answered 200 and writes nothing; Meta's
/// verification handshake echoes the challenge only for the configured token.
async fn bad_webhooks_change_nothing(backend: Backend) {
    let meta = WhatsAppServer::start("1234567890", "meta-token").await;
    let d = daemon(backend, &meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let to = "+4915112345690";
    let (id, wamid) = sent(&key, &meta, to).await;
    let before = lookup(&key, &id).await;
    let invalid_signatures = counted(&d, "invalid_signature").await;
    let (malformed, unknown) = (counted(&d, "malformed").await, counted(&d, "unknown").await);

    let body = webhook(vec![status(&wamid, "read", to)]);
    let forged = [
        None,
        Some(sign("another-secret", &body)),
        Some(sign(APP_SECRET, b"another body")),
        Some(sign(APP_SECRET, &body).replace("sha256=", "sha1=")),
        Some(sign(APP_SECRET, &body)[..40].to_owned()),
        Some("sha256=".to_owned()),
    ];
    for signature in &forged {
        let refused = problem(post(&d, body.clone(), signature.clone()).await, StatusCode::FORBIDDEN).await;
        assert_eq!(refused.code, ErrorCode::InvalidSignature, "{signature:?}");
    }
    // Unsigned garbage is refused for its signature, before its body is read.
    let refused = problem(post(&d, b"not json".to_vec(), None).await, StatusCode::FORBIDDEN).await;
    assert_eq!(refused.code, ErrorCode::InvalidSignature);

    // Signed, but not a webhook.
    for (body, says) in [
        (b"not json".to_vec(), "not JSON"),
        (br#"{"object": "page", "entry": []}"#.to_vec(), "whatsapp_business_account"),
        (br#"{"object": "whatsapp_business_account", "entry": [{"changes": [{"value": {"statuses": [{"id": 4915112345690}]}}]}]}"#.to_vec(), "statuses[0]"),
    ] {
        let signature = sign(APP_SECRET, &body);
        let refused = problem(post(&d, body, Some(signature)).await, StatusCode::BAD_REQUEST).await;
        assert_eq!(refused.code, ErrorCode::InvalidReceipt);
        let detail = refused.detail.unwrap_or_default();
        assert!(detail.contains(says), "{detail}");
        assert!(!detail.contains("4915112345690"), "no value is quoted: {detail}");
    }

    // Signed, about a message Herald never sent, or with no statuses at all (an inbound message).
    let rows = receipt_rows(&d).await;
    deliver(
        &d,
        webhook(vec![status(
            "wamid.HBgNNDkxNTExMjM0NTY5ORUCABEYEjAwMDAwMDAwMDAwMDAwMDAwMAA=",
            "delivered",
            to,
        )]),
    )
    .await;
    let inbound = serde_json::to_vec(&json!({
        "object": "whatsapp_business_account",
        "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "1234567890"},
            "contacts": [{"profile": {"name": "Kerry Fisher"}, "wa_id": "4915112345690"}],
            "messages": [{"from": "4915112345690", "id": "wamid.inbound", "timestamp": now_seconds(),
                "type": "text", "text": {"body": "Thanks!"}}],
        }}]}],
    }))
    .unwrap();
    deliver(&d, inbound).await;
    assert_eq!(receipt_rows(&d).await, rows, "nothing written");

    let after = lookup(&key, &id).await;
    assert_eq!(after.delivery_status, DeliveryStatus::Sent);
    assert!(after.receipts.is_empty());
    assert_eq!(after.updated_at, before.updated_at);
    assert!(counted(&d, "invalid_signature").await - invalid_signatures >= (forged.len() + 1) as f64);
    assert!(counted(&d, "malformed").await - malformed >= 3.0);
    assert!(counted(&d, "unknown").await - unknown >= 1.0);

    // Meta's verification handshake.
    let answer = handshake(&d, "subscribe", VERIFY_TOKEN).await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert_eq!(answer.text().await.unwrap(), CHALLENGE);
    refused_signature(handshake(&d, "subscribe", "meta-verify-token-for-test").await).await;
    refused_signature(handshake(&d, "unsubscribe", VERIFY_TOKEN).await).await;
    refused_signature(d.client.request(Method::GET, PATH).send().await.unwrap()).await;
    d.stop().await;
}
both_backends!(bad_webhooks_change_nothing_on_each_backend, bad_webhooks_change_nothing);

/// Without an app secret and a verify token, nothing can be signed or verified: both routes
/// refuse everything, even what would be right with any key.
#[tokio::test]
async fn without_the_settings_everything_is_refused() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let body = webhook(vec![status("wamid.x", "delivered", "+4915112345678")]);
    for signature in [sign("", &body), sign(APP_SECRET, &body)] {
        refused_signature(post(&d, body.clone(), Some(signature)).await).await;
    }
    for token in ["", VERIFY_TOKEN] {
        refused_signature(handshake(&d, "subscribe", token).await).await;
    }
    d.stop().await;
}
