//! `-v` and `-vv`: what the CLI does, told on stderr. The typed client logs every request to
//! `tracing` (its [`LOG_TARGET`]: method, path, status and time; with `-vv` the headers too,
//! credentials redacted), and the CLI its own steps (where the URL and each credential came
//! from, which credential a command acts with). This writes those lines, and nothing of the
//! libraries underneath, to stderr, so stdout stays the command's output (`--json` included).

use herald_common::client::LOG_TARGET;
use tracing_subscriber::{Layer, filter::Targets, layer::SubscriberExt, util::SubscriberInitExt};

/// Starts telling, at `verbosity` (the number of `-v`): nothing at 0.
pub fn init(verbosity: u8) {
    let level = match verbosity {
        0 => return,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    // The client's request log and the CLI's own modules (targets match by prefix); not
    // reqwest, hyper or rustls.
    let filter = Targets::new().with_target(LOG_TARGET, level).with_target("herald_cli", level);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_level(false)
        .with_ansi(false);
    let _ = tracing_subscriber::registry().with(lines.with_filter(filter)).try_init();
}
