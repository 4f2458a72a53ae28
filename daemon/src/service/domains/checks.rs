//! What a domain's DNS answers mean: each record judged against what Herald expects, with a
//! detail a person can act on, and the domain's status concluded from its records. Pure
//! functions of the answers, so every case is unit-tested without a DNS server.

use herald_common::api::domains::DomainStatus;
use serde::{Deserialize, Serialize};

use crate::dns::TxtLookup;

/// What one check found of one record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordCheck {
    pub status: DomainStatus,
    pub detail: String,
}

impl RecordCheck {
    fn new(status: DomainStatus, detail: impl Into<String>) -> Self {
        Self { status, detail: detail.into() }
    }

    fn temporary(host: &str, error: &str) -> Self {
        Self::new(
            DomainStatus::TemporaryFailure,
            format!(
                "The DNS lookup of {host} failed ({error}); nothing is known of this record until the next check."
            ),
        )
    }
}

/// The DMARC record, for information.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DmarcCheck {
    pub value: Option<String>,
    pub detail: String,
}

/// Everything one check found (stored as JSON with the domain).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checks {
    pub ownership: RecordCheck,
    pub spf: RecordCheck,
    pub dkim: RecordCheck,
    pub dmarc: DmarcCheck,
}

impl Checks {
    /// A domain that has not been checked yet.
    pub fn unchecked() -> Self {
        let pending =
            || RecordCheck::new(DomainStatus::Pending, "Not checked yet: publish the record, then verify.");
        Self {
            ownership: pending(),
            spf: pending(),
            dkim: pending(),
            dmarc: DmarcCheck { value: None, detail: "Not checked yet.".to_owned() },
        }
    }

    fn records_mut(&mut self) -> [&mut RecordCheck; 3] {
        [&mut self.ownership, &mut self.spf, &mut self.dkim]
    }
}

/// A value quoted in a detail, shortened if long (DKIM keys are ~400 characters).
fn quoted(value: &str) -> String {
    const MAX: usize = 72;
    if value.chars().count() <= MAX {
        format!("`{value}`")
    } else {
        let head: String = value.chars().take(MAX - 1).collect();
        format!("`{head}…`")
    }
}

fn quoted_list(values: &[String]) -> String {
    values.iter().map(|v| quoted(v)).collect::<Vec<_>>().join(", ")
}

fn not_found(host: &str, expected: &str) -> RecordCheck {
    RecordCheck::new(
        DomainStatus::Pending,
        format!(
            "No matching TXT record at {host} yet. Publish {}; DNS changes can take from minutes to hours to be seen.",
            quoted(expected)
        ),
    )
}

/// The ownership challenge: a TXT record at `host` whose text is exactly `expected`.
pub fn ownership(lookup: &TxtLookup, host: &str, expected: &str) -> RecordCheck {
    match lookup {
        TxtLookup::Failed(error) => RecordCheck::temporary(host, error),
        TxtLookup::Found(texts) if texts.iter().any(|t| t.trim() == expected) => {
            RecordCheck::new(DomainStatus::Verified, format!("Found {} at {host}.", quoted(expected)))
        }
        TxtLookup::Found(texts) if !texts.is_empty() => RecordCheck::new(
            DomainStatus::Failed,
            format!(
                "Found {} at {host}, but not this domain's challenge {}: add it (the other records may stay).",
                quoted_list(texts),
                quoted(expected)
            ),
        ),
        TxtLookup::Found(_) | TxtLookup::NotFound => not_found(host, expected),
    }
}

/// Whether a TXT record is an SPF record (RFC 7208 §4.5: `v=spf1` then a space or the end).
fn is_spf(text: &str) -> bool {
    let text = text.trim_start();
    text.len() >= 6
        && text[..6].eq_ignore_ascii_case("v=spf1")
        && text[6..].chars().next().is_none_or(|c| c == ' ')
}

/// SPF: exactly one `v=spf1` record at `host`, and it has an `include:<include>` mechanism
/// (with no qualifier or `+`). Nested includes are not followed.
pub fn spf(lookup: &TxtLookup, host: &str, include: &str) -> RecordCheck {
    let wanted = format!("include:{include}");
    let expected = format!("v=spf1 {wanted} ~all");
    let records: Vec<String> = match lookup {
        TxtLookup::Failed(error) => return RecordCheck::temporary(host, error),
        TxtLookup::NotFound => Vec::new(),
        TxtLookup::Found(texts) => texts.iter().filter(|t| is_spf(t)).map(|t| t.trim().to_owned()).collect(),
    };
    match records.as_slice() {
        [] => RecordCheck::new(
            DomainStatus::Pending,
            format!(
                "No SPF record (a TXT record starting `v=spf1`) at {host} yet. Publish {}; DNS changes can take \
                 from minutes to hours to be seen.",
                quoted(&expected)
            ),
        ),
        [record] => {
            let includes = record.split_whitespace().skip(1).any(|term| {
                let term = term.strip_prefix('+').unwrap_or(term);
                term.eq_ignore_ascii_case(&wanted)
            });
            if includes {
                RecordCheck::new(DomainStatus::Verified, format!("Found {} at {host}.", quoted(record)))
            } else {
                RecordCheck::new(
                    DomainStatus::Failed,
                    format!(
                        "The SPF record at {host} is {} and does not include `{wanted}`: add `{wanted}` to it, \
                         before its `all` term.",
                        quoted(record)
                    ),
                )
            }
        }
        many => RecordCheck::new(
            DomainStatus::Failed,
            format!(
                "Found {} SPF records at {host}: {}. A domain may have only one (more is a permanent error for \
                 receivers, RFC 7208 §3.2): merge them into one record that includes `{wanted}`.",
                many.len(),
                quoted_list(many)
            ),
        ),
    }
}

/// The tags of a DKIM key record (`v=DKIM1; k=rsa; p=…`), names lower-cased, values with their
/// whitespace removed (RFC 6376 §3.2 allows folding whitespace in them).
fn dkim_tags(text: &str) -> Vec<(String, String)> {
    text.split(';')
        .filter_map(|tag| tag.split_once('='))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.split_whitespace().collect()))
        .collect()
}

fn tag<'t>(tags: &'t [(String, String)], name: &str) -> Option<&'t str> {
    tags.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The last characters of a key, to tell two keys apart in a message.
fn key_tail(key: &str) -> String {
    let tail: String = key.chars().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
    format!("…{tail}")
}

/// DKIM: the record at `host` publishes the same public key as `expected` (this domain's record).
pub fn dkim(lookup: &TxtLookup, host: &str, expected: &str) -> RecordCheck {
    let texts = match lookup {
        TxtLookup::Failed(error) => return RecordCheck::temporary(host, error),
        TxtLookup::NotFound => return not_found(host, expected),
        TxtLookup::Found(texts) if texts.is_empty() => return not_found(host, expected),
        TxtLookup::Found(texts) => texts,
    };
    let ours = dkim_tags(expected);
    let our_key = tag(&ours, "p").unwrap_or_default();
    let keys: Vec<Vec<(String, String)>> =
        texts.iter().map(|t| dkim_tags(t)).filter(|tags| tag(tags, "p").is_some()).collect();
    if keys.is_empty() {
        return RecordCheck::new(
            DomainStatus::Failed,
            format!(
                "Found {} at {host}, which is not a DKIM key record (no `p=` tag): replace it with {}.",
                quoted_list(texts),
                quoted(expected)
            ),
        );
    }
    if keys.iter().any(|tags| {
        tag(tags, "p") == Some(our_key) && tag(tags, "k").is_none_or(|k| k.eq_ignore_ascii_case("rsa"))
    }) {
        return RecordCheck::new(
            DomainStatus::Verified,
            format!("Found this domain's public key at {host}."),
        );
    }
    let found = &keys[0];
    let key = tag(found, "p").unwrap_or_default();
    let detail = match tag(found, "k") {
        _ if key.is_empty() => format!(
            "The DKIM record at {host} has an empty `p=`, which means a revoked key: publish {}.",
            quoted(expected)
        ),
        Some(k) if !k.eq_ignore_ascii_case("rsa") => format!(
            "The DKIM record at {host} is for a `k={k}` key; this domain signs with `k=rsa`: publish {}.",
            quoted(expected)
        ),
        _ => format!(
            "The DKIM record at {host} publishes a different public key (ending {}) from this domain's (ending {}): \
             replace it with this domain's record.",
            key_tail(key),
            key_tail(our_key)
        ),
    };
    RecordCheck::new(DomainStatus::Failed, detail)
}

/// DMARC, for information: the `v=DMARC1` record at `host`, if any.
pub fn dmarc(lookup: &TxtLookup, host: &str) -> DmarcCheck {
    match lookup {
        TxtLookup::Failed(error) => {
            DmarcCheck { value: None, detail: format!("The DNS lookup of {host} failed ({error}).") }
        }
        TxtLookup::Found(texts) => match texts
            .iter()
            .find(|t| t.trim_start().to_ascii_lowercase().starts_with("v=dmarc1"))
        {
            Some(record) => DmarcCheck {
                value: Some(record.trim().to_owned()),
                detail:
                    "A DMARC policy is published (reported for information; it does not affect verification)."
                        .to_owned(),
            },
            None => no_dmarc(host),
        },
        TxtLookup::NotFound => no_dmarc(host),
    }
}

fn no_dmarc(host: &str) -> DmarcCheck {
    DmarcCheck {
        value: None,
        detail: format!(
            "No DMARC record at {host}. It is not needed for verification, but large mailbox providers expect \
             one from bulk senders: start with `v=DMARC1; p=none;` and tighten it once reports look right."
        ),
    }
}

/// How the background checks are scheduled.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Verified domains are checked again this often.
    pub recheck: i64,
    /// Domains not verified (pending or after a DNS failure) are checked this often.
    pub pending: i64,
    /// A domain not verified this long after its creation becomes failed.
    pub pending_timeout: i64,
}

/// What a check concludes for the domain.
#[derive(Clone, Debug, PartialEq)]
pub struct Conclusion {
    pub status: DomainStatus,
    /// Set while mail may be sent from the domain.
    pub verified_at: Option<i64>,
    /// The next background check (`None`: only on request).
    pub next_check_at: Option<i64>,
}

/// The domain's status from its records' (adjusting `checks`: a record still missing when it
/// can no longer be merely pending is failed):
/// - all three verified: `verified` (since `verified_at` if it already was);
/// - a DNS failure and nothing wrong: `temporary_failure`; a domain that was verified stays
///   sendable, since nothing is known to have changed;
/// - anything wrong: `failed`;
/// - something missing: `pending`, unless the domain was verified before (its records were
///   removed) or was created more than the pending timeout ago: then `failed`.
pub fn conclude(
    checks: &mut Checks,
    created_at: i64,
    verified_at: Option<i64>,
    now: i64,
    schedule: Schedule,
) -> Conclusion {
    let statuses = [checks.ownership.status, checks.spf.status, checks.dkim.status];
    let all = |status| statuses.iter().all(|s| *s == status);
    let any = |status| statuses.contains(&status);
    if all(DomainStatus::Verified) {
        return Conclusion {
            status: DomainStatus::Verified,
            verified_at: verified_at.or(Some(now)),
            next_check_at: Some(now + schedule.recheck),
        };
    }
    let failed = Conclusion { status: DomainStatus::Failed, verified_at: None, next_check_at: None };
    if any(DomainStatus::Failed) {
        return failed;
    }
    if any(DomainStatus::TemporaryFailure) {
        return Conclusion {
            status: DomainStatus::TemporaryFailure,
            verified_at,
            next_check_at: Some(now + schedule.pending),
        };
    }
    let expired = now >= created_at + schedule.pending_timeout;
    if verified_at.is_some() || expired {
        let why = if verified_at.is_some() {
            "It was found before and has since been removed."
        } else {
            "It was not found within the time allowed after the domain was added; publish it and verify again."
        };
        for record in checks.records_mut() {
            if record.status == DomainStatus::Pending {
                record.status = DomainStatus::Failed;
                record.detail = format!("{} {why}", record.detail);
            }
        }
        return failed;
    }
    Conclusion {
        status: DomainStatus::Pending,
        verified_at: None,
        // Check again soon, and at the latest when the pending time runs out.
        next_check_at: Some((now + schedule.pending).min(created_at + schedule.pending_timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(texts: &[&str]) -> TxtLookup {
        TxtLookup::Found(texts.iter().map(|t| (*t).to_owned()).collect())
    }

    const HOST: &str = "mail.example.com";

    #[test]
    fn ownership_needs_the_exact_token() {
        let token = "herald-verification=abc";
        assert_eq!(ownership(&found(&["x", token]), HOST, token).status, DomainStatus::Verified);
        let wrong = ownership(&found(&["herald-verification=old"]), HOST, token);
        assert_eq!(wrong.status, DomainStatus::Failed);
        assert!(
            wrong.detail.contains("`herald-verification=old`") && wrong.detail.contains(token),
            "{}",
            wrong.detail
        );
        assert_eq!(ownership(&TxtLookup::NotFound, HOST, token).status, DomainStatus::Pending);
        let failed = ownership(&TxtLookup::Failed("SERVFAIL".into()), HOST, token);
        assert_eq!(failed.status, DomainStatus::TemporaryFailure);
        assert!(failed.detail.contains("SERVFAIL"));
    }

    #[test]
    fn spf_needs_exactly_one_record_with_the_include() {
        let inc = "spf.herald.test";
        let ok = spf(
            &found(&["google-site-verification=x", "v=spf1 ip4:192.0.2.1 include:spf.herald.test -all"]),
            HOST,
            inc,
        );
        assert_eq!(ok.status, DomainStatus::Verified, "{}", ok.detail);
        assert_eq!(
            spf(&found(&["V=SPF1 +include:SPF.herald.test ~all"]), HOST, inc).status,
            DomainStatus::Verified
        );
        let missing = spf(&found(&["v=spf1 include:_spf.google.com ~all"]), HOST, inc);
        assert_eq!(missing.status, DomainStatus::Failed);
        assert!(missing.detail.contains("does not include `include:spf.herald.test`"), "{}", missing.detail);
        let two = spf(&found(&["v=spf1 include:spf.herald.test ~all", "v=spf1 mx -all"]), HOST, inc);
        assert_eq!(two.status, DomainStatus::Failed);
        assert!(two.detail.contains("Found 2 SPF records") && two.detail.contains("merge"), "{}", two.detail);
        // `v=spf10` is not an SPF record; neither is a TXT that merely mentions it.
        assert_eq!(
            spf(&found(&["v=spf10 include:spf.herald.test"]), HOST, inc).status,
            DomainStatus::Pending
        );
        assert_eq!(spf(&TxtLookup::NotFound, HOST, inc).status, DomainStatus::Pending);
        // A softfail qualifier on the include is not an include.
        assert_eq!(spf(&found(&["v=spf1 ~include:spf.herald.test"]), HOST, inc).status, DomainStatus::Failed);
    }

    #[test]
    fn dkim_compares_the_public_key() {
        let ours = "v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAour";
        assert_eq!(dkim(&found(&[ours]), HOST, ours).status, DomainStatus::Verified);
        // Whitespace inside p= (folded records) and a missing k= (rsa is the default) are fine.
        let folded = "v=DKIM1; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A MIIBCgKCAQEAour";
        assert_eq!(dkim(&found(&[folded]), HOST, ours).status, DomainStatus::Verified);
        let other = dkim(
            &found(&["v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAother"]),
            HOST,
            ours,
        );
        assert_eq!(other.status, DomainStatus::Failed);
        assert!(other.detail.contains("different public key"), "{}", other.detail);
        assert!(dkim(&found(&["v=DKIM1; p="]), HOST, ours).detail.contains("revoked"));
        assert!(dkim(&found(&["v=DKIM1; k=ed25519; p=abc"]), HOST, ours).detail.contains("k=ed25519"));
        assert!(dkim(&found(&["hello"]), HOST, ours).detail.contains("not a DKIM key record"));
        assert_eq!(dkim(&TxtLookup::NotFound, HOST, ours).status, DomainStatus::Pending);
    }

    #[test]
    fn dmarc_is_information() {
        let found = dmarc(&found(&["v=DMARC1; p=reject"]), "_dmarc.x.com");
        assert_eq!(found.value.as_deref(), Some("v=DMARC1; p=reject"));
        assert!(dmarc(&TxtLookup::NotFound, "_dmarc.x.com").detail.contains("No DMARC record"));
    }

    fn with(statuses: [DomainStatus; 3]) -> Checks {
        let mut checks = Checks::unchecked();
        for (record, status) in checks.records_mut().into_iter().zip(statuses) {
            record.status = status;
        }
        checks
    }

    #[test]
    fn the_domain_status_follows_its_records() {
        use DomainStatus::*;
        let s = Schedule { recheck: 1_000, pending: 10, pending_timeout: 100 };
        let verified = conclude(&mut with([Verified; 3]), 0, None, 50, s);
        assert_eq!(
            verified,
            Conclusion { status: Verified, verified_at: Some(50), next_check_at: Some(1_050) }
        );
        assert_eq!(conclude(&mut with([Verified; 3]), 0, Some(20), 50, s).verified_at, Some(20));
        let pending = conclude(&mut with([Verified, Pending, Verified]), 0, None, 95, s);
        assert_eq!(pending, Conclusion { status: Pending, verified_at: None, next_check_at: Some(100) });
        assert_eq!(
            conclude(&mut with([Verified, Failed, TemporaryFailure]), 0, Some(1), 50, s).status,
            Failed
        );
        let outage = conclude(&mut with([Verified, TemporaryFailure, Pending]), 0, Some(1), 50, s);
        assert_eq!(
            outage,
            Conclusion { status: TemporaryFailure, verified_at: Some(1), next_check_at: Some(60) }
        );

        let mut late = with([Verified, Pending, Verified]);
        assert_eq!(conclude(&mut late, 0, None, 100, s).status, Failed);
        assert_eq!(late.spf.status, Failed);
        assert!(late.spf.detail.contains("not found within the time allowed"), "{}", late.spf.detail);

        let mut removed = with([Verified, Verified, Pending]);
        assert_eq!(
            conclude(&mut removed, 0, Some(1), 50, s),
            Conclusion { status: Failed, verified_at: None, next_check_at: None }
        );
        assert!(removed.dkim.detail.contains("since been removed"));
    }
}
