//! Parsers for configuration values: each returns the value or the reason it is invalid. The
//! [`Parser`] reads values from the layers with them, adding the variable's name and where it
//! came from, and collects every error rather than stopping at the first.

use std::{fmt, path::PathBuf, time::Duration};

use super::{DatabaseUrl, Layers, OperatorIdp, Secret, SmsProvider, SmtpConfig, Source, WhatsappProvider};

fn parse_http_url(v: &str) -> Result<String, String> {
    if (v.starts_with("http://") || v.starts_with("https://")) && v.len() > "https://".len() {
        Ok(v.trim_end_matches('/').to_owned())
    } else {
        Err("must be an http:// or https:// URL".to_owned())
    }
}

pub(super) fn parse_database_url(v: &str) -> Result<DatabaseUrl, String> {
    if let Some(rest) = v.strip_prefix("sqlite://").or_else(|| v.strip_prefix("sqlite:")) {
        let path = rest.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            return Err("needs a file path (e.g. sqlite://herald-data/herald.db)".to_owned());
        }
        return Ok(DatabaseUrl::Sqlite { url: v.to_owned(), path: PathBuf::from(path) });
    }
    if v.starts_with("postgres://") || v.starts_with("postgresql://") {
        return Ok(DatabaseUrl::Postgres(Secret::new(v)));
    }
    Err("must start with sqlite:// or postgres://".to_owned())
}

pub(super) fn parse_smtp_url(v: &str) -> Result<SmtpConfig, String> {
    let Some((scheme, rest)) = v.split_once("://") else {
        return Err("must look like smtp://host:port".to_owned());
    };
    if !["smtp", "smtps", "smtp+starttls", "smtp+plain"].contains(&scheme) {
        return Err("scheme must be smtp, smtps, smtp+starttls or smtp+plain".to_owned());
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    Ok(SmtpConfig { url: Secret::new(v), host: host.to_owned() })
}

pub(super) fn parse_algorithms(v: &str) -> Result<Vec<jsonwebtoken::Algorithm>, String> {
    use jsonwebtoken::Algorithm::*;
    let mut out = Vec::new();
    for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let alg = match name {
            "RS256" => RS256,
            "RS384" => RS384,
            "RS512" => RS512,
            "PS256" => PS256,
            "PS384" => PS384,
            "PS512" => PS512,
            "ES256" => ES256,
            "ES384" => ES384,
            "EdDSA" => EdDSA,
            "HS256" | "HS384" | "HS512" | "none" => {
                return Err(format!(
                    "may not contain {name}: operator tokens must be signed with a private key"
                ));
            }
            other => return Err(format!("`{other}` is not a known algorithm")),
        };
        out.push(alg);
    }
    if out.is_empty() {
        return Err("must name at least one algorithm".to_owned());
    }
    Ok(out)
}

pub(super) fn parse_seconds(v: &str, min: u64, max: u64) -> Result<Duration, String> {
    match v.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(format!("must be a whole number of seconds from {min} to {max}")),
    }
}

/// Parses `500ms`, `5s`, `2m`, `1h`.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("`{v}` does not start with a number"))?;
    let millis = match unit {
        "ms" => n,
        "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(format!("`{v}` needs a unit: ms, s, m or h")),
    };
    Ok(Duration::from_millis(millis))
}

pub(super) fn parse_schedule(v: &str) -> Result<Vec<Duration>, String> {
    let delays =
        v.split(',').filter(|s| !s.trim().is_empty()).map(parse_duration).collect::<Result<Vec<_>, _>>()?;
    if delays.len() > 20 {
        return Err("may hold at most 20 delays".to_owned());
    }
    if delays.iter().any(|d| *d > Duration::from_secs(7 * 24 * 3600)) {
        return Err("delays may be at most 7 days".to_owned());
    }
    Ok(delays)
}

pub(super) struct Parser<'a> {
    pub(super) layers: &'a Layers,
    pub(super) errors: Vec<String>,
}

impl Parser<'_> {
    fn raw(&self, name: &str) -> Option<&(String, Source)> {
        self.layers.values.get(name).filter(|(v, _)| !v.is_empty())
    }

    fn fail(&mut self, name: &str, source: &Source, message: impl fmt::Display) {
        let env = format!("HERALD_{}", name.to_ascii_uppercase());
        self.errors.push(format!("{env} (from {source}) {message}"));
    }

    pub(super) fn optional<T>(&mut self, name: &str, f: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        let (value, source) = self.raw(name)?.clone();
        match f(&value) {
            Ok(v) => Some(v),
            Err(message) => {
                let shown = if name.contains("secret") || name.contains("token") || name.contains("url") {
                    String::new()
                } else {
                    format!(": `{value}`")
                };
                self.fail(name, &source, format!("{message}{shown}"));
                None
            }
        }
    }

    pub(super) fn parse<T>(&mut self, name: &str, f: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        if self.raw(name).is_none() {
            self.errors.push(format!("HERALD_{} must be set", name.to_ascii_uppercase()));
            return None;
        }
        self.optional(name, f)
    }

    fn require(&mut self, name: &str, because: &str) -> Option<String> {
        match self.raw(name) {
            Some((v, _)) => Some(v.clone()),
            None => {
                self.errors.push(format!("HERALD_{} must be set {because}", name.to_ascii_uppercase()));
                None
            }
        }
    }

    pub(super) fn sms(&mut self) -> Option<SmsProvider> {
        let kind = self.parse("sms_provider", |v| match v {
            "log" | "twilio" => Ok(v.to_owned()),
            _ => Err("must be `twilio` or `log`".to_owned()),
        })?;
        if kind == "log" {
            return Some(SmsProvider::Log);
        }
        let because = "when HERALD_SMS_PROVIDER=twilio";
        let base_url = self.parse("twilio_base_url", parse_http_url);
        let account_sid = self.require("twilio_account_sid", because);
        let auth_token = self.require("twilio_auth_token", because);
        let from = self.require("sms_from", because);
        Some(SmsProvider::Twilio {
            base_url: base_url?,
            account_sid: account_sid?,
            auth_token: Secret::new(auth_token?),
            from: from?,
        })
    }

    pub(super) fn whatsapp(&mut self) -> Option<WhatsappProvider> {
        let kind = self.parse("whatsapp_provider", |v| match v {
            "log" | "meta" => Ok(v.to_owned()),
            _ => Err("must be `meta` or `log`".to_owned()),
        })?;
        if kind == "log" {
            return Some(WhatsappProvider::Log);
        }
        let because = "when HERALD_WHATSAPP_PROVIDER=meta";
        let base_url = self.parse("whatsapp_base_url", parse_http_url);
        let api_version = self.parse("whatsapp_api_version", |v| Ok(v.to_owned()));
        let phone_number_id = self.require("whatsapp_phone_number_id", because);
        let token = self.require("whatsapp_token", because);
        Some(WhatsappProvider::Meta {
            base_url: base_url?,
            api_version: api_version?,
            phone_number_id: phone_number_id?,
            token: Secret::new(token?),
        })
    }

    pub(super) fn operator_idp(&mut self) -> Option<OperatorIdp> {
        let jwks_url = self.optional("operator_jwks_url", parse_http_url)?;
        let because = "when HERALD_OPERATOR_JWKS_URL is set";
        let issuer = self.require("operator_issuer", because);
        let audience = self.require("operator_audience", because);
        Some(OperatorIdp { jwks_url, issuer: issuer?, audience: audience? })
    }
}
