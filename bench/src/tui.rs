//! `herald-bench tui`: the dashboard in a real terminal (tmux, 120×40) against the release daemon
//! on SQLite, while the activity stream carries `--rate` in-app dispatches a second for
//! `--seconds`, to 100 users, one of whom the inbox pane follows. The dashboard writes a line of
//! figures a second (`HERALD_TUI_STATS`): frames drawn, the slowest frame, the slowest batch of
//! stream events applied between frames, its memory, the items it holds and has seen.

use std::{path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use herald_common::{Scope, ids::TenantId};
use herald_tests::{Backend, TestIdp};
use serde::Deserialize;

use crate::{smtp, start_daemon_with};

pub struct Options {
    pub rate: usize,
    pub seconds: u64,
    pub daemon: PathBuf,
    pub herald: PathBuf,
}

#[derive(Deserialize)]
struct Second {
    frames: u64,
    slowest_ms: f64,
    slowest_update_ms: f64,
    rss_kib: Option<u64>,
    items: usize,
    seen: u64,
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket]);
        command
    }

    fn capture(&self) -> String {
        let out = self.command().args(["capture-pane", "-p", "-t", "bench"]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    }

    fn keys(&self, keys: &[&str]) {
        let _ = self.command().args(["send-keys", "-t", "bench"]).args(keys).status();
    }

    async fn wait_for(&self, needle: &str) -> anyhow::Result<()> {
        for _ in 0..300 {
            if self.capture().contains(needle) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the dashboard did not show {needle:?}:\n{}", self.capture())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").stderr(std::process::Stdio::null()).status();
    }
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn read_seconds(path: &std::path::Path) -> Vec<Second> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

pub async fn run(options: Options) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let database_url = Backend::Sqlite.fresh_database_url(dir.path()).await;
    let (smtp_port, _received) = smtp::start().await?;
    let idp = TestIdp::start().await;
    let extra = [
        ("HERALD_OPERATOR_JWKS_URL".to_owned(), idp.jwks_url()),
        ("HERALD_OPERATOR_ISSUER".to_owned(), herald_tests::idp::ISSUER.to_owned()),
        ("HERALD_OPERATOR_AUDIENCE".to_owned(), herald_tests::idp::AUDIENCE.to_owned()),
    ];
    let d =
        start_daemon_with(&options.daemon, dir.path(), &database_url, smtp_port, false, &extra, None).await?;
    let tenant = TenantId::parse(d.boot.tenant_id.as_str())?;
    let operator = idp.operator_token(&tenant, &Scope::ALL);
    let stats = dir.path().join("tui-stats.jsonl");
    let herald = std::fs::canonicalize(&options.herald).with_context(|| {
        format!("{} (build it: cargo build --release -p herald-cli)", options.herald.display())
    })?;
    let env = [
        ("HOME", dir.path().display().to_string()),
        ("HERALD_CLI_CONFIG", dir.path().join("none.toml").display().to_string()),
        ("HERALD_URL", d.url.clone()),
        ("HERALD_API_KEY", d.boot.api_key.clone()),
        ("HERALD_OPERATOR_TOKEN", operator),
        ("HERALD_TUI_STATS", stats.display().to_string()),
    ];
    let vars: Vec<String> = env.iter().map(|(k, v)| format!("{k}={}", quote(v))).collect();
    let line = format!(
        "env -i TERM=xterm-256color PATH=/usr/bin:/bin {} {} tui",
        vars.join(" "),
        quote(&herald.display().to_string())
    );
    let tmux = Tmux { socket: format!("herald-bench-{}", std::process::id()) };
    let status = tmux
        .command()
        .args(["-f", "/dev/null", "new-session", "-d", "-s", "bench", "-x", "120", "-y", "40"])
        .arg(line)
        .status()
        .context("tmux is needed (apt-get install tmux)")?;
    if !status.success() {
        bail!("tmux new-session failed");
    }
    tmux.wait_for("activity: live").await?;
    tmux.keys(&["u"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    tmux.keys(&["-l", "user-0"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("Inbox · user-0").await?;
    let idle = read_seconds(&stats);
    let (before, seen_before) = (idle.len(), idle.last().map_or(0, |s| s.seen));

    let total = options.rate * options.seconds as usize;
    let body = |i: usize| {
        serde_json::json!({
            "channel": "in_app", "recipient": format!("user-{}", i % 100),
            "title": format!("Bench {i}"), "body": "A notification from the benchmark",
        })
    };
    let paced = crate::load::paced(
        &d.url,
        &d.boot.api_key,
        "/api/v1/notifications",
        options.rate,
        total,
        body,
        |_| {},
    )
    .await;
    // The last poll of the stream, and a last line of figures.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let screen = tmux.capture();
    tmux.keys(&["q"]);
    let seconds = read_seconds(&stats);
    let loaded: Vec<&Second> = seconds.iter().skip(before).collect();
    let Some(last) = loaded.last() else {
        bail!("the dashboard wrote no figures under load");
    };
    let slowest = loaded.iter().map(|s| s.slowest_ms).fold(0.0, f64::max);
    let slowest_update = loaded.iter().map(|s| s.slowest_update_ms).fold(0.0, f64::max);
    let mut per_second: Vec<f64> = loaded.iter().map(|s| s.slowest_ms).collect();
    per_second.sort_by(f64::total_cmp);
    let median_slowest = per_second[per_second.len() / 2];
    let frames: u64 = loaded.iter().map(|s| s.frames).sum();
    let rss: Vec<u64> = loaded.iter().filter_map(|s| s.rss_kib).collect();
    let seen = last.seen.saturating_sub(seen_before);
    let sent_rate = total as f64 / paced.sending.as_secs_f64();

    println!("\nSQLite, herald tui in tmux 120×40, {} s under load\n", loaded.len());
    println!("| measure | figure | target |");
    println!("|---|---|---|");
    println!(
        "| in-app dispatches | {total} in {:.1} s ({sent_rate:.0}/s), {} accepted | 1,000/s |",
        paced.sending.as_secs_f64(),
        paced.accepted
    );
    println!(
        "| items the dashboard saw arrive | {seen} ({:.0}/s); it holds {} | |",
        seen as f64 / loaded.len().max(1) as f64,
        last.items
    );
    println!("| frames drawn | {frames} ({:.1}/s) | |", frames as f64 / loaded.len().max(1) as f64);
    println!(
        "| slowest frame (draw) | {slowest:.2} ms; median of each second's slowest {median_slowest:.2} ms | < 16 ms |"
    );
    println!("| slowest batch of events applied between frames | {slowest_update:.2} ms | |");
    if let (Some(start), Some(end), Some(max)) = (rss.first(), rss.last(), rss.iter().max()) {
        let ten = rss.get(10).unwrap_or(start);
        println!(
            "| dashboard RSS: first second / 10 s / last / max | {start} / {ten} / {end} / {max} KiB | flat |"
        );
    }
    println!("\nThe screen at the end:\n```\n{}\n```", screen.trim_end());
    let mut child = d.child;
    let _ = child.kill().await;
    Ok(())
}
