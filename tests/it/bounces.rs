//! Email bounces and complaints (CONTRACT §8) on both backends: every email goes out with its
//! signed VERP return path, and the daemon's bounce listener takes the reports mail servers
//! send there — over real SMTP, from Python's smtplib with reports the test writes, and from a
//! private Postfix that bounces a message its next hop refused.

use std::time::{Duration, Instant};

use herald_common::{
    ErrorCode, Scope,
    api::{
        activity::ActivityDetail,
        health::TaskState,
        notifications::{Channel, DeliveryStatus, NotificationIn, ReceiptProvider},
        webhooks::{EventType, WebhookEndpointIn},
    },
    client::Client,
    ids::NotificationId,
};
use herald_tests::{
    Backend, TestDaemon, both_backends, eventually,
    peers::{Postfix, SmtpSink, WebhookReceiver, mta::deliver},
    sse::SseClient,
};

const BOUNCE_DOMAIN: &str = "bounce.test";

/// A daemon sending through `smtp_url`, and the port of its bounce listener (on a port the
/// system picks, so no other test can take it first).
async fn daemon(backend: Backend, smtp_url: String) -> (TestDaemon, u16) {
    let d = TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_SMTP_URL", smtp_url),
            ("HERALD_BOUNCE_LISTEN", "127.0.0.1:0".to_owned()),
            ("HERALD_BOUNCE_DOMAIN", BOUNCE_DOMAIN.to_owned()),
            ("HERALD_RETRY_SCHEDULE", "50ms".to_owned()),
            ("HERALD_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8".to_owned()),
        ],
    )
    .await;
    let port = d.bounce_listener_addr().await.port();
    (d, port)
}

/// An API key's client and an operator's (activity read and retry) for a new tenant, and the
/// operator's token.
async fn clients(d: &TestDaemon) -> (Client, Client, String) {
    let boot = d.bootstrap().await;
    let token = d.idp.operator_token(&boot.tenant_id, &[Scope::ActivityRead, Scope::ActivityRetry]);
    (d.with_token(&boot.api_key), d.with_token(&token), token)
}

async fn send(key: &Client, to: &str) -> NotificationId {
    key.send_notification(&NotificationIn::new(Channel::Email, to, "Your receipt"), None)
        .await
        .unwrap()
        .notification_id
}

/// The item once its status is `status`.
async fn detail_when(operator: &Client, id: &NotificationId, status: &str) -> ActivityDetail {
    eventually(&format!("{id} to be {status}"), Duration::from_secs(20), || async {
        let detail = operator.activity_item(id).await.ok()?;
        (detail.item.status == status).then_some(detail)
    })
    .await
}

/// A delivery status notification as a mail server writes it, to `return_path`, about
/// `recipient`.
fn dsn(return_path: &str, recipient: &str, action: &str, status: &str, diagnostic: &str) -> Vec<u8> {
    format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.org>\n\
         To: {return_path}\n\
         Subject: Undelivered Mail Returned to Sender\n\
         Auto-Submitted: auto-replied\n\
         MIME-Version: 1.0\n\
         Content-Type: multipart/report; report-type=delivery-status;\n\
         \tboundary=\"R1\"\n\
         \n\
         --R1\n\
         Content-Type: text/plain; charset=us-ascii\n\
         \n\
         Your message to <{recipient}> could not be delivered: {diagnostic}\n\
         \n\
         --R1\n\
         Content-Type: message/delivery-status\n\
         \n\
         Reporting-MTA: dns; mx.example.org\n\
         Arrival-Date: Wed, 25 Nov 2026 09:30:46 +0000\n\
         \n\
         Final-Recipient: rfc822; {recipient}\n\
         Original-Recipient: rfc822;{recipient}\n\
         Action: {action}\n\
         Status: {status}\n\
         Remote-MTA: dns; mx.example.org\n\
         Diagnostic-Code: smtp; {diagnostic}\n\
         \n\
         --R1\n\
         Content-Type: text/rfc822-headers\n\
         \n\
         To: {recipient}\n\
         Subject: Your receipt\n\
         \n\
         --R1--\n"
    )
    .into_bytes()
}

/// An RFC 5965 abuse report, as a mailbox provider's feedback loop sends it.
fn arf(recipient: &str) -> Vec<u8> {
    format!(
        "From: <fbl@isp.example>\n\
         Subject: FW: Your receipt\n\
         MIME-Version: 1.0\n\
         Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\n\
         \n\
         --F\n\
         Content-Type: text/plain\n\
         \n\
         This is an email abuse report.\n\
         \n\
         --F\n\
         Content-Type: message/feedback-report\n\
         \n\
         Feedback-Type: abuse\n\
         User-Agent: ISP-FBL/1.0\n\
         Version: 1\n\
         Original-Rcpt-To: <{recipient}>\n\
         \n\
         --F\n\
         Content-Type: message/rfc822\n\
         \n\
         To: {recipient}\n\
         Subject: Your receipt\n\
         \n\
         Your receipt\n\
         --F--\n"
    )
    .into_bytes()
}

/// `herald_receipts_total{provider="email", outcome}` now (0 before the first one).
async fn receipts_counted(d: &TestDaemon, outcome: &str) -> u64 {
    let text = d.client.request(reqwest::Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let label = format!("outcome=\"{outcome}\"");
    text.lines()
        .filter(|l| {
            l.starts_with("herald_receipts_total{") && l.contains("provider=\"email\"") && l.contains(&label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Sends a report to `return_path` and asserts the listener took it.
async fn report(port: u16, return_path: &str, message: &[u8]) {
    let delivery = deliver(port, "", &[return_path], message).await;
    assert_eq!(delivery.rcpt[0].0, 250, "{delivery:?}");
    assert_eq!(delivery.message.as_ref().map(|m| m.0), Some(250), "{delivery:?}");
}

async fn bounces_and_complaints(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let (d, port) = daemon(backend, smtp.url()).await;
    let (key, operator, operator_token) = clients(&d).await;
    assert_eq!(d.client.readyz().await.unwrap().tasks["bounce-listener"].state, TaskState::Running);
    let mut feed =
        SseClient::connect_to(&d.url, "/api/v1/activity/stream", &operator_token, None).await.unwrap();
    // An integrator's endpoint for bounces and complaints (every request verified with the
    // official Standard Webhooks library by the receiver).
    let hooks = WebhookReceiver::start().await;
    let event_types = Some(vec![EventType::NotificationBounced, EventType::NotificationComplained]);
    let endpoint = key
        .add_webhook(&WebhookEndpointIn { url: hooks.url("mail"), event_types, ..Default::default() })
        .await
        .unwrap();
    hooks.set_secrets("mail", &[&endpoint.secret]);
    let counted = |outcome| receipts_counted(&d, outcome);
    let (changed, recorded, forged, malformed) = (
        counted("changed").await,
        counted("recorded").await,
        counted("invalid_signature").await,
        counted("malformed").await,
    );

    // Every email carries its signed return path as MAIL FROM; the visible From is the sender.
    let hard = send(&key, "ann@example.org").await;
    let mail = smtp.wait_for(1, Duration::from_secs(10)).await.remove(0);
    let hard_path = mail.mail_from.clone();
    assert_eq!(hard_path, herald_daemon::verp::return_path(&d.state.secret, BOUNCE_DOMAIN, &(&hard).into()));
    assert!(hard_path.starts_with("bounces+n") && hard_path.ends_with("@bounce.test"), "{hard_path}");
    assert!(
        mail.raw.contains("From: Herald <no-reply@localhost>") && !mail.raw.contains("bounces+"),
        "{}",
        mail.raw
    );
    detail_when(&operator, &hard, "sent").await;

    // A hard bounce: bounced, not retryable, the recipient masked out of everything kept.
    let diagnostic = "550 5.1.1 <ann@example.org>: Recipient address rejected: User unknown";
    report(port, &hard_path, &dsn(&hard_path, "ann@example.org", "failed", "5.1.1", diagnostic)).await;
    let detail = detail_when(&operator, &hard, "bounced").await;
    let reason = detail.item.failure_reason.clone().unwrap();
    assert_eq!(reason, "5.1.1: smtp; 550 5.1.1 <a*n@example.org>: Recipient address rejected: User unknown");
    assert!(!detail.item.retryable);
    assert_eq!(detail.receipts.len(), 1);
    let receipt = &detail.receipts[0];
    assert_eq!(
        (receipt.provider, receipt.provider_status.as_str(), receipt.status, receipt.error_code.as_deref()),
        (ReceiptProvider::Email, "failed", DeliveryStatus::Bounced, Some("5.1.1"))
    );
    assert_eq!(receipt.detail.as_deref(), Some(reason.as_str()));
    let refused = operator.retry(&hard).await.unwrap_err().problem().cloned().unwrap();
    assert_eq!((refused.status, refused.code), (409, ErrorCode::NotRetryable));
    // The operators' live feed shows the change.
    let update = loop {
        let event = feed
            .next_non_heartbeat(Duration::from_secs(10))
            .await
            .expect("the bounce on the operators' stream");
        if event.data["transaction_id"] == hard.as_str() && event.data["status"] == "bounced" {
            break event;
        }
    };
    assert_eq!(update.event, "activity.updated");
    assert_eq!(update.data["failure_reason"], reason.as_str());
    let lookup = key.notification(&hard).await.unwrap();
    assert_eq!((lookup.delivery_status, lookup.receipts.len()), (DeliveryStatus::Bounced, 1));
    assert!(!serde_json::to_string(&lookup).unwrap().contains("ann@"), "{lookup:?}");

    // A transient bounce (4.x.x): bounced and retryable; a retry sends it again, from the same
    // return path, and it is `sent` once more.
    let soft = send(&key, "bob@example.org").await;
    let soft_path = smtp.wait_for(2, Duration::from_secs(10)).await.remove(1).mail_from;
    detail_when(&operator, &soft, "sent").await;
    report(
        port,
        &soft_path,
        &dsn(&soft_path, "bob@example.org", "failed", "4.2.2", "452 4.2.2 Mailbox full"),
    )
    .await;
    let detail = detail_when(&operator, &soft, "bounced").await;
    assert!(detail.item.retryable);
    assert_eq!(detail.item.failure_reason.as_deref(), Some("4.2.2: smtp; 452 4.2.2 Mailbox full"));
    operator.retry(&soft).await.unwrap();
    let again = smtp.wait_for(3, Duration::from_secs(10)).await.remove(2);
    assert_eq!(
        (again.rcpt_tos.as_slice(), again.mail_from.as_str()),
        (["bob@example.org".to_owned()].as_slice(), soft_path.as_str())
    );
    let detail = detail_when(&operator, &soft, "sent").await;
    assert_eq!((detail.item.retry_count, detail.receipts.len()), (1, 1), "the bounce stays in the history");

    // A delay is history only.
    let late = send(&key, "cat@example.org").await;
    let late_path = smtp.wait_for(4, Duration::from_secs(10)).await.remove(3).mail_from;
    detail_when(&operator, &late, "sent").await;
    report(port, &late_path, &dsn(&late_path, "cat@example.org", "delayed", "4.4.7", "421 4.4.7 Try later"))
        .await;
    let detail = eventually("the delay in the history", Duration::from_secs(10), || async {
        let detail = operator.activity_item(&late).await.ok()?;
        (!detail.receipts.is_empty()).then_some(detail)
    })
    .await;
    assert_eq!(detail.item.status, "sent");
    assert_eq!(
        (detail.receipts[0].provider_status.as_str(), detail.receipts[0].status),
        ("delayed", DeliveryStatus::Sent)
    );

    // A complaint: complained, never retryable.
    let spam = send(&key, "dan@example.org").await;
    let spam_path = smtp.wait_for(5, Duration::from_secs(10)).await.remove(4).mail_from;
    detail_when(&operator, &spam, "sent").await;
    report(port, &spam_path, &arf("dan@example.org")).await;
    let detail = detail_when(&operator, &spam, "complained").await;
    assert!(!detail.item.retryable);
    assert_eq!(detail.receipts[0].provider_status, "abuse");
    assert_eq!(detail.item.failure_reason.as_deref(), Some("Feedback-Type: abuse"));

    // A forged or altered return path, or any other address, is refused at RCPT: no message is
    // taken, nothing changes.
    let (head, token) = hard_path.split_at("bounces+n".len());
    let altered = format!("{head}{}{}", if token.starts_with('0') { '1' } else { '0' }, &token[1..]);
    let refused = deliver(
        port,
        "",
        &[&altered, "postmaster@bounce.test"],
        &dsn(&altered, "x@example.org", "delivered", "2.0.0", "250 ok"),
    )
    .await;
    assert_eq!(refused.rcpt.iter().map(|r| r.0).collect::<Vec<_>>(), [550, 550], "{refused:?}");
    assert_eq!((refused.data.0, refused.message.is_none()), (554, true), "{refused:?}");
    let detail = operator.activity_item(&hard).await.unwrap();
    assert_eq!((detail.item.status.as_str(), detail.receipts.len()), ("bounced", 1));

    // Mail to a valid return path that is not a report is taken (so the server does not try
    // again) and dropped.
    report(port, &late_path, b"Subject: Re: Your receipt\n\nThanks, got it!\n").await;
    report(port, &late_path, b"\x00\x01 not even a message").await;
    assert_eq!(operator.activity_item(&late).await.unwrap().receipts.len(), 1);

    // The hard bounce and the complaint put their recipients on the tenant's suppression list
    // (CONTRACT §9), each pointing at the notification that caused it; the transient bounce and
    // the delay did not.
    let tenant_id = d.state.store.recipient_of(&hard).await.unwrap().unwrap().tenant_id;
    let filter = herald_daemon::store::SuppressionFilter {
        tenant_id,
        channel: None,
        reason: None,
        recipient_key: None,
    };
    let (entries, total) = d.state.store.list_suppressions(&filter, 100, 0).await.unwrap();
    let mut found: Vec<(String, String, Option<String>, Option<String>)> = entries
        .iter()
        .map(|e| {
            let cause = e.transaction_id.as_ref().map(|t| t.as_str().to_owned());
            (e.reason.to_string(), e.recipient_masked.clone(), e.only_category().map(str::to_owned), cause)
        })
        .collect();
    found.sort();
    assert_eq!(total, 2, "{found:?}");
    assert_eq!(
        found,
        [
            ("complaint".to_owned(), "d*n@example.org".to_owned(), None, Some(spam.to_string())),
            ("hard_bounce".to_owned(), "a*n@example.org".to_owned(), None, Some(hard.to_string())),
        ]
    );
    // So the next message to either is not sent: suppressed, with the reason and its day.
    for to in ["ANN@example.org", "dan@example.org"] {
        let next = send(&key, to).await;
        let detail = detail_when(&operator, &next, "suppressed").await;
        let reason = detail.item.failure_reason.unwrap();
        assert!(reason.starts_with("recipient suppressed: ") && reason.contains(" since 20"), "{reason}");
        assert!(!detail.item.retryable);
    }
    assert_eq!(smtp.messages().len(), 5, "nothing more reached the relay");

    // The integrator heard of the hard bounce and the complaint.
    let events = hooks.wait_for("mail", 2, Duration::from_secs(10)).await;
    let heard = |event: &str, id: &NotificationId| {
        events.iter().any(|e| e.event_type() == event && e.body["data"]["transaction_id"] == id.as_str())
    };
    assert!(heard("notification.bounced", &hard), "{events:?}");
    assert!(heard("notification.complained", &spam), "{events:?}");

    // Counted, whatever other tests count meanwhile.
    assert!(counted("changed").await >= changed + 3, "hard and soft bounces, the complaint");
    assert!(counted("recorded").await > recorded, "the delay");
    assert!(counted("invalid_signature").await > forged, "the altered return path");
    assert!(counted("malformed").await >= malformed + 2, "the reply and the garbage");
    d.stop().await;
}
both_backends!(bounces_and_complaints_over_smtp, bounces_and_complaints);

/// A real mail server's DSN: Herald relays through a private Postfix, whose next hop (the SMTP
/// sink) refuses the recipient with 550; Postfix writes its own delivery status notification
/// to the envelope sender, which its transport map sends to Herald's bounce listener.
async fn postfix_bounce(backend: Backend) {
    if Postfix::unavailable().is_some() {
        return;
    }
    let started = Instant::now();
    let smtp = SmtpSink::start().await;
    smtp.set_rule("ann@example.net", "550");
    // Postfix first, relaying example.net to the sink; then the daemon, sending through it;
    // then the bounce domain's route to the daemon's listener.
    let mut postfix = Postfix::start(&[("example.net", smtp.port)]).await;
    let (d, bounce_port) = daemon(backend, format!("smtp+plain://127.0.0.1:{}", postfix.port)).await;
    postfix.route(BOUNCE_DOMAIN, bounce_port).await;
    let (key, operator, _) = clients(&d).await;
    let ready = started.elapsed();

    let id = send(&key, "ann@example.net").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let detail = loop {
        let detail = operator.activity_item(&id).await.unwrap();
        if detail.item.status == "bounced" {
            break detail;
        }
        assert!(
            Instant::now() < deadline,
            "Postfix's DSN did not bounce the item within 30 s: {detail:?}\nPostfix's log:\n{}",
            postfix.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Postfix logs the DSN's delivery once the listener has answered it: a moment after the item
    // turned bounced, so the log is read when that line is there.
    let dsn_delivered = format!("relay=127.0.0.1[127.0.0.1]:{bounce_port}");
    let log = eventually("Postfix to log the DSN's delivery", Duration::from_secs(10), || async {
        let log = postfix.log();
        log.contains(&dsn_delivered).then_some(log)
    })
    .await;
    assert_eq!(detail.attempts.len(), 1, "Postfix accepted it: {log}");
    let reason = detail.item.failure_reason.clone().unwrap();
    assert!(reason.starts_with("5.1.1: smtp; 550 5.1.1 <a*n@example.net>"), "{reason}\n{log}");
    assert!(!reason.contains("ann@"), "{reason}");
    assert!(!detail.item.retryable);
    assert_eq!(
        (
            detail.receipts.len(),
            detail.receipts[0].provider_status.as_str(),
            detail.receipts[0].error_code.as_deref()
        ),
        (1, "failed", Some("5.1.1"))
    );
    // Postfix's own account: the message bounced at the sink, and its notification went to the
    // return path at the listener.
    let return_path = herald_daemon::verp::return_path(&d.state.secret, BOUNCE_DOMAIN, &(&id).into());
    assert!(log.contains(&format!("from=<{return_path}>")), "{log}");
    assert!(log.contains("status=bounced"), "{log}");
    assert!(log.contains(&format!("to=<{return_path}>, relay=127.0.0.1[127.0.0.1]:{bounce_port}")), "{log}");
    eprintln!(
        "postfix bounce test ({backend:?}): Postfix and the daemon up in {ready:?}, bounced in {:?} after the send",
        started.elapsed() - ready
    );
    d.stop().await;
    drop(postfix);
}
both_backends!(a_postfix_dsn_bounces_the_item, postfix_bounce);
