//! `herald tui`: the dashboard, with the CLI's URL and credentials.

use crate::{context::Context, exit::Fail};

pub async fn exec(ctx: &Context) -> Result<(), Fail> {
    let settings = herald_tui::Settings {
        url: ctx.url.clone(),
        api_key: ctx.api_key.clone(),
        operator_token: ctx.operator_token.clone(),
    };
    herald_tui::run(settings).await.map_err(|e| Fail::failure(format!("the dashboard failed: {e:#}")))
}
