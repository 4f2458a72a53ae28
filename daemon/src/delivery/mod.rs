//! Delivery: workers take due jobs from the `deliveries` table with a lease, hand each to its
//! channel's provider, and record the outcome. Transient failures are retried on the policy's
//! schedule; permanent ones fail at once. Workers wake as soon as a dispatch commits (a
//! `Notify`), and otherwise poll, so jobs from other daemons sharing the database and retries
//! that come due are picked up too. Expired leases (a daemon that died mid-send) are reclaimed,
//! so nothing accepted is ever lost: delivery is at-least-once, and the email Message-ID carries
//! the notification id so that a resend can be recognised.

pub mod webhooks;

use std::{sync::Arc, time::Duration};

use herald_common::{api::notifications::Channel, ids::TenantId};
use rand::RngExt;
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use crate::{
    dkim::{self, DkimSigner},
    providers::{OutgoingMessage, SendError},
    service::{suppressions::Suppressed, unsubscribe},
    state::AppState,
    store::{AttemptResult, AttemptSpan, ClaimedDelivery, now_millis},
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
        while let Some(joined) = tasks.try_join_next() {
            report_panic(joined);
        }
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
    if !drain(tasks, DRAIN, |joined| {
        report_panic(joined);
    })
    .await
    {
        tracing::warn!(
            "deliveries still in flight at shutdown; their leases will expire and they will be retried"
        );
    }
}

/// Waits for the sends still in flight at shutdown, each told to `report`, for at most
/// `within`; whether they all ended.
async fn drain(
    mut tasks: JoinSet<()>,
    within: Duration,
    report: impl Fn(Result<(), tokio::task::JoinError>),
) -> bool {
    let drained = async {
        while let Some(joined) = tasks.join_next().await {
            report(joined);
        }
    };
    tokio::time::timeout(within, drained).await.is_ok()
}

/// Logs and counts a send whose task panicked (`herald_task_exits_total{task="delivery-worker",
/// reason="panicked"}`); its lease runs out and the delivery is claimed again. Returns the
/// panic's message, if it was one.
fn report_panic(joined: Result<(), tokio::task::JoinError>) -> Option<String> {
    let error = joined.err().filter(tokio::task::JoinError::is_panic)?;
    let message = crate::tasks::panic_message(&*error.into_panic());
    tracing::error!(panic = %message, "a delivery panicked; its lease will run out and it will be tried again");
    metrics::counter!("herald_task_exits_total", "task" => "delivery-worker", "reason" => "panicked")
        .increment(1);
    Some(message)
}

/// The message to hand to a claimed job's provider, with its one-click unsubscribe link if it
/// has one.
fn message<'a>(job: &'a ClaimedDelivery, unsubscribe_url: Option<&'a str>) -> OutgoingMessage<'a> {
    OutgoingMessage {
        id: job.id.as_str(),
        channel: job.channel,
        recipient: &job.recipient,
        recipient_masked: &job.recipient_masked,
        sender: job.sender.as_deref(),
        subject: job.subject.as_deref(),
        body: &job.body,
        html_body: job.html_body.as_deref(),
        unsubscribe_url,
    }
}

/// The one-click unsubscribe link of a job's email, when it has a category.
fn unsubscribe_url(state: &AppState, job: &ClaimedDelivery) -> Result<Option<String>, SendError> {
    let linked = unsubscribe::Linked {
        tenant_id: &job.tenant_id,
        notification_id: &job.id,
        channel: job.channel,
        recipient: &job.recipient,
        recipient_key: job.recipient_key.as_deref(),
        recipient_masked: &job.recipient_masked,
        category: job.category.as_deref(),
    };
    unsubscribe::link(state, &linked)
        .map_err(|e| SendError::Permanent { reason: format!("cannot make the unsubscribe link: {e}") })
}

/// The DKIM signer for an email from a tenant's own sending domain (`from` was given).
async fn signer(state: &AppState, job: &ClaimedDelivery) -> Result<Option<Arc<DkimSigner>>, SendError> {
    match &job.sender {
        Some(sender) if job.channel == Channel::Email => {
            signer_for(state, &job.tenant_id, sender).await.map(Some)
        }
        _ => Ok(None),
    }
}

/// The DKIM signer for mail from `sender` of `tenant_id`, at delivery time. A domain that can
/// no longer send (deleted, or failed a re-check since the mail was accepted) fails the
/// delivery: sending it unsigned from a domain that publishes DKIM and DMARC would only get it
/// rejected or marked as spam.
pub async fn signer_for(
    state: &AppState,
    tenant_id: &TenantId,
    sender: &str,
) -> Result<Arc<DkimSigner>, SendError> {
    let name = dkim::domain_of(sender);
    let not_sendable = || SendError::Permanent {
        reason: format!(
            "the sending domain `{name}` is no longer verified (it was removed or failed a check after this \
             notification was accepted)"
        ),
    };
    if let Some(cached) = state.signers.get(tenant_id, &name) {
        return cached.ok_or_else(not_sendable);
    }
    let domain = state.store.find_domain_by_name(tenant_id, &name).await.map_err(|e| {
        SendError::Transient { reason: format!("cannot read the sending domain: {e}"), retry_after: None }
    })?;
    let signer = match domain {
        Some(domain) if domain.verified_at.is_some() => {
            let signer = dkim::keys::open(&state.secret, &domain.id, &domain.dkim_private_key)
                .and_then(|der| DkimSigner::new(&domain.name, &domain.dkim_selector, &der))
                .map_err(|e| SendError::Permanent { reason: format!("cannot sign as `{name}`: {e}") })?;
            Some(Arc::new(signer))
        }
        _ => None,
    };
    state.signers.put(tenant_id, &name, signer.clone());
    signer.ok_or_else(not_sendable)
}

/// Sends one claimed job and records what happened.
#[tracing::instrument(skip_all, fields(notification_id = %job.id, channel = %job.channel, attempt = job.attempt_count))]
async fn deliver(state: AppState, job: ClaimedDelivery, _permit: OwnedSemaphorePermit) {
    let started_at = now_millis();
    let mut unreachable = None;
    let outcome = match suppressed(&state, &job).await {
        Ok(Some(suppressed)) => Err(Stopped::Suppressed(suppressed)),
        Ok(None) => match signer(&state, &job).await.and_then(|s| Ok((s, unsubscribe_url(&state, &job)?))) {
            Ok((signer, unsubscribe)) => state
                .providers
                .send(&message(&job, unsubscribe.as_deref()), signer.as_deref())
                .await
                .map_err(Stopped::Failed),
            Err(e) => Err(Stopped::Failed(e)),
        },
        Err(e) => Err(Stopped::Failed(e)),
    };
    let span = AttemptSpan { started_at, finished_at: now_millis() };
    let result = match outcome {
        Ok(sent) => AttemptResult::Sent { provider_message_id: sent.provider_message_id },
        Err(Stopped::Suppressed(suppressed)) => {
            AttemptResult::Suppressed { reason: suppressed.failure_reason() }
        }
        Err(Stopped::Failed(SendError::Permanent { reason })) => {
            AttemptResult::Failed { error: reason, retryable: false, transient: false }
        }
        Err(Stopped::Failed(SendError::Unreachable { reason, suppress })) => {
            unreachable = Some(suppress);
            AttemptResult::Failed { error: reason, retryable: false, transient: false }
        }
        Err(Stopped::Failed(SendError::Transient { reason, retry_after })) => {
            let attempt = u32::try_from(job.cycle_attempt).unwrap_or(u32::MAX);
            let jitter = rand::rng().random::<f64>();
            match state.retry_policy.next_delay(attempt, retry_after, jitter) {
                Some(delay) => AttemptResult::Retry {
                    error: reason,
                    next_attempt_at: span.finished_at
                        + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2),
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
        AttemptResult::Suppressed { .. } => "suppressed",
    };
    metrics::counter!("herald_delivery_attempts_total", "channel" => job.channel.as_str(), "outcome" => label)
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
        AttemptResult::Suppressed { reason } => {
            tracing::info!(recipient = %job.recipient_masked, %reason, "not sent: the recipient is suppressed")
        }
    }
    let retry = matches!(result, AttemptResult::Retry { .. });
    match state.store.record_attempt(&job.id, job.attempt_count, span, result).await {
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
    if let Some(reason) = unreachable {
        // After the outcome: the failure is recorded whether or not the entry can be.
        if let Err(e) = crate::service::suppressions::suppress_recipient_of(&state, &job.id, reason).await {
            tracing::error!(error = %e, %reason, "cannot add the recipient to the suppression list");
        }
    }
}

/// Why a claimed job was not handed over.
enum Stopped {
    /// The recipient is on the suppression list: no provider call.
    Suppressed(Suppressed),
    Failed(SendError),
}

/// The entry that stops `job`, if one does. The claim matched it already; a notification
/// accepted before the list existed has no key stored, and is looked up here.
async fn suppressed(state: &AppState, job: &ClaimedDelivery) -> Result<Option<Suppressed>, SendError> {
    if job.recipient_key.is_some() {
        return Ok(job
            .suppressed_reason
            .zip(job.suppressed_since)
            .map(|(reason, since)| Suppressed { reason, since }));
    }
    let key = crate::service::suppressions::recipient_key(&state.secret, job.channel, &job.recipient);
    match state.store.suppression_for(&job.tenant_id, job.channel, &key, job.category.as_deref()).await {
        Ok(found) => Ok(found.map(|s| Suppressed { reason: s.reason, since: s.created_at })),
        Err(e) => Err(SendError::Transient {
            reason: format!("cannot read the suppression list: {e}"),
            retry_after: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    /// A send whose task panicked is reported with its message, not discarded.
    #[tokio::test]
    async fn a_panicking_send_is_reported() {
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(async { panic!("injected into a send") });
        tasks.spawn(async {});
        let mut reported = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            reported.extend(super::report_panic(joined));
        }
        assert_eq!(reported, ["injected into a send"]);
    }
}
