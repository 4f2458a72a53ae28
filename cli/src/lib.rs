//! herald: the Herald operator CLI, as a library so that the tests can build the same program
//! (`herald-it`). Every command prints a readable table by default and the API's JSON with
//! `--json`; errors print the problem's code, detail and field errors and exit with a
//! documented code ([`exit`]).

mod cmd;
mod context;
mod exit;
mod output;
mod style;
mod verbose;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use exit::Exit;

#[derive(Parser)]
#[command(
    name = "herald",
    version,
    about = "Operate a Herald notification service: send, watch and retry deliveries, OTPs, domains",
    after_help = "Credentials and the URL come from flags, then HERALD_URL, HERALD_API_KEY, \
                  HERALD_OPERATOR_TOKEN and HERALD_USER_TOKEN, then the profile in the CLI config \
                  (`heraldd --dev` writes one). See docs/CLI.md."
)]
pub struct Cli {
    #[command(flatten)]
    global: context::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send a notification, or one per row of a CSV file (`--file`).
    Send(Box<cmd::send::Args>),
    /// Look up dispatched notifications.
    #[command(subcommand)]
    Notifications(cmd::notifications::Command),
    /// Send and verify one-time passwords.
    #[command(subcommand)]
    Otp(cmd::otp::Command),
    /// Custom sending domains: add, verify, remove.
    #[command(subcommand)]
    Domains(cmd::domains::Command),
    /// The suppression list: recipients not sent to (bounces, complaints, opt-outs, manual).
    #[command(subcommand)]
    Suppressions(cmd::suppressions::Command),
    /// Event webhooks: endpoints, secrets, test events, deliveries and recovery.
    #[command(subcommand)]
    Webhooks(cmd::webhooks::Command),
    /// The activity feed: list, follow live, inspect and retry deliveries.
    #[command(subcommand)]
    Activity(cmd::activity::Command),
    /// An end user's inbox: list it, mark items read, unread or archived.
    Inbox(cmd::inbox::Args),
    /// Follow an end user's live inbox stream.
    Stream(cmd::stream::Args),
    /// Stored templates.
    #[command(subcommand)]
    Templates(cmd::templates::Command),
    /// Mint tokens.
    #[command(subcommand)]
    Token(cmd::token::Command),
    /// Show what the configured credential is and may do.
    Whoami,
    /// Check that the daemon is up, its database reachable and its background tasks running.
    Health,
    /// The live dashboard: the activity feed and a user's inbox.
    Tui,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the man page (or write one per command into a folder).
    Man {
        /// Write herald.1 and a page per command here instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

/// Runs `herald` with the process's arguments and environment.
pub fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    // Offline commands first: they need neither a runtime nor a profile.
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(*shell, &mut Cli::command(), "herald", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man { dir } => return report(cmd::man::exec(dir.as_deref()), false),
        _ => {}
    }
    // The dashboard owns the screen: lines on stderr would tear it.
    if !matches!(cli.command, Command::Tui) {
        verbose::init(cli.global.verbose);
    }
    let ctx = match context::Context::load(&cli.global) {
        Ok(ctx) => ctx,
        Err(fail) => return fail.report(output::Output::detect(output::Format::Table).color_err),
    };
    let color = ctx.out.color_err;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => return exit::Fail::failure(format!("cannot start: {e}")).report(color),
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Send(args) => args.exec(&ctx).await,
            Command::Notifications(command) => command.exec(&ctx).await,
            Command::Otp(command) => command.exec(&ctx).await,
            Command::Domains(command) => command.exec(&ctx).await,
            Command::Suppressions(command) => command.exec(&ctx).await,
            Command::Webhooks(command) => command.exec(&ctx).await,
            Command::Activity(command) => command.exec(&ctx).await,
            Command::Inbox(args) => args.exec(&ctx).await,
            Command::Stream(args) => args.exec(&ctx).await,
            Command::Templates(command) => command.exec(&ctx).await,
            Command::Token(command) => command.exec(&ctx).await,
            Command::Whoami => cmd::health::whoami(&ctx).await,
            Command::Health => cmd::health::health(&ctx).await,
            Command::Tui => cmd::tui::exec(&ctx).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(()),
        }
    });
    // The runtime's background work (idle connections) must not hold the exit up.
    runtime.shutdown_background();
    report(result, color)
}

fn report(result: Result<(), exit::Fail>, color: bool) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fail) => fail.report(color),
    }
}

/// The clap command, for tests of the argument rules.
pub fn command() -> clap::Command {
    Cli::command()
}
