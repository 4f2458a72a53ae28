//! The suppression list (CONTRACT §9) on both backends: its API and scopes, the check the
//! delivery worker makes at send time (through a real SMTP relay and the Twilio peer), the
//! entries Herald adds itself (a relay's 5xx, Twilio's 21610 at send time and in a callback, an
//! inbound STOP signed by Twilio's own helper library), and OTPs refused before anything is
//! stored. Bounces and complaints adding entries are in `bounces.rs`.

use std::time::Duration;

use herald_common::{
    ErrorCode, Problem, Scope,
    api::{
        activity::{ActivityDetail, ActivityStatus},
        notifications::{Channel, NotificationIn},
        otp::OtpSendIn,
        suppressions::{Suppression, SuppressionList},
    },
    client::{ActivityQuery, Client},
    ids::NotificationId,
};
use herald_tests::{
    Backend, TestDaemon, both_backends, eventually,
    peers::{SmtpSink, TwilioServer, TwilioSigner},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const AUTH_TOKEN: &str = "twilio-token";
const PUBLIC_URL: &str = "https://herald.example.test";
const STOPPED: &str = "+15005550021";

/// A tenant's clients: its API key (every scope, as bootstrap grants) and the raw token, for
/// requests the typed client does not make.
struct Tenant {
    key: Client,
    token: String,
    operator: Client,
}

async fn tenant(d: &TestDaemon) -> Tenant {
    let boot = d.bootstrap().await;
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &Scope::ALL));
    Tenant { key: d.with_token(&boot.api_key), token: boot.api_key, operator }
}

/// A request with a raw bearer token: the status and the JSON body (`null` when empty).
pub(crate) async fn call(
    d: &TestDaemon,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().request(method, format!("{}{path}", d.url)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap() })
}

async fn add(d: &TestDaemon, t: &Tenant, body: Value) -> (StatusCode, Value) {
    call(d, &t.token, Method::POST, "/api/v1/suppressions", Some(body)).await
}

async fn list(d: &TestDaemon, t: &Tenant, query: &str) -> SuppressionList {
    let (status, body) = call(d, &t.token, Method::GET, &format!("/api/v1/suppressions{query}"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value(body).unwrap()
}

fn problem(body: Value) -> Problem {
    serde_json::from_value(body).unwrap()
}

async fn send(t: &Tenant, channel: Channel, to: &str, category: Option<&str>) -> NotificationId {
    let mut request = NotificationIn::new(channel, to, "Hello");
    if channel == Channel::Email {
        request.subject = Some("Hi".into());
    }
    request.category = category.map(str::to_owned);
    t.key.send_notification(&request, None).await.unwrap().notification_id
}

async fn settled(t: &Tenant, id: &NotificationId, status: ActivityStatus) -> ActivityDetail {
    eventually(&format!("{id} to be {status}"), Duration::from_secs(20), || async {
        let detail = t.operator.activity_item(id).await.ok()?;
        (detail.item.status == status).then_some(detail)
    })
    .await
}

/// The list's API: scopes, manual entries (the same again is 200 with the one there), bad
/// input, filters, pages, masking, other tenants' entries, lifting.
async fn suppression_api(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let t = tenant(&d).await;

    // Bootstrap keys have the scopes; default keys do not.
    let boot = d.bootstrap().await;
    let plain = herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &Scope::defaults())
        .await
        .unwrap();
    let (status, body) = call(&d, &plain.api_key, Method::GET, "/api/v1/suppressions", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(problem(body).scope.as_deref(), Some("suppressions:read"));
    let (status, body) = call(
        &d,
        &plain.api_key,
        Method::POST,
        "/api/v1/suppressions",
        Some(json!({"channel": "email", "recipient": "a@b.co"})),
    )
    .await;
    assert_eq!((status, problem(body).scope.as_deref()), (StatusCode::FORBIDDEN, Some("suppressions:write")));

    // A manual entry: 201, masked; the same again (another case, spaces) 200 with the same entry.
    let (status, body) = add(&d, &t, json!({"channel": "email", "recipient": "Ann.Smith@Example.com"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let first: Suppression = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(first.recipient_masked, "a*******h@example.com", "the normalised address, masked");
    assert_eq!(
        (first.reason.as_str(), first.category.as_deref(), first.transaction_id.as_ref()),
        ("manual", None, None)
    );
    assert!(first.suppression_id.as_str().starts_with("sup_"));
    assert!(!body.to_string().to_lowercase().contains("ann.smith"), "{body}");
    let (status, body) =
        add(&d, &t, json!({"channel": "email", "recipient": " ann.smith@example.com ", "reason": "manual"}))
            .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_value::<Suppression>(body).unwrap().suppression_id, first.suppression_id);
    // Another category, or channel, is another entry.
    let (status, _) = add(
        &d,
        &t,
        json!({"channel": "email", "recipient": "ann.smith@example.com", "category": "marketing"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = add(&d, &t, json!({"channel": "sms", "recipient": "+14155550100"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = add(&d, &t, json!({"channel": "whatsapp", "recipient": "+14155550100"})).await;
    assert_eq!(status, StatusCode::CREATED);

    // Bad input: 422 naming each field; nothing added.
    for (body, fields) in [
        (json!({"channel": "email", "recipient": "not an address"}), vec!["recipient"]),
        (json!({"channel": "sms", "recipient": "555-1234"}), vec!["recipient"]),
        (json!({"channel": "in_app", "recipient": "user-1"}), vec!["channel"]),
        (json!({"channel": "email", "recipient": "b@example.com", "category": "Big News"}), vec!["category"]),
        (json!({"channel": "email", "recipient": "b@example.com", "reason": "hard_bounce"}), vec!["reason"]),
        (
            json!({"channel": "email", "recipient": "nope", "reason": "complaint", "category": ""}),
            vec!["recipient", "category", "reason"],
        ),
    ] {
        let (status, answer) = add(&d, &t, body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let problem = problem(answer);
        assert_eq!(problem.code, ErrorCode::ValidationFailed);
        assert_eq!(problem.errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), fields, "{body}");
    }
    let (status, answer) =
        add(&d, &t, json!({"channel": "email", "recipient": "b@example.com", "typo": 1})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "unknown fields are refused: {answer}");

    // Filters and pages, newest first.
    let all = list(&d, &t, "").await;
    assert_eq!((all.total_count, all.items.len(), all.page, all.limit), (4, 4, 1, 20));
    assert!(all.items.windows(2).all(|w| w[0].created_at >= w[1].created_at));
    assert_eq!(list(&d, &t, "?channel=sms").await.total_count, 1);
    assert_eq!(list(&d, &t, "?reason=manual&channel=email").await.total_count, 2);
    assert_eq!(list(&d, &t, "?reason=complaint").await.total_count, 0);
    let by_recipient = list(&d, &t, "?recipient=ANN.SMITH%40example.com").await;
    assert_eq!(by_recipient.total_count, 2, "matched by the hash, whatever the case");
    assert_eq!(list(&d, &t, "?recipient=%2B14155550100&channel=whatsapp").await.total_count, 1);
    let page = list(&d, &t, "?limit=3&page=2").await;
    assert_eq!((page.total_count, page.items.len()), (4, 1));
    let (status, body) =
        call(&d, &t.token, Method::GET, "/api/v1/suppressions?reason=bored&limit=0&channel=fax", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let mut fields: Vec<String> = problem(body).errors.into_iter().map(|e| e.field).collect();
    fields.sort();
    assert_eq!(fields, ["channel", "limit", "reason"]);

    // The raw recipient is stored nowhere in the list.
    let raw: Vec<String> =
        sqlx_rows(&d, "SELECT recipient_key || ' ' || recipient_masked FROM suppressions").await;
    assert_eq!(raw.len(), 4);
    assert!(
        raw.iter().all(|r| !r.to_lowercase().contains("ann.smith") && !r.contains("4155550100")),
        "{raw:?}"
    );

    // Another tenant sees none of them, and cannot get or lift one.
    let other = tenant(&d).await;
    assert_eq!(list(&d, &other, "").await.total_count, 0);
    let path = format!("/api/v1/suppressions/{}", first.suppression_id);
    let (status, body) = call(&d, &other.token, Method::GET, &path, None).await;
    assert_eq!((status, problem(body).code), (StatusCode::NOT_FOUND, ErrorCode::NotFound));
    let (status, _) = call(&d, &other.token, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&d, &t.token, Method::GET, "/api/v1/suppressions/sup_nonsense", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Get, then lift: 204, then 404.
    let (status, body) = call(&d, &t.token, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_value::<Suppression>(body).unwrap(), first);
    let (status, _) = call(&d, &t.token, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&d, &t.token, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(list(&d, &t, "").await.total_count, 3);
    d.stop().await;
}
both_backends!(suppression_api_on_each_backend, suppression_api);

/// Many entries added at once are written in groups (one multi-row statement per batch): each
/// request gets its own entry, the same entry asked for twice in one burst is one entry (201 once,
/// 200 with the same id after), and two tenants' entries for one address stay apart.
async fn bulk_adds(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let (a, b) = (tenant(&d).await, tenant(&d).await);
    let requests: Vec<(&Tenant, Value)> = (0..300)
        .map(|i| {
            let t = if i % 3 == 2 { &b } else { &a };
            // Every address twice (in case and spacing), one of them for a category.
            let n = i / 2;
            let recipient =
                if i % 2 == 0 { format!("bulk{n}@example.com") } else { format!(" Bulk{n}@Example.COM ") };
            let category = (n % 5 == 0).then_some("news");
            (t, json!({"channel": "email", "recipient": recipient, "category": category}))
        })
        .collect();
    let answers =
        futures_util::future::join_all(requests.iter().map(|(t, body)| add(&d, t, body.clone()))).await;
    let mut entries = std::collections::HashMap::<(String, String, Value), (String, usize)>::new();
    for ((t, body), (status, answer)) in requests.iter().zip(&answers) {
        assert!(status == &StatusCode::CREATED || status == &StatusCode::OK, "{status} {answer}");
        let entry: Suppression = serde_json::from_value(answer.clone()).unwrap();
        let recipient = body["recipient"].as_str().unwrap().trim().to_lowercase();
        let key = (t.token.clone(), recipient, body["category"].clone());
        let seen = entries.entry(key).or_insert((entry.suppression_id.to_string(), 0));
        assert_eq!(seen.0, entry.suppression_id.as_str(), "one entry per recipient, channel and category");
        seen.1 += usize::from(*status == StatusCode::CREATED);
        assert_eq!(entry.category.as_deref(), body["category"].as_str());
    }
    assert!(entries.values().all(|(_, created)| *created == 1), "each entry created exactly once");
    let (a_count, b_count) =
        (list(&d, &a, "?limit=1").await.total_count, list(&d, &b, "?limit=1").await.total_count);
    let expected = |t: &Tenant| entries.keys().filter(|(token, _, _)| token == &t.token).count() as u64;
    assert_eq!((a_count, b_count), (expected(&a), expected(&b)));
    d.stop().await;
}
both_backends!(bulk_adds_on_each_backend, bulk_adds);

/// Rows of one text column, read straight from the daemon's database.
async fn sqlx_rows(d: &TestDaemon, sql: &'static str) -> Vec<String> {
    match d.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&d.database_url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap()
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&d.database_url).await.unwrap();
            sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap()
        }
    }
}

/// The delivery worker's check: a suppressed recipient gets nothing (the relay sees no message),
/// the item says why and is not retryable; a category's entry stops only that category; an
/// entry added while a notification waits for its next attempt stops it; lifting one resumes
/// sends; the feed filters by category and status.
async fn send_time_check(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(
        backend,
        vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "400ms,400ms".into())],
    )
    .await;
    let t = tenant(&d).await;
    let (_, body) = add(&d, &t, json!({"channel": "email", "recipient": "ann@example.com"})).await;
    let everything: Suppression = serde_json::from_value(body).unwrap();
    add(&d, &t, json!({"channel": "email", "recipient": "bob@example.com", "category": "marketing"})).await;

    // Every category, and transactional mail, to Ann: suppressed, with the reason and its day.
    let stopped = send(&t, Channel::Email, "Ann@Example.com", None).await;
    let detail = settled(&t, &stopped, ActivityStatus::Suppressed).await;
    let today = herald_common::Timestamp::now().to_string()[..10].to_owned();
    assert_eq!(
        detail.item.failure_reason.as_deref(),
        Some(format!("recipient suppressed: manual since {today}").as_str())
    );
    assert!(!detail.item.retryable);
    assert_eq!(detail.attempts.len(), 1);
    assert_eq!(detail.attempts[0].outcome.as_str(), "suppressed");
    let refused = t.operator.retry(&stopped).await.unwrap_err();
    assert_eq!(refused.problem().map(|p| p.code), Some(ErrorCode::NotRetryable));
    let lookup = t.key.notification(&stopped).await.unwrap();
    assert_eq!(lookup.delivery_status.as_str(), "suppressed");
    let marketing_to_ann = send(&t, Channel::Email, "ann@example.com", Some("marketing")).await;
    settled(&t, &marketing_to_ann, ActivityStatus::Suppressed).await;

    // Bob left marketing only: marketing is stopped; news and transactional mail are sent.
    let marketing = send(&t, Channel::Email, "bob@example.com", Some("marketing")).await;
    let news = send(&t, Channel::Email, "bob@example.com", Some("news")).await;
    let receipt = send(&t, Channel::Email, "bob@example.com", None).await;
    settled(&t, &marketing, ActivityStatus::Suppressed).await;
    let item = settled(&t, &news, ActivityStatus::Sent).await.item;
    assert_eq!(item.category.as_deref(), Some("news"));
    assert_eq!(settled(&t, &receipt, ActivityStatus::Sent).await.item.category, None);
    let delivered: Vec<Vec<String>> = smtp.messages().into_iter().map(|m| m.rcpt_tos).collect();
    assert_eq!(delivered, [vec!["bob@example.com".to_owned()], vec!["bob@example.com".to_owned()]]);

    // An entry added while a notification waits for its next attempt still applies.
    smtp.set_rule("cat@example.com", "451");
    let waiting = send(&t, Channel::Email, "cat@example.com", Some("digest.weekly")).await;
    eventually("the first attempt to fail", Duration::from_secs(10), || async {
        let detail = t.operator.activity_item(&waiting).await.ok()?;
        (!detail.attempts.is_empty()).then_some(())
    })
    .await;
    add(&d, &t, json!({"channel": "email", "recipient": "cat@example.com", "category": "digest.weekly"}))
        .await;
    smtp.clear_rules();
    let detail = settled(&t, &waiting, ActivityStatus::Suppressed).await;
    assert_eq!(detail.attempts.last().unwrap().outcome.as_str(), "suppressed");
    assert_eq!(smtp.messages().len(), 2, "the relay saw no message to Cat");

    // Lifted: Ann's mail flows again.
    let path = format!("/api/v1/suppressions/{}", everything.suppression_id);
    assert_eq!(call(&d, &t.token, Method::DELETE, &path, None).await.0, StatusCode::NO_CONTENT);
    let resumed = send(&t, Channel::Email, "ann@example.com", None).await;
    settled(&t, &resumed, ActivityStatus::Sent).await;

    // The feed filters by category (and status), and refuses a bad category.
    let query = |category: &str, status: Option<ActivityStatus>| ActivityQuery {
        category: Some(category.to_owned()),
        status,
        limit: Some(100),
        ..Default::default()
    };
    let marketing_items = t.operator.activity(&query("marketing", None)).await.unwrap();
    assert_eq!(marketing_items.total_count, 2);
    assert!(marketing_items.items.iter().all(|i| i.category.as_deref() == Some("marketing")));
    let suppressed =
        t.operator.activity(&query("marketing", Some(ActivityStatus::Suppressed))).await.unwrap();
    assert_eq!(suppressed.total_count, 2);
    let all_suppressed = t
        .operator
        .activity(&ActivityQuery { status: Some(ActivityStatus::Suppressed), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(all_suppressed.total_count, 4);
    let bad = t.operator.activity(&query("Not A Category", None)).await.unwrap_err();
    assert_eq!(bad.problem().map(|p| p.code), Some(ErrorCode::ValidationFailed));

    // A dispatch's category is checked; in_app takes `data.category`.
    let mut bad = NotificationIn::new(Channel::Email, "dan@example.com", "x");
    bad.category = Some("Marketing!".into());
    let err = t.key.send_notification(&bad, None).await.unwrap_err();
    assert_eq!(err.problem().unwrap().errors[0].field, "category");
    let mut in_app = NotificationIn::new(Channel::InApp, "user-1", "x");
    in_app.title = Some("t".into());
    in_app.data = json!({"category": "social"}).as_object().cloned();
    let id = t.key.send_notification(&in_app, None).await.unwrap().notification_id;
    assert_eq!(settled(&t, &id, ActivityStatus::Delivered).await.item.category.as_deref(), Some("social"));
    d.stop().await;
}
both_backends!(send_time_check_on_each_backend, send_time_check);

/// Entries Herald adds itself: the relay refusing a recipient with 550 5.1.1 (a hard bounce),
/// Twilio refusing a number with 21610 and a status callback saying 21610 (carrier opt-outs),
/// each pointing at its notification; a refusal that is the sender's problem adds none.
async fn automatic_entries(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let twilio = TwilioServer::start("AC123", AUTH_TOKEN).await;
    let d = TestDaemon::start_with(
        backend,
        [
            vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_PUBLIC_URL", PUBLIC_URL.into())],
            twilio.daemon_env(),
        ]
        .concat(),
    )
    .await;
    let t = tenant(&d).await;

    // The relay: 550 5.1.1 user unknown.
    smtp.set_rule("gone@example.com", "550");
    let refused = send(&t, Channel::Email, "gone@example.com", Some("news")).await;
    let detail = settled(&t, &refused, ActivityStatus::Failed).await;
    assert!(!detail.item.retryable);
    // Twilio at send time: 21610.
    let stopped = send(&t, Channel::Sms, STOPPED, None).await;
    let detail = settled(&t, &stopped, ActivityStatus::Failed).await;
    assert!(detail.item.failure_reason.unwrap().contains("21610"));

    // A status callback with 21610, for a message Twilio first accepted.
    let accepted = send(&t, Channel::Sms, "+14155550177", None).await;
    let sid = eventually("the SID", Duration::from_secs(15), || async {
        t.key.notification(&accepted).await.ok()?.attempts.iter().find_map(|a| a.provider_message_id.clone())
    })
    .await;
    let signer = TwilioSigner::start().await;
    let url = format!("{PUBLIC_URL}/api/v1/receipts/twilio");
    let fields = [("MessageSid", sid.as_str()), ("MessageStatus", "undelivered"), ("ErrorCode", "21610")];
    let signature = signer.sign(AUTH_TOKEN, &url, &fields).await;
    let response = d
        .client
        .request(Method::POST, "/api/v1/receipts/twilio")
        .header("X-Twilio-Signature", signature)
        .form(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    settled(&t, &accepted, ActivityStatus::Undelivered).await;

    let entries = eventually("three entries", Duration::from_secs(10), || async {
        let list = list(&d, &t, "").await;
        (list.total_count == 3).then_some(list.items)
    })
    .await;
    let mut found: Vec<(String, String, String, Option<String>)> = entries
        .iter()
        .map(|e| {
            let cause = e.transaction_id.as_ref().unwrap().as_str().to_owned();
            (e.reason.to_string(), e.channel.to_string(), cause, e.category.clone())
        })
        .collect();
    found.sort();
    let mut wanted = vec![
        ("carrier_opt_out".to_owned(), "sms".to_owned(), stopped.to_string(), None),
        ("carrier_opt_out".to_owned(), "sms".to_owned(), accepted.to_string(), None),
        ("hard_bounce".to_owned(), "email".to_owned(), refused.to_string(), None),
    ];
    wanted.sort();
    assert_eq!(found, wanted, "every category; each points at its cause");

    // The next sends to them stop at Herald.
    let sms_before = twilio.messages().len();
    for (channel, to) in
        [(Channel::Email, "gone@example.com"), (Channel::Sms, STOPPED), (Channel::Sms, "+14155550177")]
    {
        let id = send(&t, channel, to, None).await;
        settled(&t, &id, ActivityStatus::Suppressed).await;
    }
    assert_eq!(twilio.messages().len(), sms_before, "Twilio was not called");
    assert!(smtp.messages().is_empty());
    d.stop().await;
}
both_backends!(automatic_entries_on_each_backend, automatic_entries);

/// OTPs are transactional: an entry for every category refuses one at once (422
/// recipient_suppressed), before anything is sent or stored; an entry for one category does not.
async fn otp_to_suppressed(backend: Backend) {
    let twilio = TwilioServer::start("AC123", AUTH_TOKEN).await;
    let d = TestDaemon::start_with(backend, twilio.daemon_env()).await;
    let t = tenant(&d).await;
    add(&d, &t, json!({"channel": "sms", "recipient": "+14155550101"})).await;
    add(&d, &t, json!({"channel": "sms", "recipient": "+14155550102", "category": "marketing"})).await;

    let err = t.key.send_otp(&OtpSendIn::new(Channel::Sms, "+14155550101"), Some("otp-1")).await.unwrap_err();
    let problem = err.problem().unwrap();
    assert_eq!((problem.status, problem.code), (422, ErrorCode::RecipientSuppressed));
    let detail = problem.detail.clone().unwrap();
    assert!(
        detail.contains("recipient suppressed: manual since") && !detail.contains("4155550101"),
        "{detail}"
    );
    // Nothing sent, nothing stored: no transaction, and the idempotency key is not taken.
    assert!(twilio.messages().is_empty());
    let feed = t.operator.activity(&ActivityQuery::default()).await.unwrap();
    assert_eq!(feed.total_count, 0);
    let again =
        t.key.send_otp(&OtpSendIn::new(Channel::Sms, "+14155550101"), Some("otp-1")).await.unwrap_err();
    assert_eq!(again.problem().unwrap().code, ErrorCode::RecipientSuppressed);

    // A category's entry does not stop an OTP.
    t.key.send_otp(&OtpSendIn::new(Channel::Sms, "+14155550102"), None).await.unwrap();
    assert_eq!(twilio.messages().len(), 1);

    // Twilio refusing the code with 21610: 502, and the number is suppressed from then on,
    // pointing at the OTP transaction.
    let err = t.key.send_otp(&OtpSendIn::new(Channel::Sms, STOPPED), None).await.unwrap_err();
    assert_eq!(err.problem().unwrap().code, ErrorCode::DeliveryFailed);
    let entries = list(&d, &t, "?reason=carrier_opt_out").await.items;
    assert_eq!(entries.len(), 1);
    assert!(entries[0].transaction_id.as_ref().unwrap().as_str().starts_with("otp_"));
    let err = t.key.send_otp(&OtpSendIn::new(Channel::Sms, STOPPED), None).await.unwrap_err();
    assert_eq!(err.problem().unwrap().code, ErrorCode::RecipientSuppressed);
    assert_eq!(twilio.messages().len(), 2, "the second was not sent");
    d.stop().await;
}
both_backends!(otp_to_suppressed_on_each_backend, otp_to_suppressed);

/// Posts an incoming SMS as Twilio does, signed by Twilio's helper library (or not).
async fn inbound(d: &TestDaemon, signer: Option<&TwilioSigner>, from: &str, body: &str) -> reqwest::Response {
    let fields = [
        ("MessageSid", "SM0000000000000000000000000000beef"),
        ("AccountSid", "AC123"),
        ("From", from),
        ("To", "+15550000000"),
        ("Body", body),
        ("NumMedia", "0"),
    ];
    let mut request = d.client.request(Method::POST, "/api/v1/receipts/twilio/inbound").form(&fields);
    if let Some(signer) = signer {
        let url = format!("{PUBLIC_URL}/api/v1/receipts/twilio/inbound");
        request = request.header("X-Twilio-Signature", signer.sign(AUTH_TOKEN, &url, &fields).await);
    }
    request.send().await.unwrap()
}

/// An inbound STOP adds a carrier opt-out in the tenants that texted the number (not in
/// others), whatever its case; START lifts it; other text, and unsigned requests, change nothing.
async fn inbound_stop_and_start(backend: Backend) {
    let twilio = TwilioServer::start("AC123", AUTH_TOKEN).await;
    let d = TestDaemon::start_with(
        backend,
        [twilio.daemon_env(), vec![("HERALD_PUBLIC_URL", PUBLIC_URL.into())]].concat(),
    )
    .await;
    let (t, bystander) = (tenant(&d).await, tenant(&d).await);
    let signer = TwilioSigner::start().await;
    let number = "+14155550123";
    let first = send(&t, Channel::Sms, number, None).await;
    settled(&t, &first, ActivityStatus::Sent).await;

    // Unsigned: 403, nothing added. Another text: 200, nothing added.
    let response = inbound(&d, None, number, "STOP").await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let response = inbound(&d, Some(&signer), number, "Stop sending me these please").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(list(&d, &t, "").await.total_count, 0);

    // STOP (any case, spaces around): a carrier opt-out, empty TwiML back.
    let response = inbound(&d, Some(&signer), number, "  stop ").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/xml"));
    assert!(response.text().await.unwrap().ends_with("<Response/>"));
    let entries = list(&d, &t, "").await.items;
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(
        (entry.reason.as_str(), entry.channel, entry.recipient_masked.as_str(), entry.category.as_ref()),
        ("carrier_opt_out", Channel::Sms, "+14*******23", None)
    );
    assert_eq!(entry.transaction_id.as_ref().map(|t| t.as_str()), Some(first.as_str()));
    assert_eq!(list(&d, &bystander, "").await.total_count, 0, "a tenant that never texted it");
    // Again (another keyword): still one.
    assert_eq!(inbound(&d, Some(&signer), number, "UNSUBSCRIBE").await.status(), StatusCode::OK);
    assert_eq!(list(&d, &t, "").await.total_count, 1);
    let stopped = send(&t, Channel::Sms, number, None).await;
    settled(&t, &stopped, ActivityStatus::Suppressed).await;

    // START lifts it: sends resume.
    assert_eq!(inbound(&d, Some(&signer), number, "Start").await.status(), StatusCode::OK);
    assert_eq!(list(&d, &t, "").await.total_count, 0);
    let resumed = send(&t, Channel::Sms, number, None).await;
    settled(&t, &resumed, ActivityStatus::Sent).await;

    // Signed, but not an E.164 sender: 400 invalid_receipt.
    let response = inbound(&d, Some(&signer), "not-a-number", "STOP").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    d.stop().await;
}
both_backends!(inbound_stop_and_start_on_each_backend, inbound_stop_and_start);
