//! Where the writers run: the SQLite writer on a thread of its own with its own rusqlite
//! connection, beside a checkpointer thread; the PostgreSQL writers as tasks, each taking a
//! pooled connection for a batch. The batching protocol is the parent module's.
//!
//! A writer is supervised in place. A panic while it runs a batch is caught: that batch's
//! callers are answered `WriterGone` (503 `unavailable`), its transaction is undone (on
//! PostgreSQL its connection is closed, for the pool to open another), the panic is logged and
//! counted (`herald_task_exits_total{task="store-writer", reason="panicked"}`), and the writer
//! goes on with the next batch: a restart that keeps the queue. A writer that cannot go on (the
//! connection will not roll back, the checkpointer died, or [`CRASH_LOOP`] panics within
//! [`CRASH_WINDOW`]) fails the handle: its queue closes, and the daemon's supervisor, which
//! waits on [`WriterHandle::failed`], turns `/readyz` 503 and stops the daemon non-zero for its
//! service manager to start it afresh.

use std::{
    collections::VecDeque,
    panic::AssertUnwindSafe,
    sync::Arc,
    time::{Duration, Instant},
};

use futures_util::FutureExt;

use super::{BeforeCommit, Lanes, Queue, Running, WriterHandle, next_batch, run_batch};
use crate::store::{Conn, StoreError, StoreResult};

/// Panics within [`CRASH_WINDOW`] after which a writer is given up on (as the supervisor does
/// for the background tasks).
pub const CRASH_LOOP: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);

/// How often the checkpointer copies the WAL back into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// The WAL's size, in pages, at which the writer runs SQLite's own checkpoint after a commit:
/// 256 MiB with 4 KiB pages. The WAL starts over only after a checkpoint has copied all of it
/// when the writer begins a transaction, and while writes come every millisecond or so the
/// checkpointer's never have (a commit lands while it copies), so this backstop is what
/// restarts the WAL under a steady load too, not only in a burst. Its run sits inside a
/// commit: it copies what the checkpointer had not reached and syncs the database file, 40-80
/// ms on this project's test machine, with every caller of that batch waiting. At 16,384 pages
/// (64 MiB) an in-app dispatch's ~25 pages a commit reached it every 0.85 s at a steady
/// 1,000 dispatches a second and every 2 s or so saturated, and the dispatches' p99 was that
/// stall (83-101 ms saturated); at 65,536 it comes four times as rarely (p99 16-23 ms
/// saturated, alternating runs; docs/PERFORMANCE.md, thirty-fourth session). The price: up to
/// 256 MiB of disk for the WAL, and a crash's recovery reading that much at the next start.
pub const WAL_BACKSTOP_PAGES: i64 = 65_536;

/// The task name writers are counted under in `herald_task_exits_total`.
const TASK: &str = "store-writer";

/// The writers' recent panics (shared by the writers of one handle), for the crash-loop rule.
#[derive(Clone, Default)]
struct Panics(Arc<std::sync::Mutex<VecDeque<Instant>>>);

impl Panics {
    /// Logs and counts a panic; `true` if the writers have now panicked too often to go on.
    fn record(&self, panic: Box<dyn std::any::Any + Send>) -> bool {
        let message = crate::tasks::panic_message(&*panic);
        tracing::error!(task = TASK, panic = %message, "the database writer panicked in a batch; its callers were answered 503");
        metrics::counter!("herald_task_exits_total", "task" => TASK, "reason" => "panicked").increment(1);
        let Ok(mut recent) = self.0.lock() else { return true };
        let now = Instant::now();
        recent.push_back(now);
        while recent.front().is_some_and(|at| now.duration_since(*at) > CRASH_WINDOW) {
            recent.pop_front();
        }
        recent.len() >= CRASH_LOOP
    }
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on the current (non-async) thread. On the SQLite writer's
/// thread every database call completes in place, so an operation's future is ready at its
/// first poll; receiving from the queue parks the thread until a job arrives.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}

/// The single SQLite writer: its own rusqlite connection on a thread of its own, where every
/// statement of a batch runs in place ([`crate::store::local`]). `BEGIN IMMEDIATE` takes the
/// write lock at the start, so a batch never fails half-way on SQLITE_BUSY.
///
/// WAL checkpoints run on a second connection and thread (`checkpointer`), so copying pages
/// into the database file and its fsync never sit inside a commit that callers wait on. The
/// writer keeps SQLite's automatic checkpoint only as a backstop ([`WAL_BACKSTOP_PAGES`]).
///
/// `before_commit` runs in each transaction just before it commits (see [`run_batch`]);
/// `after_batch` runs on the writer's thread once each batch has committed (or failed): what a
/// commit must wake (the webhook dispatcher) is woken only when the readers can see it.
pub(crate) fn spawn_sqlite<L: Lanes>(
    mut connection: rusqlite::Connection,
    checkpointer: rusqlite::Connection,
    before_commit: Box<BeforeCommit>,
    after_batch: Box<dyn Fn() + Send>,
) -> StoreResult<WriterHandle<L>> {
    connection.pragma_update(None, "wal_autocheckpoint", WAL_BACKSTOP_PAGES)?;
    let (handle, queue) = WriterHandle::<L>::new(1);
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let watcher = handle.clone();
    std::thread::Builder::new()
        .name("herald-sqlite-checkpoint".to_owned())
        .spawn(move || {
            // Ends when the writer drops `stop`; any other end is a failure.
            let ended = std::panic::catch_unwind(AssertUnwindSafe(|| {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                    if let Err(e) = checkpointer.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
                        tracing::warn!(error = %e, "SQLite WAL checkpoint failed");
                    }
                }
            }));
            if ended.is_err() {
                metrics::counter!("herald_task_exits_total", "task" => "sqlite-checkpoint", "reason" => "panicked")
                    .increment(1);
                watcher.fail("the SQLite checkpointer panicked".to_owned());
            }
        })
        .map_err(|e| StoreError::Open(format!("cannot start the SQLite checkpointer: {e}")))?;
    let running = Running(handle.clone());
    std::thread::Builder::new()
        .name("herald-sqlite-writer".to_owned())
        .spawn(move || {
            let _running = running;
            let panics = Panics::default();
            while let Some((batch, _writing)) = block_on(next_batch(&queue)) {
                let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    block_on(run_batch::<L>(
                        &mut Conn::Local(&mut connection),
                        "BEGIN IMMEDIATE",
                        batch,
                        Some(&*before_commit),
                    ))
                }));
                after_batch();
                let Err(panic) = ran else { continue };
                let give_up = panics.record(panic);
                if !connection.is_autocommit()
                    && let Err(e) = connection.execute_batch("ROLLBACK")
                {
                    _running.0.fail(format!("the SQLite writer cannot roll back after a panic: {e}"));
                    break;
                }
                if give_up {
                    _running.0.fail(format!("the SQLite writer panicked {CRASH_LOOP} times within a minute"));
                    break;
                }
            }
            drop(stop);
        })
        .map_err(|e| StoreError::Open(format!("cannot start the SQLite writer: {e}")))?;
    Ok(handle)
}

/// PostgreSQL writers: `count` tasks, each holding a pooled connection while it runs a batch.
pub(crate) fn spawn_postgres<L: Lanes>(pool: sqlx::PgPool, count: usize) -> WriterHandle<L> {
    let (handle, queue) = WriterHandle::<L>::new(count);
    let panics = Panics::default();
    for _ in 0..count {
        tokio::spawn(run_postgres(pool.clone(), queue.clone(), Running(handle.clone()), panics.clone()));
    }
    handle
}

async fn run_postgres<L: Lanes>(
    pool: sqlx::PgPool,
    queue: Arc<Queue<L>>,
    running: Running<L>,
    panics: Panics,
) {
    while let Some((batch, _writing)) = next_batch(&queue).await {
        let mut conn = match pool.acquire().await {
            Ok(conn) => conn,
            Err(e) => {
                let message = e.to_string();
                for job in batch {
                    job.refuse(StoreError::Unavailable(message.clone()));
                }
                continue;
            }
        };
        let ran = AssertUnwindSafe(run_batch::<L>(&mut Conn::Postgres(&mut conn), "BEGIN", batch, None))
            .catch_unwind()
            .await;
        let Err(panic) = ran else { continue };
        // The connection may be inside the batch's transaction: close it rather than return it.
        let _ = conn.close().await;
        if panics.record(panic) {
            running.0.fail(format!("a PostgreSQL writer panicked {CRASH_LOOP} times within a minute"));
            break;
        }
    }
}
