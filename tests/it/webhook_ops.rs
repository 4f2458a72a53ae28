//! The operator's side of event webhooks, on both backends: every `herald webhooks` command
//! against the real daemon delivering to a loopback receiver (an endpoint that accepts, one that
//! fails, one that is gone), and the dashboard's webhooks panel in a real terminal (tmux) showing
//! each endpoint's status and recent success rate. Every delivery is verified by the receiver
//! peer with the official `standardwebhooks` library.

use std::time::Duration;

use herald_tests::{Backend, TestDaemon, both_backends, eventually, peers::WebhookReceiver};
use serde_json::Value;

use crate::{cli::Cli, terminal::Terminal, tui::line_with};

const WAIT: Duration = Duration::from_secs(15);

/// The endpoint's newest message, once `pred` holds for it.
async fn newest_delivery(cli: &Cli, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    eventually(what, WAIT, || async {
        let page = cli.run(&["webhooks", "deliveries", id, "--json"]).await.json();
        let newest = page["items"][0].clone();
        pred(&newest).then_some(newest)
    })
    .await
}

async fn operate(backend: Backend) {
    let hooks = WebhookReceiver::start().await;
    hooks.set_answers("fail", &["500"]);
    hooks.set_answers("gone", &["410"]);
    let count = |label: &str| hooks.received(label).len();
    let d = TestDaemon::start_with(
        backend,
        vec![
            ("HERALD_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8".to_owned()),
            ("HERALD_WEBHOOK_RETRY_SCHEDULE", "100ms".to_owned()),
        ],
    )
    .await;
    let cli = Cli::new(&d).await;

    // Add: the secret is printed once; get and list never show it; --json is the API's JSON.
    let ok_url = hooks.url("ok");
    let added = cli
        .run(&["webhooks", "add", &ok_url, "--event", "webhook.test", "--description", "main", "--json"])
        .await
        .json();
    let ok = added["endpoint_id"].as_str().unwrap().to_owned();
    let secret = added["secret"].as_str().unwrap().to_owned();
    hooks.set_secrets("ok", &[&secret]);
    assert!(secret.starts_with("whsec_"), "{added}");
    let got = cli.run(&["webhooks", "get", &ok, "--json"]).await.json();
    assert_eq!(got, cli.api_json(&format!("/api/v1/webhooks/{ok}")).await);
    assert_eq!(
        (got["status"].as_str(), got["event_types"][0].as_str()),
        (Some("enabled"), Some("webhook.test"))
    );
    let table = cli.run(&["webhooks", "list"]).await;
    for needle in [ok.as_str(), "enabled", "webhook.test", ok_url.as_str(), "main"] {
        assert!(table.ok().contains(needle), "`{needle}` in:\n{}", table.stdout);
    }
    assert!(!table.ok().contains(&secret) && !got.to_string().contains(&secret), "the secret is shown once");
    assert_eq!(cli.run(&["webhooks", "list", "--json"]).await.json(), cli.api_json("/api/v1/webhooks").await);

    // Test: the receiver gets it, and `deliveries` shows the attempt.
    let tested = cli.run(&["webhooks", "test", &ok]).await;
    assert!(tested.ok().contains("webhook.test queued as msg_"), "{}", tested.stdout);
    let newest =
        newest_delivery(&cli, &ok, "the test event to be delivered", |m| m["status"] == "succeeded").await;
    assert_eq!(
        (newest["event_type"].as_str(), newest["attempts"][0]["http_status"].as_u64()),
        (Some("webhook.test"), Some(204))
    );
    assert_eq!(count("ok"), 1);
    let table = cli.run(&["webhooks", "deliveries", &ok]).await;
    for needle in [newest["message_id"].as_str().unwrap(), "webhook.test", "succeeded", "204"] {
        assert!(table.ok().contains(needle), "`{needle}` in:\n{}", table.stdout);
    }

    // Update and rotate.
    let disabled = cli.run(&["webhooks", "update", &ok, "--disable", "--json"]).await.json();
    assert_eq!(disabled["status"], "disabled");
    let enabled = cli
        .run(&["webhooks", "update", &ok, "--enable", "--all-events", "--no-description", "--json"])
        .await
        .json();
    assert_eq!(
        (enabled["status"].as_str(), &enabled["event_types"], &enabled["description"]),
        (Some("enabled"), &Value::Null, &Value::Null)
    );
    let rotated = cli.run(&["webhooks", "rotate-secret", &ok, "--json"]).await.json();
    let new_secret = rotated["secret"].as_str().unwrap();
    hooks.set_secrets("ok", &[new_secret, &secret]);
    assert!(new_secret.starts_with("whsec_") && new_secret != secret, "{rotated}");
    assert!(cli.run(&["webhooks", "rotate-secret", &ok]).await.stderr.contains("old secret"));

    // Adds an endpoint with the CLI and tells the receiver its secret; its id.
    let add = |url: &str, label: &'static str| {
        let (cli, hooks, url) = (&cli, &hooks, url.to_owned());
        async move {
            let added = cli.run(&["webhooks", "add", &url, "--json"]).await.json();
            hooks.set_secrets(label, &[added["secret"].as_str().unwrap()]);
            added["endpoint_id"].as_str().unwrap().to_owned()
        }
    };

    // A failing endpoint: the schedule runs out, the message is failed; `recover` sends it again.
    let failing = add(&hooks.url("fail"), "fail").await;
    cli.run(&["webhooks", "test", &failing]).await.ok();
    newest_delivery(&cli, &failing, "the schedule to run out", |m| m["status"] == "failed").await;
    let tries = count("fail");
    assert!(tries >= 2, "tried, then retried: {tries}");
    let recovered = cli.run(&["webhooks", "recover", &failing, "--since", "1h"]).await;
    assert!(recovered.ok().contains("1 failed messages"), "{}", recovered.stdout);
    eventually("the recovered message to be sent again", WAIT, || async {
        (count("fail") > tries).then_some(())
    })
    .await;
    // Five failures in a row trip it: paused (a probe a second, its later events held), which
    // `list` and `get` show.
    cli.run(&["webhooks", "test", &failing]).await.ok();
    let paused = eventually("the failing endpoint to be paused", WAIT, || async {
        let e = cli.run(&["webhooks", "get", &failing, "--json"]).await.json();
        (e["paused"] == true).then_some(e)
    })
    .await;
    assert!(paused["failing_since"].is_string() && paused["status"] == "enabled", "{paused}");
    // And it stays paused while it is probed with nothing owed (a probe a second).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let still = cli.run(&["webhooks", "get", &failing, "--json"]).await.json();
    assert_eq!(still["paused"], true, "{still}");
    let table = cli.run(&["webhooks", "list"]).await;
    let line = table.ok().lines().find(|l| l.contains(&failing)).unwrap_or_default().to_owned();
    assert!(line.contains("paused"), "{}", table.stdout);
    let shown = cli.run(&["webhooks", "get", &failing]).await;
    assert!(shown.ok().contains("failing since") && shown.ok().contains("paused"), "{}", shown.stdout);

    // A gone endpoint is disabled at once, with the reason.
    let gone = add(&hooks.url("gone"), "gone").await;
    cli.run(&["webhooks", "test", &gone]).await.ok();
    let shown = eventually("the 410 to disable the endpoint", WAIT, || async {
        let e = cli.run(&["webhooks", "get", &gone, "--json"]).await.json();
        (e["status"] == "disabled").then_some(e)
    })
    .await;
    assert!(shown["disabled_reason"].as_str().unwrap().contains("410"), "{shown}");
    assert_eq!(count("gone"), 1, "never tried again");

    // The dashboard's panel: each endpoint, its status and its success rate.
    let term = Terminal::start(&cli, "webhooks", &["tui"], &[]).await;
    line_with(&term, "activity: live", "the dashboard to connect", |_| true).await;
    term.keys(&["w"]);
    line_with(&term, &ok_url, "the healthy endpoint", |l| l.contains("enabled") && l.contains("100% of 1"))
        .await;
    line_with(&term, &hooks.url("gone"), "the gone endpoint", |l| {
        l.contains("disabled") && l.contains("0% of 1")
    })
    .await;
    line_with(&term, &hooks.url("fail"), "the failing endpoint, paused", |l| {
        l.contains("paused") && l.contains("0% of")
    })
    .await;
    line_with(&term, "failing for", "how long it has been failing", |_| true).await;
    // `q` closes the panel (no Escape: an Escape then `q` sent at once reads as Alt-q), then quits.
    term.keys(&["q"]);
    eventually("the panel to close", WAIT, || async {
        (!term.capture().await.contains("Webhook endpoints")).then_some(())
    })
    .await;
    term.keys(&["q"]);
    line_with(&term, "[exit 0]", "the dashboard to quit", |_| true).await;

    // Remove; bad input is refused with the field named.
    assert!(cli.run(&["webhooks", "rm", &gone]).await.ok().contains("removed"));
    cli.run(&["webhooks", "get", &gone]).await.failed(4, "not_found");
    cli.run(&["webhooks", "add", "ftp://example.com/x"]).await.failed(2, "url");
    cli.run(&["webhooks", "add", "http://10.1.2.3/hook"]).await.failed(2, "url");
    cli.run(&["webhooks", "add", &ok_url, "--event", "nope.never"]).await.failed(2, "nope.never");
    cli.run(&["webhooks", "get", "whe_nope"]).await.failed(2, "whe_");
    d.stop().await;
}
both_backends!(webhooks_from_the_cli_and_the_dashboard_on_each_backend, operate);

/// Removing a busy endpoint stops its deliveries at once (only a request already under way may
/// end), and the daemon's purge then deletes its messages and its row.
async fn a_removal_stops_deliveries_at_once(backend: Backend) {
    let (d, _boot, key, hooks) = crate::webhooks::start_with(backend, Vec::new()).await;
    let id = crate::webhooks::endpoint(&key, &hooks, "busy", None).await.endpoint.endpoint_id;
    hooks.set_answers("busy", &["slow:300"]);
    // Test events of one endpoint share a subject: they go one after another, 300 ms each.
    for _ in 0..10 {
        key.test_webhook(&id).await.unwrap();
    }
    hooks.wait_for("busy", 2, WAIT).await;
    key.remove_webhook(&id).await.unwrap();
    let at_removal = hooks.received("busy").len();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = hooks.received("busy").len();
    assert!(after <= at_removal + 1, "{after} requests after the removal, {at_removal} before it");
    let left = |table: &'static str| {
        let sql = format!(
            "SELECT COUNT(*) FROM {table} WHERE {} = '{id}'",
            if table == "webhook_messages" { "endpoint_id" } else { "id" }
        );
        let url = d.database_url.clone();
        async move { backend.count(&url, &sql).await }
    };
    eventually("the purge to delete the endpoint's messages and row", WAIT, || async {
        (left("webhook_messages").await == 0 && left("webhook_endpoints").await == 0).then_some(())
    })
    .await;
    d.stop().await;
}
both_backends!(a_removal_stops_deliveries_at_once_on_each_backend, a_removal_stops_deliveries_at_once);
