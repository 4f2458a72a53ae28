//! `herald templates list|get|create|update|rm`: stored templates, their parts from files.

use herald_common::{
    api::templates::{TemplateIn, TemplateOut},
    ids::TemplateId,
};

use super::Bodies;
use crate::{
    context::Context,
    exit::Fail,
    output::{Output, Table, short},
};

#[derive(clap::Args)]
pub struct Parts {
    /// The template's name.
    #[arg(long)]
    name: String,
    /// Subject (Jinja: `Welcome, {{ name }}`).
    #[arg(long)]
    subject: Option<String>,
    #[command(flatten)]
    bodies: Bodies,
}

impl Parts {
    fn template(self) -> Result<TemplateIn, Fail> {
        let (body, html_body) = self.bodies.read()?;
        Ok(TemplateIn { name: self.name, subject: self.subject, body, html_body })
    }
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// The tenant's templates.
    List,
    /// One template with its parts.
    Get { template_id: TemplateId },
    /// Store a template.
    Create(Parts),
    /// Replace a template's name and parts.
    Update {
        template_id: TemplateId,
        #[command(flatten)]
        parts: Parts,
    },
    /// Delete a template.
    Rm { template_id: TemplateId },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        let client = ctx.server()?;
        match self {
            Command::List => {
                let list = client.templates().await?;
                if ctx.out.format == crate::output::Format::Jsonl {
                    for t in &list.templates {
                        ctx.out.json(t)?;
                    }
                    return Ok(());
                }
                if ctx.out.is_json() {
                    return ctx.out.json(&list);
                }
                let mut table = Table::new(&["ID", "NAME", "SUBJECT", "UPDATED"]);
                for t in &list.templates {
                    table.row(vec![
                        t.template_id.to_string().into(),
                        t.name.clone().into(),
                        short(t.subject.as_deref().unwrap_or("-"), 40).into(),
                        ctx.out.time(t.updated_at).into(),
                    ]);
                }
                ctx.out.table(&table)
            }
            Command::Get { template_id } => show(&ctx.out, &client.template(&template_id).await?),
            Command::Create(parts) => show(&ctx.out, &client.create_template(&parts.template()?).await?),
            Command::Update { template_id, parts } => {
                show(&ctx.out, &client.replace_template(&template_id, &parts.template()?).await?)
            }
            Command::Rm { template_id } => {
                client.delete_template(&template_id).await?;
                if !ctx.out.is_json() {
                    ctx.out.line(&format!("deleted {template_id}"))?;
                }
                Ok(())
            }
        }
    }
}

fn show(out: &Output, t: &TemplateOut) -> Result<(), Fail> {
    if out.is_json() {
        return out.json(t);
    }
    let part = |p: &Option<String>| p.clone().unwrap_or_else(|| "-".to_owned());
    out.fields(&[
        ("id", t.template_id.to_string().into()),
        ("name", t.name.clone().into()),
        ("subject", part(&t.subject).into()),
        ("body", part(&t.body).into()),
        ("html", part(&t.html_body).into()),
        ("updated", out.time(t.updated_at).into()),
    ])
}
