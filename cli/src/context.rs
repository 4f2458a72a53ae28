//! Where the CLI finds the daemon and its credentials: flags, then `HERALD_*` variables, then the
//! profile (`--profile`, or the config's default) in the CLI config file that `heraldd --dev`
//! writes.

use herald_common::{
    client::Client,
    ids::UserId,
    profile::{self, Profile},
};

use crate::{
    exit::Fail,
    output::{Format, Output},
};

#[derive(clap::Args, Debug)]
pub struct GlobalArgs {
    /// Profile in the CLI config file (default: its `default_profile`).
    #[arg(long, global = true, env = "HERALD_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,
    /// The daemon's URL (default: the profile's, else http://127.0.0.1:8080).
    #[arg(long, global = true, env = "HERALD_URL", value_name = "URL")]
    pub url: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true, conflicts_with = "jsonl")]
    pub json: bool,
    /// Print one JSON object per line (lists, follows, bulk sends).
    #[arg(long, global = true)]
    pub jsonl: bool,
    /// Say what the CLI does, on stderr: -v each request's method, path, status and time; -vv
    /// also the headers (credentials redacted).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The run's settings: where Herald is, the credentials, how to print.
pub struct Context {
    pub url: String,
    pub api_key: Option<String>,
    pub operator_token: Option<String>,
    pub user_token: Option<String>,
    pub out: Output,
    /// Where the profile came from, for messages.
    source: String,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Context {
    pub fn load(args: &GlobalArgs) -> Result<Self, Fail> {
        let path = profile::config_path();
        let saved = match &path {
            Some(path) => profile::load(path, args.profile.as_deref())
                .map_err(|e| Fail::usage(format!("cannot read the CLI config: {e}")))?,
            None => None,
        };
        if let (Some(name), None) = (&args.profile, &saved) {
            let shown = path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            return Err(Fail::usage(format!("there is no profile `{name}` in {shown}")));
        }
        let source = match (&saved, &path) {
            (Some(_), Some(path)) => format!("the profile in {}", path.display()),
            _ => "no profile".to_owned(),
        };
        let saved = saved.unwrap_or_default();
        let format = if args.json {
            Format::Json
        } else if args.jsonl {
            Format::Jsonl
        } else {
            Format::Table
        };
        Ok(Self::new(args.url.clone(), saved, Output::detect(format), source))
    }

    fn new(url: Option<String>, saved: Profile, out: Output, source: String) -> Self {
        let url_from = match (&url, &saved.url) {
            (Some(_), _) => "--url or HERALD_URL",
            (None, Some(_)) => "the profile",
            (None, None) => "the default",
        };
        // Where each credential came from, for -v (never what it is).
        let mut origins = Vec::new();
        let mut credential = |what: &str, variable: &str, saved: Option<String>| match (env(variable), saved)
        {
            (Some(value), _) => {
                origins.push(format!("{what} from {variable}"));
                Some(value)
            }
            (None, Some(value)) => {
                origins.push(format!("{what} from the profile"));
                Some(value)
            }
            (None, None) => None,
        };
        let api_key = credential("API key", "HERALD_API_KEY", saved.api_key);
        let operator_token = credential("operator token", "HERALD_OPERATOR_TOKEN", saved.operator_token);
        let user_token = credential("user token", "HERALD_USER_TOKEN", saved.user_token);
        let url = url.or(saved.url).unwrap_or_else(|| "http://127.0.0.1:8080".to_owned());
        tracing::debug!("Herald at {url} (from {url_from}); using {source}");
        match origins.is_empty() {
            true => tracing::debug!("no credentials"),
            false => tracing::debug!("{}", origins.join(", ")),
        }
        Self { url, api_key, operator_token, user_token, out, source }
    }

    /// A client without a credential.
    pub fn anonymous(&self) -> Client {
        Client::new(&self.url)
    }

    fn missing(&self, what: &str, variable: &str) -> Fail {
        Fail::auth(format!(
            "no {what}: set {variable} or use a profile (`heraldd --dev` writes one; using {})",
            self.source
        ))
    }

    /// A client with the API key (server endpoints: send, OTP, templates, user tokens).
    pub fn server(&self) -> Result<Client, Fail> {
        let key = self.api_key.as_ref().ok_or_else(|| self.missing("API key", "HERALD_API_KEY"))?;
        tracing::debug!("acting with the API key");
        Ok(self.anonymous().with_token(key))
    }

    /// A client for the operators' endpoints (activity, domains): the operator token, else the
    /// API key.
    pub fn operator(&self) -> Result<Client, Fail> {
        let (token, which) = match (&self.operator_token, &self.api_key) {
            (Some(token), _) => (token, "the operator token"),
            (None, Some(key)) => (key, "the API key (no operator token)"),
            (None, None) => {
                return Err(
                    self.missing("operator token or API key", "HERALD_OPERATOR_TOKEN or HERALD_API_KEY")
                );
            }
        };
        tracing::debug!("acting with {which}");
        Ok(self.anonymous().with_token(token))
    }

    /// A client with any credential (whoami).
    pub fn any(&self) -> Result<Client, Fail> {
        let token =
            self.api_key.as_ref().or(self.operator_token.as_ref()).or(self.user_token.as_ref()).ok_or_else(
                || self.missing("credential", "HERALD_API_KEY, HERALD_OPERATOR_TOKEN or HERALD_USER_TOKEN"),
            )?;
        Ok(self.anonymous().with_token(token))
    }

    /// A client acting as an end user: a token minted for `user` with the API key, or else
    /// `HERALD_USER_TOKEN` (or the profile's user token).
    pub async fn user(&self, user: Option<&UserId>) -> Result<Client, Fail> {
        match user {
            Some(user) => {
                let minted = self.server()?.user_token(user, Some(3600)).await?;
                tracing::debug!("acting as {user}, with the token just minted");
                Ok(self.anonymous().with_token(minted.token))
            }
            None => {
                let token = self.user_token.as_ref().ok_or_else(|| {
                    Fail::usage(
                        "give --user USER (a token is minted with the API key) or set HERALD_USER_TOKEN",
                    )
                })?;
                tracing::debug!("acting with the user token");
                Ok(self.anonymous().with_token(token))
            }
        }
    }
}
