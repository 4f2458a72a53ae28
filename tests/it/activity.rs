//! The activity feed on both backends, against the real SMTP server.

use std::time::Duration;

use herald_common::{
    ErrorCode, Problem, Scope,
    api::{
        activity::{ActivityItem, BulkRetryIn},
        notifications::{Channel, NotificationIn},
        otp::OtpSendIn,
    },
    client::{ActivityQuery, Client},
};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::SmtpSink};

async fn daemon(backend: Backend, smtp: &SmtpSink) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "50ms,50ms".into())],
    )
    .await
}

fn problem_of(error: herald_common::client::ClientError) -> Problem {
    error.problem().cloned().unwrap_or_else(|| panic!("expected a problem, got {error}"))
}

fn query(status: Option<&str>) -> ActivityQuery {
    ActivityQuery { status: status.map(Into::into), limit: Some(100), ..Default::default() }
}

async fn item_in(operator: &Client, id: &str, status: &str) -> ActivityItem {
    eventually(&format!("{id} to be {status}"), Duration::from_secs(15), || async {
        let detail = operator.activity_item(id).await.ok()?;
        (detail.item.status == status).then_some(detail.item)
    })
    .await
}

async fn failures_and_manual_retry(backend: Backend) {
    let smtp = SmtpSink::start().await;
    smtp.set_rule("gone@example.com", "550");
    smtp.set_rule("busy@example.com", "451");
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator =
        d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead, Scope::ActivityRetry]));
    let gone = key
        .send_notification(&NotificationIn::new(Channel::Email, "gone@example.com", "x"), None)
        .await
        .unwrap();
    let busy = key
        .send_notification(&NotificationIn::new(Channel::Email, "busy@example.com", "y"), None)
        .await
        .unwrap();

    let failed = item_in(&operator, gone.notification_id.as_str(), "failed").await;
    assert!(!failed.retryable, "a 550 is permanent");
    let reason = failed.failure_reason.clone().unwrap();
    assert!(reason.contains("550") && reason.contains("User unknown"), "{reason}");
    assert_eq!(failed.recipient_masked, "g**e@example.com");

    let failed = item_in(&operator, busy.notification_id.as_str(), "failed").await;
    assert!(failed.retryable, "a 451 that never cleared is retryable");
    assert_eq!(failed.retry_count, 0);
    let detail = operator.activity_item(busy.notification_id.as_str()).await.unwrap();
    assert_eq!(detail.attempts.len(), 3, "retried automatically before failing");

    let p = problem_of(operator.retry(gone.notification_id.as_str()).await.unwrap_err());
    assert_eq!((p.status, p.code), (409, ErrorCode::NotRetryable));

    // The peer recovers; an operator retries; the message goes out.
    smtp.clear_rules();
    let queued = operator.retry(busy.notification_id.as_str()).await.unwrap();
    assert_eq!(
        (queued.status.as_str(), queued.transaction_id.as_str()),
        ("retry_queued", busy.notification_id.as_str())
    );
    let sent = item_in(&operator, busy.notification_id.as_str(), "sent").await;
    assert_eq!(sent.retry_count, 1);
    assert!(sent.failure_reason.is_none());
    let detail = operator.activity_item(busy.notification_id.as_str()).await.unwrap();
    assert_eq!(detail.attempts.last().unwrap().outcome, "sent");
    assert_eq!(detail.attempts.len(), 4, "the history keeps the failed attempts");
    assert_eq!(smtp.wait_for(1, Duration::from_secs(5)).await[0].rcpt_tos, ["busy@example.com"]);
}
both_backends!(failures_and_manual_retry_on_each_backend, failures_and_manual_retry);

async fn concurrent_retries_queue_once(backend: Backend) {
    let smtp = SmtpSink::start().await;
    smtp.set_rule("flaky@example.com", "451");
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let id = key
        .send_notification(&NotificationIn::new(Channel::Email, "flaky@example.com", "z"), None)
        .await
        .unwrap()
        .notification_id;
    item_in(&key, id.as_str(), "failed").await;
    let retries: Vec<_> = (0..10)
        .map(|_| {
            let (key, id) = (key.clone(), id.to_string());
            tokio::spawn(async move { key.retry(&id).await.map(|_| ()).map_err(problem_of) })
        })
        .collect();
    let mut accepted = 0;
    for retry in retries {
        match retry.await.unwrap() {
            Ok(()) => accepted += 1,
            Err(p) => assert_eq!(p.code, ErrorCode::NotRetryable),
        }
    }
    assert_eq!(accepted, 1, "ten concurrent retries, exactly one 202");
}
both_backends!(concurrent_retries_queue_once_on_each_backend, concurrent_retries_queue_once);

async fn feed_filters_pages_and_masks(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let second_app =
        herald_daemon::admin::create_application(&d.state.store, &d.state.secret, &boot.tenant_id, "Mobile")
            .await
            .unwrap();
    let second_key =
        herald_daemon::admin::create_key(&d.state.store, &second_app.application_id, &Scope::ALL)
            .await
            .unwrap();
    let second = d.with_token(&second_key.api_key);

    let in_app = |recipient: &str| {
        let mut n = NotificationIn::new(Channel::InApp, recipient, "hello");
        n.title = Some("Hi".into());
        n
    };
    for recipient in ["a", "ab", "user-42"] {
        key.send_notification(&in_app(recipient), None).await.unwrap();
    }
    for email in ["x@example.com", "xy@example.com", "longname@example.com"] {
        key.send_notification(&NotificationIn::new(Channel::Email, email, "m"), None).await.unwrap();
    }
    second.send_notification(&NotificationIn::new(Channel::Sms, "+14155550100", "s"), None).await.unwrap();
    let otp = key.send_otp(&OtpSendIn::new(Channel::Email, "otp@example.com"), None).await.unwrap();
    for i in 0..38 {
        second.send_notification(&in_app(&format!("bulk-{i}")), None).await.unwrap();
    }
    eventually("emails sent", Duration::from_secs(10), || async {
        (smtp.messages().len() >= 4).then_some(())
    })
    .await;

    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead]));
    let all = operator.activity(&query(None)).await.unwrap();
    assert_eq!(all.total_count, 46, "notifications and OTP of every application of the tenant");
    let created: Vec<_> = all.items.iter().map(|i| (i.created_at, i.transaction_id.clone())).collect();
    let mut sorted = created.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(created, sorted, "newest first");
    let masked: Vec<&str> = all.items.iter().map(|i| i.recipient_masked.as_str()).collect();
    for expected in [
        "*",
        "a*",
        "u*****2",
        "*@example.com",
        "x*@example.com",
        "l******e@example.com",
        "+14*******00",
        "o*p@example.com",
    ] {
        assert!(masked.contains(&expected), "{expected} in {masked:?}");
    }
    let text = serde_json::to_string(&all).unwrap();
    for raw in ["longname@", "user-42", "+14155550100", "otp@example"] {
        assert!(!text.contains(raw), "a raw recipient ({raw}) in the activity response");
    }
    let names: std::collections::HashSet<_> = all.items.iter().map(|i| i.application_name.as_str()).collect();
    assert_eq!(names, ["Test", "Mobile"].into_iter().collect());

    let otp_item = all.items.iter().find(|i| i.transaction_id == otp.transaction_id.as_str()).unwrap();
    assert_eq!((otp_item.status.as_str(), otp_item.retryable), ("sent", false));
    d.state.clock.advance(Duration::from_secs(301));
    let expired = operator.activity(&query(Some("expired"))).await.unwrap();
    assert_eq!(
        expired.items.iter().map(|i| i.transaction_id.as_str()).collect::<Vec<_>>(),
        [otp.transaction_id.as_str()]
    );

    let by_channel =
        operator.activity(&ActivityQuery { channel: Some("sms".into()), ..query(None) }).await.unwrap();
    assert_eq!(by_channel.total_count, 1);
    let by_app = operator
        .activity(&ActivityQuery {
            application_id: Some(second_app.application_id.to_string()),
            ..query(None)
        })
        .await
        .unwrap();
    assert_eq!(by_app.total_count, 39);
    let delivered = operator.activity(&query(Some("delivered"))).await.unwrap();
    assert_eq!(delivered.total_count, 41);
    let future = operator
        .activity(&ActivityQuery { from: Some("2999-01-01T00:00:00Z".into()), ..query(None) })
        .await
        .unwrap();
    assert_eq!(future.total_count, 0);
    let past = operator
        .activity(&ActivityQuery { to: Some("2000-01-01T00:00:00Z".into()), ..query(None) })
        .await
        .unwrap();
    assert_eq!(past.total_count, 0);

    // Pages of 20: 20, 20, 6, then nothing; the count is exact on every page.
    let mut seen = Vec::new();
    for (page, expected) in [(1, 20), (2, 20), (3, 6), (4, 0)] {
        let list =
            operator.activity(&ActivityQuery { page: Some(page), ..Default::default() }).await.unwrap();
        assert_eq!((list.page, list.limit, list.total_count, list.items.len()), (page, 20, 46, expected));
        seen.extend(list.items.into_iter().map(|i| i.transaction_id));
    }
    let unique: std::collections::HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), 46, "pages neither overlap nor skip");

    for (params, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("page=0", "page"),
        ("page=x", "page"),
        ("status=lost", "status"),
        ("channel=fax", "channel"),
        ("from=yesterday", "from"),
        ("colour=red", "colour"),
    ] {
        let response = operator
            .request(reqwest::Method::GET, &format!("/api/v1/activity?{params}"))
            .send()
            .await
            .unwrap();
        let p: Problem = response.json().await.unwrap();
        assert_eq!(p.status, 422, "{params}");
        assert!(p.errors.iter().any(|e| e.field == field), "{params}: {:?}", p.errors);
    }
}
both_backends!(feed_filters_pages_and_masks_on_each_backend, feed_filters_pages_and_masks);

#[tokio::test]
async fn scopes_and_tenants_are_enforced() {
    let smtp = SmtpSink::start().await;
    smtp.set_rule("retry@example.com", "451");
    let d = daemon(Backend::Sqlite, &smtp).await;
    let a = d.bootstrap().await;
    let b = d.bootstrap().await;
    let key_a = d.with_token(&a.api_key);
    let id = key_a
        .send_notification(&NotificationIn::new(Channel::Email, "retry@example.com", "r"), None)
        .await
        .unwrap()
        .notification_id;
    item_in(&key_a, id.as_str(), "failed").await;

    let reader = d.with_token(&d.idp.operator_token(&a.tenant_id, &[Scope::ActivityRead]));
    let p = problem_of(reader.retry(id.as_str()).await.unwrap_err());
    assert_eq!((p.status, p.scope.as_deref()), (403, Some("activity:retry")));
    let nobody = d.with_token(&d.idp.operator_token(&a.tenant_id, &[Scope::ActivityRetry]));
    let p = problem_of(nobody.activity(&ActivityQuery::default()).await.unwrap_err());
    assert_eq!((p.status, p.scope.as_deref()), (403, Some("activity:read")));

    let other = d.with_token(&d.idp.operator_token(&b.tenant_id, &Scope::ALL));
    assert_eq!(problem_of(other.activity_item(id.as_str()).await.unwrap_err()).status, 404);
    assert_eq!(problem_of(other.retry(id.as_str()).await.unwrap_err()).status, 404);
    assert_eq!(other.activity(&ActivityQuery::default()).await.unwrap().total_count, 0);
    assert_eq!(problem_of(key_a.retry("notif_nope").await.unwrap_err()).status, 404);

    let otp = key_a.send_otp(&OtpSendIn::new(Channel::Sms, "+14155550100"), None).await.unwrap();
    let p = problem_of(key_a.retry(otp.transaction_id.as_str()).await.unwrap_err());
    assert_eq!(p.code, ErrorCode::NotRetryable, "OTP codes are never retried");
    let detail = key_a.activity_item(otp.transaction_id.as_str()).await.unwrap();
    assert_eq!((detail.item.channel, detail.failed_verifications), (Channel::Sms, Some(0)));

    // Bulk retry by filter.
    smtp.clear_rules();
    let bulk =
        key_a.retry_all(&BulkRetryIn { channel: Some(Channel::Email), ..Default::default() }).await.unwrap();
    assert_eq!(bulk.count, 1);
    item_in(&key_a, id.as_str(), "sent").await;
    assert_eq!(key_a.retry_all(&BulkRetryIn::default()).await.unwrap().count, 0);
}

async fn next_for(client: &mut herald_tests::sse::SseClient, id: &str) -> herald_tests::sse::SseEvent {
    loop {
        let event = client.next(Duration::from_secs(10)).await.expect("an activity event");
        if event.data["transaction_id"] == id {
            return event;
        }
    }
}

/// The operators' live feed: items as they appear and change, replay after Last-Event-ID.
async fn operator_stream(backend: Backend) {
    use herald_tests::sse::SseClient;
    let smtp = SmtpSink::start().await;
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator = d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead]);
    let mut feed = SseClient::connect_to(&d.url, "/api/v1/activity/stream", &operator, None).await.unwrap();
    assert_eq!(feed.next(Duration::from_secs(5)).await.unwrap().event, "connection.ready");

    let sent = key
        .send_notification(&NotificationIn::new(Channel::Email, "feed@example.com", "f"), None)
        .await
        .unwrap();
    let id = sent.notification_id.as_str();
    let first = next_for(&mut feed, id).await;
    assert!(first.event == "activity.created" || first.data["status"] == "sent", "{first:?}");
    assert_eq!(first.data["recipient_masked"], "f**d@example.com", "masked in the stream too");
    let mut last = first.clone();
    while last.data["status"] != "sent" {
        last = next_for(&mut feed, id).await;
        assert_eq!(last.event, "activity.updated");
    }

    // Resuming after the first event replays the later state, and nothing before it.
    let mut resumed =
        SseClient::connect_to(&d.url, "/api/v1/activity/stream", &operator, first.id.as_deref())
            .await
            .unwrap();
    assert_eq!(resumed.next(Duration::from_secs(5)).await.unwrap().event, "connection.ready");
    if first.data["status"] != "sent" {
        let replayed = next_for(&mut resumed, id).await;
        assert_eq!(
            (replayed.event.as_str(), replayed.data["status"].as_str()),
            ("activity.updated", Some("sent"))
        );
    }
    let otp = key
        .send_otp(&herald_common::api::otp::OtpSendIn::new(Channel::Sms, "+14155550100"), None)
        .await
        .unwrap();
    let seen = next_for(&mut resumed, otp.transaction_id.as_str()).await;
    assert_eq!(seen.data["recipient_masked"], "+14*******00");

    let bad = SseClient::connect_to(&d.url, "/api/v1/activity/stream", &operator, Some("nonsense"))
        .await
        .err()
        .unwrap();
    assert_eq!(bad.status, 422);
    let user = key.user_token("u", None).await.unwrap().token;
    let refused = SseClient::connect_to(&d.url, "/api/v1/activity/stream", &user, None).await.err().unwrap();
    assert_eq!(refused.status, 401, "user tokens are not operator credentials");
}
both_backends!(operator_stream_on_each_backend, operator_stream);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_stream_across_daemons() {
    use herald_tests::sse::SseClient;
    if !Backend::Postgres.available() {
        return;
    }
    let a = TestDaemon::start(Backend::Postgres).await;
    let b = a.start_sharing(Vec::new()).await;
    let boot = a.bootstrap().await;
    let operator = a.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead]);
    let mut feed = SseClient::connect_to(&a.url, "/api/v1/activity/stream", &operator, None).await.unwrap();
    assert_eq!(feed.next(Duration::from_secs(5)).await.unwrap().event, "connection.ready");
    let mut n = NotificationIn::new(Channel::InApp, "someone", "via B");
    n.title = Some("t".into());
    let sent = b.with_token(&boot.api_key).send_notification(&n, None).await.unwrap();
    let event = next_for(&mut feed, sent.notification_id.as_str()).await;
    assert_eq!(
        (event.event.as_str(), event.data["status"].as_str()),
        ("activity.created", Some("delivered"))
    );
}
