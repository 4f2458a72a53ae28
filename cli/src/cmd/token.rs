//! `herald token user USER_ID`: mint an end user's token with the API key.

use herald_common::ids::UserId;

use crate::{context::Context, exit::Fail};

#[derive(clap::Subcommand)]
pub enum Command {
    /// A token for an end user's inbox and stream.
    User {
        user_id: UserId,
        /// Lifetime in seconds (60 to 86400; default 3600).
        #[arg(long)]
        ttl: Option<u32>,
    },
}

impl Command {
    pub async fn exec(self, ctx: &Context) -> Result<(), Fail> {
        match self {
            Command::User { user_id, ttl } => {
                let token = ctx.server()?.user_token(&user_id, ttl).await?;
                if ctx.out.is_json() {
                    return ctx.out.json(&token);
                }
                ctx.out.fields(&[
                    ("user", token.user_id.to_string().into()),
                    ("expires", ctx.out.time(token.expires_at).into()),
                    ("token", token.token.into()),
                ])
            }
        }
    }
}
