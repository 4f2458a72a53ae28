//! Delivery: workers take due jobs from the `deliveries` table with a lease, hand each to its
//! channel's provider, and record the outcome. Transient failures are retried on the policy's
//! schedule; permanent ones fail at once. Workers wake as soon as a dispatch commits (a
//! `Notify`), and otherwise poll, so jobs from other daemons sharing the database and retries
//! that come due are picked up too. Expired leases (a daemon that died mid-send) are reclaimed,
//! so nothing accepted is ever lost: delivery is at-least-once, and the email Message-ID carries
//! the notification id so that a resend can be recognised.

pub mod dkim;
pub mod email;
pub mod http;
pub mod policy;
pub mod providers;

use std::{sync::Arc, time::Duration};

use rand::RngExt;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

pub use policy::RetryPolicy;
pub use providers::{Providers, SendError, Sent};

use herald_common::api::notifications::Channel;

use crate::{
    state::AppState,
    store::{AttemptResult, ClaimedDelivery, now_millis},
};

/// The longest a worker sleeps without looking for due jobs.
const POLL: Duration = Duration::from_secs(1);
/// Jobs claimed per round trip to the database.
const CLAIM_BATCH: usize = 64;
/// How long shutdown waits for sends in flight.
const DRAIN: Duration = Duration::from_secs(30);

/// Runs the workers until `shutdown`, then waits for the sends in flight (bounded).
pub async fn run_workers(state: AppState, shutdown: CancellationToken) {
    let workers = state.config.delivery_workers;
    let lease_ms = i64::try_from(state.config.delivery_lease.as_millis()).unwrap_or(i64::MAX);
    let permits = Arc::new(Semaphore::new(workers));
    let mut tasks = JoinSet::new();
    let reclaim_every =
        (state.config.delivery_lease / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
    let mut next_reclaim = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= next_reclaim {
            match state.store.reclaim_expired_leases().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(deliveries = n, "reclaimed deliveries whose lease expired"),
                Err(e) => tracing::warn!(error = %e, "cannot reclaim expired leases"),
            }
            next_reclaim = tokio::time::Instant::now() + reclaim_every;
        }
        let first = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            _ = shutdown.cancelled() => break,
        };
        let mut held: Vec<OwnedSemaphorePermit> = vec![first];
        while held.len() < CLAIM_BATCH {
            match permits.clone().try_acquire_owned() {
                Ok(p) => held.push(p),
                Err(_) => break,
            }
        }
        let jobs = match state.store.claim_due_deliveries(held.len() as i64, lease_ms).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(error = %e, "cannot claim deliveries");
                Vec::new()
            }
        };
        let claimed = jobs.len();
        for (job, permit) in jobs.into_iter().zip(held.drain(..claimed)) {
            tasks.spawn(deliver(state.clone(), job, permit));
        }
        drop(held);
        while tasks.try_join_next().is_some() {}
        if claimed == 0 {
            let wait = match state.store.next_delivery_due().await {
                Ok(Some(due)) => {
                    Duration::from_millis(u64::try_from(due - now_millis()).unwrap_or(0)).min(POLL)
                }
                _ => POLL,
            };
            tokio::select! {
                _ = state.delivery_wake.notified() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(5))) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
    if tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
        tracing::warn!(
            "deliveries still in flight at shutdown; their leases will expire and they will be retried"
        );
    }
}

/// The DKIM signer for an email from a tenant's own sending domain (`from` was given).
async fn signer(state: &AppState, job: &ClaimedDelivery) -> Result<Option<Arc<dkim::DkimSigner>>, SendError> {
    match &job.sender {
        Some(sender) if job.channel == Channel::Email.as_str() => {
            crate::service::domains::signer_for(state, &job.tenant_id, sender).await.map(Some)
        }
        _ => Ok(None),
    }
}

/// Sends one claimed job and records what happened.
#[tracing::instrument(skip_all, fields(notification_id = %job.id, channel = %job.channel, attempt = job.attempt_count))]
async fn deliver(state: AppState, job: ClaimedDelivery, _permit: OwnedSemaphorePermit) {
    let started_at = now_millis();
    let outcome = match signer(&state, &job).await {
        Ok(signer) => state.providers.send(&job, signer.as_deref()).await,
        Err(e) => Err(e),
    }
    .map_err(|e| e.redact(&job.recipient, &job.recipient_masked));
    let result = match outcome {
        Ok(sent) => AttemptResult::Sent { provider_message_id: sent.provider_message_id },
        Err(SendError::Permanent { reason }) => {
            AttemptResult::Failed { error: reason, retryable: false, transient: false }
        }
        Err(SendError::Transient { reason, retry_after }) => {
            let attempt = u32::try_from(job.cycle_attempt).unwrap_or(u32::MAX);
            let jitter = rand::rng().random::<f64>();
            match state.retry_policy.next_delay(attempt, retry_after, jitter) {
                Some(delay) => AttemptResult::Retry {
                    error: reason,
                    next_attempt_at: now_millis() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2),
                },
                None => AttemptResult::Failed { error: reason, retryable: true, transient: true },
            }
        }
    };
    let label = match &result {
        AttemptResult::Sent { .. } => "sent",
        AttemptResult::Retry { .. } => "retry",
        AttemptResult::Failed { retryable: true, .. } => "failed_retryable",
        AttemptResult::Failed { .. } => "failed",
    };
    metrics::counter!("herald_delivery_attempts_total", "channel" => job.channel.clone(), "outcome" => label)
        .increment(1);
    match &result {
        // Successes at debug: the activity feed and the metrics keep the record, and at
        // thousands a second an info line each would flood the log.
        AttemptResult::Sent { .. } => {
            tracing::debug!(recipient = %job.recipient_masked, "delivered to the provider")
        }
        AttemptResult::Retry { error, .. } => {
            tracing::info!(recipient = %job.recipient_masked, %error, "transient failure; will retry")
        }
        AttemptResult::Failed { error, .. } => {
            tracing::warn!(recipient = %job.recipient_masked, %error, "delivery failed")
        }
    }
    let retry = matches!(result, AttemptResult::Retry { .. });
    match state.store.record_attempt(&job.id, job.attempt_count, started_at, result).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!("the lease expired before the outcome was recorded; another attempt owns it")
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot record the outcome; the lease will expire and the job will run again")
        }
    }
    if retry {
        // The claim loop may be sleeping past this job's next attempt.
        state.delivery_wake.notify_one();
    }
}
