//! Inbox changes, webhook events and messages from other daemons, and the store's standing work.
//!
//! On PostgreSQL every daemon LISTENs on `herald_inbox`; writes that change an inbox NOTIFY
//! inside their transaction (so the message goes out at commit, or never). When the listening
//! connection drops, it reconnects and wakes every local stream, which re-read from their last
//! event: nothing sent while the listener was away is lost. On SQLite one process owns the
//! database and announces its changes after each commit, so there is nothing to listen to.

use std::time::Duration;

use herald_common::ids::{ApplicationId, InAppId, UserId};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{Engine, Readers, Store, inbox::INBOX_CHANNEL};

/// What is NOTIFYed when webhook messages are inserted (the fan-out, a recovery, a catch-up).
const WEBHOOK_CHANNEL: &str = "herald_webhooks";
/// What the events' statement trigger NOTIFYs when webhook events are inserted (migration 0022).
const WEBHOOK_EVENT_CHANNEL: &str = "herald_webhook_events";

/// The `herald_inbox` NOTIFY payload: one user's new or changed item
/// ([`super::inbox::notify_payload`]) or a batch's new items
/// ([`super::inbox::notify_created_payload`]).
#[derive(Deserialize)]
#[serde(untagged)]
enum Payload {
    Created { c: Vec<(ApplicationId, UserId)> },
    One { a: ApplicationId, u: UserId, i: Option<InAppId> },
}

impl Store {
    /// Hears other daemons' inbox changes and announces them to this daemon's hub, until
    /// `shutdown`. Returns early only if the listener cannot go on (the caller restarts it).
    pub async fn listen_for_changes(&self, shutdown: CancellationToken) {
        let Readers::Postgres(pool) = &self.readers else {
            shutdown.cancelled().await;
            return;
        };
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect_with(pool).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the notification listener; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            };
            if let Err(e) = listener.listen_all([INBOX_CHANNEL, WEBHOOK_CHANNEL, WEBHOOK_EVENT_CHANNEL]).await
            {
                tracing::warn!(error = %e, "cannot LISTEN; retrying");
                continue;
            }
            // Anything missed while not listening is re-read by every stream, and looked for by
            // the webhook dispatcher.
            self.hub.wake_all();
            self.wake_webhooks();
            self.webhook_event_wake.notify_one();
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
                        self.hub.wake_all();
                        self.wake_webhooks();
                        self.webhook_event_wake.notify_one();
                    }
                    Ok(Some(n)) if n.channel() == WEBHOOK_CHANNEL => self.wake_webhooks(),
                    Ok(Some(n)) if n.channel() == WEBHOOK_EVENT_CHANNEL => {
                        self.webhook_event_wake.notify_one()
                    }
                    Ok(Some(n)) => match serde_json::from_str::<Payload>(n.payload()) {
                        Ok(Payload::Created { c }) => {
                            for (app, user) in &c {
                                self.hub.wake_created(app, user);
                            }
                        }
                        Ok(Payload::One { a, u, i: None }) => self.hub.wake_created(&a, &u),
                        Ok(Payload::One { a, u, i: Some(item) }) => self.hub.push_update(&a, &u, &item),
                        Err(e) => {
                            // Not knowing whose inbox changed, every stream re-reads.
                            tracing::warn!(error = %e, "unreadable inbox notification");
                            self.hub.wake_all();
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "the notification listener lost its connection; reconnecting");
                        break;
                    }
                }
            }
        }
    }

    /// Keeps the activity counters current until `shutdown`. PostgreSQL's triggers append
    /// changes to `activity_count_deltas` (so concurrent writers never wait on a hot counter
    /// row); they are folded into the counters every second and their table vacuumed every ten,
    /// so readers sum few of them and skip no dead rows (store/activity). SQLite's triggers
    /// update the counters directly: nothing to fold.
    pub async fn maintain_activity_counts(&self, shutdown: CancellationToken) {
        if self.engine() != Engine::Postgres {
            shutdown.cancelled().await;
            return;
        }
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for round in 0u64.. {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            if let Err(e) = self.fold_activity_counts().await {
                tracing::warn!(error = %e, "cannot fold the activity counters");
            }
            if round % 10 == 9
                && let Err(e) = self.vacuum_activity_deltas().await
            {
                tracing::warn!(error = %e, "cannot vacuum the activity counters' changes");
            }
        }
    }
}
