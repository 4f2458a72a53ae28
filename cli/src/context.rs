//! Where the CLI finds the daemon and its credentials: flags, then `HERALD_*` variables, then the
//! profile (`--profile`, or the default one) in the CLI config file.

use anyhow::{Context as _, bail};
use herald_common::{client::Client, profile};

#[derive(clap::Args)]
pub struct GlobalArgs {
    /// Print exact JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Profile in the CLI config file.
    #[arg(long, global = true, env = "HERALD_PROFILE")]
    pub profile: Option<String>,
    /// Daemon URL.
    #[arg(long, global = true, env = "HERALD_URL")]
    pub url: Option<String>,
}

pub struct Context {
    pub json: bool,
    pub url: String,
    pub api_key: Option<String>,
    pub operator_token: Option<String>,
    pub user_token: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Context {
    pub fn load(args: &GlobalArgs) -> anyhow::Result<Self> {
        let saved = match profile::config_path() {
            Some(path) => profile::load(&path, args.profile.as_deref())
                .map_err(anyhow::Error::msg)
                .context("cannot read the CLI config")?,
            None => None,
        };
        if args.profile.is_some() && saved.is_none() {
            bail!("no profile `{}` in the CLI config", args.profile.as_deref().unwrap_or_default());
        }
        let saved = saved.unwrap_or_default();
        Ok(Self {
            json: args.json,
            url: args.url.clone().or(saved.url).unwrap_or_else(|| "http://127.0.0.1:8080".to_owned()),
            api_key: env("HERALD_API_KEY").or(saved.api_key),
            operator_token: env("HERALD_OPERATOR_TOKEN").or(saved.operator_token),
            user_token: env("HERALD_USER_TOKEN").or(saved.user_token),
        })
    }

    pub fn anonymous(&self) -> Client {
        Client::new(&self.url)
    }

    /// A client with the API key.
    pub fn server(&self) -> anyhow::Result<Client> {
        let key = self.api_key.as_ref().context("no API key: set HERALD_API_KEY or use a profile")?;
        Ok(self.anonymous().with_token(key))
    }

    /// A client with whichever credential is configured: API key, operator token, user token.
    pub fn any(&self) -> anyhow::Result<Client> {
        let token = self
            .api_key
            .as_ref()
            .or(self.operator_token.as_ref())
            .or(self.user_token.as_ref())
            .context("no credential: set HERALD_API_KEY, HERALD_OPERATOR_TOKEN or HERALD_USER_TOKEN, or use a profile")?;
        Ok(self.anonymous().with_token(token))
    }
}
