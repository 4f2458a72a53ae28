//! The configuration read section by section. Each section parses every one of its keys (so all
//! errors are reported together, not the first only), and is `None` if any of them is invalid.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use super::{
    DatabaseUrl, LogFormat, OperatorIdp, Secret, SmsProvider, SmtpConfig, WebhookConfig, WhatsappProvider,
    parse::{
        Parser, parse_algorithms, parse_database_url, parse_duration, parse_schedule, parse_seconds,
        parse_smtp_url,
    },
};

/// Where the daemon listens and what browsers and streams may do.
pub(super) struct Server {
    pub listen: SocketAddr,
    pub cors_origins: Vec<String>,
    pub stream_heartbeat: Duration,
}

/// The database and the data folder.
pub(super) struct Storage {
    pub database: DatabaseUrl,
    pub database_max_connections: u32,
    pub database_writers: usize,
    pub sqlite_synchronous_full: bool,
    pub data_dir: PathBuf,
    pub secret: Option<Secret>,
}

/// The providers and how deliveries to them are retried.
pub(super) struct Delivery {
    pub smtp: Option<SmtpConfig>,
    pub email_from: String,
    pub sms: SmsProvider,
    pub whatsapp: WhatsappProvider,
    pub retry_schedule: Vec<Duration>,
    pub delivery_workers: usize,
    pub delivery_lease: Duration,
}

/// Sending domains' DNS checks.
pub(super) struct Domains {
    pub dns_nameservers: Vec<SocketAddr>,
    pub spf_include: String,
    pub dns_timeout: Duration,
    pub domain_recheck_interval: Duration,
    pub domain_pending_interval: Duration,
    pub domain_pending_timeout: Duration,
}

/// The operators' identity provider.
pub(super) struct Operators {
    pub operator_idp: Option<OperatorIdp>,
    pub operator_algorithms: Vec<jsonwebtoken::Algorithm>,
    pub operator_jwks_refresh: Duration,
    pub operator_jwks_max_age: Duration,
}

/// Receipts from the providers: where they reach the daemon, and their keys.
pub(super) struct Receipts {
    pub public_url: Option<String>,
    pub whatsapp_app_secret: Option<Secret>,
    pub whatsapp_verify_token: Option<Secret>,
    pub bounce_listen: Option<SocketAddr>,
    pub bounce_domain: Option<String>,
}

pub(super) struct Logging {
    pub log: String,
    pub log_format: LogFormat,
}

/// A comma-separated list, each item checked.
fn list<T>(v: &str, item: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(item).collect()
}

fn cors_origin(origin: &str) -> Result<String, String> {
    let valid = origin == "*"
        || ((origin.starts_with("https://") || origin.starts_with("http://"))
            && !origin.trim_end_matches('/').contains(|c: char| c.is_whitespace())
            && origin.matches('/').count() == 2);
    if valid {
        Ok(origin.to_owned())
    } else {
        Err(format!("`{origin}` is not an origin such as https://app.example.com"))
    }
}

fn name_server(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| format!("`{s}` is not an ip or ip:port"))
}

/// A duration within `[min, max]`.
fn duration_within(
    min: Duration,
    max: Duration,
    shown: &'static str,
) -> impl Fn(&str) -> Result<Duration, String> {
    move |v| match parse_duration(v) {
        Ok(d) if d >= min && d <= max => Ok(d),
        Ok(_) => Err(format!("must be from {shown}")),
        Err(e) => Err(e),
    }
}

fn whole_number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    min: T,
    max: T,
) -> impl Fn(&str) -> Result<T, String> {
    move |v| match v.parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}

impl Parser<'_> {
    pub(super) fn server(&mut self) -> Option<Server> {
        let listen = self.parse("listen", |v| {
            v.parse::<SocketAddr>()
                .map_err(|_| "is not a socket address (expected e.g. 127.0.0.1:8080)".to_owned())
        });
        let cors_origins = self.optional("cors_origins", |v| list(v, cors_origin)).unwrap_or_default();
        let stream_heartbeat = self.parse("stream_heartbeat_seconds", |v| parse_seconds(v, 1, 3_600));
        Some(Server { listen: listen?, cors_origins, stream_heartbeat: stream_heartbeat? })
    }

    pub(super) fn storage(&mut self) -> Option<Storage> {
        let database = self.parse("database_url", parse_database_url);
        let database_max_connections = self.parse("database_max_connections", whole_number(1u32, 256));
        let database_writers = self.parse("database_writers", whole_number(1usize, 16));
        let sqlite_synchronous_full = self.parse("sqlite_synchronous", |v| match v {
            "full" => Ok(true),
            "normal" => Ok(false),
            _ => Err("must be `full` or `normal`".to_owned()),
        });
        let data_dir = self.parse("data_dir", |v| {
            if v.is_empty() { Err("must not be empty".to_owned()) } else { Ok(PathBuf::from(v)) }
        });
        let secret = self.optional("secret", |v| {
            if v.len() < 32 {
                Err("must be at least 32 characters (e.g. `openssl rand -base64 32`)".to_owned())
            } else {
                Ok(Secret::new(v))
            }
        });
        Some(Storage {
            database: database?,
            database_max_connections: database_max_connections?,
            database_writers: database_writers?,
            sqlite_synchronous_full: sqlite_synchronous_full?,
            data_dir: data_dir?,
            secret,
        })
    }

    pub(super) fn delivery(&mut self) -> Option<Delivery> {
        let smtp = self.optional("smtp_url", parse_smtp_url);
        let email_from = self.parse("email_from", |v| {
            if v.contains('@') { Ok(v.to_owned()) } else { Err("is not an email address".to_owned()) }
        });
        let sms = self.sms();
        let whatsapp = self.whatsapp();
        let retry_schedule = self.parse("retry_schedule", parse_schedule);
        let delivery_workers = self.parse("delivery_workers", whole_number(1usize, 1024));
        let delivery_lease = self.parse("delivery_lease_seconds", |v| parse_seconds(v, 1, 86_400));
        Some(Delivery {
            smtp,
            email_from: email_from?,
            sms: sms?,
            whatsapp: whatsapp?,
            retry_schedule: retry_schedule?,
            delivery_workers: delivery_workers?,
            delivery_lease: delivery_lease?,
        })
    }

    pub(super) fn webhooks(&mut self) -> Option<WebhookConfig> {
        let retry_schedule = self.parse("webhook_retry_schedule", parse_schedule);
        let timeout = self.parse(
            "webhook_timeout",
            duration_within(Duration::from_millis(100), Duration::from_secs(120), "100ms to 120s"),
        );
        let long =
            || duration_within(Duration::from_secs(1), Duration::from_secs(90 * 24 * 3600), "1s to 90 days");
        let disable_after = self.parse("webhook_disable_after", long());
        let secret_overlap = self.parse("webhook_secret_overlap", long());
        let allowed_networks = self
            .optional("webhook_allowed_networks", |v| {
                list(v, |net| {
                    net.parse::<ipnet::IpNet>()
                        .map_err(|_| format!("`{net}` is not a CIDR network such as 127.0.0.0/8"))
                })
            })
            .unwrap_or_default();
        let endpoint_concurrency = self.parse("webhook_endpoint_concurrency", whole_number(1usize, 256));
        Some(WebhookConfig {
            retry_schedule: retry_schedule?,
            timeout: timeout?,
            disable_after: disable_after?,
            secret_overlap: secret_overlap?,
            allowed_networks,
            endpoint_concurrency: endpoint_concurrency?,
        })
    }

    pub(super) fn domains(&mut self) -> Option<Domains> {
        let dns_nameservers = self.optional("dns_nameservers", |v| list(v, name_server)).unwrap_or_default();
        let spf_include = self.parse("spf_include", |v| {
            if v.is_empty() || v.contains(char::is_whitespace) {
                Err("must be a domain name".to_owned())
            } else {
                Ok(v.to_owned())
            }
        });
        let dns_timeout = self.parse(
            "dns_timeout",
            duration_within(Duration::from_millis(100), Duration::from_secs(60), "100ms to 60s"),
        );
        let interval =
            || duration_within(Duration::from_secs(1), Duration::from_secs(30 * 24 * 3600), "1s to 30 days");
        let domain_recheck_interval = self.parse("domain_recheck_interval", interval());
        let domain_pending_interval = self.parse("domain_pending_interval", interval());
        let domain_pending_timeout = self.parse("domain_pending_timeout", interval());
        Some(Domains {
            dns_nameservers,
            spf_include: spf_include?,
            dns_timeout: dns_timeout?,
            domain_recheck_interval: domain_recheck_interval?,
            domain_pending_interval: domain_pending_interval?,
            domain_pending_timeout: domain_pending_timeout?,
        })
    }

    pub(super) fn operators(&mut self) -> Option<Operators> {
        let operator_idp = self.operator_idp();
        let operator_algorithms = self.parse("operator_algorithms", parse_algorithms);
        let operator_jwks_refresh =
            self.parse("operator_jwks_refresh_seconds", |v| parse_seconds(v, 0, 86_400));
        let operator_jwks_max_age =
            self.parse("operator_jwks_max_age_seconds", |v| parse_seconds(v, 1, 86_400));
        Some(Operators {
            operator_idp,
            operator_algorithms: operator_algorithms?,
            operator_jwks_refresh: operator_jwks_refresh?,
            operator_jwks_max_age: operator_jwks_max_age?,
        })
    }

    pub(super) fn receipts(&mut self, dev: bool) -> Option<Receipts> {
        let public_url = self.optional("public_url", |v| {
            if (v.starts_with("http://") || v.starts_with("https://")) && v.len() > "https://".len() {
                Ok(v.trim_end_matches('/').to_owned())
            } else {
                Err("must be an http:// or https:// URL".to_owned())
            }
        });
        let whatsapp_app_secret = self.optional("whatsapp_app_secret", |v| Ok(Secret::new(v.to_owned())));
        let whatsapp_verify_token = self.optional("whatsapp_verify_token", |v| Ok(Secret::new(v.to_owned())));
        let bounce_listen = self
            .optional("bounce_listen", |v| {
                v.parse::<SocketAddr>().map_err(|_| "must be an address such as 0.0.0.0:25".to_owned())
            })
            .or_else(|| dev.then(|| SocketAddr::from(([127, 0, 0, 1], 2525))));
        let bounce_domain = self.optional("bounce_domain", |v| {
            if v.is_empty() || v.contains(|c: char| c.is_whitespace() || c == '@') {
                Err("must be a domain name".to_owned())
            } else {
                Ok(v.to_ascii_lowercase())
            }
        });
        Some(Receipts {
            public_url,
            whatsapp_app_secret,
            whatsapp_verify_token,
            bounce_listen,
            bounce_domain,
        })
    }

    pub(super) fn logging(&mut self) -> Option<Logging> {
        let log = self.parse("log", |v| {
            tracing_subscriber::EnvFilter::try_new(v)
                .map(|_| v.to_owned())
                .map_err(|e| format!("is not a valid log filter: {e}"))
        });
        let log_format = self.parse("log_format", |v| match v {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err("must be `text` or `json`".to_owned()),
        });
        Some(Logging { log: log?, log_format: log_format? })
    }
}
