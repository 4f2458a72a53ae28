//! One-click unsubscribe (CONTRACT §9, RFC 8058 and RFC 2369) on both backends: the two header
//! fields on categorised email only, inside the DKIM signature as Python's dkimpy verifies it
//! against the record in a real DNS server; the link POSTed as a mail client's one-click button
//! would (idempotent, no credential), the suppression it adds, and the sends it stops and does
//! not stop; the page that changes nothing; tokens that are not Herald's; and the page in a real
//! headless Chromium with JavaScript disabled, confirmed with its button.

use std::time::Duration;

use herald_common::{
    Scope,
    api::{
        activity::ActivityStatus,
        domains::{DomainIn, DomainStatus},
        notifications::{Channel, NotificationIn},
        otp::OtpSendIn,
        suppressions::{SuppressionList, SuppressionReason},
    },
    client::Client,
    ids::{NotificationId, TransactionId},
    mask::mask,
};
use herald_tests::{
    Backend, TestDaemon, both_backends,
    browser::Browser,
    eventually,
    peers::{DnsServer, ReceivedMail, SmtpSink, verify_dkim},
};
use reqwest::{StatusCode, header};

/// What the daemon believes its public address is: a proxy's, in front of it with a path of
/// its own that it strips. The tests send the link's path to the daemon itself.
const PUBLIC_URL: &str = "https://herald.example.test/notify";
const WAIT: Duration = Duration::from_secs(20);

struct Tenant {
    key: Client,
    token: String,
    operator: Client,
}

async fn daemon(backend: Backend, smtp: &SmtpSink, dns: &DnsServer) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_SMTP_URL", smtp.url()),
            ("HERALD_PUBLIC_URL", PUBLIC_URL.to_owned()),
            ("HERALD_RETRY_SCHEDULE", "100ms".to_owned()),
            ("HERALD_DNS_NAMESERVERS", dns.nameservers()),
            ("HERALD_SPF_INCLUDE", "spf.herald.test".to_owned()),
            ("HERALD_DNS_TIMEOUT", "500ms".to_owned()),
        ],
    )
    .await
}

async fn tenant(d: &TestDaemon) -> Tenant {
    let boot = d.bootstrap().await;
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &Scope::ALL));
    Tenant { key: d.with_token(&boot.api_key), token: boot.api_key, operator }
}

async fn send(t: &Tenant, to: &str, from: Option<&str>, category: Option<&str>) -> NotificationId {
    let mut request = NotificationIn::new(Channel::Email, to, "Hello  there");
    request.subject = Some("News".into());
    request.from = from.map(str::to_owned);
    request.category = category.map(str::to_owned);
    t.key.send_notification(&request, None).await.unwrap().notification_id
}

async fn settled(t: &Tenant, id: &NotificationId, status: ActivityStatus) {
    eventually(&format!("{id} to be {status}"), WAIT, || async {
        let detail = t.operator.activity_item(id).await.ok()?;
        (detail.item.status == status).then_some(())
    })
    .await
}

async fn suppressions(d: &TestDaemon, t: &Tenant) -> SuppressionList {
    let response = reqwest::Client::new()
        .get(format!("{}/api/v1/suppressions", d.url))
        .bearer_auth(&t.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// The value of header field `name` in a raw message (unfolded), if it has one.
fn field(mail: &ReceivedMail, name: &str) -> Option<String> {
    let head =
        mail.raw.split("\r\n\r\n").next().unwrap_or_default().replace("\r\n ", " ").replace("\r\n\t", " ");
    head.split("\r\n").find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// The daemon's own URL of the link in a mail's `List-Unsubscribe`.
fn link(d: &TestDaemon, mail: &ReceivedMail) -> String {
    let value = field(mail, "List-Unsubscribe").expect("a List-Unsubscribe field");
    let url = value.strip_prefix('<').and_then(|v| v.strip_suffix('>')).expect("one URL in angle brackets");
    let path =
        url.strip_prefix(PUBLIC_URL).unwrap_or_else(|| panic!("the link is under the public URL: {url}"));
    assert!(path.starts_with("/u/"), "{path}");
    format!("{}{path}", d.url)
}

async fn post(url: &str, content_type: &str, body: &str) -> (StatusCode, header::HeaderMap, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

async fn get(url: &str) -> (StatusCode, header::HeaderMap, String) {
    let response = reqwest::get(url).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

const FORM: &str = "application/x-www-form-urlencoded";
const ONE_CLICK: &str = "List-Unsubscribe=One-Click";

async fn one_click(backend: Backend) {
    let (dns, smtp) = (DnsServer::start().await, SmtpSink::start().await);
    let d = daemon(backend, &smtp, &dns).await;
    let t = tenant(&d).await;
    let domain = t
        .key
        .create_domain(&DomainIn { name: "mail.example.com".into(), dkim_selector: None })
        .await
        .unwrap();
    for r in &domain.records {
        dns.set_txt(&r.host, &[&r.value]);
    }
    assert_eq!(t.key.verify_domain(&domain.domain_id).await.unwrap().status, DomainStatus::Verified);

    // A categorised email from the verified domain: both fields, both signed.
    let ann = "Ann.Smith@Example.org";
    let first = send(&t, ann, Some("news@mail.example.com"), Some("digest")).await;
    let mail = smtp.wait_for(1, WAIT).await.remove(0);
    assert_eq!(field(&mail, "List-Unsubscribe-Post").as_deref(), Some(ONE_CLICK));
    let url = link(&d, &mail);
    let token = url.rsplit('/').next().unwrap();
    assert!(token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{token}");
    // (Not "ann": a sealed token of about 200 random characters holds some case of three given
    // letters about once in 170 runs, and did in this suite.)
    for secret in ["smith", "example.org", "digest", first.as_str(), "tnt_"] {
        assert!(!token.to_lowercase().contains(secret), "the token shows `{secret}`: {token}");
    }
    let verdict = verify_dkim(&mail.path, &dns).await;
    assert!(verdict.verified, "dkimpy rejects the signature: {:?}", verdict.log);
    let signed: Vec<&str> = verdict.headers.split(':').collect();
    for name in ["list-unsubscribe", "list-unsubscribe-post"] {
        assert!(signed.contains(&name), "{name} is not in h=: {}", verdict.headers);
    }
    // A changed link no longer verifies: the signature covers it.
    let tampered = d.dir.path().join("tampered.eml");
    std::fs::write(&tampered, mail.raw.replace(token, &token.replacen(&token[..1], "Z", 1))).unwrap();
    if !token.starts_with('Z') {
        assert!(!verify_dkim(&tampered, &dns).await.verified, "a changed link must not verify");
    }

    // Transactional mail (no category) and an OTP by email carry neither field.
    send(&t, ann, None, None).await;
    t.key.send_otp(&OtpSendIn::new(Channel::Email, ann), None).await.unwrap();
    let mails = smtp.wait_for(3, WAIT).await;
    for plain in &mails[1..] {
        assert_eq!(field(plain, "List-Unsubscribe"), None, "{}", plain.raw);
        assert_eq!(field(plain, "List-Unsubscribe-Post"), None, "{}", plain.raw);
    }

    // The page: the masked recipient and the category, a form that posts the one-click field
    // back; never the address; nothing changes.
    let (status, headers, page) = get(&url).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert!(headers.get(header::SET_COOKIE).is_none());
    assert!(page.contains(&mask(ann)) && page.contains("digest"), "{page}");
    assert!(!page.to_lowercase().contains("ann.smith"), "{page}");
    assert!(page.contains("<form method=\"post\">"), "{page}");
    assert!(page.contains("name=\"List-Unsubscribe\" value=\"One-Click\""), "{page}");
    assert!(!page.contains("<script") && !page.contains("src="), "self-contained: {page}");
    assert_eq!(get(&url).await.0, StatusCode::OK);
    assert_eq!(suppressions(&d, &t).await.total_count, 0, "GET changes nothing");

    // A POST without the one-click body changes nothing either.
    let (status, _, _) = post(&url, FORM, "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(suppressions(&d, &t).await.total_count, 0);

    // The one click, as a mail client sends it: no credential, no cookie.
    let (status, headers, page) = post(&url, FORM, ONE_CLICK).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(headers.get(header::SET_COOKIE).is_none());
    assert!(page.contains("unsubscribed") && page.contains(&mask(ann)), "{page}");
    let list = suppressions(&d, &t).await;
    assert_eq!(list.total_count, 1);
    let entry = &list.items[0];
    assert_eq!((entry.channel, entry.reason), (Channel::Email, SuppressionReason::Unsubscribe));
    assert_eq!(entry.category.as_deref(), Some("digest"));
    assert_eq!(entry.recipient_masked, mask(ann));
    assert_eq!(entry.transaction_id, Some(TransactionId::Notification(first.clone())));

    // Again, also as multipart/form-data: 200, nothing new.
    let multipart = "--b0undary\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b0undary--\r\n";
    let (status, _, _) = post(&url, "multipart/form-data; boundary=b0undary", multipart).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(post(&url, FORM, ONE_CLICK).await.0, StatusCode::OK);
    let again = suppressions(&d, &t).await;
    assert_eq!(again.total_count, 1);
    assert_eq!(again.items[0].suppression_id, entry.suppression_id);

    // The next email of that category to that recipient (in any case) is suppressed; a
    // transactional one and another category still go out.
    let stopped = send(&t, "ann.smith@example.org", Some("news@mail.example.com"), Some("digest")).await;
    settled(&t, &stopped, ActivityStatus::Suppressed).await;
    let transactional = send(&t, ann, None, None).await;
    settled(&t, &transactional, ActivityStatus::Sent).await;
    let other = send(&t, ann, None, Some("offers")).await;
    settled(&t, &other, ActivityStatus::Sent).await;
    let mails = smtp.wait_for(5, WAIT).await;
    assert_eq!(mails.len(), 5, "the suppressed one was not sent");
    assert_eq!(field(&mails[3], "List-Unsubscribe"), None);
    assert!(link(&d, &mails[4]) != url, "another category, another link");

    // Lifting the entry (the API's DELETE) lets the category through again.
    let lifted = reqwest::Client::new()
        .delete(format!("{}/api/v1/suppressions/{}", d.url, entry.suppression_id))
        .bearer_auth(&t.token)
        .send()
        .await
        .unwrap();
    assert_eq!(lifted.status(), StatusCode::NO_CONTENT);
    let resumed = send(&t, ann, Some("news@mail.example.com"), Some("digest")).await;
    settled(&t, &resumed, ActivityStatus::Sent).await;

    // Anything but a token Herald sealed: 404, by GET and by POST, never a 5xx.
    let (base, _) = url.rsplit_once('/').unwrap();
    let flipped = format!("{}{}", if token.starts_with('A') { "B" } else { "A" }, &token[1..]);
    let foreign = herald_daemon::unsubscribe::seal(
        &herald_daemon::secret::ServerSecret::new(herald_daemon::config::Secret::new(
            "another-secret-".repeat(3),
        )),
        &herald_daemon::unsubscribe::open(&d.state.secret, token).unwrap(),
    )
    .unwrap();
    for bad in [
        flipped.as_str(),
        &token[..token.len() - 1],
        &token[..20],
        "x",
        "not-a-token",
        &foreign,
        &"A".repeat(5000),
    ] {
        let bad_url = format!("{base}/{bad}");
        let (status, headers, page) = get(&bad_url).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "GET {bad}");
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
        assert!(page.contains("not valid"), "{page}");
        assert_eq!(post(&bad_url, FORM, ONE_CLICK).await.0, StatusCode::NOT_FOUND, "POST {bad}");
    }
    assert_eq!(suppressions(&d, &t).await.total_count, 0, "the bad tokens added nothing");
    d.stop().await;
}
both_backends!(one_click_unsubscribe, one_click);

/// The page in a real headless Chromium that runs no JavaScript: it shows the masked recipient
/// and the category, changes nothing when opened, and its button unsubscribes.
async fn page_in_a_browser(backend: Backend) {
    let (dns, smtp) = (DnsServer::start().await, SmtpSink::start().await);
    let d = daemon(backend, &smtp, &dns).await;
    let t = tenant(&d).await;
    let bob = "bob.jones@example.net";
    send(&t, bob, None, Some("weekly.digest")).await;
    let url = link(&d, &smtp.wait_for(1, WAIT).await.remove(0));

    let browser = Browser::start_without_javascript().await;
    // JavaScript is really off: a page that would retitle itself does not.
    browser.goto("data:text/html,<title>off</title><script>document.title='on'</script>").await;
    assert_eq!(browser.title().await, "off");

    browser.goto(&url).await;
    assert_eq!(browser.title().await, "Unsubscribe");
    let question = browser.text("main p").await;
    assert!(question.contains(&mask(bob)) && question.contains("weekly.digest"), "{question}");
    assert_eq!(suppressions(&d, &t).await.total_count, 0, "opening the page changes nothing");

    browser.click("form button[type=submit]").await;
    let confirmed = eventually("the confirmation page", WAIT, || async {
        browser.find("#unsubscribed").await?;
        Some(browser.text("#unsubscribed").await)
    })
    .await;
    assert!(confirmed.contains("You are unsubscribed") && confirmed.contains("weekly.digest"), "{confirmed}");
    assert_eq!(browser.current_url().await, url, "the form posts back to the link itself");
    browser.stop().await;

    let list = suppressions(&d, &t).await;
    assert_eq!(list.total_count, 1);
    assert_eq!(list.items[0].reason, SuppressionReason::Unsubscribe);
    assert_eq!(list.items[0].category.as_deref(), Some("weekly.digest"));
    let next = send(&t, bob, None, Some("weekly.digest")).await;
    settled(&t, &next, ActivityStatus::Suppressed).await;
    d.stop().await;
}
both_backends!(unsubscribe_page_in_chromium, page_in_a_browser);
