//! The group-commit writer. Callers submit write operations over a channel; a writer task takes
//! whatever has queued up (up to [`MAX_BATCH`]), opens one transaction, runs each operation in
//! its own savepoint, commits once, and only then answers each caller. Under load this turns
//! hundreds of fsyncs into one; with no load a batch is a single operation and adds no delay.
//! An operation whose caller stopped waiting before it started is skipped.

use std::{
    any::Any,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use futures_util::future::BoxFuture;
use sqlx::PgConnection;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::{Conn, StoreError, StoreResult};

const MAX_BATCH: usize = 256;

/// Batches committed (or tried) and the operations they held, since the process started: their
/// ratio is the mean batch size (`herald_store_write_batches_total`,
/// `herald_store_write_operations_total`).
static BATCHES: AtomicU64 = AtomicU64::new(0);
static OPERATIONS: AtomicU64 = AtomicU64::new(0);

/// `(batches, operations)` so far.
pub fn batch_counts() -> (u64, u64) {
    (BATCHES.load(Ordering::Relaxed), OPERATIONS.load(Ordering::Relaxed))
}
const QUEUE: usize = 4096;

type Erased = Box<dyn Any + Send>;
type Operation = Box<dyn for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<Erased>> + Send>;

struct Job {
    op: Operation,
    reply: oneshot::Sender<StoreResult<Erased>>,
}

#[derive(Clone)]
pub struct WriterHandle {
    sender: Arc<std::sync::Mutex<Option<mpsc::Sender<Job>>>>,
    stopped: Arc<tokio::sync::Notify>,
    tasks: Arc<std::sync::atomic::AtomicUsize>,
}

impl WriterHandle {
    fn new(sender: mpsc::Sender<Job>, tasks: usize) -> Self {
        Self {
            sender: Arc::new(std::sync::Mutex::new(Some(sender))),
            stopped: Arc::new(tokio::sync::Notify::new()),
            tasks: Arc::new(std::sync::atomic::AtomicUsize::new(tasks)),
        }
    }

    fn sender(&self) -> Option<mpsc::Sender<Job>> {
        self.sender.lock().ok().and_then(|s| s.clone())
    }

    pub async fn submit<R, F>(&self, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<R>> + Send + 'static,
    {
        let op: Operation = Box::new(move |conn| {
            let fut = op(conn);
            Box::pin(async move { fut.await.map(|r| Box::new(r) as Erased) })
        });
        let (reply, answer) = oneshot::channel();
        let sender = self.sender().ok_or(StoreError::WriterGone)?;
        sender.send(Job { op, reply }).await.map_err(|_| StoreError::WriterGone)?;
        let erased = answer.await.map_err(|_| StoreError::WriterGone)??;
        erased.downcast::<R>().map(|r| *r).map_err(|_| StoreError::WriterGone)
    }

    /// Closes the queue and waits until the writers have finished what was queued.
    pub async fn close(&self) {
        let taken = self.sender.lock().ok().and_then(|mut s| s.take());
        drop(taken);
        while self.tasks.load(std::sync::atomic::Ordering::Acquire) > 0 {
            let notified = self.stopped.notified();
            if self.tasks.load(std::sync::atomic::Ordering::Acquire) == 0 {
                break;
            }
            notified.await;
        }
    }

    fn task_done(&self) {
        self.tasks.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.stopped.notify_waiters();
    }
}

/// Receives the next batch: waits for one job, then takes what else is already queued.
async fn next_batch(receiver: &Mutex<mpsc::Receiver<Job>>) -> Option<Vec<Job>> {
    let mut receiver = receiver.lock().await;
    let first = receiver.recv().await?;
    let mut batch = Vec::with_capacity(16);
    batch.push(first);
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// Runs one batch on `conn` within one transaction, each operation after the first in its own
/// savepoint. The first needs none: if it fails, nothing else has run yet, so the transaction is
/// rolled back and begun again. (A batch of one, the common case on PostgreSQL, is then just
/// BEGIN, the operation, COMMIT; a savepoint is a round trip there.) Infrastructure failures
/// (BEGIN, a savepoint, COMMIT) fail every job of the batch not yet answered; an operation's own
/// failure fails only it.
async fn run_batch(conn: &mut Conn<'_>, begin: &'static str, batch: Vec<Job>) {
    BATCHES.fetch_add(1, Ordering::Relaxed);
    OPERATIONS.fetch_add(batch.len() as u64, Ordering::Relaxed);
    if let Err(e) = super::execute!(conn, begin) {
        return fail_all(batch, &e.to_string());
    }
    let mut results = Vec::with_capacity(batch.len());
    let mut broken: Option<String> = None;
    let mut open_savepoint = false;
    let mut jobs = batch.into_iter();
    while let Some(job) = jobs.next() {
        // A caller that has gone (its task aborted, its client disconnected) will never see
        // the result: its operation is not started. Otherwise a delivery claim made for a
        // worker that died while waiting would hold its jobs until their lease expired.
        if job.reply.is_closed() {
            continue;
        }
        let first = results.is_empty();
        if !first {
            // Releasing the previous operation's savepoint and opening this one's is one round
            // trip to the database; the last savepoint is released by COMMIT.
            let opened = if open_savepoint {
                raw(conn, "RELEASE SAVEPOINT op; SAVEPOINT op").await
            } else {
                raw(conn, "SAVEPOINT op").await
            };
            if let Err(e) = opened {
                broken = Some(e.to_string());
                let _ = job.reply.send(Err(e));
                break;
            }
            open_savepoint = true;
        }
        match (job.op)(conn).await {
            Err(e) if first => {
                // Undo the first operation's partial work by undoing everything, then start
                // over for the rest of the batch.
                let _ = job.reply.send(Err(e));
                let restarted = match super::execute!(conn, "ROLLBACK") {
                    Ok(_) => super::execute!(conn, begin).map(|_| ()),
                    Err(e) => Err(e),
                };
                if let Err(e) = restarted {
                    return fail_all(jobs, &e.to_string());
                }
            }
            Err(e) => {
                let rolled_back = raw(conn, "ROLLBACK TO SAVEPOINT op").await;
                results.push((job.reply, Err(e)));
                if let Err(e) = rolled_back {
                    broken = Some(e.to_string());
                    break;
                }
            }
            Ok(value) => results.push((job.reply, Ok(value))),
        }
    }
    let commit = match &broken {
        None => super::execute!(conn, "COMMIT").map_err(|e| e.to_string()),
        Some(message) => {
            fail_all(jobs, message);
            let _ = super::execute!(conn, "ROLLBACK");
            Err(message.clone())
        }
    };
    for (reply, outcome) in results {
        let answer = match &commit {
            Ok(_) => outcome,
            Err(message) => Err(batch_error(format!("transaction failed: {message}"))),
        };
        let _ = reply.send(answer);
    }
}

/// The error a job gets when its batch's transaction, not its own operation, failed.
fn batch_error(message: impl std::fmt::Display) -> StoreError {
    StoreError::Batch(message.to_string())
}

/// Answers each of `jobs` with the batch's failure.
fn fail_all(jobs: impl IntoIterator<Item = Job>, message: &str) {
    for job in jobs {
        let _ = job.reply.send(Err(batch_error(message)));
    }
}

/// Runs statements without parameters, several in one round trip.
async fn raw(conn: &mut Conn<'_>, sql: &'static str) -> StoreResult<()> {
    super::count_call();
    match conn {
        Conn::Sqlite(c) => sqlx::raw_sql(sql).execute(&mut **c).await.map(|_| ()).map_err(StoreError::from),
        Conn::Postgres(c) => sqlx::raw_sql(sql).execute(&mut **c).await.map(|_| ()).map_err(StoreError::from),
        Conn::Local(c) => super::local::execute_batch(c, sql),
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
fn block_on<F: std::future::Future>(future: F) -> F::Output {
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

/// How often the checkpointer copies the WAL back into the database file.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// The single SQLite writer: its own rusqlite connection on a thread of its own, where every
/// statement of a batch runs in place ([`super::local`]). `BEGIN IMMEDIATE` takes the write
/// lock at the start, so a batch never fails half-way on SQLITE_BUSY.
///
/// WAL checkpoints run on a second connection and thread (`checkpointer`), so copying pages
/// into the database file and its fsync never sit inside a commit that callers wait on. The
/// writer keeps SQLite's automatic checkpoint only as a backstop (at 64 MiB of WAL).
pub fn spawn_sqlite(
    mut connection: rusqlite::Connection,
    checkpointer: rusqlite::Connection,
) -> StoreResult<WriterHandle> {
    connection.pragma_update(None, "wal_autocheckpoint", 16_384)?;
    let (sender, receiver) = mpsc::channel(QUEUE);
    let handle = WriterHandle::new(sender, 1);
    let done = handle.clone();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("herald-sqlite-checkpoint".to_owned())
        .spawn(move || {
            // Ends when the writer drops `stop`.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY)
            {
                if let Err(e) = checkpointer.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
                    tracing::warn!(error = %e, "SQLite WAL checkpoint failed");
                }
            }
        })
        .map_err(|e| StoreError::Open(format!("cannot start the SQLite checkpointer: {e}")))?;
    std::thread::Builder::new()
        .name("herald-sqlite-writer".to_owned())
        .spawn(move || {
            let receiver = Mutex::new(receiver);
            while let Some(batch) = block_on(next_batch(&receiver)) {
                block_on(run_batch(&mut Conn::Local(&mut connection), "BEGIN IMMEDIATE", batch));
            }
            drop(stop);
            drop(connection);
            done.task_done();
        })
        .map_err(|e| StoreError::Open(format!("cannot start the SQLite writer: {e}")))?;
    Ok(handle)
}

/// PostgreSQL writers: `count` tasks, each holding a pooled connection while it runs a batch.
pub fn spawn_postgres(pool: sqlx::PgPool, count: usize) -> WriterHandle {
    let (sender, receiver) = mpsc::channel(QUEUE);
    let handle = WriterHandle::new(sender, count);
    let receiver = Arc::new(Mutex::new(receiver));
    for _ in 0..count {
        let receiver = receiver.clone();
        let pool = pool.clone();
        let done = handle.clone();
        tokio::spawn(async move {
            while let Some(batch) = next_batch(&receiver).await {
                match pool.acquire().await {
                    Ok(mut conn) => {
                        let conn: &mut PgConnection = &mut conn;
                        run_batch(&mut Conn::Postgres(conn), "BEGIN", batch).await
                    }
                    Err(e) => {
                        let message = e.to_string();
                        for job in batch {
                            let _ = job.reply.send(Err(StoreError::Unavailable(message.clone())));
                        }
                    }
                }
            }
            done.task_done();
        });
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that inserts `value` and then fails if `fail` is set (its insert must not survive).
    fn job(value: i64, fail: bool) -> (Job, oneshot::Receiver<StoreResult<Erased>>) {
        let (reply, answer) = oneshot::channel();
        let op: Operation = Box::new(move |conn| {
            Box::pin(async move {
                super::super::execute!(conn, "INSERT INTO t (v) VALUES ($1)", value)?;
                if fail {
                    return Err(StoreError::WriterGone);
                }
                Ok(Box::new(value) as Erased)
            })
        });
        (Job { op, reply }, answer)
    }

    fn run(conn: &mut rusqlite::Connection, spec: &[(i64, bool)]) -> Vec<bool> {
        let (jobs, answers): (Vec<_>, Vec<_>) = spec.iter().map(|&(v, f)| job(v, f)).unzip();
        block_on(run_batch(&mut Conn::Local(conn), "BEGIN IMMEDIATE", jobs));
        answers.into_iter().map(|a| block_on(a).map(|r| r.is_ok()).unwrap_or(false)).collect()
    }

    fn stored(conn: &rusqlite::Connection) -> Vec<i64> {
        let mut statement = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    }

    #[test]
    fn a_failing_operation_leaves_nothing_and_takes_nothing_with_it() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)").unwrap();
        // The first fails (no savepoint: the transaction restarts), so does the new first after
        // it; then one in a savepoint fails between two that succeed.
        let answers = run(&mut conn, &[(1, true), (2, true), (3, false), (4, true), (5, false)]);
        assert_eq!(answers, [false, false, true, false, true]);
        assert_eq!(stored(&conn), [3, 5]);
        // A batch of one that fails, then one that succeeds: the connection is usable after both.
        assert_eq!(run(&mut conn, &[(6, true)]), [false]);
        assert_eq!(run(&mut conn, &[(7, false), (8, false)]), [true, true]);
        assert_eq!(stored(&conn), [3, 5, 7, 8]);
        // A database error in the first operation (a duplicate key) is handled the same way.
        assert_eq!(run(&mut conn, &[(3, false), (9, false)]), [false, true]);
        assert_eq!(stored(&conn), [3, 5, 7, 8, 9]);
    }

    #[test]
    fn an_operation_whose_caller_has_gone_is_not_run() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER PRIMARY KEY)").unwrap();
        let (first, gone_first) = job(1, false);
        let (second, kept) = job(2, false);
        let (third, gone_third) = job(3, false);
        drop((gone_first, gone_third));
        block_on(run_batch(&mut Conn::Local(&mut conn), "BEGIN IMMEDIATE", vec![first, second, third]));
        assert!(block_on(kept).unwrap().is_ok());
        assert_eq!(stored(&conn), [2], "only the operation someone waits for ran");
    }
}
