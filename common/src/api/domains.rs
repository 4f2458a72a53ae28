//! Custom sending domains (`/api/v1/domains`): the DNS records a tenant publishes to prove it owns
//! a domain and to let Herald send mail for it (SPF, DKIM), and what the last check found.

use serde::{Deserialize, Serialize};

use crate::{Timestamp, ids::DomainId, wire::wire_enum};

wire_enum! {
    /// Where a domain, or one of its records, stands after the last check.
    pub enum DomainStatus {
        /// Not found yet: publish the record (DNS changes can take a while to be seen).
        Pending = "pending",
        /// Found and correct.
        Verified = "verified",
        /// Found but wrong (or, for a domain, not found within 72 hours): the detail says what to fix.
        Failed = "failed",
        /// The DNS could not answer (a timeout or SERVFAIL): nothing is known; checked again later.
        TemporaryFailure = "temporary_failure",
    }
}

wire_enum! {
    /// What a record proves.
    pub enum RecordPurpose {
        /// `_herald-challenge.<name>` holds the domain's challenge token: the tenant controls its DNS.
        Ownership = "ownership",
        /// The single `v=spf1` record of `<name>` includes Herald's sending hosts.
        Spf = "spf",
        /// `<selector>._domainkey.<name>` publishes the public half of the domain's DKIM key.
        Dkim = "dkim",
    }
}

/// `POST /api/v1/domains`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainIn {
    /// The domain mail will be sent from, e.g. `mail.example.com`.
    pub name: String,
    /// The DKIM selector (a DNS label); `herald` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dkim_selector: Option<String>,
}

/// One DNS record to publish, and what the last check found of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DnsRecordOut {
    pub purpose: RecordPurpose,
    /// Always `TXT`.
    #[serde(rename = "type")]
    pub record_type: String,
    /// The fully qualified name to publish the record at.
    pub host: String,
    /// The record's text, as one string.
    pub value: String,
    /// The record as a zone-file line, its text split into strings of at most 255 bytes (a
    /// DNS limit), ready to paste into a BIND-style zone.
    pub zone_line: String,
    pub status: DomainStatus,
    /// What the last check found and, unless verified, what to change.
    pub detail: String,
}

/// The domain's DMARC policy, reported for information: it does not affect verification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DmarcOut {
    /// `_dmarc.<name>`.
    pub host: String,
    /// The `v=DMARC1` record found at the last check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub detail: String,
}

/// A sending domain (CONTRACT §4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DomainOut {
    pub domain_id: DomainId,
    pub name: String,
    pub status: DomainStatus,
    /// Whether mail can be sent from this domain now: it was verified at the last conclusive
    /// check (a DNS outage since does not stop it).
    pub sending_enabled: bool,
    pub dkim_selector: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Timestamp>,
    /// When the domain became verified (cleared if a later check finds it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Timestamp>,
    pub records: Vec<DnsRecordOut>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dmarc: Option<DmarcOut>,
}

/// `GET /api/v1/domains`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DomainListOut {
    pub domains: Vec<DomainOut>,
}

/// The selector used when none is given.
pub const DEFAULT_DKIM_SELECTOR: &str = "herald";

/// `name` as Herald keeps it (lower case, without a final dot), or why it is not a domain name
/// mail can be sent from: at least two labels of letters, digits and inner hyphens, each at most
/// 63 characters, 253 in all, and a top-level label that is not all digits (so no IP addresses).
pub fn normalize_domain_name(name: &str) -> Result<String, String> {
    let name = name.trim();
    if name.contains("://") || name.contains('/') {
        return Err("must be a domain name such as mail.example.com, not a URL".to_owned());
    }
    if name.contains('@') {
        return Err("must be a domain name such as mail.example.com, not an email address".to_owned());
    }
    if name.parse::<std::net::IpAddr>().is_ok()
        || name.trim_matches(['[', ']']).parse::<std::net::Ipv6Addr>().is_ok()
    {
        return Err("must be a domain name, not an IP address".to_owned());
    }
    if !name.is_ascii() {
        return Err("must be ASCII: give an internationalised name in its xn-- (punycode) form".to_owned());
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err("is required".to_owned());
    }
    if name.len() > 253 {
        return Err("must be at most 253 characters".to_owned());
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 {
        return Err("must have at least two labels, such as example.com".to_owned());
    }
    for label in &labels {
        dns_label(label).map_err(|m| format!("`{label}`: {m}"))?;
    }
    if labels.last().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
        return Err("must be a domain name, not an IP address".to_owned());
    }
    Ok(name)
}

/// A DKIM selector: one DNS label (lower-cased), or why not.
pub fn normalize_selector(selector: &str) -> Result<String, String> {
    let selector = selector.trim().to_ascii_lowercase();
    dns_label(&selector)?;
    Ok(selector)
}

fn dns_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("a label cannot be empty".to_owned());
    }
    if label.len() > 63 {
        return Err("a label can have at most 63 characters".to_owned());
    }
    if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err("a label may hold only letters, digits and hyphens".to_owned());
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err("a label cannot start or end with a hyphen".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_names_are_normalised_and_checked() {
        assert_eq!(normalize_domain_name(" Mail.Example.COM. ").unwrap(), "mail.example.com");
        assert_eq!(normalize_domain_name("xn--bcher-kva.example").unwrap(), "xn--bcher-kva.example");
        for (bad, why) in [
            ("https://example.com", "URL"),
            ("example.com/path", "URL"),
            ("ann@example.com", "email"),
            ("192.168.1.10", "IP"),
            ("::1", "IP"),
            ("[2001:db8::1]", "IP"),
            ("10.0.0.300", "IP"),
            ("localhost", "two labels"),
            ("", "required"),
            ("exa_mple.com", "letters, digits"),
            ("-a.example.com", "hyphen"),
            ("a..example.com", "empty"),
            ("bücher.example", "punycode"),
        ] {
            let message = normalize_domain_name(bad).unwrap_err();
            assert!(message.contains(why), "{bad}: {message}");
        }
        assert!(normalize_domain_name(&format!("{}.com", "a".repeat(64))).is_err());
        assert!(normalize_domain_name(&format!("{}.com", ["a"; 130].join("."))).is_err());
    }

    #[test]
    fn selectors_are_single_labels() {
        assert_eq!(normalize_selector("Herald2026").unwrap(), "herald2026");
        assert!(normalize_selector("a.b").is_err());
        assert!(normalize_selector("").is_err());
    }
}
