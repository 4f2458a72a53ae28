//! `herald domains list|add|get|verify|rm`: custom sending domains. `add` prints the records to
//! publish, as a table and as a zone-file snippet; `verify --wait` checks again until the domain
//! is verified or failed, and shows each record's status and what to change.

use std::time::{Duration, Instant};

use herald_common::{
    api::domains::{DomainIn, DomainOut, DomainStatus},
    client::Client,
    ids::DomainId,
};

use crate::{
    context::Context,
    exit::{Exit, Fail},
    output::{Format, Output, Table, cell, short},
    style::Tone,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// The tenant's sending domains.
    List,
    /// Add a domain: prints the DNS records to publish.
    Add {
        /// The domain mail will be sent from, e.g. mail.example.com.
        name: String,
        /// The DKIM selector (default `herald`).
        #[arg(long)]
        selector: Option<String>,
    },
    /// One domain, its records and what the last check found.
    Get { domain_id: DomainId },
    /// Check the domain's records in the DNS now.
    Verify {
        domain_id: DomainId,
        /// Check again (with a spinner) until the domain is verified or failed.
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits (30s, 10m, 1h).
        #[arg(long, default_value = "10m", value_parser = super::duration)]
        timeout: Duration,
        /// Time between checks with `--wait`.
        #[arg(long, default_value = "10s", value_parser = super::duration)]
        interval: Duration,
    },
    /// Remove a domain: mail is no longer sent from it.
    Rm { domain_id: DomainId },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.operator()?;
        let out = &ctx.out;
        match self {
            Command::List => {
                let list = client.domains().await?;
                if out.format == Format::Jsonl {
                    return list.domains.iter().try_for_each(|d| out.json(d));
                }
                if out.is_json() {
                    return out.json(&list);
                }
                let mut table = Table::new(&["ID", "NAME", "STATUS", "SENDING", "CHECKED"]);
                for d in &list.domains {
                    table.row(vec![
                        d.domain_id.to_string().into(),
                        d.name.clone().into(),
                        cell(d.status.as_str(), Tone::of_domain(d.status)),
                        if d.sending_enabled { "yes" } else { "no" }.into(),
                        d.last_checked_at.map(|t| out.time(t)).unwrap_or_else(|| "never".to_owned()).into(),
                    ]);
                }
                out.table(&table)
            }
            Command::Add { name, selector } => {
                let domain = client.create_domain(&DomainIn { name, dkim_selector: selector }).await?;
                if out.is_json() {
                    return out.json(&domain);
                }
                summary(out, &domain)?;
                records(out, &domain, false)?;
                out.line("")?;
                out.line("Zone-file snippet:")?;
                for record in &domain.records {
                    out.line(&record.zone_line)?;
                }
                out.line("")?;
                out.line(&format!(
                    "Publish the records, then: herald domains verify {} --wait",
                    domain.domain_id
                ))
            }
            Command::Get { domain_id } => show(out, &client.domain(&domain_id).await?),
            Command::Verify { domain_id, wait, timeout, interval } => {
                let domain = if wait {
                    wait_for(out, &client, &domain_id, timeout, interval).await?
                } else {
                    client.verify_domain(&domain_id).await?
                };
                show(out, &domain)?;
                match domain.status {
                    DomainStatus::Verified => Ok(()),
                    status if wait => Err(Fail::new(Exit::Failure, format!("the domain is {status}"))),
                    _ => Ok(()),
                }
            }
            Command::Rm { domain_id } => {
                client.delete_domain(&domain_id).await?;
                if !out.is_json() {
                    out.line(&format!("removed {domain_id}"))?;
                }
                Ok(())
            }
        }
    }
}

/// Checks until verified or failed (or `timeout`), with a spinner on a terminal.
async fn wait_for(
    out: &Output,
    client: &Client,
    domain_id: &DomainId,
    timeout: Duration,
    interval: Duration,
) -> Result<DomainOut, Fail> {
    let spinner = super::spinner(format!("checking {domain_id}"));
    let started = Instant::now();
    loop {
        let domain = client.verify_domain(domain_id).await?;
        let waiting: Vec<String> = domain
            .records
            .iter()
            .filter(|r| r.status != DomainStatus::Verified)
            .map(|r| format!("{} {}", r.purpose, r.status))
            .collect();
        spinner.set_message(format!(
            "{}: {} ({}) · {:.0?} elapsed",
            domain.name,
            domain.status,
            if waiting.is_empty() { "all records found".to_owned() } else { waiting.join(", ") },
            started.elapsed()
        ));
        let done = matches!(domain.status, DomainStatus::Verified | DomainStatus::Failed);
        if done || started.elapsed() + interval > timeout {
            spinner.finish_and_clear();
            if !done && !out.is_json() {
                out.note(&format!("gave up waiting after {timeout:.0?}; the domain is {}", domain.status));
            }
            return Ok(domain);
        }
        tokio::time::sleep(interval).await;
    }
}

fn show(out: &Output, domain: &DomainOut) -> Result<(), Fail> {
    if out.is_json() {
        return out.json(domain);
    }
    summary(out, domain)?;
    records(out, domain, true)?;
    if let Some(dmarc) = &domain.dmarc {
        out.line("")?;
        out.fields(&[("dmarc", format!("{} ({})", dmarc.host, dmarc.detail).into())])?;
    }
    Ok(())
}

fn summary(out: &Output, d: &DomainOut) -> Result<(), Fail> {
    out.fields(&[
        ("id", d.domain_id.to_string().into()),
        ("name", d.name.clone().into()),
        ("status", cell(d.status.as_str(), Tone::of_domain(d.status))),
        ("sending", if d.sending_enabled { "enabled" } else { "not yet" }.into()),
        ("checked", d.last_checked_at.map(|t| out.time(t)).unwrap_or_else(|| "never".to_owned()).into()),
    ])
}

/// The records as a table; with `details`, what the last check found of each.
fn records(out: &Output, d: &DomainOut, details: bool) -> Result<(), Fail> {
    let headers: &[&'static str] = if details {
        &["PURPOSE", "TYPE", "HOST", "STATUS", "DETAIL"]
    } else {
        &["PURPOSE", "TYPE", "HOST", "VALUE"]
    };
    let mut table = Table::new(headers);
    for r in &d.records {
        let mut row = vec![r.purpose.as_str().into(), r.record_type.clone().into(), r.host.clone().into()];
        if details {
            row.push(cell(r.status.as_str(), Tone::of_domain(r.status)));
            row.push(short(&r.detail, 120).into());
        } else {
            row.push(r.value.clone().into());
        }
        table.row(row);
    }
    out.line("")?;
    out.table(&table)
}
