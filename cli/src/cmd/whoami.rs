//! `herald whoami`.

use crate::{context::Context, output};

#[derive(clap::Args)]
pub struct Args {}

impl Args {
    pub async fn exec(self, ctx: &Context) -> anyhow::Result<()> {
        let who = ctx.any()?.whoami().await?;
        output::print(ctx.json, &who)
    }
}
