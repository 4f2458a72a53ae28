//! `herald send`: one notification, or one per row of a CSV file (`--file`, see [`bulk`]).

mod bulk;

use std::path::PathBuf;

use herald_common::{
    api::notifications::{Channel, NotificationIn},
    ids::TemplateId,
};

use super::{Bodies, key_value, object};
use crate::{context::Context, exit::Fail, output::cell, style::Tone};

#[derive(clap::Args)]
pub struct Args {
    /// email, sms, whatsapp or in_app.
    #[arg(long)]
    channel: Channel,
    /// Email address, E.164 phone number, or user id (in_app).
    #[arg(long, required_unless_present = "file", conflicts_with = "file")]
    to: Option<String>,
    /// A CSV file: a `recipient` column, and a column per template variable. One notification
    /// per row, resumable (run the same command again after an interruption).
    #[arg(long, value_name = "CSV")]
    file: Option<PathBuf>,
    /// Subject (email; in_app uses it as the title when there is no --title).
    #[arg(long)]
    subject: Option<String>,
    /// Title of an in-app notification.
    #[arg(long)]
    title: Option<String>,
    #[command(flatten)]
    bodies: Bodies,
    /// A stored template (its parts win over --subject, --body and --html).
    #[arg(long, value_name = "TEMPLATE_ID")]
    template: Option<TemplateId>,
    /// A template variable, KEY=VALUE (KEY:=JSON for other types); repeat for more.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = key_value)]
    vars: Vec<(String, String)>,
    /// In-app data, KEY=VALUE (action_url, avatar_url, category, …); repeat for more.
    #[arg(long = "data", value_name = "KEY=VALUE", value_parser = key_value)]
    data: Vec<(String, String)>,
    /// Sender address (email), on one of the tenant's verified domains.
    #[arg(long)]
    from: Option<String>,
    /// What kind of message this is (marketing, digest.weekly, …): recipients can unsubscribe
    /// from a category, and email of one carries a one-click unsubscribe link. Without it the
    /// notification is transactional.
    #[arg(long)]
    category: Option<String>,
    /// Sending again with the same key sends nothing. With --file: the prefix of each row's key
    /// (by default the keys derive from the file's content and each row).
    #[arg(long)]
    idempotency_key: Option<String>,
    /// With --file: notifications in flight at once.
    #[arg(long, default_value_t = 32, requires = "file")]
    concurrency: usize,
    /// With --file: start at most this many rows a second (to stay under a provider's limit).
    #[arg(long, value_name = "PER_SECOND", requires = "file")]
    rate: Option<u32>,
    /// With --file: where to write the refused rows (default: next to the file,
    /// NAME.failures.csv).
    #[arg(long, value_name = "CSV", requires = "file")]
    failures: Option<PathBuf>,
}

impl Args {
    /// The request every recipient gets (the recipient left empty).
    fn request(&self) -> Result<NotificationIn, Fail> {
        let (body, html_body) = self.bodies.read()?;
        let template_data = if self.vars.is_empty() { None } else { Some(object(&self.vars)?) };
        if template_data.is_some() && self.template.is_none() {
            return Err(Fail::usage("--var sets a template's variables: give --template too"));
        }
        Ok(NotificationIn {
            channel: self.channel,
            recipient: String::new(),
            subject: self.subject.clone(),
            title: self.title.clone(),
            body,
            html_body,
            template_id: self.template.clone(),
            template_data,
            data: if self.data.is_empty() { None } else { Some(object(&self.data)?) },
            from: self.from.clone(),
            category: self.category.clone(),
        })
    }

    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.server()?;
        let mut request = self.request()?;
        if let Some(file) = &self.file {
            let options = bulk::Options {
                file: file.clone(),
                concurrency: self.concurrency.max(1),
                failures: self.failures.clone(),
                key_prefix: self.idempotency_key.clone(),
                rate: self.rate.filter(|r| *r > 0),
            };
            return bulk::run(ctx, &client, request, options).await;
        }
        request.recipient = self.to.clone().unwrap_or_default();
        let answer = client.dispatch(&request, self.idempotency_key.as_deref()).await?;
        let accepted = answer.value;
        if ctx.out.is_json() {
            return ctx.out.json(&accepted);
        }
        ctx.out.fields(&[
            ("status", cell(accepted.status.as_str(), Tone::Good)),
            ("notification", accepted.notification_id.to_string().into()),
            ("channel", accepted.channel.as_str().into()),
            (
                "delivery",
                cell(accepted.delivery_status.as_str(), Tone::of_delivery(accepted.delivery_status)),
            ),
        ])?;
        if answer.replayed {
            ctx.out
                .note("(a repeat of an earlier request with this idempotency key: nothing was sent again)");
        }
        Ok(())
    }
}
