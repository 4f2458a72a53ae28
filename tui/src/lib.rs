//! The Herald terminal dashboard (`herald tui`): the tenant's activity feed, live, with retries
//! from the keyboard, and one end user's inbox stream.
//!
//! Built as ratatui's async apps are: [`app`] holds the state and applies actions (no I/O),
//! [`keymap`] maps keys to actions (the help overlay is drawn from it), [`ui`] draws the state,
//! [`net`] runs the network work in tasks that report back as actions, and [`run`] is the event
//! loop: it `select!`s over keys, a tick and those reports, and draws at most ~30 times a second,
//! so a busy feed never freezes the keyboard and the network never blocks a frame.

pub mod app;
pub mod feed;
pub mod inbox;
pub mod keymap;
pub mod layout;
pub mod net;
pub mod ui;
pub mod webhooks;

use std::{
    io::Write,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures_util::StreamExt;
use herald_common::{Timestamp, client::Client};
use ratatui::{
    DefaultTerminal,
    crossterm::event::{Event, EventStream, KeyEventKind},
};
use tokio::sync::mpsc;

use crate::{
    app::{Action, App, Command},
    keymap::{KeyAction, Mode},
};

/// Where the dashboard finds Herald and the credentials it uses.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: String,
    pub api_key: Option<String>,
    pub operator_token: Option<String>,
}

/// Frames are drawn at most this often.
const FRAME: Duration = Duration::from_millis(33);
/// Ages and sparklines move on this often.
const TICK: Duration = Duration::from_millis(250);

/// Runs the dashboard until the operator quits. The terminal is restored on every way out: quit,
/// Ctrl-C, SIGTERM, an error, and (through ratatui's panic hook) a panic.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let base = Client::new(&settings.url);
    let operator_token = settings
        .operator_token
        .as_ref()
        .or(settings.api_key.as_ref())
        .context("no credential: set HERALD_OPERATOR_TOKEN or HERALD_API_KEY, or use a profile")?;
    let operator = base.with_token(operator_token);
    let server = settings.api_key.as_ref().map(|key| base.with_token(key));
    let (actions, receiver) = mpsc::channel(8_192);
    let mut net = net::Net::new(operator, server, actions);
    let mut app = App::new(settings.url.clone(), Timestamp::now().millis());
    let mut terminal = ratatui::try_init().context("cannot take over the terminal")?;
    if let Ok(size) = terminal.size() {
        app.update(Action::Resize(size.width, size.height));
    }
    net.start();
    let result = event_loop(&mut terminal, &mut app, &mut net, receiver).await;
    ratatui::restore();
    result
}

/// Frame statistics for the bench (`HERALD_TUI_STATS=FILE`): a JSON line a second with the
/// frames drawn, the slowest frame, the slowest batch of updates applied between frames, and the
/// process's memory.
struct FrameStats {
    file: Option<std::fs::File>,
    since: Instant,
    frames: u64,
    slowest: Duration,
    slowest_update: Duration,
    actions: u64,
}

impl FrameStats {
    fn from_env() -> Self {
        let file = std::env::var_os("HERALD_TUI_STATS").and_then(|path| std::fs::File::create(path).ok());
        Self {
            file,
            since: Instant::now(),
            frames: 0,
            slowest: Duration::ZERO,
            slowest_update: Duration::ZERO,
            actions: 0,
        }
    }

    fn update(&mut self, took: Duration, actions: usize) {
        self.slowest_update = self.slowest_update.max(took);
        self.actions += actions as u64;
    }

    fn frame(&mut self, took: Duration, app: &App) {
        let Some(file) = &mut self.file else { return };
        self.frames += 1;
        self.slowest = self.slowest.max(took);
        if self.since.elapsed() >= Duration::from_secs(1) {
            let line = serde_json::json!({
                "frames": self.frames,
                "slowest_ms": self.slowest.as_secs_f64() * 1000.0,
                "slowest_update_ms": self.slowest_update.as_secs_f64() * 1000.0,
                "actions": self.actions,
                "rss_kib": rss_kib(),
                "items": app.feed.len(),
                "seen": app.stats.total_created,
            });
            let _ = writeln!(file, "{line}");
            (self.since, self.frames, self.slowest) = (Instant::now(), 0, Duration::ZERO);
            (self.slowest_update, self.actions) = (Duration::ZERO, 0);
        }
    }
}

/// The process's resident memory, from `/proc/self/status` (Linux).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn event_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    net: &mut net::Net,
    mut network: mpsc::Receiver<Action>,
) -> anyhow::Result<()> {
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    let mut frame = tokio::time::interval(FRAME);
    frame.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut stats = FrameStats::from_env();
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    #[cfg(not(unix))]
    let mut terminate = futures_util::stream::pending::<()>();
    let mut dirty = true;
    loop {
        let mut draw_now = false;
        let actions: Vec<Action> = tokio::select! {
            event = keys.next() => match event {
                Some(Ok(Event::Key(key))) if key.kind != KeyEventKind::Release => {
                    draw_now = true;
                    match keymap::lookup(app.mode, &key) {
                        Some(action) => vec![Action::Key(action)],
                        None if app.mode == Mode::Input => match key.code {
                            ratatui::crossterm::event::KeyCode::Char(c) => vec![Action::Input(c)],
                            _ => Vec::new(),
                        },
                        None => Vec::new(),
                    }
                }
                Some(Ok(Event::Resize(width, height))) => {
                    draw_now = true;
                    vec![Action::Resize(width, height)]
                }
                Some(Ok(_)) => Vec::new(),
                Some(Err(e)) => return Err(e).context("cannot read the terminal"),
                None => vec![Action::Key(KeyAction::Quit)],
            },
            action = network.recv() => {
                // Take what else is waiting, so a burst costs one frame.
                let mut batch: Vec<Action> = action.into_iter().collect();
                while batch.len() < 4_096 {
                    match network.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                batch
            }
            _ = tick.tick() => vec![Action::Tick(Timestamp::now().millis())],
            _ = frame.tick() => {
                if dirty {
                    draw(terminal, app, &mut stats)?;
                    dirty = false;
                }
                continue;
            }
            _ = recv_terminate(&mut terminate) => vec![Action::Key(KeyAction::Quit)],
        };
        let applying = Instant::now();
        let count = actions.len();
        for action in actions {
            dirty = true;
            for command in app.update(action) {
                if command == Command::Quit {
                    return Ok(());
                }
                net.run(command);
            }
        }
        stats.update(applying.elapsed(), count);
        if draw_now {
            draw(terminal, app, &mut stats)?;
            dirty = false;
        }
    }
}

#[cfg(unix)]
async fn recv_terminate(signal: &mut tokio::signal::unix::Signal) {
    signal.recv().await;
}

#[cfg(not(unix))]
async fn recv_terminate(signal: &mut futures_util::stream::Pending<()>) {
    signal.next().await;
}

fn draw(terminal: &mut DefaultTerminal, app: &App, stats: &mut FrameStats) -> anyhow::Result<()> {
    let started = Instant::now();
    terminal.draw(|frame| ui::draw(frame, app)).context("cannot draw")?;
    stats.frame(started.elapsed(), app);
    Ok(())
}
