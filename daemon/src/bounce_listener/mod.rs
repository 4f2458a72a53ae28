//! The bounce listener (CONTRACT §8, `HERALD_BOUNCE_LISTEN`): an SMTP server that takes mail
//! for the VERP return paths of the bounce domain, as the domain's MX delivers it, and hands
//! every message to `service::receipts::email`. It runs as the supervised background task
//! `bounce-listener`; its socket is bound when the daemon starts (so a taken port stops the
//! start with a clear error) and kept across restarts of the task.
//!
//! There is no TLS: reports carry no secret, and a forged one can only name a message whose
//! signed return path it already knows. Sessions are bounded in number ([`MAX_SESSIONS`]; one
//! more is told `421` and closed) and each by [`session::Limits`].

pub mod session;

use std::{net::SocketAddr, sync::Arc};

use herald_common::{api::notifications::ReceiptProvider, ids::TransactionId};
use tokio::{net::TcpListener, sync::Semaphore, task::JoinSet};
use tokio_util::sync::CancellationToken;

use self::session::{Intake, Limits, Recipient};
use crate::{
    service::receipts::{self, Counted},
    state::AppState,
    verp::{self, ReturnPath},
};

/// Sessions served at once; a mail server delivering reports needs few.
pub const MAX_SESSIONS: usize = 32;

/// Binds the listener's address, if it is configured.
pub fn bind(state: &AppState) -> anyhow::Result<Option<Arc<TcpListener>>> {
    let Some(addr) = state.config.bounce_listen else { return Ok(None) };
    let listener = crate::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot listen for bounces on {addr} (HERALD_BOUNCE_LISTEN): {e}"))?;
    Ok(Some(Arc::new(listener)))
}

/// The listener's intake: return paths checked with the server secret, reports recorded in
/// the store.
struct Receipts<'a> {
    state: &'a AppState,
}

impl Intake for Receipts<'_> {
    fn recipient(&self, address: &str) -> Recipient {
        match verp::check(&self.state.secret, &self.state.config.bounce_domain, address) {
            ReturnPath::Signed(id) => Recipient::Accepted(id),
            ReturnPath::Forged => {
                receipts::count(ReceiptProvider::Email, Counted::InvalidSignature);
                // Counted; at `debug` only, so that a flood of forgeries cannot flood the log.
                tracing::debug!("bounce listener: refused a return path Herald did not sign");
                Recipient::Forged
            }
            ReturnPath::NotOurs => Recipient::Unknown,
        }
    }

    async fn deliver(&self, to: &[TransactionId], message: &[u8]) -> bool {
        let received_at = self.state.clock.now_millis();
        for about in to {
            if let Err(e) = receipts::email::receive(self.state, about, message, received_at).await {
                tracing::warn!(error = %e, "bounce listener: cannot record a report now; the mail server will retry");
                return false;
            }
        }
        true
    }
}

/// Serves SMTP on `listener` until `token` is cancelled; sessions still open are told `421`
/// and closed.
#[tracing::instrument(skip_all, fields(addr = ?listener.local_addr().ok()))]
pub async fn run(state: AppState, listener: Arc<TcpListener>, token: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_SESSIONS));
    let limits = Arc::new(Limits::default());
    let mut sessions = JoinSet::new();
    tracing::info!("bounce listener accepting reports");
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished sessions as they end, so the set does not grow.
            Some(_) = sessions.join_next(), if !sessions.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                tracing::warn!(error = %e, "bounce listener: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (state, limits, token) = (state.clone(), limits.clone(), token.clone());
        let slot = slots.clone().try_acquire_owned();
        sessions.spawn(async move {
            let Ok(_slot) = slot else {
                busy(stream).await;
                return;
            };
            session_on(stream, peer, &state, &limits, &token).await;
        });
    }
    // Sessions see the token too and close at their next line; give them a moment to.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
}

#[tracing::instrument(skip_all, fields(peer = %peer.ip()))]
async fn session_on(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    state: &AppState,
    limits: &Limits,
    token: &CancellationToken,
) {
    let intake = Receipts { state };
    if let Err(e) = session::serve(stream, &intake, &state.config.bounce_domain, limits, token).await {
        tracing::debug!(error = %e, "bounce listener: session ended");
    }
}

/// Tells a client over [`MAX_SESSIONS`] to come back later.
async fn busy(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let _ = stream.write_all(b"421 4.3.2 Too many connections, try again later\r\n").await;
    let _ = stream.shutdown().await;
}
