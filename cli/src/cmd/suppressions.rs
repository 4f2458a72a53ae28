//! `herald suppressions list|add|rm`: the recipients the tenant does not send to. `add` is an
//! operator's own entry (`manual`); `rm` lifts an entry of any reason, and sends resume.

use herald_common::{
    api::{
        notifications::Channel,
        suppressions::{Suppression, SuppressionIn, SuppressionQuery, SuppressionReason},
    },
    client::Client,
    ids::SuppressionId,
};

use crate::{
    context::Context,
    exit::Fail,
    output::{Cell, Output, cell},
    style::Tone,
};

#[derive(clap::Subcommand)]
pub enum Command {
    /// The list, newest first.
    List {
        /// email, sms or whatsapp.
        #[arg(long)]
        channel: Option<Channel>,
        /// hard_bounce, complaint, unsubscribe, carrier_opt_out or manual.
        #[arg(long)]
        reason: Option<SuppressionReason>,
        /// Only the entries of this address or number (matched by its hash, never shown).
        #[arg(long, value_name = "ADDR")]
        recipient: Option<String>,
        #[command(flatten)]
        pages: super::PageArgs,
    },
    /// Stop sending to a recipient (a `manual` entry).
    Add {
        /// email, sms or whatsapp.
        #[arg(long)]
        channel: Channel,
        /// The address or E.164 number.
        #[arg(long, value_name = "ADDR")]
        to: String,
        /// Stop only this category; without it, every send to the recipient stops.
        #[arg(long)]
        category: Option<String>,
    },
    /// Lift an entry: sends to the recipient resume.
    Rm { suppression_id: SuppressionId },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.operator()?;
        let out = &ctx.out;
        match self {
            Command::List { channel, reason, recipient, pages } => {
                let query = SuppressionQuery {
                    channel,
                    reason,
                    recipient,
                    page: Some(pages.page),
                    limit: Some(pages.limit),
                };
                list(out, &client, query, pages.all).await
            }
            Command::Add { channel, to, category } => {
                let entry = SuppressionIn {
                    channel,
                    recipient: to,
                    category,
                    reason: Some(SuppressionReason::Manual),
                };
                let added = client.add_suppression(&entry).await?;
                if out.is_json() {
                    return out.json(&added.suppression);
                }
                show(out, &added.suppression)?;
                if !added.created {
                    out.note("already on the list: nothing new was added");
                }
                Ok(())
            }
            Command::Rm { suppression_id } => {
                client.delete_suppression(&suppression_id).await?;
                if !out.is_json() {
                    out.line(&format!("removed {suppression_id}: sends to the recipient resume"))?;
                }
                Ok(())
            }
        }
    }
}

const HEADERS: [&str; 7] = ["ID", "CREATED", "CHANNEL", "RECIPIENT", "REASON", "CATEGORY", "CAUSE"];

fn tone(reason: SuppressionReason) -> Tone {
    match reason {
        SuppressionReason::HardBounce | SuppressionReason::Complaint => Tone::Bad,
        SuppressionReason::Unsubscribe | SuppressionReason::CarrierOptOut | SuppressionReason::Manual => {
            Tone::Dim
        }
    }
}

fn row(out: &Output, s: &Suppression) -> Vec<Cell> {
    vec![
        s.suppression_id.to_string().into(),
        out.time(s.created_at).into(),
        s.channel.as_str().into(),
        s.recipient_masked.clone().into(),
        cell(s.reason.as_str(), tone(s.reason)),
        s.category.clone().unwrap_or_else(|| "(all)".to_owned()).into(),
        s.transaction_id.as_ref().map(ToString::to_string).unwrap_or_else(|| "-".to_owned()).into(),
    ]
}

async fn list(out: &Output, client: &Client, query: SuppressionQuery, all: bool) -> Result<(), Fail> {
    let first = query.page.unwrap_or(1);
    let fetch = |page| {
        let query = SuppressionQuery { page: Some(page), ..query.clone() };
        async move { client.suppressions(&query).await }
    };
    super::pages(out, &HEADERS, "entries", (first, all), fetch, row).await
}

fn show(out: &Output, s: &Suppression) -> Result<(), Fail> {
    out.fields(&[
        ("id", s.suppression_id.to_string().into()),
        ("channel", s.channel.as_str().into()),
        ("recipient", s.recipient_masked.clone().into()),
        ("reason", cell(s.reason.as_str(), tone(s.reason))),
        ("category", s.category.clone().unwrap_or_else(|| "every category".to_owned()).into()),
        ("created", out.time(s.created_at).into()),
    ])
}
