//! Custom sending domains against a real DNS server on loopback (hickory-server, answering over
//! UDP and TCP): every verification outcome, background checks with a moved clock, and mail
//! sent from a verified domain, whose DKIM signature Python's dkimpy verifies against the
//! record published in that DNS server. Store behaviour runs on both backends.

use std::time::Duration;

use herald_common::{
    ErrorCode, Scope,
    api::{
        domains::{DnsRecordOut, DomainIn, DomainOut, DomainStatus, RecordPurpose},
        notifications::{Channel, DeliveryStatus, NotificationIn},
    },
    client::Client,
};
use herald_tests::{
    Backend, TestDaemon, both_backends, eventually,
    peers::{DnsServer, SmtpSink, verify_dkim},
};
use serde_json::json;

const SPF_INCLUDE: &str = "spf.herald.test";

async fn daemon(backend: Backend, dns: &DnsServer, extra: Vec<(&str, String)>) -> TestDaemon {
    let mut env = vec![
        ("HERALD_DNS_NAMESERVERS", dns.nameservers()),
        ("HERALD_SPF_INCLUDE", SPF_INCLUDE.to_owned()),
        ("HERALD_DNS_TIMEOUT", "500ms".to_owned()),
    ];
    env.extend(extra);
    TestDaemon::start_with(backend, env).await
}

fn record(domain: &DomainOut, purpose: RecordPurpose) -> &DnsRecordOut {
    domain.records.iter().find(|r| r.purpose == purpose).expect("the record is listed")
}

/// Publishes the domain's three records as the API lists them.
fn publish_all(dns: &DnsServer, domain: &DomainOut) {
    for r in &domain.records {
        dns.set_txt(&r.host, &[&r.value]);
    }
}

fn code(err: herald_common::client::ClientError) -> (u16, ErrorCode, String) {
    let problem = err.problem().expect("a problem body").clone();
    (problem.status, problem.code, problem.detail.unwrap_or_default())
}

async fn add(key: &Client, name: &str) -> DomainOut {
    key.create_domain(&DomainIn { name: name.to_owned(), dkim_selector: None }).await.expect("add the domain")
}

async fn endpoints_scopes_and_tenants(backend: Backend) {
    let dns = DnsServer::start().await;
    let d = daemon(backend, &dns, vec![]).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);

    let domain = key
        .create_domain(&DomainIn {
            name: " Mail.Example.COM. ".into(),
            dkim_selector: Some("Herald2026".into()),
        })
        .await
        .unwrap();
    assert!(domain.domain_id.to_string().starts_with("dom_"));
    assert_eq!((domain.name.as_str(), domain.dkim_selector.as_str()), ("mail.example.com", "herald2026"));
    assert_eq!((domain.status, domain.sending_enabled), (DomainStatus::Pending, false));
    assert!(domain.last_checked_at.is_none() && domain.verified_at.is_none() && domain.dmarc.is_none());
    let hosts: Vec<(RecordPurpose, &str)> =
        domain.records.iter().map(|r| (r.purpose, r.host.as_str())).collect();
    assert_eq!(
        hosts,
        [
            (RecordPurpose::Ownership, "_herald-challenge.mail.example.com"),
            (RecordPurpose::Spf, "mail.example.com"),
            (RecordPurpose::Dkim, "herald2026._domainkey.mail.example.com"),
        ]
    );
    let ownership = record(&domain, RecordPurpose::Ownership);
    assert!(ownership.value.starts_with("herald-verification=") && ownership.value.len() > 40);
    assert_eq!(record(&domain, RecordPurpose::Spf).value, format!("v=spf1 include:{SPF_INCLUDE} ~all"));
    let dkim = record(&domain, RecordPurpose::Dkim);
    assert!(dkim.value.starts_with("v=DKIM1; k=rsa; p=MIIBIjAN"), "an RSA-2048 key: {}", dkim.value);
    assert!(dkim.zone_line.contains("\" \""), "the zone line splits the long value: {}", dkim.zone_line);
    assert!(domain.records.iter().all(|r| r.status == DomainStatus::Pending && r.record_type == "TXT"));

    // Duplicates (by normalised name), bad names, and other tenants.
    let (status, code_, _) = code(
        key.create_domain(&DomainIn { name: "mail.example.com".into(), dkim_selector: None })
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code_), (409, ErrorCode::Conflict));
    for bad in ["203.0.113.7", "https://mail.example.com/", "localhost", "ann@example.com", "exa mple.com"] {
        let err = key.create_domain(&DomainIn { name: bad.into(), dkim_selector: None }).await.unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!((problem.status, problem.code), (422, ErrorCode::ValidationFailed), "{bad}");
        assert_eq!(problem.errors[0].field, "name", "{bad}");
    }
    let err = key
        .create_domain(&DomainIn { name: "x.example.com".into(), dkim_selector: Some("a.b".into()) })
        .await
        .unwrap_err();
    assert_eq!(err.problem().unwrap().errors[0].field, "dkim_selector");
    let raw = key
        .request(reqwest::Method::POST, "/api/v1/domains")
        .json(&json!({"name": "a.example.com", "selector": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 422, "unknown fields are refused");

    let second = add(&key, "news.example.com").await;
    let listed = key.domains().await.unwrap().domains;
    assert_eq!(
        listed.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["mail.example.com", "news.example.com"]
    );
    assert_eq!(key.domain(&domain.domain_id).await.unwrap(), domain);

    let other = d.bootstrap().await;
    let other_key = d.with_token(&other.api_key);
    let id = domain.domain_id.clone();
    assert!(other_key.domains().await.unwrap().domains.is_empty());
    assert_eq!(code(other_key.domain(&id).await.unwrap_err()).0, 404);
    assert_eq!(code(other_key.verify_domain(&id).await.unwrap_err()).0, 404);
    assert_eq!(code(other_key.delete_domain(&id).await.unwrap_err()).0, 404);
    // The same name in another tenant is that tenant's own domain.
    add(&other_key, "mail.example.com").await;

    // Scopes: reading needs domains:read, changing needs domains:write; operators too.
    let reader =
        herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &[Scope::DomainsRead])
            .await
            .unwrap();
    let reader = d.with_token(&reader.api_key);
    assert_eq!(reader.domains().await.unwrap().domains.len(), 2);
    for err in [
        reader.verify_domain(&id).await.unwrap_err(),
        reader.delete_domain(&id).await.unwrap_err(),
        reader
            .create_domain(&DomainIn { name: "z.example.com".into(), dkim_selector: None })
            .await
            .unwrap_err(),
    ] {
        let problem = err.problem().unwrap();
        assert_eq!((problem.status, problem.scope.as_deref()), (403, Some("domains:write")));
    }
    let none =
        herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &[Scope::NotificationsSend])
            .await
            .unwrap();
    let problem = d.with_token(&none.api_key).domains().await.unwrap_err();
    assert_eq!(problem.problem().unwrap().scope.as_deref(), Some("domains:read"));
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::DomainsRead]));
    assert_eq!(operator.domains().await.unwrap().domains.len(), 2);
    assert_eq!(code(operator.delete_domain(&id).await.unwrap_err()).0, 403);

    key.delete_domain(&second.domain_id).await.unwrap();
    assert_eq!(code(key.domain(&second.domain_id).await.unwrap_err()).0, 404);
    assert_eq!(code(key.delete_domain(&second.domain_id).await.unwrap_err()).0, 404);
    d.stop().await;
}
both_backends!(domain_endpoints_scopes_and_tenants, endpoints_scopes_and_tenants);

async fn verification_outcomes(backend: Backend) {
    let dns = DnsServer::start().await;
    let d = daemon(backend, &dns, vec![]).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let domain = add(&key, "mail.example.com").await;
    let id = domain.domain_id.clone();
    let (ownership, spf, dkim) = (
        record(&domain, RecordPurpose::Ownership).clone(),
        record(&domain, RecordPurpose::Spf).clone(),
        record(&domain, RecordPurpose::Dkim).clone(),
    );

    // Nothing published yet: pending, each record saying what to publish.
    let checked = key.verify_domain(&id).await.unwrap();
    assert_eq!(checked.status, DomainStatus::Pending);
    assert!(checked.last_checked_at.is_some());
    for r in &checked.records {
        assert_eq!(r.status, DomainStatus::Pending, "{r:?}");
        assert!(r.detail.contains(&r.host), "{}", r.detail);
    }
    assert!(checked.dmarc.as_ref().unwrap().detail.contains("No DMARC record"));

    // Everything published (the DKIM value as two strings of at most 255 bytes): verified. The
    // names were NXDOMAIN a moment ago, so this also shows nothing negative was cached.
    publish_all(&dns, &domain);
    let verified = key.verify_domain(&id).await.unwrap();
    assert_eq!(verified.status, DomainStatus::Verified, "{:#?}", verified.records);
    assert!(verified.sending_enabled && verified.verified_at.is_some());
    assert!(verified.records.iter().all(|r| r.status == DomainStatus::Verified));

    // DMARC is information only.
    dns.set_txt("_dmarc.mail.example.com", &["v=DMARC1; p=quarantine; rua=mailto:dmarc@example.com"]);
    let with_dmarc = key.verify_domain(&id).await.unwrap();
    assert_eq!(
        with_dmarc.dmarc.unwrap().value.as_deref(),
        Some("v=DMARC1; p=quarantine; rua=mailto:dmarc@example.com")
    );
    assert_eq!(with_dmarc.verified_at, verified.verified_at, "still verified since the first success");

    // A DNS failure (SERVFAIL) is temporary: nothing known changed, so sending goes on.
    dns.servfail(&dkim.host, true);
    let outage = key.verify_domain(&id).await.unwrap();
    assert_eq!(outage.status, DomainStatus::TemporaryFailure);
    assert_eq!(record(&outage, RecordPurpose::Dkim).status, DomainStatus::TemporaryFailure);
    let detail = &record(&outage, RecordPurpose::Dkim).detail;
    assert!(detail.contains("SERVFAIL"), "{detail}");
    assert!(outage.sending_enabled);
    dns.servfail(&dkim.host, false);

    // SPF without Herald's include: failed, naming the include.
    dns.set_txt(&spf.host, &["v=spf1 include:_spf.google.com ~all", "google-site-verification=abc"]);
    let no_include = key.verify_domain(&id).await.unwrap();
    assert_eq!(no_include.status, DomainStatus::Failed);
    assert!(!no_include.sending_enabled && no_include.verified_at.is_none());
    let detail = &record(&no_include, RecordPurpose::Spf).detail;
    assert!(detail.contains("does not include `include:spf.herald.test`"), "{detail}");
    assert_eq!(record(&no_include, RecordPurpose::Dkim).status, DomainStatus::Verified);

    // Two SPF records: failed, asking to merge them.
    dns.set_txt(&spf.host, &[&spf.value, "v=spf1 mx -all"]);
    let two = key.verify_domain(&id).await.unwrap();
    let detail = &record(&two, RecordPurpose::Spf).detail;
    assert_eq!(two.status, DomainStatus::Failed);
    assert!(detail.contains("Found 2 SPF records") && detail.contains("merge"), "{detail}");

    // Fixed: the next check sees it.
    dns.set_txt(&spf.host, &["v=spf1 ip4:192.0.2.0/24 include:spf.herald.test -all"]);
    assert_eq!(key.verify_domain(&id).await.unwrap().status, DomainStatus::Verified);

    // Another key pair's record at the DKIM host: failed, saying the key differs.
    let stranger = add(&key, "other.example.com").await;
    dns.set_txt(&dkim.host, &[&record(&stranger, RecordPurpose::Dkim).value]);
    let wrong_key = key.verify_domain(&id).await.unwrap();
    assert_eq!(wrong_key.status, DomainStatus::Failed);
    assert!(record(&wrong_key, RecordPurpose::Dkim).detail.contains("different public key"));

    // The ownership token of another domain: failed, quoting what was found.
    dns.set_txt(&dkim.host, &[&dkim.value]);
    dns.set_txt(&ownership.host, &["herald-verification=not-this-one"]);
    let wrong_token = key.verify_domain(&id).await.unwrap();
    assert_eq!(wrong_token.status, DomainStatus::Failed);
    assert!(
        record(&wrong_token, RecordPurpose::Ownership).detail.contains("`herald-verification=not-this-one`")
    );

    // A record that was verified and is then removed: failed, saying so.
    dns.set_txt(&ownership.host, &[&ownership.value]);
    assert_eq!(key.verify_domain(&id).await.unwrap().status, DomainStatus::Verified);
    dns.remove(&dkim.host);
    let removed = key.verify_domain(&id).await.unwrap();
    assert_eq!(removed.status, DomainStatus::Failed);
    assert!(record(&removed, RecordPurpose::Dkim).detail.contains("since been removed"));

    // What the last check found is kept: GET shows it.
    assert_eq!(key.domain(&id).await.unwrap(), removed);
    d.stop().await;
}
both_backends!(domain_verification_outcomes, verification_outcomes);

async fn background_checks(backend: Backend) {
    let dns = DnsServer::start().await;
    let d = daemon(
        backend,
        &dns,
        vec![
            ("HERALD_DOMAIN_PENDING_INTERVAL", "1s".to_owned()),
            ("HERALD_DOMAIN_RECHECK_INTERVAL", "24h".to_owned()),
        ],
    )
    .await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let published = add(&key, "mail.example.com").await;
    let abandoned = add(&key, "never.example.com").await;

    // Records published after the domain was added are found without anyone asking.
    publish_all(&dns, &published);
    let id = published.domain_id.clone();
    let verified =
        eventually("the background check to verify the domain", Duration::from_secs(15), || async {
            let domain = key.domain(&id).await.unwrap();
            (domain.status == DomainStatus::Verified).then_some(domain)
        })
        .await;
    assert!(verified.sending_enabled);

    // 72 hours later the domain whose records never appeared is failed, and the verified one,
    // re-checked after 24 hours, is failed too once its DKIM record has been removed.
    dns.remove(&record(&published, RecordPurpose::Dkim).host);
    d.state.clock.advance(Duration::from_secs(73 * 3600));
    let abandoned_id = abandoned.domain_id.clone();
    let expired = eventually("the pending domain to fail after 72 h", Duration::from_secs(15), || async {
        let domain = key.domain(&abandoned_id).await.unwrap();
        (domain.status == DomainStatus::Failed).then_some(domain)
    })
    .await;
    assert!(expired.records.iter().all(|r| r.status == DomainStatus::Failed));
    assert!(
        expired.records[0].detail.contains("not found within the time allowed"),
        "{}",
        expired.records[0].detail
    );
    let rechecked = eventually("the verified domain's re-check", Duration::from_secs(15), || async {
        let domain = key.domain(&id).await.unwrap();
        (domain.status == DomainStatus::Failed).then_some(domain)
    })
    .await;
    assert!(!rechecked.sending_enabled);

    // Failed domains are not checked in the background any more: only on request. A day later
    // (past the re-check interval), a domain added then is checked in the background twice; a
    // pass begins only once the one before has finished every check it claimed, so by the
    // second check any pass that could have taken the failed domains is over, and the DNS
    // server has heard nothing about them.
    let failed_names = ["mail.example.com", "never.example.com"];
    let queries = failed_names.map(|name| dns.queries_under(name));
    d.state.clock.advance(Duration::from_secs(25 * 3600));
    let sentinel = add(&key, "sentinel.example.com").await.domain_id;
    let (client, id) = (&key, &sentinel);
    let checked_after = move |after: Option<i64>| async move {
        let at = client.domain(id).await.unwrap().last_checked_at?.millis();
        (Some(at) > after).then_some(at)
    };
    // Due after the pending interval (1 s) of the daemon's clock.
    d.state.clock.advance(Duration::from_secs(2));
    let first =
        eventually("a background check of a new domain", Duration::from_secs(15), || checked_after(None))
            .await;
    d.state.clock.advance(Duration::from_secs(2));
    eventually("its next background check", Duration::from_secs(15), || checked_after(Some(first))).await;
    assert!(dns.queries_under("sentinel.example.com") > 0);
    assert_eq!(
        failed_names.map(|name| dns.queries_under(name)),
        queries,
        "no background lookups for failed domains"
    );
    d.stop().await;
}
both_backends!(domain_background_checks, background_checks);

async fn signed_mail(backend: Backend) {
    let dns = DnsServer::start().await;
    let smtp = SmtpSink::start().await;
    let d = daemon(
        backend,
        &dns,
        vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "100ms".into())],
    )
    .await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);

    // Not a domain of this tenant, or not verified yet: 422 domain_not_verified.
    let mut email =
        NotificationIn::new(Channel::Email, "ann@example.org", "Your receipt\r\n\r\nThanks  for your order.");
    email.subject = Some("Receipt".into());
    email.from = Some("billing@mail.example.com".into());
    let (status, code_, detail) = code(key.send_notification(&email, None).await.unwrap_err());
    assert_eq!((status, code_), (422, ErrorCode::DomainNotVerified));
    assert!(detail.contains("mail.example.com"), "{detail}");
    let domain = add(&key, "mail.example.com").await;
    let (_, code_, detail) = code(key.send_notification(&email, None).await.unwrap_err());
    assert_eq!(code_, ErrorCode::DomainNotVerified);
    assert!(detail.contains("pending"), "{detail}");

    publish_all(&dns, &domain);
    assert_eq!(key.verify_domain(&domain.domain_id).await.unwrap().status, DomainStatus::Verified);
    email.html_body = Some("<p>Thanks for your <b>order</b>.</p>".into());
    let accepted = key.send_notification(&email, None).await.unwrap();
    let mail = smtp.wait_for(1, Duration::from_secs(10)).await.remove(0);
    // The visible From is the tenant's; the envelope sender is the notification's signed
    // return path in the bounce domain (the default sender's domain here).
    assert!(mail.raw.contains("From: billing@mail.example.com"), "{}", mail.raw);
    let return_path =
        herald_daemon::verp::return_path(&d.state.secret, "localhost", &(&accepted.notification_id).into());
    assert_eq!(mail.mail_from, return_path);
    assert!(
        mail.raw.starts_with(
            "DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=mail.example.com; s=herald;"
        )
    );

    // dkimpy, with the key from the DNS server, agrees.
    let verdict = verify_dkim(&mail.path, &dns).await;
    assert!(verdict.verified, "dkimpy rejects the signature: {:?}", verdict.log);
    assert_eq!((verdict.domain.as_str(), verdict.selector.as_str()), ("mail.example.com", "herald"));
    assert!(
        verdict.headers.split(':').filter(|h| *h == "from").count() == 2,
        "From is over-signed: {}",
        verdict.headers
    );
    for field in ["subject", "to", "message-id", "date", "content-type"] {
        assert!(verdict.headers.split(':').any(|h| h == field), "{field} is signed: {}", verdict.headers);
    }
    // And it notices tampering: the same message with one word of the body changed fails.
    let tampered = d.dir.path().join("tampered.eml");
    std::fs::write(&tampered, mail.raw.replace("Thanks  for", "Thanks  fr")).unwrap();
    assert!(!verify_dkim(&tampered, &dns).await.verified, "a changed body must not verify");
    // A changed key in the DNS: the old signature no longer verifies there.
    let other = add(&key, "other.example.com").await;
    dns.set_txt(&record(&domain, RecordPurpose::Dkim).host, &[&record(&other, RecordPurpose::Dkim).value]);
    assert!(!verify_dkim(&mail.path, &dns).await.verified);

    // The notification itself records the send as usual.
    let n = eventually("the signed email to be sent", Duration::from_secs(10), || async {
        let n = key.notification(&accepted.notification_id).await.unwrap();
        (n.delivery_status == DeliveryStatus::Sent).then_some(n)
    })
    .await;
    assert_eq!(n.attempts.len(), 1);

    // Mail without `from` goes out from the default sender, unsigned.
    key.send_notification(&NotificationIn::new(Channel::Email, "bob@example.org", "Hi"), None).await.unwrap();
    let plain = smtp.wait_for(2, Duration::from_secs(10)).await.remove(1);
    assert!(!plain.raw.contains("DKIM-Signature"));

    // A domain removed after a notification was accepted: its queued mail fails at delivery
    // rather than go out unsigned, and new mail from it is refused.
    let signer =
        |sender: &'static str| herald_daemon::delivery::signer_for(&d.state, &boot.tenant_id, sender);
    assert!(signer("billing@mail.example.com").await.is_ok());
    key.delete_domain(&domain.domain_id).await.unwrap();
    match signer("billing@mail.example.com").await {
        Err(herald_daemon::providers::SendError::Permanent { reason }) => {
            assert!(reason.contains("no longer verified"), "{reason}")
        }
        other => panic!("a removed domain still signs: {other:?}"),
    }
    assert_eq!(code(key.send_notification(&email, None).await.unwrap_err()).1, ErrorCode::DomainNotVerified);
    d.stop().await;
}
both_backends!(dkim_signed_mail_from_a_verified_domain, signed_mail);

/// A name server that never answers: the check ends as a temporary failure within the timeout,
/// not as a hung request or a failed domain.
#[tokio::test]
async fn a_silent_name_server_is_a_temporary_failure() {
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let d = TestDaemon::start_with(
        Backend::Sqlite,
        vec![
            ("HERALD_DNS_NAMESERVERS", silent.local_addr().unwrap().to_string()),
            ("HERALD_DNS_TIMEOUT", "200ms".to_owned()),
        ],
    )
    .await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let domain = add(&key, "mail.example.com").await;
    let started = std::time::Instant::now();
    let checked = key.verify_domain(&domain.domain_id).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "the check took {:?}", started.elapsed());
    assert_eq!(checked.status, DomainStatus::TemporaryFailure);
    for r in &checked.records {
        assert_eq!(r.status, DomainStatus::TemporaryFailure, "{r:?}");
        assert!(r.detail.contains("failed"), "{}", r.detail);
    }
    d.stop().await;
}
