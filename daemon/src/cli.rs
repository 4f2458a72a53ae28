//! The `heraldd` command line: serve (the default), migrate, print-default-config, admin.
//! `main.rs` only calls [`main`], so tests can build the same program as a binary of their own.

use std::{path::PathBuf, process::ExitCode};

use crate::{
    admin,
    config::{self, Config, Layers},
    secret::ServerSecret,
    store::Store,
};
use clap::{Args, Parser, Subcommand};
use herald_common::{
    Scope,
    ids::{ApplicationId, KeyId, TenantId},
    profile::{self, Profile},
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "heraldd", version, about = "Herald notification delivery daemon")]
struct Cli {
    /// TOML configuration file (keys as in `heraldd print-default-config`).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to bind (overrides HERALD_LISTEN).
    #[arg(long, global = true, value_name = "ADDR")]
    listen: Option<String>,
    /// Database URL (overrides HERALD_DATABASE_URL).
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
    /// Development mode: a built-in identity provider, credentials printed at start and a
    /// `herald` CLI profile written.
    #[arg(long, global = true)]
    dev: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print the annotated default configuration file.
    PrintDefaultConfig,
    /// Create tenants, applications and keys directly in the database.
    Admin(AdminArgs),
}

#[derive(Args)]
struct AdminArgs {
    /// Print exactly one JSON object.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Tenants.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Applications.
    App {
        #[command(subcommand)]
        command: AppCommand,
    },
    /// API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Create a tenant, an application and a key with every scope.
    Bootstrap {
        #[arg(long, default_value = "Default")]
        name: String,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    Create {
        #[arg(long)]
        name: String,
    },
}

#[derive(Subcommand)]
enum AppCommand {
    Create {
        #[arg(long)]
        tenant: TenantId,
        #[arg(long)]
        name: String,
    },
    /// Set the messages that carry OTP codes (`{code}`, `{minutes}`); an option left out restores
    /// its default.
    OtpMessages {
        #[arg(long)]
        application: ApplicationId,
        #[arg(long)]
        email_subject: Option<String>,
        #[arg(long)]
        email_body: Option<String>,
        #[arg(long)]
        sms_body: Option<String>,
    },
    /// Show the application's signing secret for end-user tokens; `--rotate` replaces it.
    Secret {
        #[arg(long)]
        application: ApplicationId,
        #[arg(long)]
        rotate: bool,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create a key; without --scope it gets every scope except otp:custom_code and
    /// activity:retry.
    Create {
        #[arg(long)]
        application: ApplicationId,
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<Scope>,
    },
    /// Revoke a key at once.
    Revoke { key_id: KeyId },
}

/// Runs `heraldd` with the process's arguments and environment.
pub fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    if let Some(Command::PrintDefaultConfig) = cli.command {
        print!("{}", config::default_config_toml());
        return ExitCode::SUCCESS;
    }
    let config = match load_config(&cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("heraldd: {e}");
            return ExitCode::from(2);
        }
    };
    crate::telemetry::init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("heraldd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("heraldd: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(cli: &Cli) -> Result<Config, config::ConfigError> {
    let mut layers = Layers::new();
    if let Some(path) = &cli.config {
        layers = layers.file(path);
    }
    layers
        .env(std::env::vars())
        .flag("listen", cli.listen.clone())
        .flag("database_url", cli.database_url.clone())
        .build(cli.dev)
}

async fn dispatch(cli: Cli, config: Config) -> anyhow::Result<()> {
    match cli.command {
        None | Some(Command::Serve) => serve(config).await,
        Some(Command::Migrate) => {
            let store = Store::open(&config).await?;
            store.close().await;
            eprintln!("heraldd: the {} database is up to date", config.database.engine());
            Ok(())
        }
        Some(Command::PrintDefaultConfig) => Ok(()),
        Some(Command::Admin(args)) => admin_command(args, config).await,
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener =
        crate::bind(config.listen).map_err(|e| anyhow::anyhow!("cannot bind {}: {e}", config.listen))?;
    let local = listener.local_addr()?;
    let state = crate::build_state(config, local).await?;
    if state.config.dev {
        let credentials = admin::dev_credentials(&state).await?;
        announce_dev(&format!("http://{local}"), &credentials);
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    crate::serve(state, listener, shutdown).await
}

/// Cancels `token` on SIGTERM or SIGINT.
async fn stop_on_signal(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = ctrl_c.await;
                token.cancel();
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down: finishing requests in flight");
    token.cancel();
}

/// Prints the development credentials (to stdout, never to the log) and writes the CLI profile.
fn announce_dev(url: &str, credentials: &admin::DevCredentials) {
    let b = &credentials.bootstrap;
    let profile_note = match profile::config_path() {
        Some(path) => {
            let profile = Profile {
                url: Some(url.to_owned()),
                api_key: Some(b.api_key.clone()),
                operator_token: credentials.operator_token.clone(),
                user_token: Some(credentials.user_token.clone()),
            };
            match profile::save(&path, "dev", &profile) {
                Ok(()) => format!("{} (profile `dev`)", path.display()),
                Err(e) => format!("not written: {e}"),
            }
        }
        None => "not written: no home directory".to_owned(),
    };
    println!(
        "\nHerald is running in development mode at {url}\n\n\
         \x20 tenant          {tenant}\n\
         \x20 application     {app}\n\
         \x20 API key         {key}\n\
         \x20 signing secret  {signing}\n\
         \x20 operator token  {operator}\n\
         \x20 user token      {user_token}  (user `{user}`)\n\
         \x20 CLI profile     {profile_note}\n\n\
         Try:\n\
         \x20 herald whoami          (the CLI reads the profile above)\n\
         \x20 herald tui             (the dashboard)\n\
         \x20 curl -H 'Authorization: Bearer {key}' {url}/api/v1/whoami\n",
        tenant = b.tenant_id,
        app = b.application_id,
        key = b.api_key,
        signing = b.signing_secret,
        operator = credentials
            .operator_token
            .as_deref()
            .unwrap_or("(from your identity provider: HERALD_OPERATOR_JWKS_URL is set)"),
        user_token = credentials.user_token,
        user = credentials.user_id,
    );
}

async fn admin_command(args: AdminArgs, config: Config) -> anyhow::Result<()> {
    let store = Store::open(&config).await?;
    let json = args.json;
    let result = async {
        match args.command {
            AdminCommand::Tenant { command: TenantCommand::Create { name } } => {
                print_out(json, &admin::create_tenant(&store, &name).await?)
            }
            AdminCommand::App { command: AppCommand::Create { tenant, name } } => {
                let secret = ServerSecret::load(config.secret.as_ref(), &config.data_dir)?;
                print_out(json, &admin::create_application(&store, &secret, &tenant, &name).await?)
            }
            AdminCommand::App {
                command: AppCommand::OtpMessages { application, email_subject, email_body, sms_body },
            } => {
                let messages = crate::store::OtpMessages {
                    otp_email_subject: email_subject,
                    otp_email_body: email_body,
                    otp_sms_body: sms_body,
                };
                print_out(json, &admin::set_otp_messages(&store, &application, messages).await?)
            }
            AdminCommand::App { command: AppCommand::Secret { application, rotate } } => {
                let secret = ServerSecret::load(config.secret.as_ref(), &config.data_dir)?;
                let shown = admin::application_secret(&store, &secret, &application, rotate).await?;
                print_out(json, &shown)
            }
            AdminCommand::Key { command: KeyCommand::Create { application, scopes } } => {
                print_out(json, &admin::create_key(&store, &application, &scopes).await?)
            }
            AdminCommand::Key { command: KeyCommand::Revoke { key_id } } => {
                print_out(json, &admin::revoke_key(&store, &key_id).await?)
            }
            AdminCommand::Bootstrap { name } => {
                let secret = ServerSecret::load(config.secret.as_ref(), &config.data_dir)?;
                print_out(json, &admin::bootstrap(&store, &secret, &name).await?)
            }
        }
    }
    .await;
    store.close().await;
    result
}

/// One JSON object with `--json`; otherwise one `field: value` line per field.
fn print_out<T: Serialize>(json: bool, value: &T) -> anyhow::Result<()> {
    let value = serde_json::to_value(value)?;
    if json {
        println!("{value}");
        return Ok(());
    }
    if let serde_json::Value::Object(map) = value {
        let width = map.keys().map(String::len).max().unwrap_or(0);
        for (field, value) in map {
            let text = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(" "),
                other => other.to_string(),
            };
            println!("{field:width$}  {text}");
        }
    }
    Ok(())
}
