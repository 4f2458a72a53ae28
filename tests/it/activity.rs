//! The activity feed on both backends, against the real SMTP server.

use std::time::Duration;

use herald_common::{
    ErrorCode, Problem, Scope, Timestamp,
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
    ActivityQuery { status: status.map(|s| s.parse().unwrap()), limit: Some(100), ..Default::default() }
}

async fn item_in(operator: &Client, id: &str, status: &str) -> ActivityItem {
    eventually(&format!("{id} to be {status}"), Duration::from_secs(15), || async {
        let detail =
            operator.activity_item(&herald_common::ids::TransactionId::parse(id).unwrap()).await.ok()?;
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
    let detail = operator.activity_item(&busy.notification_id).await.unwrap();
    assert_eq!(detail.attempts.len(), 3, "retried automatically before failing");

    let p = problem_of(operator.retry(&gone.notification_id).await.unwrap_err());
    assert_eq!((p.status, p.code), (409, ErrorCode::NotRetryable));

    // The peer recovers; an operator retries; the message goes out.
    smtp.clear_rules();
    let queued = operator.retry(&busy.notification_id).await.unwrap();
    assert_eq!(
        (queued.status.as_str(), queued.transaction_id.as_str()),
        ("retry_queued", busy.notification_id.as_str())
    );
    let sent = item_in(&operator, busy.notification_id.as_str(), "sent").await;
    assert_eq!(sent.retry_count, 1);
    assert!(sent.failure_reason.is_none());
    let detail = operator.activity_item(&busy.notification_id).await.unwrap();
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
            let (key, id) = (key.clone(), id.clone());
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
        operator.activity(&ActivityQuery { channel: Some(Channel::Sms), ..query(None) }).await.unwrap();
    assert_eq!(by_channel.total_count, 1);
    let by_app = operator
        .activity(&ActivityQuery { application_id: Some(second_app.application_id.clone()), ..query(None) })
        .await
        .unwrap();
    assert_eq!(by_app.total_count, 39);
    let delivered = operator.activity(&query(Some("delivered"))).await.unwrap();
    assert_eq!(delivered.total_count, 41);
    let future = operator
        .activity(&ActivityQuery {
            from: Some(Timestamp::parse("2999-01-01T00:00:00Z").unwrap()),
            ..query(None)
        })
        .await
        .unwrap();
    assert_eq!(future.total_count, 0);
    let past = operator
        .activity(&ActivityQuery {
            to: Some(Timestamp::parse("2000-01-01T00:00:00Z").unwrap()),
            ..query(None)
        })
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
    let p = problem_of(reader.retry(&id).await.unwrap_err());
    assert_eq!((p.status, p.scope.as_deref()), (403, Some("activity:retry")));
    let nobody = d.with_token(&d.idp.operator_token(&a.tenant_id, &[Scope::ActivityRetry]));
    let p = problem_of(nobody.activity(&ActivityQuery::default()).await.unwrap_err());
    assert_eq!((p.status, p.scope.as_deref()), (403, Some("activity:read")));

    let other = d.with_token(&d.idp.operator_token(&b.tenant_id, &Scope::ALL));
    assert_eq!(problem_of(other.activity_item(&id).await.unwrap_err()).status, 404);
    assert_eq!(problem_of(other.retry(&id).await.unwrap_err()).status, 404);
    assert_eq!(other.activity(&ActivityQuery::default()).await.unwrap().total_count, 0);
    let malformed = key_a.request(reqwest::Method::POST, "/api/v1/activity/notif_nope/retry");
    let malformed = Client::send::<serde_json::Value>(malformed).await;
    assert_eq!(problem_of(malformed.unwrap_err()).status, 404);

    let otp = key_a.send_otp(&OtpSendIn::new(Channel::Sms, "+14155550100"), None).await.unwrap();
    let p = problem_of(key_a.retry(&otp.transaction_id).await.unwrap_err());
    assert_eq!(p.code, ErrorCode::NotRetryable, "OTP codes are never retried");
    let detail = key_a.activity_item(&otp.transaction_id).await.unwrap();
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
    // Created, or (if it changed before the stream's poll saw it) updated with its latest state.
    assert!(
        first.event == "activity.created"
            || ["sending", "sent"].contains(&first.data["status"].as_str().unwrap()),
        "{first:?}"
    );
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
    let user = key.user_token(&herald_tests::user_id("u"), None).await.unwrap().token;
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

/// A burst larger than a page of the feed (1,200 in-app items and 100 emails that change state,
/// within the reorder window): the live feed carries every change once, in ascending order of
/// event id; and a reconnection with `Last-Event-ID` at any point of it replays exactly what came
/// after, in the same order, with nothing sent twice.
async fn bursts_replay_exactly_once_in_order(backend: Backend) {
    use herald_common::client::{ConnectionState, FollowOptions, Followed, Follower};
    use herald_common::stream::StreamEvent;
    let smtp = SmtpSink::start().await;
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead]));
    let in_app = |i: usize| {
        let mut n = NotificationIn::new(Channel::InApp, format!("user{i}"), format!("burst {i}"));
        n.title = Some("t".into());
        n
    };

    /// Reads `follower` until the event of an item that `last` accepts: the event ids seen, in
    /// order.
    async fn until(follower: &mut Follower, mut last: impl FnMut(&ActivityItem) -> bool) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut ids = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, follower.next()).await {
                Ok(Some(Followed::Event {
                    id: Some(id),
                    event: StreamEvent::ActivityCreated(item) | StreamEvent::ActivityUpdated(item),
                })) => {
                    ids.push(id);
                    if last(&item) {
                        return ids;
                    }
                }
                Ok(Some(_)) => {}
                other => panic!("after {} events: {other:?}", ids.len()),
            }
        }
    }

    // The live follower connects before the burst.
    let mut live = operator.follow_activity(FollowOptions::default());
    while live.next().await != Some(Followed::State(ConnectionState::Live)) {}
    let sends = (0..1_300).map(|i| {
        let key = key.clone();
        let n = if i % 13 == 0 {
            NotificationIn::new(Channel::Email, format!("burst{i}@example.com"), "b")
        } else {
            in_app(i)
        };
        async move {
            key.send_notification(&n, None).await.unwrap();
        }
    });
    futures_util::StreamExt::collect::<Vec<()>>(futures_util::StreamExt::buffer_unordered(
        futures_util::stream::iter(sends),
        16,
    ))
    .await;
    smtp.wait_for(100, Duration::from_secs(30)).await;
    // The emails' last changes (`sent`) are seen, so no change of the burst is still to come;
    // then the sentinel, read by a later poll than any of them, ends each read.
    let mut sent_emails = std::collections::HashSet::new();
    let mut ids = until(&mut live, |item| {
        if item.channel == Channel::Email && item.status == "sent" {
            sent_emails.insert(item.transaction_id.clone());
        }
        sent_emails.len() == 100
    })
    .await;
    let sentinel = key.send_notification(&in_app(10_000), None).await.unwrap().notification_id.to_string();
    let is_sentinel = |item: &ActivityItem| item.transaction_id == sentinel.as_str();
    ids.extend(until(&mut live, is_sentinel).await);
    assert!(ids.len() >= 1_301, "every item of the burst and the sentinel: {}", ids.len());
    let key_of = |id: &str| {
        let (ms, rest) = id.split_once('-').unwrap();
        (ms.parse::<i64>().unwrap(), rest.to_owned())
    };
    let items: std::collections::HashSet<String> = ids.iter().map(|id| key_of(id).1).collect();
    assert_eq!(items.len(), 1_301, "every item at least once");
    let keys: Vec<(i64, String)> = ids.iter().map(|id| key_of(id)).collect();
    let unique: std::collections::HashSet<_> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "no event twice");
    // Ids ascend except for changes that committed out of time order: several PostgreSQL
    // writers, or on SQLite a request held up between taking its time and queueing its write.
    // The stream's look-back catches them, so one may only arrive behind by less than that.
    let mut newest = keys[0].clone();
    for (i, key) in keys.iter().enumerate().skip(1) {
        assert!(
            key.0 > newest.0 - herald_daemon::stream::activity::REORDER_WINDOW_MS,
            "event {} arrives more than the reorder window late (newest {newest:?})",
            ids[i]
        );
        newest = newest.max(key.clone());
    }

    // Resume at many points of the burst: every item whose latest change is after the point,
    // once, at that latest state (the feed carries states, so a change superseded since is not
    // replayed), in event-id order.
    let mut latest: std::collections::HashMap<String, (i64, String)> = std::collections::HashMap::new();
    for key in &keys {
        let entry = latest.entry(key.1.clone()).or_insert_with(|| key.clone());
        *entry = entry.clone().max(key.clone());
    }
    let mut latest: Vec<(i64, String)> = latest.into_values().collect();
    latest.sort();
    for at in [0, 1, 499, 500, 777, 1_200, ids.len() - 2] {
        let point = &keys[at];
        let expected: Vec<String> =
            latest.iter().filter(|key| *key > point).map(|(ms, id)| format!("{ms}-{id}")).collect();
        let options = FollowOptions { last_event_id: Some(ids[at].clone()), ..Default::default() };
        let mut resumed = operator.follow_activity(options);
        assert_eq!(until(&mut resumed, is_sentinel).await, expected, "resumed after event {at}");
    }
    d.stop().await;
}
both_backends!(bursts_replay_exactly_once_in_order_on_each_backend, bursts_replay_exactly_once_in_order);

/// A change that commits late (stamped before changes the stream has already sent, as another
/// daemon's slower transaction would be) still reaches a live follower if it falls within the
/// reorder window, once; one stamped before the window is left to a reload of the feed.
async fn late_commits_within_the_window_arrive(backend: Backend) {
    use herald_common::client::{ConnectionState, FollowOptions, Followed};
    use herald_common::stream::StreamEvent;
    let smtp = SmtpSink::start().await;
    let d = daemon(backend, &smtp).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead]));
    let send = |user: &str| {
        let mut n = NotificationIn::new(Channel::InApp, user, "late");
        n.title = Some("t".into());
        n
    };
    // The follower resumes from a point three windows back (a dashboard reconnecting): nothing
    // stamped after it is left out for being older than the stream, so a change stamped two
    // windows before the newest is left out by the window alone, without waiting that long.
    let window = herald_daemon::stream::activity::REORDER_WINDOW_MS;
    let resume_at = herald_common::Timestamp::now().millis() - 3 * window;
    let options = FollowOptions {
        last_event_id: Some(format!("{resume_at}-{}", herald_common::ids::NotificationId::new())),
        ..Default::default()
    };
    let mut live = operator.follow_activity(options);
    while live.next().await != Some(Followed::State(ConnectionState::Live)) {}
    let mut next_id = async || loop {
        match tokio::time::timeout(Duration::from_secs(10), live.next()).await.expect("an event in time") {
            Some(Followed::Event {
                id: Some(id),
                event: StreamEvent::ActivityCreated(_) | StreamEvent::ActivityUpdated(_),
            }) => return id,
            Some(_) => {}
            None => panic!("the stream ended"),
        }
    };
    let millis_of = |id: &str| -> i64 { id.split_once('-').unwrap().0.parse().unwrap() };
    let early = key.send_notification(&send("early"), None).await.unwrap().notification_id.to_string();
    let early_id = next_id().await;
    assert!(early_id.ends_with(&early), "{early_id}");
    let early_ms = millis_of(&early_id);
    // `newer` is stamped at least 2 ms after `early`, leaving room for a change between them.
    eventually("the wall clock to pass early's stamp", Duration::from_secs(5), || async {
        (herald_common::Timestamp::now().millis() > early_ms + 1).then_some(())
    })
    .await;
    key.send_notification(&send("newer"), None).await.unwrap();
    let newer_id = next_id().await;
    let newer_ms = millis_of(&newer_id);

    // `early` changes again, stamped after its first change but (up to) half a second before
    // `newer` was sent.
    let late = (newer_ms - 500).max(early_ms + 1);
    let url = d.database_url.clone();
    backend
        .execute(&url, &[format!("UPDATE notifications SET updated_at = {late} WHERE id = '{early}'")])
        .await;
    assert_eq!(next_id().await, format!("{late}-{early}"), "the late change arrives");
    // Another, stamped before the window (and after the stream's start): not sent (a reconnect
    // or a reload shows it).
    let too_late = newer_ms - 2 * window;
    assert!(too_late > resume_at);
    backend
        .execute(&url, &[format!("UPDATE notifications SET updated_at = {too_late} WHERE id = '{early}'")])
        .await;
    // Then three sends, each once the one before has arrived. Each is read by a later poll than
    // the one before it, and a poll sends what it finds in the window after what is new; so what
    // the polls before the third's would send arrives before the third: nothing from before the
    // window, and no change twice.
    for user in ["last", "after1", "after2"] {
        let id = key.send_notification(&send(user), None).await.unwrap().notification_id.to_string();
        let next = next_id().await;
        assert!(next.ends_with(&id), "each change once, nothing from before the window: {next}");
    }
    d.stop().await;
}
both_backends!(late_commits_within_the_window_arrive_on_each_backend, late_commits_within_the_window_arrive);
