//! `herald token user USER_ID`: mint an end-user token with the API key.

use crate::{context::Context, output};

#[derive(clap::Subcommand)]
pub enum Command {
    /// A token for an end user's inbox and stream.
    User {
        user_id: String,
        /// Lifetime in seconds (60 to 86400).
        #[arg(long)]
        ttl: Option<u32>,
    },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> anyhow::Result<()> {
        match self {
            Command::User { user_id, ttl } => {
                let token = ctx.server()?.user_token(&user_id, ttl).await?;
                output::print(ctx.json, &token)
            }
        }
    }
}
