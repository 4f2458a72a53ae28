//! `herald health`.

use crate::{context::Context, output};

#[derive(clap::Args)]
pub struct Args {}

impl Args {
    pub async fn exec(self, ctx: &Context) -> anyhow::Result<()> {
        let ready = ctx.anonymous().readyz().await?;
        output::print(ctx.json, &ready)
    }
}
