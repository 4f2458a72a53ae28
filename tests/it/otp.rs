//! One-time passwords on both backends: delivered through the real SMTP server and the
//! Twilio-shaped API, every state of spec §3.1 reached, limits held in the database, and no
//! plaintext code at rest or in the logs.

use std::{collections::HashMap, time::Duration};

use herald_common::{
    ErrorCode, Problem, Scope,
    api::{
        notifications::Channel,
        otp::{OtpSendIn, OtpSendOut},
    },
    client::Client,
};
use herald_tests::{
    Backend, TestDaemon, both_backends,
    peers::{SmtpSink, TwilioServer, twilio},
};

async fn daemon(backend: Backend, smtp: &SmtpSink, twilio: &TwilioServer) -> TestDaemon {
    TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_SMTP_URL", smtp.url()),
            ("HERALD_SMS_PROVIDER", "twilio".into()),
            ("HERALD_TWILIO_BASE_URL", twilio.base_url()),
            ("HERALD_TWILIO_ACCOUNT_SID", "AC123".into()),
            ("HERALD_TWILIO_AUTH_TOKEN", "twilio-token".into()),
            ("HERALD_SMS_FROM", "+15550000000".into()),
        ],
    )
    .await
}

async fn peers() -> (SmtpSink, TwilioServer) {
    (SmtpSink::start().await, TwilioServer::start("AC123", "twilio-token").await)
}

/// The code in a delivered message ("… code is 123456. …").
fn code_in(text: &str) -> String {
    let start = text.find("code is ").expect("the message names the code") + "code is ".len();
    text[start..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

fn problem_of(error: herald_common::client::ClientError) -> Problem {
    error.problem().cloned().unwrap_or_else(|| panic!("expected a problem, got {error}"))
}

async fn send_email(key: &Client, sink: &SmtpSink, to: &str) -> (OtpSendOut, String) {
    let before = sink.messages().len();
    let sent = key.send_otp(&OtpSendIn::new(Channel::Email, to), None).await.unwrap();
    let mail = sink.wait_for(before + 1, Duration::from_secs(10)).await.pop().unwrap();
    (sent, code_in(&mail.raw))
}

async fn email_codes_verify_once(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let (sent, code) = send_email(&key, &smtp, "ann@example.com").await;
    assert_eq!(sent.status, "sent");
    assert!(sent.transaction_id.as_str().starts_with("otp_"));
    assert_eq!(
        (sent.recipient.as_str(), sent.channel, sent.expires_in_seconds),
        ("a*n@example.com", Channel::Email, 300)
    );
    assert_eq!(code.len(), 6, "a 6-digit code by default");
    assert!(code.bytes().all(|b| b.is_ascii_digit()));
    let mail = smtp.messages().pop().unwrap();
    assert!(mail.raw.contains("Subject: Your verification code"));

    let verified = key.verify_otp(&sent.transaction_id, &code).await.unwrap();
    assert_eq!((verified.status.as_str(), &verified.transaction_id), ("verified", &sent.transaction_id));
    let again = problem_of(key.verify_otp(&sent.transaction_id, &code).await.unwrap_err());
    assert_eq!((again.status, again.code), (409, ErrorCode::OtpAlreadyVerified));
}
both_backends!(email_codes_verify_once_on_each_backend, email_codes_verify_once);

async fn sms_codes_through_twilio(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let mut request = OtpSendIn::new(Channel::Sms, "+14155550100");
    request.length = Some(4);
    request.ttl_seconds = Some(120);
    let sent = key.send_otp(&request, None).await.unwrap();
    assert_eq!((sent.recipient.as_str(), sent.expires_in_seconds), ("+14*******00", 120));
    let message = tw.messages().pop().unwrap();
    assert_eq!(message.to, "+14155550100");
    let code = code_in(&message.body);
    assert_eq!(code.len(), 4);
    assert!(message.body.contains("2 min"), "{}", message.body);
    key.verify_otp(&sent.transaction_id, &code).await.unwrap();

    // A provider that refuses the number: 502, recorded as failed, nothing to verify.
    let refused = problem_of(
        key.send_otp(&OtpSendIn::new(Channel::Sms, twilio::INVALID_NUMBER), None).await.unwrap_err(),
    );
    assert_eq!((refused.status, refused.code), (502, ErrorCode::DeliveryFailed));
    let detail = refused.detail.unwrap();
    assert!(detail.contains("21211") && !detail.contains("15005550001"), "masked provider text: {detail}");
}
both_backends!(sms_codes_through_twilio_on_each_backend, sms_codes_through_twilio);

async fn five_wrong_codes_tombstone(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let (sent, code) = send_email(&key, &smtp, "bob@example.com").await;
    let id = &sent.transaction_id;
    let wrong = if code == "000000" { "111111" } else { "000000" };
    for remaining in [4, 3, 2, 1] {
        let p = problem_of(key.verify_otp(id, wrong).await.unwrap_err());
        assert_eq!(
            (p.status, p.code, p.attempts_remaining),
            (400, ErrorCode::OtpInvalidCode, Some(remaining))
        );
    }
    let p = problem_of(key.verify_otp(id, wrong).await.unwrap_err());
    assert_eq!((p.status, p.code), (423, ErrorCode::OtpTombstoned), "the 5th failure tombstones");
    let p = problem_of(key.verify_otp(id, &code).await.unwrap_err());
    assert_eq!((p.status, p.code), (423, ErrorCode::OtpTombstoned), "even the right code, for ever");
}
both_backends!(five_wrong_codes_tombstone_on_each_backend, five_wrong_codes_tombstone);

async fn parallel_guesses_count_one_by_one(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let (sent, code) = send_email(&key, &smtp, "carol@example.com").await;
    let wrong = if code == "000000" { "111111" } else { "000000" };
    let guesses: Vec<_> = (0..30)
        .map(|_| {
            let (key, id) = (key.clone(), sent.transaction_id.clone());
            tokio::spawn(async move { problem_of(key.verify_otp(&id, wrong).await.unwrap_err()) })
        })
        .collect();
    let mut by_code: HashMap<String, usize> = HashMap::new();
    for guess in guesses {
        *by_code.entry(guess.await.unwrap().code.as_str().to_owned()).or_default() += 1;
    }
    assert_eq!(by_code.get("otp_invalid_code"), Some(&4), "{by_code:?}");
    assert_eq!(by_code.get("otp_tombstoned"), Some(&26), "the 5th and every later guess: {by_code:?}");
    let p = problem_of(key.verify_otp(&sent.transaction_id, &code).await.unwrap_err());
    assert_eq!(p.code, ErrorCode::OtpTombstoned);
}
both_backends!(parallel_guesses_count_one_by_one_on_each_backend, parallel_guesses_count_one_by_one);

async fn codes_expire(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let mut request = OtpSendIn::new(Channel::Email, "dave@example.com");
    request.ttl_seconds = Some(30);
    let sent = key.send_otp(&request, None).await.unwrap();
    let code = code_in(&smtp.wait_for(1, Duration::from_secs(10)).await[0].raw);
    d.state.clock.advance(Duration::from_secs(31));
    for _ in 0..2 {
        let p = problem_of(key.verify_otp(&sent.transaction_id, &code).await.unwrap_err());
        assert_eq!((p.status, p.code), (410, ErrorCode::OtpExpired));
    }
}
both_backends!(codes_expire_on_each_backend, codes_expire);

async fn limits_hold_in_the_database(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    // Five sends per recipient per 10 minutes (the address's case does not matter).
    for to in ["eve@example.com", "Eve@example.com", "eve@example.com", "EVE@example.com", "eve@example.com"]
    {
        key.send_otp(&OtpSendIn::new(Channel::Email, to), None).await.unwrap();
    }
    let response = key
        .request(reqwest::Method::POST, "/api/v1/otp/send")
        .json(&OtpSendIn::new(Channel::Email, "eve@example.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=600).contains(&retry_after), "{retry_after}");
    key.send_otp(&OtpSendIn::new(Channel::Email, "frank@example.com"), None)
        .await
        .expect("other recipients are not limited");
    d.state.clock.advance(Duration::from_secs(601));
    key.send_otp(&OtpSendIn::new(Channel::Email, "eve@example.com"), None)
        .await
        .expect("the window moved on");

    // Twenty failed verifications per recipient per 24 h, across transactions: four codes
    // guessed at five times each, then a fifth code cannot even be tried.
    d.state.clock.advance(Duration::from_secs(601));
    for _ in 0..4 {
        let otp = key.send_otp(&OtpSendIn::new(Channel::Email, "eve@example.com"), None).await.unwrap();
        for _ in 0..5 {
            let p = problem_of(key.verify_otp(&otp.transaction_id, "wrong-guess").await.unwrap_err());
            assert!(matches!(p.code, ErrorCode::OtpInvalidCode | ErrorCode::OtpTombstoned), "{p}");
        }
    }
    let before = smtp.messages().len();
    let last = key.send_otp(&OtpSendIn::new(Channel::Email, "eve@example.com"), None).await.unwrap();
    let code = code_in(&smtp.wait_for(before + 1, Duration::from_secs(10)).await.pop().unwrap().raw);
    let p = problem_of(key.verify_otp(&last.transaction_id, "wrong-guess").await.unwrap_err());
    assert_eq!((p.status, p.code), (429, ErrorCode::RateLimited), "the 21st failure in 24 h is refused");
    let p = problem_of(key.verify_otp(&last.transaction_id, &code).await.unwrap_err());
    assert_eq!(p.code, ErrorCode::RateLimited, "even the right code: guessing is over for today");
    d.state.clock.advance(Duration::from_secs(24 * 3600));
    let before = smtp.messages().len();
    let late = key.send_otp(&OtpSendIn::new(Channel::Email, "eve@example.com"), None).await.unwrap();
    let code = code_in(&smtp.wait_for(before + 1, Duration::from_secs(10)).await.pop().unwrap().raw);
    key.verify_otp(&late.transaction_id, &code).await.expect("a day later the limit has passed");
}
both_backends!(limits_hold_in_the_database_on_each_backend, limits_hold_in_the_database);

async fn idempotent_sends_send_once(backend: Backend) {
    let (smtp, tw) = peers().await;
    let d = daemon(backend, &smtp, &tw).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let request = OtpSendIn::new(Channel::Sms, "+14155550123");
    let first = key.send_otp(&request, Some("login-7")).await.unwrap();
    let again = key
        .request(reqwest::Method::POST, "/api/v1/otp/send")
        .header("Idempotency-Key", "login-7")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<OtpSendOut>().await.unwrap(), first);
    assert_eq!(tw.messages().len(), 1, "a replay sends nothing");
    let mut other = request.clone();
    other.ttl_seconds = Some(60);
    let p = problem_of(key.send_otp(&other, Some("login-7")).await.unwrap_err());
    assert_eq!(p.code, ErrorCode::IdempotencyKeyReused);
}
both_backends!(idempotent_sends_send_once_on_each_backend, idempotent_sends_send_once);

#[tokio::test]
async fn custom_codes_need_their_scope_and_shape() {
    let (smtp, tw) = peers().await;
    let d = daemon(Backend::Sqlite, &smtp, &tw).await;
    let boot = d.bootstrap().await;
    let plain = herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &[]).await.unwrap();
    let plain = d.with_token(&plain.api_key);
    let mut request = OtpSendIn::new(Channel::Sms, "+14155550100");
    request.code = Some("Herald-42_x".into());
    let p = problem_of(plain.send_otp(&request, None).await.unwrap_err());
    assert_eq!((p.status, p.scope.as_deref()), (403, Some("otp:custom_code")));

    let full = d.with_token(&boot.api_key);
    let sent = full.send_otp(&request, None).await.unwrap();
    assert_eq!(code_in(&tw.messages().pop().unwrap().body), "Herald-42_x");
    full.verify_otp(&sent.transaction_id, "Herald-42_x").await.unwrap();
    for bad in ["abc", "has space", "x".repeat(17).as_str(), "ünï-code"] {
        request.code = Some(bad.to_owned());
        let p = problem_of(full.send_otp(&request, None).await.unwrap_err());
        assert_eq!((p.status, p.errors[0].field.as_str()), (422, "code"), "{bad}");
    }
}

#[tokio::test]
async fn invalid_sends_name_their_fields() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let cases = [
        (serde_json::json!({"channel": "whatsapp", "recipient": "+14155550100"}), "channel"),
        (serde_json::json!({"channel": "in_app", "recipient": "u1"}), "channel"),
        (serde_json::json!({"channel": "carrier-pigeon", "recipient": "x"}), "channel"),
        (serde_json::json!({"channel": "sms", "recipient": "4155550100"}), "recipient"),
        (serde_json::json!({"channel": "email", "recipient": "nope"}), "recipient"),
        (serde_json::json!({"channel": "sms", "recipient": "+14155550100", "length": 5}), "length"),
        (
            serde_json::json!({"channel": "sms", "recipient": "+14155550100", "ttl_seconds": 29}),
            "ttl_seconds",
        ),
        (
            serde_json::json!({"channel": "sms", "recipient": "+14155550100", "ttl_seconds": 601}),
            "ttl_seconds",
        ),
    ];
    for (body, field) in cases {
        let response =
            key.request(reqwest::Method::POST, "/api/v1/otp/send").json(&body).send().await.unwrap();
        let p: Problem = response.json().await.unwrap();
        assert_eq!(p.status, 422, "{body}");
        assert!(p.errors.iter().any(|e| e.field == field), "{body}: {:?}", p.errors);
    }
    let malformed =
        herald_common::api::otp::OtpVerifyIn { transaction_id: "otp_nope".into(), code: "123456".into() };
    let p = problem_of(key.post::<_, serde_json::Value>("/api/v1/otp/verify", &malformed).await.unwrap_err());
    assert_eq!(p.status, 404);
}

#[tokio::test]
async fn another_tenants_transaction_is_not_found() {
    let (smtp, tw) = peers().await;
    let d = daemon(Backend::Sqlite, &smtp, &tw).await;
    let mine = d.with_token(&d.bootstrap().await.api_key);
    let theirs = d.with_token(&d.bootstrap().await.api_key);
    let (sent, code) = send_email(&mine, &smtp, "gina@example.com").await;
    let p = problem_of(theirs.verify_otp(&sent.transaction_id, &code).await.unwrap_err());
    assert_eq!((p.status, p.code), (404, ErrorCode::NotFound));
    mine.verify_otp(&sent.transaction_id, &code).await.expect("still verifiable by its owner");
}

#[tokio::test]
async fn no_plaintext_code_at_rest() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let key = d.with_token(&d.bootstrap().await.api_key);
    let code = "Zq7-Plaintext_9";
    let mut request = OtpSendIn::new(Channel::Sms, "+14155550100");
    request.code = Some(code.into());
    let sent = key.send_otp(&request, Some("scan-1")).await.unwrap();
    key.verify_otp(&sent.transaction_id, "wrong-one").await.unwrap_err();
    let mut scanned = 0;
    for entry in std::fs::read_dir(d.dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("herald.db") {
            let bytes = std::fs::read(&path).unwrap();
            scanned += bytes.len();
            assert!(
                !bytes.windows(code.len()).any(|w| w == code.as_bytes()),
                "the code is in {}",
                path.display()
            );
            assert!(
                !bytes.windows(12).any(|w| w == b"+14155550100"),
                "the raw recipient is in {}",
                path.display()
            );
        }
    }
    assert!(scanned > 0, "the database and its WAL were scanned");
}

#[tokio::test]
async fn codes_never_reach_the_logs() {
    use crate::process::{heraldd, run, start_serving, terminate};
    herald_tests::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let (_, out, _) = run(heraldd(dir.path()).args(["admin", "bootstrap", "--json"])).await;
    let boot: herald_common::api::admin::Bootstrapped = serde_json::from_str(out.trim()).unwrap();
    let mut command = heraldd(dir.path());
    command.env("HERALD_LOG", "debug,hyper=info,h2=info");
    let (child, addr, mut logs) = start_serving(&mut command).await;
    let key = Client::new(format!("http://{addr}")).with_token(&boot.api_key);
    let mut request = OtpSendIn::new(Channel::Sms, "+14155550100");
    request.code = Some("Log-Canary-77".into());
    let sent = key.send_otp(&request, None).await.unwrap();
    key.verify_otp(&sent.transaction_id, "Log-Canary-78").await.unwrap_err();
    key.verify_otp(&sent.transaction_id, "Log-Canary-77").await.unwrap();
    terminate(&child);
    crate::process::exit_code(child).await;
    let mut lines = 0;
    while let Ok(line) = logs.try_recv() {
        lines += 1;
        assert!(!line.contains("Log-Canary"), "a code reached the log: {line}");
        assert!(!line.contains("4155550100"), "a raw recipient reached the log: {line}");
    }
    assert!(lines > 5, "debug logs were produced ({lines} lines)");
    assert!(Scope::ALL.contains(&Scope::OtpVerify));
}
