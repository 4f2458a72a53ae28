//! herald: the Herald operator CLI. Every command prints a readable table by default and exact
//! JSON with `--json`; errors print the problem's `code` and `detail` and exit non-zero.

mod cmd;
mod context;
mod output;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "herald", version, about = "Operate a Herald notification service")]
struct Cli {
    #[command(flatten)]
    global: context::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check that the daemon is alive and its database reachable.
    Health(cmd::health::Args),
    /// Show what the configured credential is and may do.
    Whoami(cmd::whoami::Args),
    /// Mint tokens.
    #[command(subcommand)]
    Token(cmd::token::Command),
}

fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("herald: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let ctx = context::Context::load(&cli.global)?;
        match cli.command {
            Command::Health(args) => args.exec(&ctx).await,
            Command::Whoami(args) => args.exec(&ctx).await,
            Command::Token(command) => command.exec(&ctx).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::print_error(&e);
            ExitCode::FAILURE
        }
    }
}
