//! Cross-daemon wake-ups on PostgreSQL: every daemon LISTENs on `herald_inbox`; writes that
//! change an inbox NOTIFY inside their transaction (so the message goes out at commit, or never).
//! When the listening connection drops, it reconnects and wakes every local stream, which re-read
//! from their last event: nothing sent while the listener was away is lost.

use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

#[derive(Deserialize)]
struct Payload {
    a: String,
    u: String,
    i: Option<String>,
}

pub async fn run(state: AppState, shutdown: CancellationToken) {
    let Some(pool) = state.store.postgres_pool() else { return };
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the notification listener; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = shutdown.cancelled() => return,
                }
            }
        };
        if let Err(e) = listener.listen(crate::store::INBOX_CHANNEL).await {
            tracing::warn!(error = %e, "cannot LISTEN; retrying");
            continue;
        }
        // Anything missed while not listening is re-read by every stream.
        state.hub.wake_all();
        loop {
            // `try_recv` (not `recv`, which reconnects silently) reports a lost connection as
            // `Ok(None)`; notifications sent meanwhile are gone, so every stream re-reads.
            let notification = tokio::select! {
                n = listener.try_recv() => n,
                _ = shutdown.cancelled() => return,
            };
            match notification {
                Ok(None) => {
                    tracing::warn!(
                        "the notification listener reconnected; streams re-read what they may have missed"
                    );
                    state.hub.wake_all();
                }
                Ok(Some(n)) => match serde_json::from_str::<Payload>(n.payload()) {
                    Ok(Payload { a, u, i: None }) => state.hub.wake_created(&a, &u),
                    Ok(Payload { a, u, i: Some(item) }) => state.hub.push_update(&a, &u, &item),
                    Err(e) => tracing::warn!(error = %e, "unreadable inbox notification"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "the notification listener lost its connection; reconnecting");
                    break;
                }
            }
        }
    }
}
