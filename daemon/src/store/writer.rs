//! The group-commit writer. Callers submit write operations over a channel; a writer task takes
//! whatever has queued up (up to [`MAX_BATCH`]), opens one transaction, runs the operations,
//! commits once, and only then answers each caller. Under load this turns hundreds of fsyncs
//! into one; with no load a batch is a single operation and adds no delay. An operation whose
//! caller stopped waiting before it started is skipped.
//!
//! Most operations are closures, each run in its own savepoint. The hot ones (dispatch, and the
//! delivery workers' attempt outcomes) are typed [`Work`] instead: those of one kind that meet
//! in a batch are written together, with a fixed number of statements for the whole group
//! (set-based statements on PostgreSQL, where each statement is a round trip; one savepoint for
//! the group on SQLite, whose statements run in place). The statements decide each operation's
//! outcome (an idempotency key already used, a lease lost), so an operation that is refused
//! still costs nothing extra. If a group's statements fail as a whole (a constraint one
//! operation breaks), the group is undone and its operations run again one by one, each in its
//! own savepoint, so the bad one fails alone and takes nothing with it.

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

use super::{Conn, StoreError, StoreResult, notifications};

const MAX_BATCH: usize = 256;

/// Batches committed (or tried) and the operations they held, since the process started: their
/// ratio is the mean batch size (`herald_store_write_batches_total`,
/// `herald_store_write_operations_total`).
static BATCHES: AtomicU64 = AtomicU64::new(0);
static OPERATIONS: AtomicU64 = AtomicU64::new(0);
/// Operations written in a group, with their kind's set-based statements
/// (`herald_store_grouped_operations_total`).
static GROUPED: AtomicU64 = AtomicU64::new(0);

/// `(batches, operations, grouped operations)` so far.
pub fn batch_counts() -> (u64, u64, u64) {
    (BATCHES.load(Ordering::Relaxed), OPERATIONS.load(Ordering::Relaxed), GROUPED.load(Ordering::Relaxed))
}
const QUEUE: usize = 4096;

type Erased = Box<dyn Any + Send>;
type Operation = Box<dyn for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<Erased>> + Send>;

/// What a job writes.
pub(super) enum Work {
    /// Any operation: run alone, in its own savepoint.
    One(Operation),
    /// A dispatch (answers a `DispatchResult`).
    Dispatch(Box<notifications::Dispatch>),
    /// A delivery attempt's outcome (answers whether the lease was still held).
    Attempt(Box<notifications::Attempt>),
    /// An OTP send (answers an `OtpSendStart`).
    OtpSend(Box<super::otp::OtpSend>),
    /// An OTP verification (answers an `Option<OtpVerdict>`).
    OtpVerify(Box<super::otp::OtpVerify>),
}

impl Work {
    /// Which group the work joins, if any, and what must not occur twice in one group (an
    /// idempotency key, a notification, an OTP recipient): work that repeats one of them runs
    /// alone after the group, so it sees what the first wrote.
    fn group(&self) -> Option<(u8, Vec<String>)> {
        match self {
            Work::One(_) => None,
            Work::Dispatch(d) => Some((1, d.conflict_key().into_iter().collect())),
            Work::Attempt(a) => Some((2, vec![a.conflict_key()])),
            Work::OtpSend(o) => Some((3, o.conflict_keys())),
            Work::OtpVerify(v) => Some((4, vec![v.conflict_key()])),
        }
    }

    /// Runs the work alone. Typed work that fails comes back, to run again after a conflict;
    /// a closure runs once.
    async fn run(self, conn: &mut Conn<'_>) -> Result<Erased, (StoreError, Option<Work>)> {
        let outcome = match &self {
            Work::One(_) => None,
            Work::Dispatch(d) => {
                Some(notifications::dispatch_one(conn, d).await.map(|r| Box::new(r) as Erased))
            }
            Work::Attempt(a) => Some(notifications::record_one(conn, a).await.map(|r| Box::new(r) as Erased)),
            Work::OtpSend(o) => Some(super::otp::send_one(conn, o).await.map(|r| Box::new(r) as Erased)),
            Work::OtpVerify(v) => Some(super::otp::verify_one(conn, v).await.map(|r| Box::new(r) as Erased)),
        };
        match (outcome, self) {
            (Some(outcome), work) => outcome.map_err(|e| (e, Some(work))),
            (None, Work::One(op)) => op(conn).await.map_err(|e| (e, None)),
            (None, _) => Err((StoreError::Statement("typed work that did not run".to_owned()), None)),
        }
    }
}

/// A group's typed work, borrowed from its jobs.
enum Group<'a> {
    Dispatches(Vec<&'a notifications::Dispatch>),
    Attempts(Vec<&'a notifications::Attempt>),
    OtpSends(Vec<&'a super::otp::OtpSend>),
    OtpVerifies(Vec<&'a super::otp::OtpVerify>),
}

impl<'a> Group<'a> {
    /// The work of `jobs`, if they are all of one groupable kind.
    fn of(jobs: &'a [Job]) -> Option<Self> {
        macro_rules! all {
            ($work:ident, $group:ident) => {{
                let works: Vec<_> = jobs
                    .iter()
                    .filter_map(|j| if let Work::$work(w) = &j.work { Some(&**w) } else { None })
                    .collect();
                (works.len() == jobs.len()).then_some(Group::$group(works))
            }};
        }
        match &jobs.first()?.work {
            Work::Dispatch(_) => all!(Dispatch, Dispatches),
            Work::Attempt(_) => all!(Attempt, Attempts),
            Work::OtpSend(_) => all!(OtpSend, OtpSends),
            Work::OtpVerify(_) => all!(OtpVerify, OtpVerifies),
            Work::One(_) => None,
        }
    }

    /// Whether the group is written by one statement (so it needs no transaction of its own):
    /// on PostgreSQL, outcomes always, dispatches when none has an idempotency key.
    fn is_one_statement(&self, engine: super::Engine) -> bool {
        engine == super::Engine::Postgres
            && match self {
                Group::Dispatches(d) => d.iter().all(|d| d.conflict_key().is_none()),
                Group::Attempts(_) => true,
                Group::OtpSends(_) | Group::OtpVerifies(_) => false,
            }
    }

    /// Runs the group: one answer per job, in order, or an error if the group as a whole failed
    /// (its partial changes are the caller's to undo), with its kind's set-based statements
    /// (PostgreSQL's `unnest`, or multi-row `VALUES` on the SQLite writer's own connection).
    async fn run(group: Option<Self>, conn: &mut Conn<'_>) -> StoreResult<Vec<Erased>> {
        fn boxed<T: Send + 'static>(values: Vec<T>) -> Vec<Erased> {
            values.into_iter().map(|v| Box::new(v) as Erased).collect()
        }
        /// Each of `$works` alone, through `$one`.
        macro_rules! one_by_one {
            ($works:expr, $one:path, $conn:expr) => {{
                let mut answers = Vec::with_capacity($works.len());
                for work in $works {
                    answers.push(Box::new($one($conn, work).await?) as Erased);
                }
                Ok(answers)
            }};
        }
        let Some(group) = group else {
            return Err(StoreError::Statement("a write group mixes kinds of work".to_owned()));
        };
        match (group, conn) {
            (Group::Dispatches(d), conn @ (Conn::Postgres(_) | Conn::Local(_))) => {
                notifications::dispatch_all(conn, &d).await.map(boxed)
            }
            (Group::Attempts(a), Conn::Postgres(pg)) => notifications::record_all(pg, &a).await.map(boxed),
            (Group::Attempts(a), Conn::Local(local)) => notifications::record_all_local(local, &a).map(boxed),
            (Group::OtpSends(o), conn @ (Conn::Postgres(_) | Conn::Local(_))) => {
                super::otp::send_all(conn, &o).await.map(boxed)
            }
            (Group::OtpVerifies(v), conn @ (Conn::Postgres(_) | Conn::Local(_))) => {
                super::otp::verify_all(conn, &v).await.map(boxed)
            }
            // sqlx's SQLite connection (the writer holds its own: see `store/local.rs`).
            (Group::Dispatches(d), conn) => one_by_one!(d, notifications::dispatch_one, conn),
            (Group::Attempts(a), conn) => one_by_one!(a, notifications::record_one, conn),
            (Group::OtpSends(o), conn) => one_by_one!(o, super::otp::send_one, conn),
            (Group::OtpVerifies(v), conn) => one_by_one!(v, super::otp::verify_one, conn),
        }
    }
}

/// The error of a set-based group on sqlx's SQLite connection (the writer runs its groups on
/// PostgreSQL or on its own SQLite connection: see `store/local.rs`).
pub(super) fn not_set_based() -> StoreError {
    StoreError::Statement("groups run on PostgreSQL or on the SQLite writer's connection".to_owned())
}

struct Job {
    work: Work,
    reply: oneshot::Sender<StoreResult<Erased>>,
}

/// What a batch runs, in order: groups of typed work, then single operations.
enum Unit {
    Group(Vec<Job>),
    One(Job),
}

impl Unit {
    fn into_jobs(self) -> Vec<Job> {
        match self {
            Unit::Group(jobs) => jobs,
            Unit::One(job) => vec![job],
        }
    }
}

/// Orders a batch into units: each kind of typed work becomes a group (on SQLite only from two
/// jobs up), whose repeats of a conflict key run alone after the groups, with the closures.
fn units(batch: Vec<Job>, engine: super::Engine) -> std::collections::VecDeque<Unit> {
    let mut groups: Vec<(u8, Vec<Job>, std::collections::HashSet<String>)> = Vec::new();
    let mut singles = Vec::new();
    for job in batch {
        // A caller that has gone (its task aborted, its client disconnected) will never see
        // the result: its operation is not started. Otherwise a delivery claim made for a
        // worker that died while waiting would hold its jobs until their lease expired.
        if job.reply.is_closed() {
            continue;
        }
        let Some((kind, keys)) = job.work.group() else {
            singles.push(job);
            continue;
        };
        let index = match groups.iter().position(|(k, ..)| *k == kind) {
            Some(i) => i,
            None => {
                groups.push((kind, Vec::new(), Default::default()));
                groups.len() - 1
            }
        };
        let (_, jobs, seen) = &mut groups[index];
        if keys.iter().any(|key| seen.contains(key)) {
            singles.push(job);
        } else {
            seen.extend(keys);
            jobs.push(job);
        }
    }
    let mut units = std::collections::VecDeque::with_capacity(groups.len() + singles.len());
    for (_, mut jobs, _) in groups {
        match jobs.len() {
            0 => {}
            // On SQLite a group of one is the operation alone; on PostgreSQL it may be a single
            // statement that needs no transaction (see [`run_batch`]).
            1 if engine == super::Engine::Sqlite => units.extend(jobs.pop().map(Unit::One)),
            _ => units.push_back(Unit::Group(jobs)),
        }
    }
    units.extend(singles.into_iter().map(Unit::One));
    units
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
        self.submit_work(Work::One(op)).await
    }

    /// Submits typed work; `R` is what its kind answers.
    pub(super) async fn submit_work<R: Send + 'static>(&self, work: Work) -> StoreResult<R> {
        let (reply, answer) = oneshot::channel();
        let sender = self.sender().ok_or(StoreError::WriterGone)?;
        sender.send(Job { work, reply }).await.map_err(|_| StoreError::WriterGone)?;
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

/// How many times one batch runs a unit again after a conflict with another transaction
/// before it treats the conflict as the unit's failure.
const CONFLICT_RETRIES: usize = 8;

/// Runs one batch on `conn`: usually in one transaction, see [`run_transaction`]. When a unit
/// conflicts with another writer's transaction (PostgreSQL broke a deadlock between them), the
/// units before it commit, which releases their locks, and the rest runs in a new transaction.
async fn run_batch(conn: &mut Conn<'_>, begin: &'static str, batch: Vec<Job>) {
    BATCHES.fetch_add(1, Ordering::Relaxed);
    OPERATIONS.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut units = units(batch, conn.engine());
    // A batch that is one group written by one statement needs no transaction: the statement is
    // atomic on its own, so it is one round trip instead of three.
    if let [Unit::Group(jobs)] = units.make_contiguous()
        && Group::of(jobs).is_some_and(|group| group.is_one_statement(conn.engine()))
        && let Some(Unit::Group(jobs)) = units.pop_front()
    {
        match Group::run(Group::of(&jobs), conn).await {
            Ok(values) => {
                GROUPED.fetch_add(values.len() as u64, Ordering::Relaxed);
                for (job, value) in jobs.into_iter().zip(values) {
                    let _ = job.reply.send(Ok(value));
                }
                return;
            }
            // The statement changed nothing; run again in a transaction, as a group after a
            // conflict, else one by one so that only the bad operation fails.
            Err(e) if e.is_conflict() => units.push_back(Unit::Group(jobs)),
            Err(_) => units.extend(jobs.into_iter().map(Unit::One)),
        }
    }
    let mut conflicts = 0;
    while !units.is_empty() {
        if let Err(e) = super::execute!(conn, begin) {
            return fail_all(units.into_iter().flat_map(Unit::into_jobs), &e.to_string());
        }
        run_transaction(conn, begin, &mut units, &mut conflicts).await;
    }
}

/// Runs units from the front of `units` in the open transaction and commits, each unit after
/// the first in its own savepoint. The first needs none: if it fails, nothing else has run yet,
/// so the transaction is rolled back and begun again. (A batch of one, the common case at low
/// load, is then just BEGIN, the operation, COMMIT; a savepoint is a round trip on PostgreSQL.)
/// A group that fails is undone and its jobs run again one by one. A unit that conflicts
/// with another transaction after others succeeded is undone and left at the front of `units`,
/// and the transaction commits without it. Infrastructure failures (BEGIN, a savepoint,
/// COMMIT) fail every job not yet answered; an operation's own failure fails only it.
async fn run_transaction(
    conn: &mut Conn<'_>,
    begin: &'static str,
    units: &mut std::collections::VecDeque<Unit>,
    conflicts: &mut usize,
) {
    let mut results = Vec::with_capacity(units.len());
    let mut broken: Option<String> = None;
    let mut open_savepoint = false;
    while let Some(unit) = units.pop_front() {
        let first = results.is_empty();
        if !first {
            // Releasing the previous unit's savepoint and opening this one's is one round
            // trip to the database; the last savepoint is released by COMMIT.
            let opened = if open_savepoint {
                raw(conn, "RELEASE SAVEPOINT op; SAVEPOINT op").await
            } else {
                raw(conn, "SAVEPOINT op").await
            };
            if let Err(e) = opened {
                broken = Some(e.to_string());
                units.push_front(unit);
                break;
            }
            open_savepoint = true;
        }
        let (error, unit) = match unit {
            Unit::One(job) => {
                let Job { work, reply } = job;
                match work.run(conn).await {
                    Ok(value) => {
                        results.push((reply, Ok(value)));
                        continue;
                    }
                    Err((e, again)) => (e, Failed::One(reply, again)),
                }
            }
            Unit::Group(jobs) => match Group::run(Group::of(&jobs), conn).await {
                Ok(values) => {
                    GROUPED.fetch_add(values.len() as u64, Ordering::Relaxed);
                    results.extend(jobs.into_iter().zip(values).map(|(job, value)| (job.reply, Ok(value))));
                    continue;
                }
                Err(e) => (e, Failed::Group(jobs)),
            },
        };
        // Undo the failed unit: the first by undoing everything and starting over, any other
        // by rolling back to its savepoint.
        let undone = if first {
            match super::execute!(conn, "ROLLBACK") {
                Ok(_) => super::execute!(conn, begin).map(|_| ()),
                Err(e) => Err(e),
            }
        } else {
            raw(conn, "ROLLBACK TO SAVEPOINT op").await
        };
        let conflict = error.is_conflict() && *conflicts < CONFLICT_RETRIES;
        if conflict {
            *conflicts += 1;
            tracing::debug!(error = %error, "a write conflicted with another transaction; running it again");
        }
        let split = conflict && !first;
        match unit {
            // Run again: at once if it was first (this transaction holds nothing the other
            // waits for), else in the next transaction, after this one commits.
            Failed::One(reply, Some(work)) if conflict => units.push_front(Unit::One(Job { work, reply })),
            Failed::Group(jobs) if conflict => units.push_front(Unit::Group(jobs)),
            // A single operation's failure is its answer.
            Failed::One(reply, _) if first => {
                let _ = reply.send(Err(error));
            }
            Failed::One(reply, _) => results.push((reply, Err(error))),
            // A group's jobs run again alone, before anything else.
            Failed::Group(jobs) => {
                tracing::debug!(error = %error, jobs = jobs.len(), "a write group failed; running its jobs one by one");
                for job in jobs.into_iter().rev() {
                    units.push_front(Unit::One(job));
                }
            }
        }
        if let Err(e) = undone {
            if first {
                return fail_all(std::mem::take(units).into_iter().flat_map(Unit::into_jobs), &e.to_string());
            }
            broken = Some(e.to_string());
            break;
        }
        if split {
            break;
        }
    }
    let commit = match &broken {
        None => super::execute!(conn, "COMMIT").map_err(|e| e.to_string()),
        Some(message) => {
            fail_all(std::mem::take(units).into_iter().flat_map(Unit::into_jobs), message);
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

/// A unit that failed, with what is needed to answer it or run it again.
enum Failed {
    /// A single job's reply and, if it can run again, its work.
    One(oneshot::Sender<StoreResult<Erased>>, Option<Work>),
    Group(Vec<Job>),
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
        (Job { work: Work::One(op), reply }, answer)
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
