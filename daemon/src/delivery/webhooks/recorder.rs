//! Records the dispatcher's attempts in groups: each send hands its attempt to one recorder task
//! and waits until it has committed (its slot stays taken till then, so the next claim sees the
//! message settled). Whatever arrives while a group is being written goes in the next, so the
//! faster attempts end, the larger the groups: one transaction, and on PostgreSQL a handful of
//! set-based statements, for tens of attempts, where each attempt alone cost a transaction of
//! six or more round trips.

use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

use crate::store::{Store, WebhookAttemptRecord};

/// The most attempts written in one transaction.
const GROUP: usize = 256;

/// An attempt to record, and who waits for it.
type Entry = (WebhookAttemptRecord, oneshot::Sender<()>);

/// Hands attempts to the recorder task. Cloned into every send; the task ends once every clone
/// is dropped and what they handed in is written.
#[derive(Clone)]
pub struct Recorder {
    entries: mpsc::UnboundedSender<Entry>,
}

impl Recorder {
    /// Starts the recorder task.
    pub fn spawn(store: Store) -> (Recorder, JoinHandle<()>) {
        let (entries, received) = mpsc::unbounded_channel();
        (Recorder { entries }, tokio::spawn(run(store, received)))
    }

    /// Records `attempt`, returning once it is written or could not be (then the lease runs out
    /// and the message is sent again; the recorder logs why).
    pub async fn record(&self, attempt: WebhookAttemptRecord) {
        let (answer, answered) = oneshot::channel();
        if self.entries.send((attempt, answer)).is_ok() {
            let _ = answered.await;
        }
    }
}

async fn run(store: Store, mut received: mpsc::UnboundedReceiver<Entry>) {
    let mut group = Vec::with_capacity(GROUP);
    while received.recv_many(&mut group, GROUP).await > 0 {
        let (attempts, answers): (Vec<_>, Vec<_>) = group.drain(..).unzip();
        metrics::histogram!("herald_webhook_record_group_size").record(attempts.len() as f64);
        match store.record_webhook_attempts(attempts.clone()).await {
            Ok(disabled) => report(&disabled),
            // One attempt the group could not take (its endpoint removed mid-way, say) must not
            // cost the others theirs: each is tried alone.
            Err(e) if attempts.len() > 1 => {
                tracing::warn!(error = %e, attempts = attempts.len(), "cannot record a group of webhook attempts; recording each alone");
                for attempt in attempts {
                    record_alone(&store, attempt).await;
                }
            }
            Err(e) => warn_unrecorded(&e),
        }
        for answer in answers {
            let _ = answer.send(());
        }
    }
}

async fn record_alone(store: &Store, attempt: WebhookAttemptRecord) {
    match store.record_webhook_attempts(vec![attempt]).await {
        Ok(disabled) => report(&disabled),
        Err(e) => warn_unrecorded(&e),
    }
}

fn warn_unrecorded(error: &crate::store::StoreError) {
    tracing::warn!(error = %error, "cannot record a webhook attempt; the lease will run out and it will be sent again");
}

fn report(disabled: &[(herald_common::ids::WebhookEndpointId, String)]) {
    for (endpoint_id, reason) in disabled {
        tracing::warn!(endpoint_id = %endpoint_id, reason = %reason, "a webhook endpoint was disabled");
        metrics::counter!("herald_webhook_endpoints_disabled_total").increment(1);
    }
}
