//! Twilio's status callbacks end to end, on both backends: the daemon sends SMS through the
//! Twilio peer with a `StatusCallback`, and the callbacks posted back are signed by Twilio's own
//! helper library (PyPI `twilio`), so the signature check is held to Twilio's scheme, not to a
//! copy of Herald's code. What a callback says reaches the activity feed, its history, the
//! operators' stream, the retries and `/metrics`; what an unsigned caller sends changes nothing.

use std::time::Duration;

use herald_common::{
    ErrorCode, Scope,
    api::{
        activity::{ActivityDetail, ActivityItem},
        notifications::{Channel, DeliveryStatus, NotificationIn, ReceiptProvider},
    },
    client::{Client, ConnectionState, FollowOptions, Followed, Follower},
    ids::NotificationId,
    stream::StreamEvent,
};
use herald_tests::{
    Backend, TestDaemon, both_backends, eventually,
    peers::{TwilioServer, TwilioSigner},
};
use reqwest::StatusCode;

const AUTH_TOKEN: &str = "twilio-token";
/// Where Twilio reaches Herald: a proxy's address, with a path the proxy strips.
const PUBLIC_URL: &str = "https://herald.example.test/notify";

async fn daemon(backend: Backend, twilio: &TwilioServer) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        [twilio.daemon_env(), vec![("HERALD_PUBLIC_URL", PUBLIC_URL.into())]].concat(),
    )
    .await
}

/// How a test callback is signed.
enum Signed<'a> {
    /// By Twilio's library, with the auth token, over `url` and the fields sent.
    Over(&'a str),
    /// By Twilio's library, over `url` and these fields rather than those sent.
    OtherFields(&'a str, &'a [(&'a str, &'a str)]),
    /// By Twilio's library with another account's token.
    OtherToken(&'a str),
    Unsigned,
}

struct Twilio {
    signer: TwilioSigner,
    /// The `StatusCallback` the daemon gave the peer.
    callback_url: String,
}

impl Twilio {
    /// Posts a status callback as Twilio does: the fields as a form, signed as `signed` says.
    async fn post(&self, d: &TestDaemon, fields: &[(&str, &str)], signed: Signed<'_>) -> reqwest::Response {
        let path = self.callback_url.strip_prefix(PUBLIC_URL).expect("the callback URL is the public URL's");
        let signature = match signed {
            Signed::Over(url) => Some(self.signer.sign(AUTH_TOKEN, url, fields).await),
            Signed::OtherFields(url, other) => Some(self.signer.sign(AUTH_TOKEN, url, other).await),
            Signed::OtherToken(url) => Some(self.signer.sign("another-token", url, fields).await),
            Signed::Unsigned => None,
        };
        let mut request = d.client.request(reqwest::Method::POST, path).form(fields);
        if let Some(signature) = signature {
            request = request.header("X-Twilio-Signature", signature);
        }
        request.send().await.unwrap()
    }

    /// A callback as Twilio sends one for `sid`, signed over the callback URL; answered 204.
    async fn status(&self, d: &TestDaemon, sid: &str, status: &str, error_code: Option<&str>) {
        let mut fields = vec![
            ("MessageSid", sid),
            ("SmsSid", sid),
            ("MessageStatus", status),
            ("SmsStatus", status),
            ("AccountSid", "AC123"),
            ("ApiVersion", "2010-04-01"),
            ("From", "+15550000000"),
            ("To", "+14155550100"),
        ];
        if let Some(code) = error_code {
            fields.push(("ErrorCode", code));
        }
        let response = self.post(d, &fields, Signed::Over(&self.callback_url)).await;
        assert_eq!(
            response.status(),
            StatusCode::NO_CONTENT,
            "{status} for {sid}: {}",
            response.text().await.unwrap()
        );
    }
}

/// Sends an SMS to `to` and waits until Twilio has accepted it; returns it with its `MessageSid`.
async fn sent_sms(key: &Client, to: &str) -> (NotificationId, String) {
    let id = key
        .send_notification(&NotificationIn::new(Channel::Sms, to, "Your order shipped"), None)
        .await
        .unwrap()
        .notification_id;
    let sid = latest_sid(key, &id, 1).await;
    (id, sid)
}

/// The `MessageSid` of the notification's `attempts`-th accepted attempt, once there is one.
async fn latest_sid(key: &Client, id: &NotificationId, attempts: usize) -> String {
    eventually(&format!("{id} to be sent {attempts} time(s)"), Duration::from_secs(15), || async {
        let out = key.notification(id).await.ok()?;
        let sent: Vec<_> = out.attempts.iter().filter_map(|a| a.provider_message_id.clone()).collect();
        (out.delivery_status == DeliveryStatus::Sent && sent.len() >= attempts)
            .then(|| sent[attempts - 1].clone())
    })
    .await
}

async fn detail(operator: &Client, id: &NotificationId) -> ActivityDetail {
    operator.activity_item(id).await.unwrap()
}

/// Reads the operators' stream until an `activity.updated` of `id` with `status`.
async fn updated(live: &mut Follower, id: &NotificationId, status: &str) -> ActivityItem {
    let wanted = |item: &ActivityItem| item.transaction_id == id.as_str() && item.status == status;
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match live.next().await {
                Some(Followed::Event { event: StreamEvent::ActivityUpdated(item), .. }) if wanted(&item) => {
                    return item;
                }
                Some(_) => {}
                None => panic!("the stream ended"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no activity.updated of {id} as {status} on the operators' stream"))
}

/// The value of `herald_receipts_total{provider="twilio", outcome}`, 0 without one.
async fn counted(d: &TestDaemon, outcome: &str) -> f64 {
    let text = d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let label = format!("outcome=\"{outcome}\"");
    text.lines()
        .find(|l| {
            l.starts_with("herald_receipts_total{") && l.contains("provider=\"twilio\"") && l.contains(&label)
        })
        .map_or(0.0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

async fn twilio_status_callbacks(backend: Backend) {
    let peer = TwilioServer::start("AC123", AUTH_TOKEN).await;
    let d = daemon(backend, &peer).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &Scope::ALL));
    let mut live = operator.follow_activity(FollowOptions::default());
    while live.next().await != Some(Followed::State(ConnectionState::Live)) {}

    // Every SMS names the callback URL, made from the public URL.
    let (reached, reached_sid) = sent_sms(&key, "+14155550100").await;
    let sent = peer.messages().into_iter().find(|m| m.sid.as_deref() == Some(reached_sid.as_str())).unwrap();
    assert_eq!(sent.status_callback, format!("{PUBLIC_URL}/api/v1/receipts/twilio"));
    let twilio = Twilio { signer: TwilioSigner::start().await, callback_url: sent.status_callback };

    // `delivered` moves the item, and is kept in its history.
    twilio.status(&d, &reached_sid, "sent", None).await;
    twilio.status(&d, &reached_sid, "delivered", None).await;
    let item = updated(&mut live, &reached, "delivered").await;
    assert!(!item.retryable && item.failure_reason.is_none(), "{item:?}");
    let out = detail(&operator, &reached).await;
    assert_eq!(out.item.status, "delivered");
    let history: Vec<(ReceiptProvider, &str, DeliveryStatus)> =
        out.receipts.iter().map(|r| (r.provider, r.provider_status.as_str(), r.status)).collect();
    assert_eq!(
        history,
        [
            (ReceiptProvider::Twilio, "sent", DeliveryStatus::Sent),
            (ReceiptProvider::Twilio, "delivered", DeliveryStatus::Delivered)
        ]
    );
    // A later `undelivered` is kept, and does not move it down.
    twilio.status(&d, &reached_sid, "undelivered", Some("30003")).await;
    let out = detail(&operator, &reached).await;
    assert_eq!((out.item.status.as_str(), out.receipts.len()), ("delivered", 3));
    assert_eq!(out.receipts[2].error_code.as_deref(), Some("30003"));

    // An unreachable handset: `undelivered`, retryable, the reason named without the number.
    let (unreachable, first_sid) = sent_sms(&key, "+14155550111").await;
    twilio.status(&d, &first_sid, "undelivered", Some("30003")).await;
    let item = updated(&mut live, &unreachable, "undelivered").await;
    assert!(item.retryable, "{item:?}");
    assert_eq!(item.failure_reason.as_deref(), Some("30003: Unreachable destination handset"));
    let out = detail(&operator, &unreachable).await;
    let receipt = &out.receipts[0];
    assert_eq!(
        (receipt.status, receipt.error_code.as_deref(), receipt.detail.as_deref()),
        (DeliveryStatus::Undelivered, Some("30003"), Some("30003: Unreachable destination handset"))
    );
    let shown = serde_json::to_string(&out).unwrap();
    assert!(!shown.contains("14155550111") && !shown.contains("5550111"), "no number: {shown}");
    // A retry sends it again through Twilio; the new message's receipt lands on the same item.
    operator.retry(&unreachable).await.unwrap();
    let second_sid = latest_sid(&key, &unreachable, 2).await;
    assert_ne!(second_sid, first_sid);
    let to_it: Vec<_> = peer.messages().into_iter().filter(|m| m.to == "+14155550111").collect();
    assert_eq!(to_it.len(), 2, "the peer saw the message twice");
    assert!(to_it.iter().all(|m| m.status_callback == twilio.callback_url));
    twilio.status(&d, &second_sid, "delivered", None).await;
    updated(&mut live, &unreachable, "delivered").await;
    let out = detail(&operator, &unreachable).await;
    assert_eq!((out.item.status.as_str(), out.item.retry_count, out.item.retryable), ("delivered", 1, false));
    let words: Vec<&str> = out.receipts.iter().map(|r| r.provider_status.as_str()).collect();
    assert_eq!(words, ["undelivered", "delivered"]);

    // A landline: undelivered for good; Twilio's signature of the URL with :443 is taken too.
    let (landline, landline_sid) = sent_sms(&key, "+14155550122").await;
    let with_port = twilio.callback_url.replace("herald.example.test/", "herald.example.test:443/");
    let fields =
        [("MessageSid", landline_sid.as_str()), ("MessageStatus", "undelivered"), ("ErrorCode", "30006")];
    let response = twilio.post(&d, &fields, Signed::Over(&with_port)).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let item = updated(&mut live, &landline, "undelivered").await;
    assert_eq!(
        (item.retryable, item.failure_reason.as_deref()),
        (false, Some("30006: Landline or unreachable carrier"))
    );
    let refused = operator.retry(&landline).await.unwrap_err();
    assert_eq!(refused.problem().map(|p| p.code), Some(ErrorCode::NotRetryable));

    // Unsigned or wrongly signed: 403 invalid_signature, nothing changes.
    let before = detail(&operator, &reached).await;
    let read = [("MessageSid", reached_sid.as_str()), ("MessageStatus", "read")];
    let delivered = [("MessageSid", reached_sid.as_str()), ("MessageStatus", "delivered")];
    let loopback = format!("{}/api/v1/receipts/twilio", d.url);
    let refused_before = counted(&d, "invalid_signature").await;
    for (what, signed) in [
        ("no signature", Signed::Unsigned),
        ("another account's token", Signed::OtherToken(&twilio.callback_url)),
        ("other fields", Signed::OtherFields(&twilio.callback_url, &delivered)),
        ("another URL", Signed::Over(&loopback)),
    ] {
        let response = twilio.post(&d, &read, signed).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{what}");
        let problem: herald_common::Problem = response.json().await.unwrap();
        assert_eq!(problem.code, ErrorCode::InvalidSignature, "{what}");
    }
    assert!(counted(&d, "invalid_signature").await >= refused_before + 4.0);
    let after = detail(&operator, &reached).await;
    assert_eq!((after.item.status.as_str(), after.receipts.len()), ("delivered", before.receipts.len()));
    assert_eq!(after.updated_at, before.updated_at);

    // Signed but malformed: 400 invalid_receipt, nothing changes.
    let response = twilio.post(&d, &[("MessageStatus", "read")], Signed::Over(&twilio.callback_url)).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let problem: herald_common::Problem = response.json().await.unwrap();
    assert_eq!(problem.code, ErrorCode::InvalidReceipt);
    let signature = twilio.signer.sign(AUTH_TOKEN, &twilio.callback_url, &[]).await;
    let response = d
        .client
        .request(reqwest::Method::POST, "/api/v1/receipts/twilio")
        .header("X-Twilio-Signature", signature)
        .json(&serde_json::json!({"MessageSid": reached_sid, "MessageStatus": "read"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST, "a body that is not a form");
    assert_eq!(detail(&operator, &reached).await.receipts.len(), before.receipts.len());

    // A message Herald does not know: 204, and nothing written.
    let items = [&reached, &unreachable, &landline];
    let mut histories = Vec::new();
    for id in items {
        histories.push(d.state.store.receipts_of(id).await.unwrap().len());
    }
    let ghost = "SM00000000000000000000000000000000";
    twilio.status(&d, ghost, "delivered", None).await;
    assert_eq!(d.state.store.notification_of_provider_message(ghost).await.unwrap(), None);
    for (id, before) in items.into_iter().zip(histories) {
        assert_eq!(d.state.store.receipts_of(id).await.unwrap().len(), before, "{id}");
    }

    // Everything was counted (at least this test's own: delivered, undelivered, delivered after
    // the retry, the landline; the counters are the process's, so other tests add to them).
    for (outcome, at_least) in [("changed", 4.0), ("recorded", 2.0), ("unknown", 1.0), ("malformed", 2.0)] {
        let value = counted(&d, outcome).await;
        assert!(
            value >= at_least,
            "herald_receipts_total{{provider=\"twilio\",outcome=\"{outcome}\"}} = {value}"
        );
    }
    d.stop().await;
}
both_backends!(twilio_status_callbacks_on_each_backend, twilio_status_callbacks);

/// Without Twilio as the SMS provider there is no key to check a signature with: every callback
/// is refused, even one signed with some token. (Nothing is stored: one backend is enough.)
#[tokio::test]
async fn callbacks_are_refused_without_twilio() {
    let d = TestDaemon::start_with(Backend::Sqlite, vec![("HERALD_PUBLIC_URL", PUBLIC_URL.into())]).await;
    let twilio = Twilio {
        signer: TwilioSigner::start().await,
        callback_url: format!("{PUBLIC_URL}/api/v1/receipts/twilio"),
    };
    let fields = [("MessageSid", "SM00000000000000000000000000000001"), ("MessageStatus", "delivered")];
    let response = twilio.post(&d, &fields, Signed::Over(&twilio.callback_url)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let problem: herald_common::Problem = response.json().await.unwrap();
    assert_eq!(problem.code, ErrorCode::InvalidSignature);
    d.stop().await;
}
