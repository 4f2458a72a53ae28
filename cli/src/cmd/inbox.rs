//! `herald inbox [--user USER] [read|unread|archive ID | read-all]`: an end user's inbox, with a
//! token minted for `--user` with the API key, or `HERALD_USER_TOKEN`.

use herald_common::{
    api::inbox::{InboxItem, InboxPatch},
    client::{Client, InboxQuery},
    ids::{InAppId, UserId},
};

use crate::{
    context::Context,
    exit::Fail,
    output::{Format, Output, Table, cell, short},
    style::Tone,
};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct Args {
    /// The user (a token is minted with the API key); default: HERALD_USER_TOKEN.
    #[arg(long, global = true)]
    user: Option<UserId>,
    /// Only unread items.
    #[arg(long)]
    unread: bool,
    /// Archived items instead.
    #[arg(long)]
    archived: bool,
    /// Items per page (1 to 100).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Every page.
    #[arg(long)]
    all: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Mark an item read.
    Read { id: InAppId },
    /// Mark an item unread.
    Unread { id: InAppId },
    /// Archive an item.
    Archive { id: InAppId },
    /// Mark every item read.
    ReadAll,
}

impl Args {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let user = ctx.user(self.user.as_ref()).await?;
        let out = &ctx.out;
        let patch = |is_read, archived| InboxPatch { is_read, archived };
        let (id, change) = match self.command {
            None => return list(ctx, &user, self.unread, self.archived, self.limit, self.all).await,
            Some(Command::ReadAll) => {
                let done = user.read_all().await?;
                if out.is_json() {
                    return out.json(&done);
                }
                return out.line(&format!("{} marked read; {} unread", done.updated, done.unread_count));
            }
            Some(Command::Read { id }) => (id, patch(Some(true), None)),
            Some(Command::Unread { id }) => (id, patch(Some(false), None)),
            Some(Command::Archive { id }) => (id, patch(None, Some(true))),
        };
        let item = user.patch_inbox_item(&id, &change).await?;
        if out.is_json() {
            return out.json(&item);
        }
        let mut table = header();
        table.row(row(out, &item));
        out.table(&table)
    }
}

async fn list(
    ctx: &Context,
    user: &Client,
    unread: bool,
    archived: bool,
    limit: u32,
    all: bool,
) -> Result<(), Fail> {
    let out = &ctx.out;
    let mut query =
        InboxQuery { unread_only: Some(unread), archived: Some(archived), limit: Some(limit), cursor: None };
    let mut table = header();
    loop {
        let page = user.inbox(&query).await?;
        match out.format {
            Format::Json if !all => return out.json(&page),
            Format::Json | Format::Jsonl => page.notifications.iter().try_for_each(|item| out.json(item))?,
            Format::Table => {
                if query.cursor.is_none() {
                    out.line(&format!("{} unread", page.unread_count))?;
                }
                for item in &page.notifications {
                    table.row(row(out, item));
                }
            }
        }
        query.cursor = page.next_cursor;
        if !all || query.cursor.is_none() {
            break;
        }
    }
    if out.format == Format::Table {
        out.table(&table)?;
    }
    Ok(())
}

fn header() -> Table {
    Table::new(&["ID", "CREATED", "STATE", "TITLE", "BODY"])
}

fn row(out: &Output, item: &InboxItem) -> Vec<crate::output::Cell> {
    let state = match (item.archived, item.is_read) {
        (true, _) => cell("archived", Tone::Dim),
        (false, true) => cell("read", Tone::Dim),
        (false, false) => cell("unread", Tone::Bold),
    };
    vec![
        item.id.to_string().into(),
        out.time(item.created_at).into(),
        state,
        short(&item.title, 40).into(),
        short(&item.body, 60).into(),
    ]
}
