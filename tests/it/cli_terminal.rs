//! The `herald` CLI on a real terminal (tmux, `terminal.rs`): colour only there and never with
//! `NO_COLOR`, and the spinners of its long waits.

use herald_tests::{Backend, TestDaemon, eventually};

use crate::{cli::Cli, terminal::Terminal, tui::line_with};

const WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Colour only on a terminal, and never with `NO_COLOR`: the CLI run in a real terminal (tmux).
#[tokio::test]
async fn cli_colour_only_on_a_terminal_without_no_color() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let cli = Cli::new(&d).await;
    let colored = Terminal::start(&cli, "herald-colour", &["health"], &[]).await;
    let screen = eventually("health on the terminal", WAIT, || async {
        let screen = colored.capture_escapes().await;
        screen.contains("running").then_some(screen)
    })
    .await;
    assert!(screen.contains("\u{1b}["), "colour on a terminal: {screen:?}");
    let plain = Terminal::start(&cli, "herald-nocolour", &["health"], &[("NO_COLOR", "1")]).await;
    let screen = eventually("health on the terminal", WAIT, || async {
        let screen = plain.capture_escapes().await;
        screen.contains("running").then_some(screen)
    })
    .await;
    assert!(!screen.contains("\u{1b}[3"), "no colour with NO_COLOR: {screen:?}");
    // Piped: no colour either.
    assert!(!cli.run(&["health"]).await.ok().contains('\u{1b}'));
    d.stop().await;
}

/// A long wait shows a spinner with what it is waiting for: `domains verify --wait` the last
/// check's findings. (Without a style it drew an empty bar and "0/0", and no message, until the
/// thirty-third session.)
#[tokio::test]
async fn cli_spinners_say_what_they_wait_for() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let cli = Cli::new(&d).await;
    cli.run(&["domains", "add", "mail.example.com"]).await.ok();
    let listed = cli.run(&["domains", "list", "--json"]).await.json();
    let domain_id = listed["domains"][0]["domain_id"].as_str().unwrap().to_owned();
    let args = ["domains", "verify", &domain_id, "--wait", "--timeout", "3s", "--interval", "200ms"];
    let term = Terminal::start(&cli, "domain-wait", &args, &[]).await;
    line_with(&term, "mail.example.com: pending (", "the spinner's line", |l| {
        l.contains("elapsed") && !l.contains("0/0")
    })
    .await;
    line_with(&term, "[exit 1]", "the wait to give up", |_| true).await;
    d.stop().await;
}
