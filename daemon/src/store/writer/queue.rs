//! How the writers of one handle take their batches from the queue they share.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, Notify, mpsc};

use super::{MAX_BATCH, Pending};

/// How many writes a writer gathers before it writes beside another writer's batch (see
/// [`next_batch`]).
pub(super) const JOIN_AT: usize = 32;

/// The receiving end of the queue, shared by the writers of one handle, and how many of them
/// are writing a batch (see [`next_batch`]).
pub(crate) struct Queue<L> {
    receiver: Mutex<mpsc::Receiver<Box<dyn Pending<L>>>>,
    writing: AtomicUsize,
    /// A wake-up when a writer has finished its batch.
    written: Notify,
}

/// Held by a writer while it writes the batch [`next_batch`] gave it: dropped (the batch
/// written, refused, or its writer panicked), the writer no longer counts as writing.
pub(crate) struct Writing<'q, L>(pub(crate) &'q Queue<L>);

impl<L> Drop for Writing<'_, L> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::AcqRel);
        self.0.written.notify_waiters();
    }
}

impl<L> Queue<L> {
    pub(super) fn new(receiver: mpsc::Receiver<Box<dyn Pending<L>>>) -> Self {
        Self { receiver: Mutex::new(receiver), writing: AtomicUsize::new(0), written: Notify::new() }
    }
}

/// Receives the next batch: waits for one job, then takes what else is already queued. While
/// another writer is writing its batch, it goes on taking jobs until it holds [`JOIN_AT`] or that
/// writer has finished: a second writer that took whatever had come in while the first wrote split
/// a burst into batches half as large, and each batch costs the server per statement (on
/// PostgreSQL, in-app dispatch with one writer held batches of 32 at the same rate as two with
/// 16, for a fifth less of the server's CPU, and the webhook outbox's statement trigger cost it
/// half as much: docs/PERFORMANCE.md, twenty-third session). Under a deep queue both write at
/// once, as before. The caller holds the [`Writing`] until it has written the batch.
pub(crate) async fn next_batch<L>(queue: &Queue<L>) -> Option<(Vec<Box<dyn Pending<L>>>, Writing<'_, L>)> {
    let mut receiver = queue.receiver.lock().await;
    let first = receiver.recv().await?;
    let mut batch = Vec::with_capacity(16);
    batch.push(first);
    take_queued(&mut receiver, &mut batch);
    while batch.len() < JOIN_AT {
        let written = queue.written.notified();
        tokio::pin!(written);
        written.as_mut().enable();
        if queue.writing.load(Ordering::Acquire) == 0 {
            break;
        }
        tokio::select! {
            job = receiver.recv() => match job {
                Some(job) => {
                    batch.push(job);
                    take_queued(&mut receiver, &mut batch);
                }
                None => break,
            },
            () = &mut written => break,
        }
    }
    queue.writing.fetch_add(1, Ordering::AcqRel);
    Some((batch, Writing(queue)))
}

/// Takes what is already queued, up to [`MAX_BATCH`] in all.
fn take_queued<L>(receiver: &mut mpsc::Receiver<Box<dyn Pending<L>>>, batch: &mut Vec<Box<dyn Pending<L>>>) {
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}
