//! Parsers for configuration values: each returns the value or the reason it is invalid
//! (the caller adds the variable's name and where it came from).

use std::{path::PathBuf, time::Duration};

use super::{DatabaseUrl, Secret, SmtpConfig};

pub(super) fn parse_http_url(v: &str) -> Result<String, String> {
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
