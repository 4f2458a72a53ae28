//! The `herald` CLI as a person or a script uses it: the real binary against the real daemon, on
//! both backends. Every command's happy path and error path, the exit codes, `--json` equal to
//! the API's own JSON, a follow that survives the daemon's restart, a bulk send interrupted and
//! run again (each recipient gets one message), and a closed pipe (the CLI on a terminal:
//! `cli_terminal.rs`).

use std::{collections::BTreeMap, path::Path, process::Stdio, time::Duration};

use herald_common::{
    Scope,
    api::{activity::ActivityStatus, admin::Bootstrapped, notifications::Channel},
    client::{ActivityQuery, Client},
};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::SmtpSink};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};

const HERALD: &str = env!("CARGO_BIN_EXE_herald-it");
const WAIT: Duration = Duration::from_secs(10);

/// What a run printed and how it ended.
#[derive(Debug)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "exit code; stderr:\n{}\nstdout:\n{}", self.stderr, self.stdout);
        &self.stdout
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }

    #[track_caller]
    pub fn failed(&self, code: i32, needle: &str) {
        assert_eq!(self.code, code, "exit code; stderr:\n{}", self.stderr);
        assert!(self.stderr.contains(needle), "stderr lacks `{needle}`:\n{}", self.stderr);
    }
}

/// The CLI pointed at a daemon with one tenant's credentials, in a clean environment.
pub(crate) struct Cli {
    pub url: String,
    pub boot: Bootstrapped,
    pub operator: String,
    home: tempfile::TempDir,
}

impl Cli {
    pub async fn new(d: &TestDaemon) -> Cli {
        let boot = d.bootstrap().await;
        let operator = d.idp.operator_token(&boot.tenant_id, &Scope::ALL);
        Cli { url: d.url.clone(), boot, operator, home: tempfile::tempdir().unwrap() }
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(HERALD);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HERALD_CLI_CONFIG", self.home.path().join("cli.toml"))
            .env("HERALD_URL", &self.url)
            .env("HERALD_API_KEY", &self.boot.api_key)
            .env("HERALD_OPERATOR_TOKEN", &self.operator)
            .current_dir(self.home.path())
            .kill_on_drop(true);
        command
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        run(self.command().args(args)).await
    }

    /// Stores a template with the CLI; its id.
    async fn template(&self, name: &str, subject: &str, body: &str) -> String {
        let args = ["templates", "create", "--name", name, "--subject", subject, "--body", body, "--json"];
        let template = self.run(&args).await.json();
        template["template_id"].as_str().unwrap().to_owned()
    }

    fn api(&self) -> Client {
        Client::new(&self.url).with_token(&self.boot.api_key)
    }

    /// The API's own JSON for `path`, with the operator token.
    pub async fn api_json(&self, path: &str) -> Value {
        let response = Client::new(&self.url)
            .with_token(&self.operator)
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.status());
        response.json().await.unwrap()
    }
}

pub(crate) async fn run(command: &mut Command) -> Run {
    let output = command.stdin(Stdio::null()).output().await.expect("run herald");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn smtp_env(smtp: &SmtpSink) -> Vec<(&'static str, String)> {
    vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "100ms".to_owned())]
}

async fn every_command(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(backend, smtp_env(&smtp)).await;
    let cli = Cli::new(&d).await;

    // Health and identity.
    let health = cli.run(&["health"]).await;
    assert!(health.ok().contains("delivery-workers") && health.ok().contains("running"), "{}", health.stdout);
    assert_eq!(cli.run(&["whoami", "--json"]).await.json()["kind"], "api_key");

    // Send, then look it up: the CLI's JSON is the API's JSON.
    let sent = cli
        .run(&[
            "send",
            "--channel",
            "email",
            "--to",
            "ann@example.com",
            "--subject",
            "Hi",
            "--body",
            "Hello",
            "--json",
        ])
        .await
        .json();
    assert_eq!(
        (sent["status"].as_str(), sent["delivery_status"].as_str()),
        (Some("accepted"), Some("queued"))
    );
    let id = sent["notification_id"].as_str().unwrap().to_owned();
    smtp.wait_for(1, WAIT).await;
    let shown = eventually("the email to be sent", WAIT, || async {
        let shown = cli.run(&["notifications", "get", &id, "--json"]).await.json();
        (shown["delivery_status"] == "sent").then_some(shown)
    })
    .await;
    assert_eq!(shown, cli.api_json(&format!("/api/v1/notifications/{id}")).await);
    let table = cli.run(&["notifications", "get", &id]).await;
    assert!(table.ok().contains("a*n@example.com") && table.ok().contains("sent"), "{}", table.stdout);
    // Bad input: every field error, exit 2.
    cli.run(&["send", "--channel", "sms", "--to", "555", "--body", "x"]).await.failed(2, "recipient");
    cli.run(&["send", "--channel", "email", "--to", "a@example.com"]).await.failed(2, "body");
    // A template with variables, and in-app data.
    let template_id = cli.template("welcome", "Hi {{ name }}", "Hello {{ name }}").await;
    cli.run(&[
        "send",
        "--channel",
        "email",
        "--to",
        "bo@example.com",
        "--template",
        &template_id,
        "--var",
        "name=Bo",
    ])
    .await
    .ok();
    let mail = smtp.wait_for(2, WAIT).await.remove(1);
    assert!(mail.raw.contains("Hello Bo"), "{}", mail.raw);
    cli.run(&[
        "send",
        "--channel",
        "in_app",
        "--to",
        "ann",
        "--title",
        "Welcome",
        "--body",
        "Hi",
        "--data",
        "category=test",
    ])
    .await
    .ok();

    // Templates.
    assert!(cli.run(&["templates", "list"]).await.ok().contains("welcome"));
    cli.run(&["templates", "update", &template_id, "--name", "welcome2", "--body", "Hey"]).await.ok();
    assert_eq!(cli.run(&["templates", "get", &template_id, "--json"]).await.json()["name"], "welcome2");
    cli.run(&["templates", "rm", &template_id]).await.ok();
    cli.run(&["templates", "get", &template_id]).await.failed(4, "not_found");

    // OTP: the code arrives at the SMTP peer; a wrong one says how many tries are left.
    let otp = cli
        .run(&["otp", "send", "--channel", "email", "--to", "otp@example.com", "--length", "4", "--json"])
        .await
        .json();
    let transaction = otp["transaction_id"].as_str().unwrap().to_owned();
    let mail = smtp.wait_for(3, WAIT).await.remove(2);
    let code: String = mail.raw.split("code is ").nth(1).unwrap().chars().take(4).collect();
    let wrong = if code == "0000" { "1111" } else { "0000" };
    let refused = cli.run(&["otp", "verify", &transaction, wrong]).await;
    refused.failed(1, "otp_invalid_code");
    assert!(refused.stderr.contains("attempts remaining: 4"), "{}", refused.stderr);
    assert_eq!(cli.run(&["otp", "verify", &transaction, &code, "--json"]).await.json()["status"], "verified");
    cli.run(&["otp", "verify", &transaction, &code]).await.failed(5, "otp_already_verified");
    cli.run(&["otp", "verify", "otp_01kqzs0000000000000000000c", "1234"]).await.failed(4, "not_found");

    // Domains.
    let added = cli.run(&["domains", "add", "mail.example.com"]).await;
    let text = added.ok();
    assert!(text.contains("_herald-challenge.mail.example.com") && text.contains("IN TXT"), "{text}");
    let listed = cli.run(&["domains", "list", "--json"]).await.json();
    let domain_id = listed["domains"][0]["domain_id"].as_str().unwrap().to_owned();
    assert_eq!(listed, cli.api_json("/api/v1/domains").await);
    let checked = cli.run(&["domains", "verify", &domain_id]).await;
    assert!(checked.ok().contains("ownership"), "{}", checked.stdout);
    cli.run(&["domains", "verify", &domain_id, "--wait", "--timeout", "1s", "--interval", "100ms"])
        .await
        .failed(1, "the domain is");
    cli.run(&["domains", "rm", &domain_id]).await.ok();
    cli.run(&["domains", "get", &domain_id]).await.failed(4, "not_found");
    cli.run(&["domains", "add", "not a domain"]).await.failed(2, "name");

    // Activity: the list, its JSON, one item, and a retry that is refused.
    let feed = cli.run(&["activity", "list"]).await;
    assert!(feed.ok().contains(&id), "{}", feed.stdout);
    let page = cli.run(&["activity", "list", "--json", "--limit", "5"]).await.json();
    assert_eq!(page, cli.api_json("/api/v1/activity?limit=5").await);
    let all = cli.run(&["activity", "list", "--all", "--limit", "2", "--jsonl"]).await;
    assert_eq!(all.ok().lines().count(), page["total_count"].as_u64().unwrap() as usize, "every page");
    let detail = cli.run(&["activity", "get", &id]).await;
    assert!(detail.ok().contains("ATTEMPT") && detail.ok().contains("sent"), "{}", detail.stdout);
    cli.run(&["activity", "retry", &id]).await.failed(5, "not_retryable");
    // A malformed id is refused before any request; a well-formed unknown one is the API's 404.
    cli.run(&["activity", "get", "notif_nope"]).await.failed(2, "notif_");
    cli.run(&["activity", "get", "notif_01kqzs0000000000000000000c"]).await.failed(4, "not_found");
    cli.run(&["activity", "list", "--status", "lost"]).await.failed(2, "lost");

    // The inbox, with a minted token.
    let inbox = cli.run(&["inbox", "--user", "ann", "--json"]).await.json();
    assert_eq!(inbox["unread_count"], 1);
    let item = inbox["notifications"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(cli.run(&["inbox", "--user", "ann", "read", &item, "--json"]).await.json()["is_read"], true);
    assert!(cli.run(&["inbox", "--user", "ann"]).await.ok().contains("0 unread"));
    cli.run(&["inbox", "--user", "ann", "unread", &item]).await.ok();
    assert_eq!(cli.run(&["inbox", "--user", "ann", "read-all", "--json"]).await.json()["updated"], 1);
    cli.run(&["inbox"]).await.failed(2, "--user");
    cli.run(&["inbox", "--user", "ann", "read", "inapp_nope"]).await.failed(2, "inapp_");
    cli.run(&["inbox", "--user", "ann", "read", "inapp_01kqzs0000000000000000000c"])
        .await
        .failed(4, "not_found");

    // Tokens.
    let token = cli.run(&["token", "user", "ann", "--ttl", "600", "--json"]).await.json();
    let me = Client::new(&cli.url).with_token(token["token"].as_str().unwrap()).current_user().await.unwrap();
    assert_eq!(me.user_id, "ann");
    cli.run(&["token", "user", "ann", "--ttl", "5"]).await.failed(2, "ttl_seconds");
    d.stop().await;
}
both_backends!(cli_every_command_on_each_backend, every_command);

/// Exit codes for credentials and the network, a closed pipe, completions and man pages.
#[tokio::test]
async fn cli_exit_codes_and_conventions() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let cli = Cli::new(&d).await;
    for i in 0..30 {
        cli.api()
            .send_notification(
                &herald_common::api::notifications::NotificationIn::new(
                    Channel::Sms,
                    "+14155550100",
                    format!("n{i}"),
                ),
                None,
            )
            .await
            .unwrap();
    }
    // Authentication: 3.
    run(cli.command().env("HERALD_API_KEY", "hk_wrong").args([
        "send",
        "--channel",
        "sms",
        "--to",
        "+14155550100",
        "--body",
        "x",
    ]))
    .await
    .failed(3, "unauthorized");
    run(cli.command().env_remove("HERALD_API_KEY").args(["templates", "list"]))
        .await
        .failed(3, "HERALD_API_KEY");
    let narrow = d.idp.operator_token(&cli.boot.tenant_id, &[Scope::ActivityRead]);
    run(cli.command().env("HERALD_OPERATOR_TOKEN", narrow).args([
        "activity",
        "retry",
        "notif_01kqzs0000000000000000000c",
    ]))
    .await
    .failed(3, "insufficient_scope");
    // Usage: 2 (clap's own too).
    cli.run(&["send", "--channel", "carrier-pigeon", "--to", "x", "--body", "x"])
        .await
        .failed(2, "carrier-pigeon");
    cli.run(&["activity", "retry"]).await.failed(2, "<IDS>");
    run(cli.command().args(["--profile", "nope", "health"])).await.failed(2, "no profile `nope`");
    // Not reachable: 7.
    run(cli.command().env("HERALD_URL", "http://127.0.0.1:9").arg("health"))
        .await
        .failed(7, "cannot reach Herald");

    // A closed pipe ends the command quietly: `herald activity list --all | head -1`.
    let mut child = cli
        .command()
        .args(["activity", "list", "--all", "--limit", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = stdout.next_line().await.unwrap().unwrap();
    assert!(first.starts_with("ID"), "{first}");
    drop(stdout);
    let output = child.wait_with_output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "quiet exit: {}", String::from_utf8_lossy(&output.stderr));
    assert!(output.stderr.is_empty(), "nothing on stderr: {}", String::from_utf8_lossy(&output.stderr));

    // Completions and man pages, offline.
    for shell in ["bash", "zsh", "fish"] {
        let script = cli.run(&["completions", shell]).await;
        assert!(script.ok().contains("herald"), "{shell}");
    }
    assert!(cli.run(&["man"]).await.ok().contains(".TH herald"));
    let pages = cli.home.path().join("man");
    cli.run(&["man", "--dir", pages.to_str().unwrap()]).await.ok();
    assert!(pages.join("herald-activity-retry.1").exists());
    d.stop().await;
}

/// `activity retry --all-failed` over more failures than a page of the feed holds: counted (the
/// permanent failure left out), refused without a terminal or `--yes`, then queued by the
/// server's bulk retry; and `-vv` tells each request on stderr, never a credential.
#[tokio::test]
async fn cli_retries_every_failed_item_in_bulk() {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(Backend::Sqlite, smtp_env(&smtp)).await;
    let cli = Cli::new(&d).await;
    const BUSY: usize = 120;
    for i in 0..BUSY {
        smtp.set_rule(&format!("busy{i}@example.com"), "451");
    }
    smtp.set_rule("gone@example.com", "550");
    let api = cli.api();
    let email = |to: String| herald_common::api::notifications::NotificationIn::new(Channel::Email, to, "x");
    for i in 0..BUSY {
        api.send_notification(&email(format!("busy{i}@example.com")), None).await.unwrap();
    }
    api.send_notification(&email("gone@example.com".into()), None).await.unwrap();
    let operator = d.with_token(&cli.operator);
    let failed = ActivityQuery { status: Some(ActivityStatus::Failed), limit: Some(1), ..Default::default() };
    eventually("every delivery to fail", Duration::from_secs(60), || async {
        (operator.activity(&failed).await.unwrap().total_count == BUSY as u64 + 1).then_some(())
    })
    .await;

    let dry = cli.run(&["activity", "retry", "--all-failed", "--dry-run", "--jsonl"]).await;
    assert_eq!(dry.ok().lines().count(), BUSY, "both pages; not the permanent failure");
    cli.run(&["activity", "retry", "--all-failed"])
        .await
        .failed(2, &format!("{BUSY} items would be retried"));

    smtp.clear_rules();
    let retried = cli.run(&["activity", "retry", "--all-failed", "--yes", "--json", "-vv"]).await;
    let queued = retried.json();
    assert_eq!(
        (queued["status"].as_str(), queued["count"].as_u64()),
        (Some("retry_queued"), Some(BUSY as u64))
    );
    let told = &retried.stderr;
    for line in [
        "GET /api/v1/activity?status=failed&page=2&limit=100 → 200 OK",
        "POST /api/v1/activity/retry → 202 Accepted",
        "> authorization: Bearer [redacted]",
        "acting with the operator token",
    ] {
        assert!(told.contains(line), "stderr lacks `{line}`:\n{told}");
    }
    for secret in ["eyJ", "hk_", cli.operator.as_str(), cli.boot.api_key.as_str()] {
        assert!(!told.contains(secret), "a credential on stderr:\n{told}");
    }
    assert_eq!(smtp.wait_for(BUSY, Duration::from_secs(60)).await.len(), BUSY);
    let none_left = cli.run(&["activity", "retry", "--all-failed", "--yes"]).await;
    assert!(none_left.ok().contains("no failed, retryable deliveries match"), "{}", none_left.stdout);
    // Without -v, stderr stays quiet.
    assert!(cli.run(&["health"]).await.stderr.is_empty());
    d.stop().await;
}

/// `activity list --follow` across a restart of the daemon: every event once, in order, including
/// those created while the follower was reconnecting.
async fn follow_survives_a_restart(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let cli = Cli::new(&d).await;
    let mut child = cli
        .command()
        .args(["activity", "list", "--follow", "--jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON line: {line}")));
        }
    });
    // The follow shows changes from the moment it is live: probes until one is printed say it
    // is (a probe sent before may never be, one sent after is printed and set aside).
    let mut probes = std::collections::HashSet::new();
    loop {
        probes.insert(send_in_app(&cli.api(), 100).await);
        if let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
            assert!(probes.contains(event["item"]["transaction_id"].as_str().unwrap()), "{event}");
            break;
        }
    }
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(send_in_app(&cli.api(), i).await);
    }
    let mut events: Vec<Value> = Vec::new();
    receive_skipping(&mut rx, &mut events, 5, &probes).await;
    let d = d.restart().await;
    // Created while the follower waits to reconnect: replayed from its Last-Event-ID.
    for i in 5..10 {
        sent.push(send_in_app(&cli.api(), i).await);
    }
    receive_skipping(&mut rx, &mut events, 10, &probes).await;
    // Nothing more: one more item arrives next, after any duplicate the replay would have sent.
    let last = send_in_app(&cli.api(), 10).await;
    receive_skipping(&mut rx, &mut events, 11, &probes).await;
    assert_eq!(events.pop().unwrap()["item"]["transaction_id"].as_str(), Some(last.as_str()), "{events:?}");
    let ids: Vec<&str> = events.iter().map(|e| e["item"]["transaction_id"].as_str().unwrap()).collect();
    assert_eq!(ids, sent.iter().map(String::as_str).collect::<Vec<_>>(), "every event once, in order");
    let event_ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let mut sorted = event_ids.clone();
    sorted.sort_by_key(|id| {
        let (ms, rest) = id.split_once('-').unwrap();
        (ms.parse::<i64>().unwrap(), rest.to_owned())
    });
    assert_eq!(event_ids, sorted, "ascending event ids");
    let _ = child.start_kill();
    d.stop().await;
}
both_backends!(cli_follow_survives_a_restart_on_each_backend, follow_survives_a_restart);

async fn send_in_app(api: &Client, i: usize) -> String {
    let mut n =
        herald_common::api::notifications::NotificationIn::new(Channel::InApp, format!("user{i}"), "x");
    n.title = Some(format!("t{i}"));
    api.send_notification(&n, None).await.unwrap().notification_id.to_string()
}

/// Waits until `events` holds `count` lines of the follow, leaving out the `probes`' events.
async fn receive_skipping(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    events: &mut Vec<Value>,
    count: usize,
    probes: &std::collections::HashSet<String>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.len() < count {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(event))
                if probes.contains(event["item"]["transaction_id"].as_str().unwrap_or_default()) => {}
            Ok(Some(event)) => events.push(event),
            _ => panic!("{} of {count} events arrived: {events:#?}", events.len()),
        }
    }
}

fn write_rows(path: &Path, rows: usize) {
    let mut text = String::from("recipient,name\n");
    for i in 0..rows {
        text.push_str(&format!("bulk{i}@example.com,Person {i}\n"));
    }
    std::fs::write(path, text).unwrap();
}

/// A bulk send of 1,000 rows interrupted part-way (SIGINT) and run again: each recipient gets
/// exactly one message at the SMTP peer.
async fn bulk_send_resumes(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(backend, smtp_env(&smtp)).await;
    let cli = Cli::new(&d).await;
    let template_id = cli.template("bulk", "For {{ name }}", "Hello {{ name }}").await;
    let file = cli.home.path().join("list.csv");
    write_rows(&file, 1_000);
    let args = [
        "send",
        "--channel",
        "email",
        "--template",
        &template_id,
        "--file",
        "list.csv",
        "--concurrency",
        "4",
        // Slow enough that the interrupt lands part-way even on a loaded machine.
        "--rate",
        "250",
    ];
    let child = cli.command().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Interrupt once the daemon has accepted some rows: what the CLI has done, not how far the
    // delivery workers (which may lag on a loaded machine) have got.
    let operator = d.with_token(&cli.operator);
    let query = ActivityQuery { channel: Some(Channel::Email), limit: Some(1), ..Default::default() };
    eventually("some rows to be accepted", Duration::from_secs(30), || async {
        (operator.activity(&query).await.unwrap().total_count >= 100).then_some(())
    })
    .await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(130),
        "interrupted: {stderr}\n{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(stderr.contains("Run the same command again to resume"), "{stderr}");
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(summary.contains("not tried"), "the summary counts what was left: {summary}");

    let rerun = cli.run(&args).await;
    let text = rerun.ok();
    assert!(text.contains("already sent"), "{text}");
    smtp.wait_for(1_000, Duration::from_secs(60)).await;
    // Every delivery has ended once nothing is queued or sending (an item is `sent` only after
    // the SMTP server took it), so a duplicate would be in the sink by then.
    let api = cli.api();
    eventually("every delivery to end", Duration::from_secs(60), || async {
        let busy = |status| ActivityQuery { status: Some(status), limit: Some(1), ..Default::default() };
        let queued = api.activity(&busy(ActivityStatus::Queued)).await.ok()?.total_count;
        let sending = api.activity(&busy(ActivityStatus::Sending)).await.ok()?.total_count;
        (queued + sending == 0).then_some(())
    })
    .await;
    let mail = smtp.messages();
    let mut per_recipient: BTreeMap<String, usize> = BTreeMap::new();
    for m in &mail {
        for to in &m.rcpt_tos {
            *per_recipient.entry(to.clone()).or_default() += 1;
        }
    }
    assert_eq!(per_recipient.len(), 1_000, "every recipient");
    let twice: Vec<_> = per_recipient.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "each exactly once: {twice:?}");
    // And a third run sends nothing at all.
    let third = cli.run(&[&args[..], &["--json"]].concat()).await.json();
    assert_eq!((third["sent"].as_u64(), third["already_sent"].as_u64()), (Some(0), Some(1_000)));
    d.stop().await;
}
both_backends!(cli_bulk_send_resumes_on_each_backend, bulk_send_resumes);

/// `herald suppressions list|add|rm`, `send --category` and `activity list --category`: an entry
/// the CLI adds stops the next send of its category (`suppressed`, with the reason), leaves
/// transactional sends alone, is never shown unmasked, and `rm` lifts it.
async fn suppressions(backend: Backend) {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(backend, smtp_env(&smtp)).await;
    let cli = Cli::new(&d).await;

    let add = ["suppressions", "add", "--channel", "email", "--to", "Zed@Example.com", "--category", "news"];
    let added = cli.run(&[&add[..], &["--json"]].concat()).await.json();
    let id = added["suppression_id"].as_str().unwrap().to_owned();
    assert_eq!((added["reason"].as_str(), added["category"].as_str()), (Some("manual"), Some("news")));
    assert!(!added.to_string().to_lowercase().contains("zed@example.com"), "{added}");
    let again = cli.run(&add).await;
    assert!(again.ok().contains(&id), "{}", again.stdout);
    assert!(again.stderr.contains("already on the list"), "{}", again.stderr);

    let table = cli.run(&["suppressions", "list"]).await;
    for needle in [id.as_str(), "manual", "news", "z*d@example.com"] {
        assert!(table.ok().contains(needle), "`{needle}` in:\n{}", table.stdout);
    }
    assert!(!table.ok().to_lowercase().contains("zed@example.com"), "{}", table.stdout);
    let listed = cli.run(&["suppressions", "list", "--json"]).await.json();
    assert_eq!(listed, cli.api_json("/api/v1/suppressions").await);
    let mine = cli.run(&["suppressions", "list", "--recipient", "zed@example.com", "--json"]).await.json();
    assert_eq!(mine["total_count"], 1);
    let other = cli.run(&["suppressions", "list", "--recipient", "amy@example.com", "--json"]).await.json();
    assert_eq!(other["total_count"], 0);
    assert_eq!(
        cli.run(&["suppressions", "list", "--reason", "hard_bounce", "--json"]).await.json()["total_count"],
        0
    );

    // A newsletter to the recipient is suppressed at send time; a transactional email is sent.
    let send = |category: Option<&'static str>| {
        let mut args = vec![
            "send",
            "--channel",
            "email",
            "--to",
            "zed@example.com",
            "--subject",
            "Hi",
            "--body",
            "Hello",
        ];
        if let Some(category) = category {
            args.extend(["--category", category]);
        }
        args.push("--json");
        let cli = &cli;
        async move { cli.run(&args).await.json()["notification_id"].as_str().unwrap().to_owned() }
    };
    let news = send(Some("news")).await;
    let plain = send(None).await;
    for (id, status) in [(&news, "suppressed"), (&plain, "sent")] {
        eventually("the send to settle", WAIT, || async {
            let item = cli.run(&["activity", "get", id, "--json"]).await.json();
            (item["status"] == status).then_some(())
        })
        .await;
    }
    assert_eq!(smtp.wait_for(1, WAIT).await.len(), 1, "only the transactional email went out");
    let detail = cli.run(&["activity", "get", &news]).await;
    for needle in ["category", "news", "recipient suppressed: manual since", "suppressed"] {
        assert!(detail.ok().contains(needle), "`{needle}` in:\n{}", detail.stdout);
    }
    let feed = cli.run(&["activity", "list", "--category", "news", "--json"]).await.json();
    assert_eq!(feed["total_count"], 1, "{feed}");
    assert_eq!(feed["items"][0]["transaction_id"].as_str(), Some(news.as_str()));
    assert_eq!(feed["items"][0]["category"], "news");
    assert_eq!(feed, cli.api_json("/api/v1/activity?category=news").await);

    // Lifted: the list is empty and the id is gone.
    assert!(cli.run(&["suppressions", "rm", &id]).await.ok().contains("resume"));
    assert_eq!(cli.run(&["suppressions", "list", "--json"]).await.json()["total_count"], 0);
    cli.run(&["suppressions", "rm", &id]).await.failed(4, "not_found");
    // Bad input, refused with the field named.
    cli.run(&["suppressions", "add", "--channel", "email", "--to", "not an address"])
        .await
        .failed(2, "recipient");
    cli.run(&["suppressions", "add", "--channel", "sms", "--to", "+15551234567", "--category", "Bad Cat"])
        .await
        .failed(2, "category");
    cli.run(&["suppressions", "list", "--reason", "bored"]).await.failed(2, "bored");
    cli.run(&["suppressions", "rm", "sup_nope"]).await.failed(2, "sup_");
    d.stop().await;
}
both_backends!(cli_suppressions_on_each_backend, suppressions);
