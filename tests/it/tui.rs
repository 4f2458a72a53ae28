//! The dashboard (`herald tui`) in a real terminal (tmux), against the real daemon and SMTP peer,
//! on both backends: a failed delivery appears live, `r` retries it once the peer recovers and
//! its row turns sent; the inbox pane shows an in-app notification sent by another process within
//! a second; the screen survives a resize to 80×24; and quitting gives the terminal back.

use std::time::{Duration, Instant};

use herald_common::api::notifications::{Channel, NotificationIn};
use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::SmtpSink};

use crate::{cli::Cli, terminal::Terminal};

const WAIT: Duration = Duration::from_secs(15);

/// The screen's line that mentions `needle`, once `pred` holds for it.
pub(crate) async fn line_with(
    term: &Terminal,
    needle: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    eventually(what, WAIT, || async {
        let screen = term.capture().await;
        screen.lines().find(|l| l.contains(needle) && pred(l)).map(str::to_owned)
    })
    .await
}

async fn dashboard(backend: Backend) {
    let smtp = SmtpSink::start().await;
    smtp.set_rule("flaky@example.com", "451");
    let d = TestDaemon::start_with(
        backend,
        vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "100ms,100ms".to_owned())],
    )
    .await;
    let cli = Cli::new(&d).await;
    let term = Terminal::start(&cli, "dashboard", &["tui"], &[]).await;
    line_with(&term, "activity: live", "the dashboard to connect", |_| true).await;

    // A delivery that fails (the peer answers 451 to every attempt) appears, failed, live.
    let api = herald_common::client::Client::new(&cli.url).with_token(&cli.boot.api_key);
    let id = api
        .send_notification(&NotificationIn::new(Channel::Email, "flaky@example.com", "Hello"), None)
        .await
        .unwrap()
        .notification_id
        .to_string();
    let row = line_with(&term, &id, "the failure to show", |l| l.contains("failed")).await;
    assert!(
        row.contains("f***y@example.com") && row.contains("SMTP"),
        "the masked recipient and the reason: {row}"
    );

    // The peer recovers; `r` (the newest row is selected), `y`, and the row turns sent.
    smtp.clear_rules();
    term.keys(&["r"]);
    line_with(&term, "Retry", "the question", |l| l.contains(&id)).await;
    term.keys(&["y"]);
    let row = line_with(&term, &id, "the retried delivery to be sent", |l| l.contains("sent")).await;
    assert!(row.contains(" 1 ") || row.contains(" 1  "), "one retry counted: {row}");
    line_with(&term, "202 retry_queued", "the outcome", |_| true).await;
    assert_eq!(smtp.wait_for(1, WAIT).await[0].rcpt_tos, ["flaky@example.com"]);

    // The inbox pane: a user picked with `u`; an in-app notification sent by another process
    // (the CLI) shows within a second.
    term.keys(&["u"]);
    term.type_text("ann");
    term.keys(&["Enter"]);
    line_with(&term, "Inbox · ann", "the inbox pane", |l| l.contains("live")).await;
    let sent = cli
        .run(&[
            "send",
            "--channel",
            "in_app",
            "--to",
            "ann",
            "--title",
            "From another process",
            "--body",
            "hi",
        ])
        .await;
    let accepted = Instant::now();
    sent.ok();
    line_with(&term, "From another process", "the notification in the inbox pane", |_| true).await;
    assert!(accepted.elapsed() < Duration::from_secs(1), "shown {:?} after the 202", accepted.elapsed());
    line_with(&term, "Inbox · ann · 1 unread", "the unread count", |_| true).await;
    // `n` sends a test notification that travels the same way.
    term.keys(&["n"]);
    line_with(&term, "Test ", "the test notification", |l| !l.contains("accepted")).await;

    // The help lists the keys; 80×24 still draws everything that matters.
    term.keys(&["?"]);
    line_with(&term, "retry every failed item the filter matches", "the help", |_| true).await;
    term.keys(&["Escape"]);
    term.resize(80, 24);
    line_with(&term, "Enter detail", "the footer at 80×24", |_| true).await;
    line_with(&term, &id, "the row at 80×24", |l| l.contains("sent")).await;

    // Quitting gives the terminal back.
    term.keys(&["q"]);
    line_with(&term, "[exit 0]", "the dashboard to quit", |_| true).await;
    let screen = term.capture().await;
    assert!(!screen.contains("Activity"), "the dashboard's screen is gone:\n{screen}");
    d.stop().await;
}
both_backends!(dashboard_in_a_terminal_on_each_backend, dashboard);

/// Failures from before the dashboard opened come with its first page (loaded once the live feed
/// is connected); `R` counts the failed, retryable ones, asks, and queues them with one bulk
/// retry; they turn sent.
#[tokio::test]
async fn dashboard_retries_every_failed_item_at_once() {
    let smtp = SmtpSink::start().await;
    let d = TestDaemon::start_with(
        Backend::Sqlite,
        vec![("HERALD_SMTP_URL", smtp.url()), ("HERALD_RETRY_SCHEDULE", "100ms".to_owned())],
    )
    .await;
    let cli = Cli::new(&d).await;
    let api = herald_common::client::Client::new(&cli.url).with_token(&cli.boot.api_key);
    let mut ids = Vec::new();
    for name in ["ann", "bob", "cy"] {
        smtp.set_rule(&format!("{name}@example.com"), "451");
        let n = NotificationIn::new(Channel::Email, format!("{name}@example.com"), "Hello");
        ids.push(api.send_notification(&n, None).await.unwrap().notification_id);
    }
    let operator = d.with_token(&cli.operator);
    for id in &ids {
        eventually("the delivery to fail", WAIT, || async {
            let item = operator.activity_item(id).await.unwrap().item;
            (item.status == "failed").then_some(())
        })
        .await;
    }

    let term = Terminal::start(&cli, "bulk", &["tui"], &[]).await;
    for id in &ids {
        line_with(&term, id.as_str(), "the failure in the first page", |l| l.contains("failed")).await;
    }
    smtp.clear_rules();
    term.keys(&["R"]);
    line_with(&term, "Retry 3 failed, retryable deliveries?", "the question", |_| true).await;
    term.keys(&["y"]);
    line_with(&term, "3 items queued again", "the bulk retry's answer", |_| true).await;
    for id in &ids {
        line_with(&term, id.as_str(), "the retried delivery to be sent", |l| l.contains("sent")).await;
    }
    assert_eq!(smtp.wait_for(3, WAIT).await.len(), 3);
    term.keys(&["q"]);
    line_with(&term, "[exit 0]", "the dashboard to quit", |_| true).await;
    d.stop().await;
}

/// Ctrl-C quits from anywhere, and a refused credential shows as the stream's state (not a
/// crash): reconnecting would not fix a 401.
#[tokio::test]
async fn dashboard_ctrl_c_and_a_refused_credential() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let cli = Cli::new(&d).await;
    let term = Terminal::start(
        &cli,
        "refused",
        &["tui"],
        &[("HERALD_OPERATOR_TOKEN", "not.a.token"), ("HERALD_API_KEY", "hk_nope")],
    )
    .await;
    line_with(&term, "activity: failed", "the refusal to show", |l| l.contains("401")).await;
    term.keys(&["u"]);
    term.keys(&["C-c"]);
    line_with(&term, "[exit 0]", "Ctrl-C to quit from the prompt", |_| true).await;
    d.stop().await;
}
