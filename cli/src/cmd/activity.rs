//! `herald activity list|get|retry`: the masked delivery timeline. `list --follow` tails the
//! operators' live stream (resuming with `Last-Event-ID` after a lost connection, and on a
//! terminal rewriting an item's line in place as its state changes); `retry --all-failed`
//! counts the failed, retryable items a filter matches, asks, and queues them with the server's
//! bulk retry; `retry ID…` retries the items given, several at once, with progress.

use std::{collections::HashMap, io::IsTerminal, sync::Arc};

use futures_util::{StreamExt, stream};
use herald_common::{
    Timestamp,
    api::{
        activity::{ActivityItem, ActivityStatus, BulkRetryIn, RetryQueued},
        notifications::Channel,
    },
    client::{ActivityQuery, Client, ConnectionState, FollowOptions, Followed},
    ids::{ApplicationId, TransactionId},
    stream::StreamEvent,
};

use super::{confirm, progress, when};
use crate::{
    context::Context,
    exit::{Exit, Fail, Interrupt},
    output::{Cell, Format, Output, Table, cell, line, short},
    style::{Tone, paint},
};

#[derive(clap::Args, Clone, Default)]
pub struct Filters {
    /// email, sms, whatsapp or in_app.
    #[arg(long)]
    channel: Option<Channel>,
    /// Only this application's items.
    #[arg(long, value_name = "APP_ID")]
    application: Option<ApplicationId>,
    /// Created at or after: RFC 3339, or an age such as 2h or 7d.
    #[arg(long, value_parser = when)]
    from: Option<Timestamp>,
    /// Created before: RFC 3339, or an age.
    #[arg(long, value_parser = when)]
    to: Option<Timestamp>,
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// The feed, newest first (or live with --follow).
    List {
        #[command(flatten)]
        filters: Filters,
        /// queued, sending, sent, delivered, read, undelivered, bounced, complained, failed,
        /// suppressed, verified, expired or tombstoned.
        #[arg(long)]
        status: Option<ActivityStatus>,
        /// Only notifications of this category.
        #[arg(long)]
        category: Option<String>,
        /// Page number, from 1.
        #[arg(long, default_value_t = 1)]
        page: u32,
        /// Items per page (1 to 100).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Walk every page.
        #[arg(long, conflicts_with = "follow")]
        all: bool,
        /// Tail the live feed: new items and state changes as they happen.
        #[arg(long)]
        follow: bool,
    },
    /// One item with its delivery attempts and the provider's answers.
    Get { id: TransactionId },
    /// Queue failed, retryable deliveries again.
    Retry {
        /// The items to retry.
        #[arg(required_unless_present = "all_failed", conflicts_with = "all_failed")]
        ids: Vec<TransactionId>,
        /// Every failed, retryable item the filters match.
        #[arg(long)]
        all_failed: bool,
        #[command(flatten)]
        filters: Filters,
        /// Show what would be retried, and stop.
        #[arg(long, requires = "all_failed")]
        dry_run: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Retries in flight at once (of the items given by id).
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.operator()?;
        match self {
            Command::List { filters, status, category, page, limit, all, follow } => {
                if follow {
                    return follow_feed(ctx, &client, &filters, status).await;
                }
                let query = ActivityQuery { category, ..query(&filters, status, page, limit) };
                list(&ctx.out, &client, query, all).await
            }
            Command::Get { id } => {
                let detail = client.activity_item(&id).await?;
                if ctx.out.is_json() {
                    return ctx.out.json(&detail);
                }
                let item = &detail.item;
                let mut fields = vec![
                    ("id", Cell::from(item.transaction_id.to_string())),
                    ("application", format!("{} ({})", item.application_name, item.application_id).into()),
                    ("channel", item.channel.as_str().into()),
                    ("recipient", item.recipient_masked.clone().into()),
                    ("status", cell(item.status.as_str(), Tone::of_activity(item.status))),
                ];
                if let Some(category) = &item.category {
                    fields.push(("category", category.clone().into()));
                }
                if let Some(reason) = &item.failure_reason {
                    fields.push(("reason", cell(reason.clone(), reason_tone(item.status))));
                }
                fields.push(("retryable", item.retryable.to_string().into()));
                fields.push(("retries", item.retry_count.to_string().into()));
                if let Some(n) = detail.failed_verifications {
                    fields.push(("wrong codes", n.to_string().into()));
                }
                fields.push(("created", ctx.out.time(item.created_at).into()));
                fields.push(("updated", ctx.out.time(detail.updated_at).into()));
                ctx.out.fields(&fields)?;
                super::notifications::attempts(&ctx.out, &detail.attempts)?;
                super::notifications::receipts(&ctx.out, &detail.receipts)
            }
            Command::Retry { ids, all_failed, filters, dry_run, yes, concurrency } => {
                if !all_failed {
                    return retry(&ctx.out, &client, ids, concurrency.max(1)).await;
                }
                let filter = filters.bulk();
                let failed = client.failed_retryable(&filter).await?;
                if dry_run || failed.is_empty() {
                    return show_candidates(&ctx.out, &failed);
                }
                if !yes {
                    if !std::io::stdin().is_terminal() {
                        return Err(Fail::usage(format!(
                            "{} items would be retried: confirm with --yes (or look first with --dry-run)",
                            failed.len()
                        )));
                    }
                    if !confirm(&format!("Retry {} failed deliveries?", failed.len()))? {
                        return Err(Fail::failure("nothing retried"));
                    }
                }
                retry_all_failed(&ctx.out, &client, &filter, failed.len() as u64).await
            }
        }
    }
}

impl Filters {
    /// The filters as the bulk retry takes them.
    fn bulk(&self) -> BulkRetryIn {
        BulkRetryIn {
            channel: self.channel,
            application_id: self.application.clone(),
            from: self.from,
            to: self.to,
        }
    }
}

fn query(filters: &Filters, status: Option<ActivityStatus>, page: u32, limit: u32) -> ActivityQuery {
    ActivityQuery {
        channel: filters.channel,
        status,
        application_id: filters.application.clone(),
        from: filters.from,
        to: filters.to,
        category: None,
        page: Some(page),
        limit: Some(limit),
    }
}

/// The table's columns.
const HEADERS: [&str; 7] = ["ID", "CREATED", "CHANNEL", "RECIPIENT", "STATUS", "RETRIES", "APP / REASON"];

fn row(out: &Output, item: &ActivityItem) -> Vec<Cell> {
    let last = match &item.failure_reason {
        Some(reason) => cell(short(reason, 60), reason_tone(item.status)),
        None => item.application_name.clone().into(),
    };
    vec![
        item.transaction_id.to_string().into(),
        out.time(item.created_at).into(),
        item.channel.as_str().into(),
        item.recipient_masked.clone().into(),
        cell(item.status.as_str(), Tone::of_activity(item.status)),
        item.retry_count.to_string().into(),
        last,
    ]
}

/// A failure's reason is red; a suppression's (a stop the tenant asked for) is dim like its status.
fn reason_tone(status: ActivityStatus) -> Tone {
    match status {
        ActivityStatus::Suppressed => Tone::Dim,
        _ => Tone::Bad,
    }
}

async fn list(out: &Output, client: &Client, query: ActivityQuery, all: bool) -> Result<(), Fail> {
    let first = query.page.unwrap_or(1);
    let fetch = |page| {
        let query = ActivityQuery { page: Some(page), ..query.clone() };
        async move { client.activity(&query).await }
    };
    super::pages(out, &HEADERS, "items", (first, all), fetch, row).await
}

fn show_candidates(out: &Output, items: &[ActivityItem]) -> Result<(), Fail> {
    if out.is_json() {
        return items.iter().try_for_each(|i| out.json(i));
    }
    if items.is_empty() {
        return out.line("no failed, retryable deliveries match");
    }
    let mut table = Table::new(&HEADERS);
    items.iter().for_each(|item| table.row(row(out, item)));
    out.table(&table)?;
    out.line(&format!("{} would be retried", items.len()))
}

/// Queues the failed, retryable items of `filter` with the bulk retry (`expected` were counted
/// and agreed to), and says how many it queued.
async fn retry_all_failed(
    out: &Output,
    client: &Client,
    filter: &BulkRetryIn,
    expected: u64,
) -> Result<(), Fail> {
    let queued = client.retry_all_failed(filter, expected).await?;
    if out.is_json() {
        return out.json(&queued);
    }
    let status = paint(queued.status.as_str(), Tone::Good, out.color);
    out.line(&format!("{status}  {} queued again at {}", queued.count, out.time(queued.queued_at)))?;
    if queued.count < expected {
        // Another operator's retry, or the daemon's own, took them first.
        out.note(&format!("{} of the {expected} were no longer failed", expected - queued.count));
    }
    Ok(())
}

/// Retries `ids`, `concurrency` at a time, with a progress bar and a line per item. One item is
/// retried like any other call: its refusal is the command's error.
async fn retry(
    out: &Output,
    client: &Client,
    ids: Vec<TransactionId>,
    concurrency: usize,
) -> Result<(), Fail> {
    if let [id] = ids.as_slice() {
        let queued = client.retry(id).await?;
        if out.is_json() {
            return out.json(&queued);
        }
        return out.line(&line(
            &[
                id.as_str().into(),
                cell(queued.status.as_str(), Tone::Good),
                out.time(queued.queued_at).into(),
            ],
            &[32, 12],
            out.color,
        ));
    }
    let bar = Arc::new(if ids.len() > 1 {
        progress(ids.len() as u64, "retrying")
    } else {
        indicatif::ProgressBar::hidden()
    });
    let results: Vec<(TransactionId, Result<RetryQueued, Fail>)> = stream::iter(ids)
        .map(|id| {
            let (client, bar) = (client.clone(), bar.clone());
            async move {
                let result = client.retry(&id).await.map_err(Fail::from);
                bar.inc(1);
                (id, result)
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    bar.finish_and_clear();
    let mut refused = Vec::new();
    for (id, result) in &results {
        match result {
            Ok(queued) if out.is_json() => out.json(queued)?,
            Ok(queued) => out.line(&line(
                &[
                    id.as_str().into(),
                    cell(queued.status.as_str(), Tone::Good),
                    out.time(queued.queued_at).into(),
                ],
                &[32, 12],
                out.color,
            ))?,
            Err(fail) => {
                let code = fail.problem.as_ref().map(|p| p.code.as_str()).unwrap_or("error");
                if out.is_json() {
                    out.json(
                        &serde_json::json!({"transaction_id": id, "error": code, "detail": fail.message}),
                    )?;
                } else {
                    out.line(&line(
                        &[id.as_str().into(), cell(code, Tone::Bad), fail.message.clone().into()],
                        &[32, 12],
                        out.color,
                    ))?;
                }
                refused.push(id);
            }
        }
    }
    if results.len() > 1 && !out.is_json() {
        out.note(&format!("{} queued again, {} refused", results.len() - refused.len(), refused.len()));
    }
    if refused.is_empty() { Ok(()) } else { Err(Fail::new(Exit::Failure, String::new())) }
}

/// Tails the live feed. On a terminal, an item's line is rewritten in place when its state
/// changes (while it is still on the screen); elsewhere every change is a line of its own.
async fn follow_feed(
    ctx: &Context,
    client: &Client,
    filters: &Filters,
    status: Option<ActivityStatus>,
) -> Result<(), Fail> {
    let out = &ctx.out;
    let mut follower = client.follow_activity(FollowOptions::default());
    let mut live = LiveLines::new(out.stdout_tty && out.format == Format::Table);
    if out.format == Format::Table {
        out.line(&live.header(out))?;
    }
    let mut previous = ConnectionState::Connecting;
    let mut interrupt = Interrupt::listen()?;
    loop {
        let next = tokio::select! {
            next = follower.next() => next,
            _ = interrupt.recv() => return Ok(()),
        };
        let (created, item, id) = match next {
            None => return Ok(()),
            Some(Followed::State(ConnectionState::Failed(reason))) => {
                return Err(Fail::new(Exit::Auth, format!("the live feed was refused: {reason}")));
            }
            Some(Followed::State(state)) => {
                // On one terminal, a note is a line above the cursor too.
                if super::stream::state_note(out, &state, &previous) && out.stderr_tty {
                    live.printed += 1;
                }
                previous = state;
                continue;
            }
            Some(Followed::Event { event: StreamEvent::ActivityCreated(item), id }) => (true, item, id),
            Some(Followed::Event { event: StreamEvent::ActivityUpdated(item), id }) => (false, item, id),
            Some(Followed::Event { .. }) => continue,
        };
        if !matches(filters, status, &item) {
            continue;
        }
        match out.format {
            Format::Table => {
                let text = live.render(out, created, &item);
                let terminal_height = terminal_height();
                out.line_raw(&live.place(&item.transaction_id, text, terminal_height))?;
            }
            _ => out.json(&serde_json::json!({
                "event": if created { "activity.created" } else { "activity.updated" },
                "id": id,
                "item": item,
            }))?,
        }
    }
}

fn matches(filters: &Filters, status: Option<ActivityStatus>, item: &ActivityItem) -> bool {
    filters.channel.is_none_or(|c| c == item.channel)
        && filters.application.as_ref().is_none_or(|a| *a == item.application_id)
        && status.is_none_or(|s| s == item.status)
        && filters.from.is_none_or(|f| item.created_at >= f)
        && filters.to.is_none_or(|t| item.created_at < t)
}

fn terminal_height() -> usize {
    crossterm_size().map(|(_, rows)| rows as usize).unwrap_or(24)
}

fn crossterm_size() -> Option<(u16, u16)> {
    crossterm::terminal::size().ok()
}

/// The lines a follow has printed, so that a change to an item still on the screen rewrites its
/// line instead of adding one.
pub struct LiveLines {
    in_place: bool,
    printed: usize,
    line_of: HashMap<TransactionId, usize>,
    widths: Vec<usize>,
}

impl LiveLines {
    pub fn new(in_place: bool) -> Self {
        // Fixed widths: a live table cannot measure rows still to come.
        Self { in_place, printed: 0, line_of: HashMap::new(), widths: vec![32, 19, 8, 22, 10, 7, 0] }
    }

    fn header(&mut self, out: &Output) -> String {
        self.printed += 1;
        let headers: Vec<Cell> = HEADERS.iter().map(|h| cell(*h, Tone::Bold)).collect();
        line(&headers, &self.widths, out.color)
    }

    fn render(&self, out: &Output, created: bool, item: &ActivityItem) -> String {
        let mut cells = row(out, item);
        if !self.in_place && !created {
            // Without rewriting, say that this line is a change of an item seen before.
            cells[0] = cell(format!("{} ↻", item.transaction_id), Tone::Plain);
        }
        line(&cells, &self.widths, out.color)
    }

    /// What to write for an item's new `text`: escape codes that rewrite its line when it is
    /// still on the screen (`height` rows), else the line itself (and a newline).
    pub fn place(&mut self, id: &TransactionId, text: String, height: usize) -> String {
        if self.in_place
            && let Some(&at) = self.line_of.get(id)
        {
            let up = self.printed - at;
            if up < height {
                // Up to the line, rewrite it, and back down to where the next line goes.
                return format!("\u{1b}[{up}A\r\u{1b}[2K{text}\u{1b}[{up}B\r");
            }
        }
        self.line_of.insert(id.clone(), self.printed);
        self.printed += 1;
        if self.line_of.len() > 10_000 {
            let oldest = self.printed.saturating_sub(1_000);
            self.line_of.retain(|_, at| *at >= oldest);
        }
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_common::ids::NotificationId;

    #[test]
    fn changes_on_screen_are_rewritten_in_place() {
        let (a, b) = (TransactionId::from(NotificationId::new()), TransactionId::from(NotificationId::new()));
        let mut live = LiveLines::new(true);
        live.printed = 1; // the header
        assert_eq!(live.place(&a, "a queued".into(), 24), "a queued\n");
        assert_eq!(live.place(&b, "b queued".into(), 24), "b queued\n");
        // a is two lines up from where the cursor is.
        assert_eq!(live.place(&a, "a sent".into(), 24), "\u{1b}[2A\r\u{1b}[2Ka sent\u{1b}[2B\r");
        // Scrolled off a two-row screen: a new line instead.
        assert_eq!(live.place(&a, "a failed".into(), 2), "a failed\n");
        let mut piped = LiveLines::new(false);
        assert_eq!(piped.place(&a, "x".into(), 24), "x\n");
        assert_eq!(piped.place(&a, "y".into(), 24), "y\n");
    }
}
