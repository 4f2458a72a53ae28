//! Dispatch against real peers on loopback: an SMTP server (aiosmtpd), and HTTP servers shaped
//! like Twilio's and Meta's APIs. Store behaviour runs on both backends.

use std::time::Duration;

use herald_common::{
    ErrorCode, Scope,
    api::notifications::{Channel, DeliveryStatus, NotificationIn, NotificationOut},
    client::{ActivityQuery, Client},
};
use herald_tests::{
    Backend, TestDaemon, both_backends, eventually,
    peers::{SmtpSink, TwilioServer, WhatsAppServer, twilio, whatsapp},
};
use serde_json::json;

const FAST_RETRIES: &str = "100ms,200ms";

async fn daemon_with_peers(
    backend: Backend,
    smtp: &SmtpSink,
    twilio: &TwilioServer,
    meta: &WhatsAppServer,
) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_SMTP_URL", smtp.url()),
            ("HERALD_SMS_PROVIDER", "twilio".into()),
            ("HERALD_TWILIO_BASE_URL", twilio.base_url()),
            ("HERALD_TWILIO_ACCOUNT_SID", "AC123".into()),
            ("HERALD_TWILIO_AUTH_TOKEN", "twilio-token".into()),
            ("HERALD_SMS_FROM", "+15550000000".into()),
            ("HERALD_WHATSAPP_PROVIDER", "meta".into()),
            ("HERALD_WHATSAPP_BASE_URL", meta.base_url()),
            ("HERALD_WHATSAPP_PHONE_NUMBER_ID", "1234567890".into()),
            ("HERALD_WHATSAPP_TOKEN", "meta-token".into()),
            ("HERALD_RETRY_SCHEDULE", FAST_RETRIES.into()),
        ],
    )
    .await
}

struct Peers {
    smtp: SmtpSink,
    twilio: TwilioServer,
    meta: WhatsAppServer,
}

async fn peers() -> Peers {
    Peers {
        smtp: SmtpSink::start().await,
        twilio: TwilioServer::start("AC123", "twilio-token").await,
        meta: WhatsAppServer::start("1234567890", "meta-token").await,
    }
}

/// Waits until the notification leaves `queued`/`sending` and returns it.
async fn settled(client: &Client, id: &str) -> NotificationOut {
    eventually(&format!("{id} to settle"), Duration::from_secs(15), || async {
        let n = client
            .notification(&herald_common::ids::NotificationId::parse(id).unwrap())
            .await
            .expect("get notification");
        matches!(n.delivery_status, DeliveryStatus::Sent | DeliveryStatus::Delivered | DeliveryStatus::Failed)
            .then_some(n)
    })
    .await
}

async fn email_over_smtp(backend: Backend) {
    let p = peers().await;
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let mut n = NotificationIn::new(Channel::Email, "ann@example.com", "Hello Ann");
    n.subject = Some("Welcome".into());
    n.html_body = Some("<p>Hello <b>Ann</b></p>".into());
    let accepted = key.send_notification(&n, None).await.unwrap();
    assert_eq!((accepted.status.as_str(), accepted.delivery_status), ("accepted", DeliveryStatus::Queued));
    let mail = p.smtp.wait_for(1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(mail.rcpt_tos, vec!["ann@example.com"]);
    let message_id = format!("<{}@localhost>", accepted.notification_id);
    assert_eq!(
        mail.message_id.as_deref(),
        Some(message_id.as_str()),
        "Message-ID derives from the notification id"
    );
    assert!(mail.raw.contains("Subject: Welcome"));
    assert!(mail.raw.contains("multipart/alternative"), "text and HTML parts");
    assert!(mail.raw.contains("text/html"));
    let out = settled(&key, accepted.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent);
    assert_eq!(out.recipient_masked, "a*n@example.com");
    assert_eq!(out.attempts.len(), 1);
    assert_eq!(out.attempts[0].outcome, "sent");
    assert_eq!(out.attempts[0].provider_message_id.as_deref(), Some(message_id.as_str()));
}
both_backends!(email_over_smtp_on_each_backend, email_over_smtp);

async fn smtp_failures_are_classified(backend: Backend) {
    let p = peers().await;
    p.smtp.set_rule("gone@example.com", "550");
    p.smtp.set_rule("busy@example.com", "451");
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let gone = key
        .send_notification(&NotificationIn::new(Channel::Email, "gone@example.com", "x"), None)
        .await
        .unwrap();
    let busy = key
        .send_notification(&NotificationIn::new(Channel::Email, "busy@example.com", "x"), None)
        .await
        .unwrap();

    let out = settled(&key, gone.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Failed);
    assert!(!out.retryable, "a 550 is permanent");
    assert_eq!(out.attempts.len(), 1, "permanent failures are not retried");
    let reason = out.failure_reason.unwrap();
    assert!(reason.contains("550") && reason.contains("User unknown"), "the SMTP text is kept: {reason}");
    assert!(!reason.contains("gone@example.com") && reason.contains("g**e@example.com"), "masked: {reason}");
    assert!(!out.attempts[0].error.as_deref().unwrap().contains("gone@"), "attempt errors are masked too");

    let out = settled(&key, busy.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Failed);
    assert!(out.retryable, "a 451 that never clears fails retryable");
    assert_eq!(out.attempts.len(), 3, "the first attempt and one per delay in {FAST_RETRIES}");
    assert!(out.attempts.iter().all(|a| a.outcome == "transient_failure"));
    assert!(out.failure_reason.unwrap().contains("451"));
    let gaps: Vec<i64> =
        out.attempts.windows(2).map(|w| w[1].started_at.millis() - w[0].finished_at.millis()).collect();
    assert!(gaps[0] >= 75 && gaps[1] >= 150, "the schedule (with ±20 % jitter) is followed: {gaps:?}");
    assert!(p.smtp.messages().is_empty());
}
both_backends!(smtp_failures_are_classified_on_each_backend, smtp_failures_are_classified);

async fn sms_through_twilio(backend: Backend) {
    let p = peers().await;
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let ok = key
        .send_notification(&NotificationIn::new(Channel::Sms, "+14155550100", "Your order shipped"), None)
        .await
        .unwrap();
    let invalid = key
        .send_notification(&NotificationIn::new(Channel::Sms, twilio::INVALID_NUMBER, "x"), None)
        .await
        .unwrap();
    p.twilio.fail_next("+14155550111", 2);
    let flaky =
        key.send_notification(&NotificationIn::new(Channel::Sms, "+14155550111", "y"), None).await.unwrap();

    let out = settled(&key, ok.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent);
    let sid = out.attempts[0].provider_message_id.clone().unwrap();
    assert!(sid.starts_with("SM"), "{sid}");
    let sent = p.twilio.messages().into_iter().find(|m| m.sid.as_deref() == Some(sid.as_str())).unwrap();
    assert_eq!(
        (sent.to.as_str(), sent.from.as_str(), sent.body.as_str()),
        ("+14155550100", "+15550000000", "Your order shipped")
    );

    let out = settled(&key, invalid.notification_id.as_str()).await;
    assert_eq!((out.delivery_status, out.retryable), (DeliveryStatus::Failed, false));
    let reason = out.failure_reason.unwrap();
    assert!(reason.contains("21211"), "Twilio's code is kept: {reason}");
    assert!(!reason.contains(twilio::INVALID_NUMBER) && !reason.contains("15005550001"), "masked: {reason}");

    let out = settled(&key, flaky.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent, "transient 503s are retried");
    assert_eq!(out.attempts.len(), 3);
}
both_backends!(sms_through_twilio_on_each_backend, sms_through_twilio);

#[tokio::test]
async fn provider_retry_after_is_honoured() {
    let p = peers().await;
    let d = daemon_with_peers(Backend::Sqlite, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let limited = key
        .send_notification(&NotificationIn::new(Channel::Sms, twilio::RATE_LIMITED_NUMBER, "x"), None)
        .await
        .unwrap();
    let out = settled(&key, limited.notification_id.as_str()).await;
    assert_eq!((out.delivery_status, out.retryable), (DeliveryStatus::Failed, true));
    let gap = out.attempts[1].started_at.millis() - out.attempts[0].finished_at.millis();
    assert!(gap >= 950, "Retry-After: 1 outweighs the 100 ms schedule (gap {gap} ms)");
}

async fn whatsapp_through_cloud_api(backend: Backend) {
    let p = peers().await;
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let ok = key
        .send_notification(&NotificationIn::new(Channel::Whatsapp, "+4915112345678", "Hallo"), None)
        .await
        .unwrap();
    let bad = key
        .send_notification(
            &NotificationIn::new(Channel::Whatsapp, format!("+{}", whatsapp::UNDELIVERABLE_NUMBER), "x"),
            None,
        )
        .await
        .unwrap();
    let out = settled(&key, ok.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent);
    assert!(out.attempts[0].provider_message_id.as_deref().unwrap().starts_with("wamid."));
    let sent = p.meta.messages().into_iter().find(|m| m.to == "4915112345678").unwrap();
    assert_eq!(sent.body, "Hallo");
    let out = settled(&key, bad.notification_id.as_str()).await;
    assert_eq!((out.delivery_status, out.retryable), (DeliveryStatus::Failed, false));
    assert!(out.failure_reason.unwrap().contains("131026"));
}
both_backends!(whatsapp_through_cloud_api_on_each_backend, whatsapp_through_cloud_api);

async fn in_app_is_delivered_on_acceptance(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let mut n = NotificationIn::new(Channel::InApp, "user-42", "You have a new follower");
    n.title = Some("New follower".into());
    n.data = Some(
        json!({"action_url": "https://example.com/u/7", "category": "social"}).as_object().cloned().unwrap(),
    );
    let accepted = key.send_notification(&n, None).await.unwrap();
    assert_eq!(accepted.delivery_status, DeliveryStatus::Queued, "spec 2.2: queued on acceptance");
    let out = key.notification(&accepted.notification_id).await.unwrap();
    assert_eq!(out.delivery_status, DeliveryStatus::Delivered, "in the inbox as soon as the 202 is out");
    assert_eq!(out.attempts[0].outcome, "delivered");
    assert!(out.attempts[0].provider_message_id.as_deref().unwrap().starts_with("inapp_"));
    assert_eq!(out.recipient_masked, "u*****2");
}
both_backends!(in_app_is_delivered_on_acceptance_on_each_backend, in_app_is_delivered_on_acceptance);

async fn idempotency_keys(backend: Backend) {
    let p = peers().await;
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let body = json!({"channel": "email", "recipient": "idem@example.com", "body": "once"});
    let post = |idem: &'static str, body: serde_json::Value| {
        key.request(reqwest::Method::POST, "/api/v1/notifications")
            .header("Idempotency-Key", idem)
            .json(&body)
            .send()
    };
    let first = post("order-1", body.clone()).await.unwrap();
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: serde_json::Value = first.json().await.unwrap();

    // Same key, same body (keys in another order): the first response, nothing sent again.
    let reordered = json!({"body": "once", "recipient": "idem@example.com", "channel": "email"});
    let again = post("order-1", reordered).await.unwrap();
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<serde_json::Value>().await.unwrap(), first);

    // Same key, another body: 422.
    let other =
        post("order-1", json!({"channel": "email", "recipient": "idem@example.com", "body": "twice"}))
            .await
            .unwrap();
    assert_eq!(other.status(), 422);
    assert_eq!(other.json::<serde_json::Value>().await.unwrap()["code"], "idempotency_key_reused");

    // Sixteen at once with one key: one notification, one delivery.
    let concurrent = json!({"channel": "email", "recipient": "race@example.com", "body": "race"});
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let request = key
            .request(reqwest::Method::POST, "/api/v1/notifications")
            .header("Idempotency-Key", "race-1")
            .json(&concurrent);
        tasks.push(tokio::spawn(async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<serde_json::Value>().await.unwrap())
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert!(
            status == 202 || (status == 409 && body["code"] == "idempotency_in_progress"),
            "{status} {body}"
        );
        if status == 202 {
            ids.insert(body["notification_id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(ids.len(), 1, "one notification for one key");
    let id = ids.into_iter().next().unwrap();
    settled(&key, &id).await;
    // Nothing of the tenant is still queued or being sent, so had the race made a second
    // notification, it would have reached the SMTP peer by now (one is `sent` only once the
    // peer has taken it).
    let feed = eventually("every notification to settle", Duration::from_secs(15), || async {
        let feed = key.activity(&ActivityQuery { limit: Some(100), ..Default::default() }).await.unwrap();
        feed.items.iter().all(|i| !["queued", "sending"].contains(&i.status.as_str())).then_some(feed)
    })
    .await;
    let race: Vec<_> = feed.items.iter().filter(|i| i.recipient_masked == "r**e@example.com").collect();
    assert_eq!(race.len(), 1, "one notification for one key: {race:?}");
    let received: Vec<_> =
        p.smtp.messages().into_iter().filter(|m| m.rcpt_tos == ["race@example.com"]).collect();
    assert_eq!(received.len(), 1, "one delivery for one key");

    let bad = post("", body).await.unwrap();
    assert_eq!(bad.status(), 422, "an empty key is invalid");
}
both_backends!(idempotency_keys_on_each_backend, idempotency_keys);

#[tokio::test]
async fn invalid_requests_name_their_fields() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let cases = [
        (json!({"channel": "fax", "recipient": "x", "body": "b"}), "channel"),
        (json!({"channel": "email", "recipient": "not-an-address", "body": "b"}), "recipient"),
        (
            json!({"channel": "email", "recipient": format!("{}@example.com", "a".repeat(65)), "body": "b"}),
            "recipient",
        ),
        (json!({"channel": "sms", "recipient": "4155550100", "body": "b"}), "recipient"),
        (json!({"channel": "sms", "recipient": "+1234567890123456", "body": "b"}), "recipient"),
        (json!({"channel": "whatsapp", "recipient": "+0155550100", "body": "b"}), "recipient"),
        (json!({"channel": "in_app", "recipient": "has space", "title": "t", "body": "b"}), "recipient"),
        (json!({"channel": "email", "recipient": "a@example.com"}), "body"),
        (
            json!({"channel": "sms", "recipient": "+14155550100", "body": "b", "html_body": "<p>"}),
            "html_body",
        ),
        (json!({"channel": "sms", "recipient": "+14155550100", "body": "x".repeat(1601)}), "body"),
        (json!({"channel": "in_app", "recipient": "u1", "body": "b"}), "title"),
        (json!({"channel": "email", "recipient": "a@example.com", "body": "b", "title": "t"}), "title"),
        (
            json!({"channel": "in_app", "recipient": "u1", "title": "t", "body": "b", "data": {"action_url": "javascript:alert(1)"}}),
            "data.action_url",
        ),
        (
            json!({"channel": "in_app", "recipient": "u1", "title": "t", "body": "b", "data": {"avatar_url": 5}}),
            "data.avatar_url",
        ),
        (json!({"channel": "email", "recipient": "a@example.com", "body": "b", "data": {}}), "data"),
        (
            json!({"channel": "email", "recipient": "a@example.com", "body": "b", "subject": "Hi\r\nBcc: x@evil.test"}),
            "subject",
        ),
        (
            json!({"channel": "email", "recipient": "a@example.com", "body": "b", "template_data": {"a": 1}}),
            "template_data",
        ),
        (
            json!({"channel": "email", "recipient": "a@example.com", "body": "b", "template_id": "tpl_nope"}),
            "template_id",
        ),
        (json!({"channel": "email", "recipient": "a@example.com", "body": "b", "colour": "red"}), "colour"),
    ];
    for (body, field) in cases {
        let response =
            key.request(reqwest::Method::POST, "/api/v1/notifications").json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let problem: herald_common::Problem = response.json().await.unwrap();
        assert_eq!((status, problem.code), (422, ErrorCode::ValidationFailed), "{body}");
        assert!(
            problem.errors.iter().any(|e| e.field == field),
            "{body}: expected `{field}` in {:?}",
            problem.errors
        );
    }
    let response = key
        .request(reqwest::Method::POST, "/api/v1/notifications")
        .json(&json!({"channel": "email", "recipient": "a@example.com", "body": "b", "from": "ceo@unverified.example"}))
        .send()
        .await
        .unwrap();
    let problem: herald_common::Problem = response.json().await.unwrap();
    assert_eq!((problem.status, problem.code), (422, ErrorCode::DomainNotVerified));

    let boot = d.bootstrap().await;
    let narrow = herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &[Scope::OtpSend])
        .await
        .unwrap();
    let err = d
        .with_token(&narrow.api_key)
        .send_notification(&NotificationIn::new(Channel::InApp, "u", "b"), None)
        .await
        .unwrap_err();
    assert_eq!(err.problem().unwrap().scope.as_deref(), Some("notifications:send"));
}

#[tokio::test]
async fn without_smtp_email_goes_to_the_outbox() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let accepted = key
        .send_notification(
            &NotificationIn::new(Channel::Email, "dev@example.com", "Look in the outbox"),
            None,
        )
        .await
        .unwrap();
    let out = settled(&key, accepted.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent);
    let file = d.dir.path().join("data/outbox").join(format!("{}.eml", accepted.notification_id));
    let eml = std::fs::read_to_string(&file).expect("an .eml file in the outbox");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600,
        "outbox files may hold codes"
    );
    assert!(eml.contains("Look in the outbox") && eml.contains("To: dev@example.com"));
    let sms = key
        .send_notification(&NotificationIn::new(Channel::Sms, "+14155550100", "logged"), None)
        .await
        .unwrap();
    let out = settled(&key, sms.notification_id.as_str()).await;
    assert_eq!(out.delivery_status, DeliveryStatus::Sent, "the log provider accepts");
}

async fn templates_render_into_dispatch(backend: Backend) {
    let p = peers().await;
    let d = daemon_with_peers(backend, &p.smtp, &p.twilio, &p.meta).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let template = key
        .create_template(&herald_common::api::templates::TemplateIn {
            name: "welcome".into(),
            subject: Some("Welcome, {{ name }}".into()),
            body: Some("Hi {{ name }}, your code is {{ code }}.".into()),
            html_body: Some("<p>Hi {{ name }}</p>".into()),
        })
        .await
        .unwrap();
    let id = template.template_id.clone();
    assert_eq!(key.templates().await.unwrap().templates.len(), 1);

    let mut n = NotificationIn::new(Channel::Email, "tpl@example.com", "");
    n.body = None;
    n.template_id = Some(template.template_id.clone());
    n.template_data = Some(json!({"name": "<Ann>", "code": "1234"}).as_object().cloned().unwrap());
    key.send_notification(&n, None).await.unwrap();
    let mail = p.smtp.wait_for(1, Duration::from_secs(10)).await.remove(0);
    assert!(mail.raw.contains("Subject: Welcome, <Ann>"), "{}", mail.raw);
    assert!(mail.raw.contains("Hi <Ann>, your code is 1234."));
    assert!(mail.raw.contains("&lt;Ann&gt;"), "values are escaped in HTML");

    n.template_data = Some(json!({"name": "Bo"}).as_object().cloned().unwrap());
    let err = key.send_notification(&n, None).await.unwrap_err();
    let p2 = err.problem().unwrap();
    assert_eq!(p2.errors[0].field, "template_data");
    assert!(p2.errors[0].message.contains("code"), "names the missing variable");

    // Exactly the spec's shape (§2.1 makes `body` required): the template's parts win.
    let post = |body: serde_json::Value| {
        key.request(reqwest::Method::POST, "/api/v1/notifications")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
    };
    let spec_shape = json!({
        "channel": "email", "recipient": "spec@example.com", "subject": "Mine", "body": "Plain fallback",
        "template_id": id, "template_data": {"name": "Bo", "code": "9"},
    });
    assert_eq!(post(spec_shape).await.unwrap().status(), 202);
    let mail = p.smtp.wait_for(2, Duration::from_secs(10)).await.remove(1);
    assert!(mail.raw.contains("Subject: Welcome, Bo"), "the template's subject: {}", mail.raw);
    assert!(mail.raw.contains("Hi Bo, your code is 9."), "the template's body: {}", mail.raw);
    assert!(!mail.raw.contains("Plain fallback") && !mail.raw.contains("Mine"), "{}", mail.raw);
    // A template without a body: the request's body is the fallback, used as it is.
    let subject_only = key
        .create_template(&herald_common::api::templates::TemplateIn {
            name: "subject only".into(),
            subject: Some("Only {{ name }}".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let spec_shape = json!({
        "channel": "email", "recipient": "spec@example.com", "body": "Plain {{ fallback }}",
        "template_id": subject_only.template_id, "template_data": {"name": "Bo"},
    });
    assert_eq!(post(spec_shape).await.unwrap().status(), 202);
    let mail = p.smtp.wait_for(3, Duration::from_secs(10)).await.remove(2);
    assert!(mail.raw.contains("Subject: Only Bo"), "{}", mail.raw);
    assert!(mail.raw.contains("Plain {{ fallback }}"), "the request's body, not rendered: {}", mail.raw);

    let bad = key
        .create_template(&herald_common::api::templates::TemplateIn {
            name: "x".into(),
            body: Some("{% if %}".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.problem().unwrap().errors[0].field, "body");

    let mut replaced = herald_common::api::templates::TemplateIn {
        name: "welcome2".into(),
        body: Some("Bye".into()),
        ..Default::default()
    };
    assert_eq!(key.replace_template(&id, &replaced).await.unwrap().name, "welcome2");
    let other = d.with_token(&d.bootstrap().await.api_key);
    assert_eq!(
        other.template(&id).await.unwrap_err().problem().unwrap().status,
        404,
        "another tenant's template"
    );
    replaced.name = "hijack".into();
    assert_eq!(other.replace_template(&id, &replaced).await.unwrap_err().problem().unwrap().status, 404);
    assert_eq!(other.delete_template(&id).await.unwrap_err().problem().unwrap().status, 404);
    key.delete_template(&id).await.unwrap();
    assert_eq!(key.template(&id).await.unwrap_err().problem().unwrap().status, 404);
}
both_backends!(templates_render_into_dispatch_on_each_backend, templates_render_into_dispatch);

#[tokio::test]
async fn notifications_are_visible_only_to_their_owners() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let a = d.bootstrap().await;
    let b = d.bootstrap().await;
    let key_a = d.with_token(&a.api_key);
    let sent =
        key_a.send_notification(&NotificationIn::new(Channel::Sms, "+14155550100", "x"), None).await.unwrap();
    let id = &sent.notification_id;
    assert_eq!(d.with_token(&b.api_key).notification(id).await.unwrap_err().problem().unwrap().status, 404);
    let operator_b = d.with_token(&d.idp.operator_token(&b.tenant_id, &[Scope::NotificationsRead]));
    assert_eq!(operator_b.notification(id).await.unwrap_err().problem().unwrap().status, 404);
    let operator_a = d.with_token(&d.idp.operator_token(&a.tenant_id, &[Scope::NotificationsRead]));
    let seen = operator_a.notification(id).await.unwrap();
    assert_eq!(seen.recipient_masked, "+14*******00", "never the raw number");
}
