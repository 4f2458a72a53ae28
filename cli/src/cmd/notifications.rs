//! `herald notifications get ID`: a dispatch's state, its delivery attempts and the providers'
//! receipts.

use herald_common::{
    api::notifications::{AttemptOut, NotificationOut, ReceiptOut},
    ids::NotificationId,
};

use crate::{
    context::Context,
    exit::Fail,
    output::{Cell, Output, Table, cell, short},
    style::Tone,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// One notification with its delivery attempts.
    Get { notification_id: NotificationId },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        match self {
            Command::Get { notification_id } => {
                let client = match &ctx.api_key {
                    Some(_) => ctx.server()?,
                    None => ctx.operator()?,
                };
                let notification = client.notification(&notification_id).await?;
                if ctx.out.is_json() {
                    return ctx.out.json(&notification);
                }
                print(&ctx.out, &notification)
            }
        }
    }
}

fn print(out: &Output, n: &NotificationOut) -> Result<(), Fail> {
    let mut fields: Vec<(&str, Cell)> = vec![
        ("id", n.notification_id.to_string().into()),
        ("channel", n.channel.as_str().into()),
        ("recipient", n.recipient_masked.clone().into()),
        ("status", cell(n.delivery_status.as_str(), Tone::of_delivery(n.delivery_status))),
    ];
    if let Some(reason) = &n.failure_reason {
        fields.push(("reason", cell(reason.clone(), Tone::Bad)));
    }
    fields.push(("retryable", n.retryable.to_string().into()));
    fields.push(("retries", n.retry_count.to_string().into()));
    fields.push(("created", out.time(n.created_at).into()));
    fields.push(("updated", out.time(n.updated_at).into()));
    out.fields(&fields)?;
    attempts(out, &n.attempts)?;
    receipts(out, &n.receipts)
}

/// The providers' receipts as a table, under the attempts (nothing when there are none).
pub fn receipts(out: &Output, receipts: &[ReceiptOut]) -> Result<(), Fail> {
    if receipts.is_empty() {
        return Ok(());
    }
    let mut table = Table::new(&["RECEIVED", "PROVIDER", "SAID", "STATUS", "CODE / DETAIL"]);
    for r in receipts {
        let detail = match (&r.error_code, &r.detail) {
            (_, Some(detail)) => detail.clone(),
            (Some(code), None) => code.clone(),
            (None, None) => String::new(),
        };
        table.row(vec![
            out.time(r.received_at).into(),
            r.provider.as_str().into(),
            r.provider_status.clone().into(),
            cell(r.status.as_str(), Tone::of_delivery(r.status)),
            short(&detail, 100).into(),
        ]);
    }
    out.line("")?;
    out.table(&table)
}

/// The attempts as a table (nothing when there are none).
pub fn attempts(out: &Output, attempts: &[AttemptOut]) -> Result<(), Fail> {
    if attempts.is_empty() {
        return Ok(());
    }
    let mut table = Table::new(&["ATTEMPT", "FINISHED", "OUTCOME", "PROVIDER ID / ERROR"]);
    for a in attempts {
        let tone = if a.outcome.is_failure() { Tone::Bad } else { Tone::Good };
        let detail = a.error.as_deref().or(a.provider_message_id.as_deref()).unwrap_or_default();
        table.row(vec![
            a.attempt.to_string().into(),
            out.time(a.finished_at).into(),
            cell(a.outcome.as_str(), tone),
            short(detail, 100).into(),
        ]);
    }
    out.line("")?;
    out.table(&table)
}
