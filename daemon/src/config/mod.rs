//! Configuration: built-in defaults, then a TOML file (`--config`), then `HERALD_*` environment
//! variables, then command-line flags. Every value is validated at load; a bad one is reported
//! with the variable's name, where it came from and why, and the daemon does not start.
//! Secrets are wrapped in [`Secret`] so that `Debug` never prints them.

mod parse;
mod sections;

use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

pub use parse::parse_duration;

/// A value that must not be printed: `Debug` and `Display` show `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// One configuration key: its file name (the variable name is `HERALD_` + upper case), its
/// default, and what it means. This table is the single source for loading,
/// `print-default-config` and the configuration docs.
pub struct Key {
    pub name: &'static str,
    pub default: Option<&'static str>,
    pub help: &'static str,
}

impl Key {
    pub fn env_name(&self) -> String {
        format!("HERALD_{}", self.name.to_ascii_uppercase())
    }
}

macro_rules! keys {
    ($($name:literal => $default:expr, $help:literal;)*) => {
        pub const KEYS: &[Key] = &[$(Key { name: $name, default: $default, help: $help }),*];
    };
}

keys! {
    "listen" => Some("127.0.0.1:8080"), "Address the daemon binds.";
    "database_url" => Some("sqlite://herald-data/herald.db"), "sqlite://PATH (embedded default) or postgres://USER@HOST/DB.";
    "database_max_connections" => Some("8"), "Connections in the read pool (and, on PostgreSQL, the writers share these).";
    "database_writers" => Some("2"), "PostgreSQL: group-commit writers per daemon, each borrowing a pool connection while it writes (1–16, at most the pool size less two). With several daemons on one database, 1 each keeps batches large. SQLite always has one.";
    "sqlite_synchronous" => Some("full"), "SQLite durability: full (fsync every group commit) or normal (WAL checkpoints only).";
    "data_dir" => Some("herald-data"), "Folder for the generated secret, the email outbox and development files.";
    "secret" => None, "Server-side secret (at least 32 characters): OTP hashes, signing secrets. Generated once into the data folder when unset; set it when several daemons share a database.";
    "smtp_url" => None, "smtp://[user:pass@]host:port (STARTTLS if offered), smtp+starttls:// (required), smtps:// (TLS), smtp+plain:// (never TLS). Unset: email is written to <data_dir>/outbox/ as .eml files.";
    "email_from" => Some("Herald <no-reply@localhost>"), "Default sender of email.";
    "sms_provider" => Some("log"), "twilio (Twilio-compatible REST) or log.";
    "twilio_base_url" => Some("https://api.twilio.com"), "Base URL of the Twilio-compatible API.";
    "twilio_account_sid" => None, "Twilio account SID (required with sms_provider=twilio).";
    "twilio_auth_token" => None, "Twilio auth token (required with sms_provider=twilio).";
    "sms_from" => None, "Sender number for SMS, E.164 (required with sms_provider=twilio).";
    "whatsapp_provider" => Some("log"), "meta (WhatsApp Cloud API) or log.";
    "whatsapp_base_url" => Some("https://graph.facebook.com"), "Base URL of the WhatsApp Cloud API.";
    "whatsapp_api_version" => Some("v21.0"), "Cloud API version path segment.";
    "whatsapp_phone_number_id" => None, "Cloud API phone number id (required with whatsapp_provider=meta).";
    "whatsapp_token" => None, "Cloud API bearer token (required with whatsapp_provider=meta).";
    "public_url" => None, "The URL the providers and mail clients reach this daemon at (https://herald.example.com): Twilio's StatusCallback and its signatures use it, and so do the one-click unsubscribe links of categorised email. Unset: http://<listen>.";
    "whatsapp_app_secret" => None, "Meta app secret: the key of the Cloud API webhook's X-Hub-Signature-256. Unset: WhatsApp receipts are refused.";
    "whatsapp_verify_token" => None, "The token Meta's webhook verification (GET /api/v1/receipts/whatsapp) must present. Unset: verification is refused.";
    "bounce_listen" => None, "Address of the SMTP listener for bounce and complaint reports (the bounce domain's MX delivers there), e.g. 0.0.0.0:25. Unset: off (--dev: 127.0.0.1:2525).";
    "bounce_domain" => None, "Domain of the VERP return path bounces+<token>@<domain>. Unset: the domain of HERALD_EMAIL_FROM.";
    "dns_nameservers" => None, "Comma-separated ip:port list for domain verification; unset: the system resolver.";
    "spf_include" => Some("spf.herald.localhost"), "What a sending domain's SPF record must include.";
    "dns_timeout" => Some("5s"), "How long one DNS query of a domain check may take (ms/s/m/h); then it is tried once more, and a second timeout is a temporary failure.";
    "domain_recheck_interval" => Some("24h"), "How often verified sending domains are checked again (ms/s/m/h).";
    "domain_pending_interval" => Some("10m"), "How often domains not yet verified (or last seen with a DNS failure) are checked in the background.";
    "domain_pending_timeout" => Some("72h"), "A domain whose records are not all found within this time of its creation becomes failed.";
    "operator_jwks_url" => None, "JWKS URL of the operators' identity provider.";
    "operator_issuer" => None, "Required `iss` of operator tokens.";
    "operator_audience" => None, "Required `aud` of operator tokens.";
    "operator_algorithms" => Some("RS256,ES256"), "Accepted operator token algorithms (RS256, RS384, RS512, PS256, ES256, ES384, EdDSA; never HS* or none).";
    "operator_jwks_refresh_seconds" => Some("30"), "Least time between two JWKS fetches caused by an unknown kid.";
    "operator_jwks_max_age_seconds" => Some("300"), "A cached JWKS older than this is fetched again.";
    "stream_heartbeat_seconds" => Some("15"), "Heartbeat interval of SSE streams.";
    "cors_origins" => None, "Comma-separated origins (https://app.example.com) whose browser pages may call the API and open streams; `*` for any. Unset: no cross-origin access.";
    "retry_schedule" => Some("5s,30s,2m,10m,30m"), "Delays between automatic delivery attempts (ms/s/m/h); after the last, failed.";
    "delivery_workers" => Some("32"), "Deliveries handed to providers at the same time by this daemon.";
    "delivery_lease_seconds" => Some("120"), "How long a worker holds a delivery; a daemon that dies mid-send loses it to another worker after this.";
    "webhook_retry_schedule" => Some("5s,5m,30m,2h,5h,10h,10h"), "Delays between attempts to send a webhook message (ms/s/m/h), each with ±20 % jitter and never sooner than the endpoint's Retry-After; after the last, the message is failed.";
    "webhook_timeout" => Some("15s"), "How long one webhook request may take, connection included; longer is a failure.";
    "webhook_disable_after" => Some("120h"), "An endpoint that fails for this long without one success is disabled.";
    "webhook_secret_overlap" => Some("24h"), "After a secret rotation, how long the old secret still signs every message beside the new one.";
    "webhook_allowed_networks" => None, "Comma-separated CIDRs (127.0.0.0/8, 10.0.0.0/8, fd00::/8) that webhook endpoints may reach although they are loopback, private, link-local, CGNAT or multicast. Unset: none.";
    "webhook_endpoint_concurrency" => Some("16"), "Messages this daemon sends to one endpoint at the same time (a slow endpoint holds only its own).";
    "log" => Some("info"), "Log filter (tracing EnvFilter syntax).";
    "log_format" => Some("text"), "text or json.";
}

/// Where a value came from, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Environment,
    Flag,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("the default"),
            Source::File(path) => write!(f, "config file {}", path.display()),
            Source::Environment => f.write_str("the environment"),
            Source::Flag => f.write_str("a command-line flag"),
        }
    }
}

/// Everything wrong with a configuration, one line per problem.
#[derive(Debug)]
pub struct ConfigError(pub Vec<String>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for line in &self.0 {
            writeln!(f, "  - {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite { url: String, path: PathBuf },
    Postgres(Secret),
}

impl DatabaseUrl {
    pub fn engine(&self) -> &'static str {
        match self {
            DatabaseUrl::Sqlite { .. } => "sqlite",
            DatabaseUrl::Postgres(_) => "postgres",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug)]
pub struct SmtpConfig {
    pub url: Secret,
    pub host: String,
}

#[derive(Clone, Debug)]
pub enum SmsProvider {
    Log,
    Twilio { base_url: String, account_sid: String, auth_token: Secret, from: String },
}

#[derive(Clone, Debug)]
pub enum WhatsappProvider {
    Log,
    Meta { base_url: String, api_version: String, phone_number_id: String, token: Secret },
}

/// The operators' identity provider.
#[derive(Clone, Debug)]
pub struct OperatorIdp {
    pub jwks_url: String,
    pub issuer: String,
    pub audience: String,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub database: DatabaseUrl,
    pub database_max_connections: u32,
    /// PostgreSQL's group-commit writers per daemon (at most the pool size less two).
    pub database_writers: usize,
    pub sqlite_synchronous_full: bool,
    pub data_dir: PathBuf,
    /// `None` means: use (or create) the secret file in `data_dir`.
    pub secret: Option<Secret>,
    pub smtp: Option<SmtpConfig>,
    pub email_from: String,
    pub sms: SmsProvider,
    pub whatsapp: WhatsappProvider,
    pub dns_nameservers: Vec<SocketAddr>,
    pub spf_include: String,
    pub dns_timeout: Duration,
    pub domain_recheck_interval: Duration,
    pub domain_pending_interval: Duration,
    pub domain_pending_timeout: Duration,
    /// `None` without a configured provider; `--dev` fills it with the built-in one.
    pub operator_idp: Option<OperatorIdp>,
    pub operator_algorithms: Vec<jsonwebtoken::Algorithm>,
    pub operator_jwks_refresh: Duration,
    pub operator_jwks_max_age: Duration,
    pub stream_heartbeat: Duration,
    /// Origins allowed to call from browsers (`["*"]` for any); empty: none.
    pub cors_origins: Vec<String>,
    pub retry_schedule: Vec<Duration>,
    pub delivery_workers: usize,
    pub delivery_lease: Duration,
    pub log: String,
    pub log_format: LogFormat,
    /// Development mode: a built-in identity provider and printed credentials.
    /// The URL the providers reach this daemon at, without a trailing slash.
    pub public_url: String,
    pub whatsapp_app_secret: Option<Secret>,
    pub whatsapp_verify_token: Option<Secret>,
    /// The bounce SMTP listener's address, if it runs.
    pub bounce_listen: Option<SocketAddr>,
    /// The domain of the VERP return path.
    pub bounce_domain: String,
    /// Outbound event webhooks.
    pub webhooks: WebhookConfig,
    pub dev: bool,
}

/// How webhook messages are sent (CONTRACT §10).
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub retry_schedule: Vec<Duration>,
    pub timeout: Duration,
    pub disable_after: Duration,
    pub secret_overlap: Duration,
    pub allowed_networks: Vec<ipnet::IpNet>,
    pub endpoint_concurrency: usize,
}

/// Raw values by key, each with its source.
#[derive(Default)]
pub struct Layers {
    values: BTreeMap<&'static str, (String, Source)>,
    errors: Vec<String>,
}

fn find_key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

impl Layers {
    pub fn new() -> Self {
        let mut layers = Self::default();
        for key in KEYS {
            if let Some(default) = key.default {
                layers.values.insert(key.name, (default.to_owned(), Source::Default));
            }
        }
        layers
    }

    /// Reads a TOML file whose keys are the lower-case names (`listen = "0.0.0.0:8080"`).
    /// Unknown keys are errors, so a typo does not pass silently.
    pub fn file(mut self, path: &Path) -> Self {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                self.errors.push(format!("cannot read config file {}: {e}", path.display()));
                return self;
            }
        };
        let table = match text.parse::<toml::Table>() {
            Ok(table) => table,
            Err(e) => {
                self.errors.push(format!("config file {} is not valid TOML: {e}", path.display()));
                return self;
            }
        };
        for (name, value) in table {
            let Some(key) = find_key(&name) else {
                self.errors.push(format!(
                    "config file {}: unknown key `{name}` (see `heraldd print-default-config`)",
                    path.display()
                ));
                continue;
            };
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(items) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(","),
                other => {
                    self.errors.push(format!(
                        "config file {}: `{name}` must be a string or number, not {}",
                        path.display(),
                        other.type_str()
                    ));
                    continue;
                }
            };
            self.values.insert(key.name, (text, Source::File(path.to_owned())));
        }
        self
    }

    /// Applies `HERALD_*` variables. Other `HERALD_` variables (the CLI's, the tests') are
    /// ignored here.
    pub fn env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        for key in KEYS {
            if let Some(value) = vars.get(&key.env_name()) {
                self.values.insert(key.name, (value.clone(), Source::Environment));
            }
        }
        self
    }

    /// Applies a command-line flag.
    pub fn flag(mut self, name: &'static str, value: Option<String>) -> Self {
        if let (Some(value), Some(key)) = (value, find_key(name)) {
            self.values.insert(key.name, (value, Source::Flag));
        }
        self
    }

    /// Validates every value, section by section, and reports every problem at once.
    pub fn build(self, dev: bool) -> Result<Config, ConfigError> {
        let mut p = parse::Parser { layers: &self, errors: self.errors.clone() };
        let sections = (p.server(), p.storage(), p.delivery(), p.domains(), p.operators(), p.logging());
        let receipts = p.receipts(dev);
        let webhooks = p.webhooks();
        let (
            Some(server),
            Some(storage),
            Some(delivery),
            Some(domains),
            Some(operators),
            Some(logging),
            Some(receipts),
            Some(webhooks),
        ) = (sections.0, sections.1, sections.2, sections.3, sections.4, sections.5, receipts, webhooks)
        else {
            return Err(ConfigError(p.errors));
        };
        let public_url = receipts.public_url.unwrap_or_else(|| format!("http://{}", server.listen));
        let bounce_domain = receipts.bounce_domain.unwrap_or_else(|| {
            let address = delivery.email_from.rsplit('<').next().unwrap_or_default().trim_end_matches('>');
            address.rsplit('@').next().unwrap_or("localhost").to_ascii_lowercase()
        });
        if !p.errors.is_empty() {
            return Err(ConfigError(p.errors));
        }
        Ok(Config {
            listen: server.listen,
            cors_origins: server.cors_origins,
            stream_heartbeat: server.stream_heartbeat,
            database: storage.database,
            database_max_connections: storage.database_max_connections,
            database_writers: storage.database_writers,
            sqlite_synchronous_full: storage.sqlite_synchronous_full,
            data_dir: storage.data_dir,
            secret: storage.secret,
            smtp: delivery.smtp,
            email_from: delivery.email_from,
            sms: delivery.sms,
            whatsapp: delivery.whatsapp,
            retry_schedule: delivery.retry_schedule,
            delivery_workers: delivery.delivery_workers,
            delivery_lease: delivery.delivery_lease,
            dns_nameservers: domains.dns_nameservers,
            spf_include: domains.spf_include,
            dns_timeout: domains.dns_timeout,
            domain_recheck_interval: domains.domain_recheck_interval,
            domain_pending_interval: domains.domain_pending_interval,
            domain_pending_timeout: domains.domain_pending_timeout,
            operator_idp: operators.operator_idp,
            operator_algorithms: operators.operator_algorithms,
            operator_jwks_refresh: operators.operator_jwks_refresh,
            operator_jwks_max_age: operators.operator_jwks_max_age,
            log: logging.log,
            log_format: logging.log_format,
            public_url,
            whatsapp_app_secret: receipts.whatsapp_app_secret,
            whatsapp_verify_token: receipts.whatsapp_verify_token,
            bounce_listen: receipts.bounce_listen,
            bounce_domain,
            webhooks,
            dev,
        })
    }
}

/// The annotated default configuration file, for `heraldd print-default-config`.
pub fn default_config_toml() -> String {
    let mut out = String::from(
        "# Herald daemon configuration. Every key may also be set as an environment variable\n\
         # HERALD_<KEY> (upper case), which wins over this file; flags win over both.\n\n",
    );
    for key in KEYS {
        out.push_str(&format!("# {}\n# env: {}\n", key.help, key.env_name()));
        match key.default {
            Some(default) => out.push_str(&format!("{} = {:?}\n\n", key.name, default)),
            None => out.push_str(&format!("# {} = \"\"\n\n", key.name)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_valid() {
        let config = Layers::new().build(false).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.database.engine(), "sqlite");
        assert_eq!(config.retry_schedule.len(), 5);
        assert_eq!(config.stream_heartbeat, Duration::from_secs(15));
    }

    #[test]
    fn bad_values_name_the_variable_and_the_source() {
        let err = Layers::new()
            .env(env(&[("HERALD_LISTEN", "nowhere"), ("HERALD_RETRY_SCHEDULE", "5x")]))
            .build(false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("HERALD_LISTEN (from the environment) is not a socket address"), "{err}");
        assert!(err.contains("HERALD_RETRY_SCHEDULE"), "{err}");
    }

    #[test]
    fn env_wins_over_file_and_flags_over_env() {
        let dir = tempfile_dir();
        let file = dir.join("herald.toml");
        std::fs::write(&file, "listen = \"127.0.0.1:1\"\nstream_heartbeat_seconds = 2\n").unwrap();
        let config =
            Layers::new().file(&file).env(env(&[("HERALD_LISTEN", "127.0.0.1:2")])).build(false).unwrap();
        assert_eq!(config.listen.port(), 2);
        assert_eq!(config.stream_heartbeat, Duration::from_secs(2));
        let config = Layers::new()
            .env(env(&[("HERALD_LISTEN", "127.0.0.1:2")]))
            .flag("listen", Some("127.0.0.1:3".into()))
            .build(false)
            .unwrap();
        assert_eq!(config.listen.port(), 3);
    }

    #[test]
    fn database_writers_are_one_to_sixteen() {
        let build = |v: &str| Layers::new().env(env(&[("HERALD_DATABASE_WRITERS", v)])).build(false);
        assert_eq!(Layers::new().build(false).unwrap().database_writers, 2);
        assert_eq!(build("1").unwrap().database_writers, 1);
        for bad in ["0", "17", "two"] {
            let err = build(bad).unwrap_err().to_string();
            assert!(err.contains("HERALD_DATABASE_WRITERS"), "{bad}: {err}");
        }
    }

    #[test]
    fn unknown_file_keys_are_rejected() {
        let dir = tempfile_dir();
        let file = dir.join("herald.toml");
        std::fs::write(&file, "lisen = \"x\"\n").unwrap();
        let err = Layers::new().file(&file).build(false).unwrap_err().to_string();
        assert!(err.contains("unknown key `lisen`"), "{err}");
    }

    #[test]
    fn providers_require_their_settings() {
        let err = Layers::new()
            .env(env(&[("HERALD_SMS_PROVIDER", "twilio")]))
            .build(false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("HERALD_TWILIO_ACCOUNT_SID must be set when HERALD_SMS_PROVIDER=twilio"),
            "{err}"
        );
    }

    #[test]
    fn operator_algorithms_never_allow_hmac_or_none() {
        for bad in ["HS256", "RS256,none"] {
            let err = Layers::new()
                .env(env(&[("HERALD_OPERATOR_ALGORITHMS", bad)]))
                .build(false)
                .unwrap_err()
                .to_string();
            assert!(err.contains("HERALD_OPERATOR_ALGORITHMS"), "{err}");
        }
    }

    #[test]
    fn secrets_are_redacted_in_debug_and_errors() {
        let config = Layers::new()
            .env(env(&[
                ("HERALD_SECRET", "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"),
                ("HERALD_DATABASE_URL", "postgres://user:pw-in-url@localhost/db"),
            ]))
            .build(false)
            .unwrap();
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        assert!(!debug.contains("pw-in-url"), "{debug}");
        let err = Layers::new()
            .env(env(&[("HERALD_SECRET", "short-secret-value")]))
            .build(false)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("short-secret-value"), "{err}");
    }

    #[test]
    fn cors_origins_are_checked() {
        let config = Layers::new()
            .env(env(&[("HERALD_CORS_ORIGINS", "https://a.example.com, http://localhost:3000")]))
            .build(false)
            .unwrap();
        assert_eq!(config.cors_origins, ["https://a.example.com", "http://localhost:3000"]);
        let err = Layers::new()
            .env(env(&[("HERALD_CORS_ORIGINS", "https://a.example.com/path")]))
            .build(false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("HERALD_CORS_ORIGINS"), "{err}");
        assert!(Layers::new().build(false).unwrap().cors_origins.is_empty(), "none by default");
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn the_default_file_parses_back() {
        let dir = tempfile_dir();
        let file = dir.join("default.toml");
        std::fs::write(&file, default_config_toml()).unwrap();
        Layers::new().file(&file).build(false).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("herald-config-{}", herald_common::ids::new_body()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
