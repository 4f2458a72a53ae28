//! Custom sending domains: creating one (its challenge token and DKIM key pair), checking its
//! records in the DNS (on request and in the background), and deciding whether mail may be sent
//! from an address. (Signing that mail is delivery's, with [`crate::dkim`].)

pub mod checks;

use std::time::Duration;

use herald_common::{
    Timestamp,
    api::domains::{
        DEFAULT_DKIM_SELECTOR, DmarcOut, DnsRecordOut, DomainIn, DomainOut, DomainStatus, RecordPurpose,
        normalize_domain_name, normalize_selector,
    },
    ids::{DomainId, TenantId},
};
use tokio_util::sync::CancellationToken;

use self::checks::{Checks, RecordCheck, Schedule};
use super::InvalidFields;
use crate::{
    dkim,
    state::AppState,
    store::{DomainCheck, DomainRecord, StoreError, StoreResult},
};

/// What can go wrong with a tenant's sending domains, and with sending from one.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error(transparent)]
    Invalid(#[from] InvalidFields),
    #[error("This tenant already has the domain `{0}`.")]
    AlreadyExists(String),
    #[error("No such domain.")]
    NotFound,
    /// A `from` on one of the tenant's domains that mail may not be sent from (yet).
    #[error(
        "The sending domain `{name}` is {status} ({id}): publish its records and verify it before sending from it."
    )]
    SenderNotVerified { name: String, status: DomainStatus, id: DomainId },
    /// A `from` on a domain the tenant does not have.
    #[error(
        "`{0}` is not a sending domain of this tenant: add it (POST /api/v1/domains), publish its \
         records and verify it."
    )]
    NotASendingDomain(String),
    /// The domain's DKIM key pair could not be made or sealed.
    #[error("cannot make the domain's DKIM key: {0:#}")]
    Key(anyhow::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a domain must publish, derived from the stored domain and the configured SPF include.
struct Expected {
    ownership: (String, String),
    spf: (String, String),
    dkim: (String, String),
    dmarc_host: String,
}

impl Expected {
    fn of(domain: &DomainRecord, spf_include: &str) -> Self {
        let name = &domain.name;
        Self {
            ownership: (
                format!("_herald-challenge.{name}"),
                format!("herald-verification={}", domain.challenge_token),
            ),
            spf: (name.clone(), format!("v=spf1 include:{spf_include} ~all")),
            dkim: (format!("{}._domainkey.{name}", domain.dkim_selector), domain.dkim_record.clone()),
            dmarc_host: format!("_dmarc.{name}"),
        }
    }
}

/// `value` as a zone-file TXT line, split into quoted strings of at most 255 bytes.
fn zone_line(host: &str, value: &str) -> String {
    let strings: Vec<String> = value
        .as_bytes()
        .chunks(255)
        .map(|chunk| {
            format!("\"{}\"", String::from_utf8_lossy(chunk).replace('\\', "\\\\").replace('"', "\\\""))
        })
        .collect();
    format!("{host}. 3600 IN TXT {}", strings.join(" "))
}

fn stored_checks(domain: &DomainRecord) -> Checks {
    domain
        .checks
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(Checks::unchecked)
}

/// The API form of a stored domain.
pub fn out(domain: &DomainRecord, spf_include: &str) -> DomainOut {
    let expected = Expected::of(domain, spf_include);
    let checks = stored_checks(domain);
    let record = |purpose, (host, value): (String, String), check: RecordCheck| DnsRecordOut {
        purpose,
        record_type: "TXT".to_owned(),
        zone_line: zone_line(&host, &value),
        host,
        value,
        status: check.status,
        detail: check.detail,
    };
    DomainOut {
        domain_id: domain.id.clone(),
        name: domain.name.clone(),
        status: domain.status,
        sending_enabled: domain.verified_at.is_some(),
        dkim_selector: domain.dkim_selector.clone(),
        created_at: Timestamp::from_millis(domain.created_at),
        last_checked_at: domain.last_checked_at.map(Timestamp::from_millis),
        verified_at: domain.verified_at.map(Timestamp::from_millis),
        records: vec![
            record(RecordPurpose::Ownership, expected.ownership, checks.ownership),
            record(RecordPurpose::Spf, expected.spf, checks.spf),
            record(RecordPurpose::Dkim, expected.dkim, checks.dkim),
        ],
        dmarc: domain.last_checked_at.map(|_| DmarcOut {
            host: expected.dmarc_host,
            value: checks.dmarc.value,
            detail: checks.dmarc.detail,
        }),
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

fn schedule(state: &AppState) -> Schedule {
    Schedule {
        recheck: millis(state.config.domain_recheck_interval),
        pending: millis(state.config.domain_pending_interval),
        pending_timeout: millis(state.config.domain_pending_timeout),
    }
}

/// Registers a domain for the tenant: a challenge token and a new DKIM key pair; `pending`
/// until its records are found.
pub async fn create(
    state: &AppState,
    tenant_id: &TenantId,
    input: DomainIn,
) -> Result<DomainRecord, DomainError> {
    let name = normalize_domain_name(&input.name).map_err(|m| InvalidFields::field("name", m))?;
    let selector = normalize_selector(input.dkim_selector.as_deref().unwrap_or(DEFAULT_DKIM_SELECTOR))
        .map_err(|m| InvalidFields::field("dkim_selector", m))?;
    // Checked first so a duplicate does not cost a key pair; the insert checks again.
    if state.store.find_domain_by_name(tenant_id, &name).await?.is_some() {
        return Err(DomainError::AlreadyExists(name));
    }
    let id = DomainId::new();
    let key = tokio::task::spawn_blocking(dkim::generate_key)
        .await
        .map_err(|e| DomainError::Key(e.into()))?
        .map_err(DomainError::Key)?;
    let now = state.clock.now_millis();
    let record = DomainRecord {
        dkim_private_key: dkim::keys::seal(&state.secret, &id, &key.pkcs8_der).map_err(DomainError::Key)?,
        id,
        tenant_id: tenant_id.clone(),
        name: name.clone(),
        dkim_selector: selector,
        challenge_token: crate::secret::random_token(24),
        dkim_record: key.record,
        status: DomainStatus::Pending,
        checks: None,
        created_at: now,
        last_checked_at: None,
        verified_at: None,
        next_check_at: Some(now + schedule(state).pending),
    };
    if !state.store.create_domain(record.clone()).await? {
        return Err(DomainError::AlreadyExists(name));
    }
    tracing::info!(domain_id = %record.id, domain = %record.name, "sending domain added");
    Ok(record)
}

/// Looks up every record of `domain` now, records what was found and returns the domain as
/// stored after the check (`None` if it was deleted meanwhile).
#[tracing::instrument(skip_all, fields(domain_id = %domain.id, domain = %domain.name))]
pub async fn check(state: &AppState, domain: &DomainRecord) -> StoreResult<Option<DomainRecord>> {
    let expected = Expected::of(domain, &state.config.spf_include);
    let resolver = &state.resolver;
    let (ownership, spf, dkim, dmarc) = tokio::join!(
        resolver.txt(&expected.ownership.0),
        resolver.txt(&expected.spf.0),
        resolver.txt(&expected.dkim.0),
        resolver.txt(&expected.dmarc_host),
    );
    let mut found = Checks {
        ownership: checks::ownership(&ownership, &expected.ownership.0, &expected.ownership.1),
        spf: checks::spf(&spf, &expected.spf.0, &state.config.spf_include),
        dkim: checks::dkim(&dkim, &expected.dkim.0, &expected.dkim.1),
        dmarc: checks::dmarc(&dmarc, &expected.dmarc_host),
    };
    let now = state.clock.now_millis();
    let conclusion =
        checks::conclude(&mut found, domain.created_at, domain.verified_at, now, schedule(state));
    metrics::counter!("herald_domain_checks_total", "status" => conclusion.status.as_str()).increment(1);
    if conclusion.status != domain.status {
        tracing::info!(from = %domain.status, to = %conclusion.status, "sending domain status changed");
    }
    let checked = state
        .store
        .record_domain_check(
            &domain.id,
            DomainCheck {
                status: conclusion.status,
                checks: serde_json::to_string(&found).unwrap_or_default(),
                checked_at: now,
                verified_at: conclusion.verified_at,
                next_check_at: conclusion.next_check_at,
            },
        )
        .await?;
    state.signers.forget(&domain.tenant_id, &domain.name);
    Ok(checked)
}

/// Removes a domain; mail is no longer sent from it.
pub async fn delete(state: &AppState, tenant_id: &TenantId, domain_id: &DomainId) -> Result<(), DomainError> {
    let domain = state.store.get_domain(tenant_id, domain_id).await?.ok_or(DomainError::NotFound)?;
    if !state.store.delete_domain(tenant_id, domain_id).await? {
        return Err(DomainError::NotFound);
    }
    state.signers.forget(tenant_id, &domain.name);
    tracing::info!(%domain_id, domain = %domain.name, "sending domain removed");
    Ok(())
}

/// Accepts `from` only on one of the tenant's domains that mail may be sent from.
pub async fn check_sender(state: &AppState, tenant_id: &TenantId, from: &str) -> Result<(), DomainError> {
    let name = dkim::domain_of(from);
    match state.store.find_domain_by_name(tenant_id, &name).await? {
        Some(domain) if domain.verified_at.is_some() => Ok(()),
        Some(domain) => Err(DomainError::SenderNotVerified { name, status: domain.status, id: domain.id }),
        None => Err(DomainError::NotASendingDomain(name)),
    }
}

/// How many domains one daemon checks at once in the background.
const CHECK_BATCH: i64 = 8;
/// A claimed check not recorded within this time (its daemon died) is claimed again.
const CHECK_LEASE: Duration = Duration::from_secs(300);

/// Background checks: verified domains again every `domain_recheck_interval`, domains not yet
/// verified every `domain_pending_interval` until they verify or their pending time runs out.
/// Wakes at most every minute (sooner with shorter intervals) to claim what is due.
pub async fn run_checks(state: AppState, shutdown: CancellationToken) {
    let tick = state
        .config
        .domain_pending_interval
        .min(state.config.domain_recheck_interval)
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut every = tokio::time::interval(tick);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let now = state.clock.now_millis();
        let due = match state.store.claim_due_domains(now, now + millis(CHECK_LEASE), CHECK_BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim sending domains to check");
                continue;
            }
        };
        let checks = due.iter().map(|domain| check(&state, domain));
        for result in futures_util::future::join_all(checks).await {
            if let Err(e) = result {
                tracing::warn!(error = %e, "cannot record a sending domain check");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_lines_split_long_values_into_255_byte_strings() {
        let value = format!("v=DKIM1; k=rsa; p={}", "A".repeat(392));
        let line = zone_line("herald._domainkey.mail.example.com", &value);
        let strings: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        assert_eq!(strings.len(), 2);
        assert_eq!(strings[0].len(), 255);
        assert_eq!(strings.concat(), value);
        assert!(line.starts_with("herald._domainkey.mail.example.com. 3600 IN TXT \"v=DKIM1;"));
    }
}
