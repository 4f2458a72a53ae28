//! The group-commit writer's batching protocol. Callers submit writes over a channel; a writer
//! takes whatever has queued up (up to [`MAX_BATCH`]), opens one transaction, runs the writes,
//! commits once, and only then answers each caller. Under load this turns hundreds of fsyncs
//! into one; with no load a batch is a single write and adds no delay. A write whose caller
//! stopped waiting before it started is skipped.
//!
//! A write is either a closure, run once in its own savepoint ([`WriterHandle::write`]), or
//! typed work of a [`WriteKind`] ([`WriterHandle::submit`]). The works of one kind that meet in
//! a batch are written together, by the kind's set-based statements: a fixed number of
//! statements for the whole group (PostgreSQL's `unnest`, SQLite's multi-row `VALUES`). The
//! statements decide each work's outcome (an idempotency key already used, a lease lost), so a
//! work that is refused costs nothing extra. If a group's statements fail as a whole (a
//! constraint one work breaks), the group is undone and its works run again one by one, each a
//! group of one in its own savepoint, so the bad one fails alone and takes nothing with it.
//!
//! This module knows no kind by name: each kind states itself in its own module
//! (`impl WriteKind`), and the store registers them once, in a [`lanes!`] list
//! (`store/kinds.rs`). Where the writers run (the SQLite thread and its checkpointer, the
//! PostgreSQL tasks) is [`runtime`]'s business.

mod queue;
pub(crate) mod runtime;

pub(crate) use self::queue::{Queue, next_batch};

use std::{
    collections::{HashSet, VecDeque},
    future::Future,
    hash::Hash,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use futures_util::future::BoxFuture;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::{Conn, Engine, StoreError, StoreResult};

const MAX_BATCH: usize = 256;
const QUEUE: usize = 4096;

/// Batches committed (or tried) and the operations they held, since the process started: their
/// ratio is the mean batch size (`herald_store_write_batches_total`,
/// `herald_store_write_operations_total`).
static BATCHES: AtomicU64 = AtomicU64::new(0);
static OPERATIONS: AtomicU64 = AtomicU64::new(0);
/// Operations written in a group of two or more, with their kind's set-based statements
/// (`herald_store_grouped_operations_total`).
static GROUPED: AtomicU64 = AtomicU64::new(0);

/// `(batches, operations, grouped operations)` so far.
pub fn batch_counts() -> (u64, u64, u64) {
    (BATCHES.load(Ordering::Relaxed), OPERATIONS.load(Ordering::Relaxed), GROUPED.load(Ordering::Relaxed))
}

/// A kind of typed write. Its works that meet in a batch are written as one group by
/// [`WriteKind::write_all`]; one written alone is a group of one, so each statement has one SQL
/// text per dialect.
pub(crate) trait WriteKind: Send + Sync + Sized + 'static {
    /// What the writer answers the caller of one work.
    type Answer: Send + 'static;
    /// What two works of one group must not share (an idempotency key, a notification, an OTP
    /// recipient): the second runs alone after the group, so it sees what the first wrote.
    type Key: Eq + Hash + Send;

    fn conflict_keys(&self) -> Vec<Self::Key>;

    /// Writes `group` (one or more works, no conflict key twice): one answer per work, in order.
    /// On failure the group's partial changes are the writer's to undo. Runs on PostgreSQL or
    /// on the SQLite writer's own connection (`Conn::Local`).
    fn write_all(
        conn: &mut Conn<'_>,
        group: &[&Self],
    ) -> impl Future<Output = StoreResult<Vec<Self::Answer>>> + Send;

    /// Whether `group` is written by a single statement on `engine`, which is atomic on its own
    /// and so needs no transaction when it is a whole batch (one round trip instead of three).
    fn is_one_statement(_group: &[&Self], _engine: Engine) -> bool {
        false
    }
}

/// The error of a set-based group on sqlx's SQLite connection (the writer runs its groups on
/// PostgreSQL or on its own SQLite connection: see `store/local.rs`).
pub(super) fn not_set_based() -> StoreError {
    StoreError::Statement("groups run on PostgreSQL or on the SQLite writer's connection".to_owned())
}

/// One work of kind `K` and the caller waiting for its answer.
pub(crate) struct Typed<K: WriteKind> {
    work: K,
    reply: oneshot::Sender<StoreResult<K::Answer>>,
}

/// The works of one kind in a batch, grouped as they arrive; those that repeat a conflict key
/// are set aside to run alone.
pub(crate) struct Lane<K: WriteKind> {
    jobs: Vec<Typed<K>>,
    seen: HashSet<K::Key>,
}

impl<K: WriteKind> Default for Lane<K> {
    fn default() -> Self {
        Self { jobs: Vec::new(), seen: HashSet::new() }
    }
}

impl<K: WriteKind> Lane<K> {
    fn push(&mut self, job: Typed<K>, singles: &mut Vec<Box<dyn Unit>>) {
        let keys = job.work.conflict_keys();
        if keys.iter().any(|key| self.seen.contains(key)) {
            singles.push(Box::new(Group { jobs: vec![job], answers: Vec::new() }));
        } else {
            self.seen.extend(keys);
            self.jobs.push(job);
        }
    }

    /// The lane's group, if it has works.
    pub(crate) fn drain_into(self, units: &mut VecDeque<Box<dyn Unit>>) {
        if !self.jobs.is_empty() {
            units.push_back(Box::new(Group { jobs: self.jobs, answers: Vec::new() }));
        }
    }
}

/// The registered kinds: one [`Lane`] each. Made by [`lanes!`].
pub(crate) trait Lanes: Default + Send + 'static {
    /// Each lane's group, in registration order.
    fn drain_into(self, units: &mut VecDeque<Box<dyn Unit>>);
}

/// That `Self` has a lane for kind `K` (so `K` can be submitted).
pub(crate) trait HasLane<K: WriteKind> {
    fn lane(&mut self) -> &mut Lane<K>;
}

/// Registers the writer's kinds: `lanes! { pub(crate) struct Lanes { field: Kind, … } }` makes a
/// [`Lanes`] type with one lane per kind, which a [`WriterHandle`] is typed by.
macro_rules! lanes {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($field:ident: $kind:ty),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Default)]
        $vis struct $name {
            $($field: $crate::store::writer::Lane<$kind>,)+
        }

        impl $crate::store::writer::Lanes for $name {
            fn drain_into(
                self,
                units: &mut std::collections::VecDeque<Box<dyn $crate::store::writer::Unit>>,
            ) {
                $(self.$field.drain_into(units);)+
            }
        }

        $(
            impl $crate::store::writer::HasLane<$kind> for $name {
                fn lane(&mut self) -> &mut $crate::store::writer::Lane<$kind> {
                    &mut self.$field
                }
            }
        )+
    };
}
pub(crate) use lanes;

/// A write waiting in the queue, of any kind.
pub(crate) trait Pending<L>: Send {
    /// Whether its caller has stopped waiting.
    fn is_closed(&self) -> bool;
    /// Puts it in its kind's lane, or with the writes that run alone.
    fn sort(self: Box<Self>, lanes: &mut L, singles: &mut Vec<Box<dyn Unit>>);
    /// Answers its caller with `error`, unrun.
    fn refuse(self: Box<Self>, error: StoreError);
}

impl<K: WriteKind, L: HasLane<K>> Pending<L> for Typed<K> {
    fn is_closed(&self) -> bool {
        self.reply.is_closed()
    }

    fn sort(self: Box<Self>, lanes: &mut L, singles: &mut Vec<Box<dyn Unit>>) {
        lanes.lane().push(*self, singles);
    }

    fn refuse(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

type Operation<R> = Box<dyn for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<R>> + Send>;

/// A closure and its caller: it runs once, alone.
struct Closure<R> {
    op: Option<Operation<R>>,
    answer: Option<R>,
    reply: oneshot::Sender<StoreResult<R>>,
}

impl<L, R: Send + 'static> Pending<L> for Closure<R> {
    fn is_closed(&self) -> bool {
        self.reply.is_closed()
    }

    fn sort(self: Box<Self>, _: &mut L, singles: &mut Vec<Box<dyn Unit>>) {
        singles.push(self);
    }

    fn refuse(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

/// What a transaction runs: a group of typed works (perhaps of one), or a closure. It keeps its
/// answers until the transaction's outcome is known.
pub(crate) trait Unit: Send {
    fn len(&self) -> usize;
    /// Runs it; on success its answers wait in it for [`Unit::answer`].
    fn run<'a, 'c>(&'a mut self, conn: &'a mut Conn<'c>) -> BoxFuture<'a, StoreResult<()>>;
    fn is_one_statement(&self, engine: Engine) -> bool;
    /// Whether it can run again after a conflict (a closure runs once).
    fn can_run_again(&self) -> bool;
    /// A group of several, as groups of one; a single unit comes back as it is.
    fn split(self: Box<Self>) -> Result<Vec<Box<dyn Unit>>, Box<dyn Unit>>;
    /// Answers its callers: with the answers it keeps, or with `error` (the first caller gets
    /// `error` itself, any other the same as a failed batch).
    fn answer(self: Box<Self>, error: Option<StoreError>);
}

/// Typed works of one kind, written together.
struct Group<K: WriteKind> {
    jobs: Vec<Typed<K>>,
    answers: Vec<K::Answer>,
}

impl<K: WriteKind> Unit for Group<K> {
    fn len(&self) -> usize {
        self.jobs.len()
    }

    fn run<'a, 'c>(&'a mut self, conn: &'a mut Conn<'c>) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let works: Vec<&K> = self.jobs.iter().map(|j| &j.work).collect();
            let answers = K::write_all(conn, &works).await?;
            if answers.len() != works.len() {
                return Err(StoreError::Statement(format!(
                    "a write group of {} was answered {} times",
                    works.len(),
                    answers.len()
                )));
            }
            self.answers = answers;
            Ok(())
        })
    }

    fn is_one_statement(&self, engine: Engine) -> bool {
        let works: Vec<&K> = self.jobs.iter().map(|j| &j.work).collect();
        K::is_one_statement(&works, engine)
    }

    fn can_run_again(&self) -> bool {
        true
    }

    fn split(self: Box<Self>) -> Result<Vec<Box<dyn Unit>>, Box<dyn Unit>> {
        if self.jobs.len() < 2 {
            return Err(self);
        }
        Ok(self
            .jobs
            .into_iter()
            .map(|job| Box::new(Group { jobs: vec![job], answers: Vec::new() }) as _)
            .collect())
    }

    fn answer(self: Box<Self>, error: Option<StoreError>) {
        match error {
            None => {
                for (job, answer) in self.jobs.into_iter().zip(self.answers) {
                    let _ = job.reply.send(Ok(answer));
                }
            }
            Some(error) => {
                let message = error.to_string();
                let mut error = Some(error);
                for job in self.jobs {
                    let _ = job.reply.send(Err(error.take().unwrap_or_else(|| batch_error(&message))));
                }
            }
        }
    }
}

impl<R: Send + 'static> Unit for Closure<R> {
    fn len(&self) -> usize {
        1
    }

    fn run<'a, 'c>(&'a mut self, conn: &'a mut Conn<'c>) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let op = self.op.take().ok_or_else(|| StoreError::Statement("a closure ran twice".to_owned()))?;
            self.answer = Some(op(conn).await?);
            Ok(())
        })
    }

    fn is_one_statement(&self, _: Engine) -> bool {
        false
    }

    fn can_run_again(&self) -> bool {
        self.op.is_some()
    }

    fn split(self: Box<Self>) -> Result<Vec<Box<dyn Unit>>, Box<dyn Unit>> {
        Err(self)
    }

    fn answer(self: Box<Self>, error: Option<StoreError>) {
        let answer = match (error, self.answer) {
            (Some(error), _) => Err(error),
            (None, Some(answer)) => Ok(answer),
            (None, None) => Err(StoreError::Statement("a closure was answered before it ran".to_owned())),
        };
        let _ = self.reply.send(answer);
    }
}

/// A handle to the writers, typed by the kinds they take (`L`, made by [`lanes!`]).
pub struct WriterHandle<L> {
    sender: Arc<std::sync::Mutex<Option<Sender<L>>>>,
    /// The writers still running, and a wake-up when one ends.
    running: Arc<AtomicUsize>,
    stopped: Arc<Notify>,
    /// Why the writers stopped taking writes before they were closed, once they have.
    failure: watch::Sender<Option<String>>,
}

impl<L> Clone for WriterHandle<L> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            running: self.running.clone(),
            stopped: self.stopped.clone(),
            failure: self.failure.clone(),
        }
    }
}

type Sender<L> = mpsc::Sender<Box<dyn Pending<L>>>;

impl<L: Lanes> WriterHandle<L> {
    /// A handle and its queue, for `writers` writers to take from.
    pub(crate) fn new(writers: usize) -> (Self, Arc<Queue<L>>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let handle = Self {
            sender: Arc::new(std::sync::Mutex::new(Some(sender))),
            running: Arc::new(AtomicUsize::new(writers)),
            stopped: Arc::new(Notify::new()),
            failure: watch::Sender::new(None),
        };
        (handle, Arc::new(Queue::new(receiver)))
    }

    async fn send(&self, job: Box<dyn Pending<L>>) -> StoreResult<()> {
        let sender = self.sender.lock().ok().and_then(|s| s.clone()).ok_or(StoreError::WriterGone)?;
        sender.send(job).await.map_err(|_| StoreError::WriterGone)
    }

    /// Submits a closure, run once in a savepoint of its own.
    pub async fn write<R, F>(&self, op: F) -> StoreResult<R>
    where
        R: Send + 'static,
        F: for<'c, 'd> FnOnce(&'c mut Conn<'d>) -> BoxFuture<'c, StoreResult<R>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(Closure { op: Some(Box::new(op)), answer: None, reply })).await?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Submits typed work of kind `K`, written with the others of its kind in its batch.
    pub(crate) async fn submit<K: WriteKind>(&self, work: K) -> StoreResult<K::Answer>
    where
        L: HasLane<K>,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(Typed { work, reply })).await?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Resolves with the reason once the writers stop taking writes before being closed.
    pub async fn failed(&self) -> String {
        let mut watching = self.failure.subscribe();
        let reason = watching.wait_for(Option::is_some).await.ok().and_then(|reason| reason.clone());
        match reason {
            Some(reason) => reason,
            // The handle is the sender: it cannot have gone while `self` exists.
            None => std::future::pending().await,
        }
    }

    /// Closes the queue and waits until the writers have finished what was queued.
    pub async fn close(&self) {
        let taken = self.sender.lock().ok().and_then(|mut s| s.take());
        drop(taken);
        while self.running.load(Ordering::Acquire) > 0 {
            let notified = self.stopped.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                break;
            }
            notified.await;
        }
    }

    /// Records that the writers can take no more writes: the queue closes (callers get
    /// `WriterGone` at once) and [`WriterHandle::failed`] resolves.
    pub(crate) fn fail(&self, reason: String) {
        tracing::error!(reason = %reason, "the database writer has stopped");
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        self.failure.send_replace(Some(reason));
    }
}

/// Marks one writer as ended when dropped, even by a panic, so that [`WriterHandle::close`]
/// never waits for a writer that is gone.
pub(crate) struct Running<L>(pub(crate) WriterHandle<L>);

impl<L> Drop for Running<L> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.stopped.notify_waiters();
    }
}

/// Orders a batch into units: each kind's group (in registration order), then the works that
/// repeat a conflict key, with the closures, each alone.
fn units<L: Lanes>(batch: Vec<Box<dyn Pending<L>>>) -> VecDeque<Box<dyn Unit>> {
    let mut lanes = L::default();
    let mut singles = Vec::new();
    for job in batch {
        // A caller that has gone (its task aborted, its client disconnected) will never see
        // the result: its operation is not started. Otherwise a delivery claim made for a
        // worker that died while waiting would hold its jobs until their lease expired.
        if !job.is_closed() {
            job.sort(&mut lanes, &mut singles);
        }
    }
    let mut units = VecDeque::with_capacity(4 + singles.len());
    lanes.drain_into(&mut units);
    units.extend(singles);
    units
}

/// How many times one batch runs a unit again after a conflict with another transaction
/// before it treats the conflict as the unit's failure.
const CONFLICT_RETRIES: usize = 8;

fn count_grouped(unit: &dyn Unit) {
    if unit.len() > 1 {
        GROUPED.fetch_add(unit.len() as u64, Ordering::Relaxed);
    }
}

/// What the SQLite writer runs in each of its transactions just before `COMMIT`, on its own
/// connection (the store's: SQLite's webhook fan-out), told how many works the transaction
/// wrote (a large number: the writer is saturated, its queue held that many when the batch
/// began). It answers for its own failures: it must leave the transaction as its units left it.
pub(crate) type BeforeCommit = dyn Fn(&rusqlite::Connection, usize) + Send + Sync;

/// Runs one batch on `conn`: usually in one transaction, see [`run_transaction`]. When a unit
/// conflicts with another writer's transaction (PostgreSQL broke a deadlock between them), the
/// units before it commit, which releases their locks, and the rest runs in a new transaction.
/// `before_commit` runs in each transaction that commits (on SQLite's own connection only); a
/// batch that is one statement outside a transaction does without it.
pub(crate) async fn run_batch<L: Lanes>(
    conn: &mut Conn<'_>,
    begin: &'static str,
    batch: Vec<Box<dyn Pending<L>>>,
    before_commit: Option<&BeforeCommit>,
) {
    BATCHES.fetch_add(1, Ordering::Relaxed);
    OPERATIONS.fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut units = units(batch);
    // A batch that is one group written by one statement needs no transaction: the statement is
    // atomic on its own, so it is one round trip instead of three.
    if units.len() == 1
        && units.front().is_some_and(|u| u.is_one_statement(conn.engine()))
        && let Some(mut unit) = units.pop_front()
    {
        match unit.run(conn).await {
            Ok(()) => {
                count_grouped(unit.as_ref());
                return unit.answer(None);
            }
            // The statement changed nothing; run again in a transaction, as a group after a
            // conflict, else one by one so that only the bad work fails.
            Err(e) if e.is_conflict() => units.push_back(unit),
            Err(_) => match unit.split() {
                Ok(singles) => units.extend(singles),
                Err(unit) => units.push_back(unit),
            },
        }
    }
    let mut conflicts = 0;
    while !units.is_empty() {
        if let Err(e) = super::execute!(conn, begin) {
            return fail_all(units, &e.to_string());
        }
        run_transaction(conn, begin, &mut units, &mut conflicts, before_commit).await;
    }
}

/// Runs units from the front of `units` in the open transaction and commits, each unit after
/// the first in its own savepoint. The first needs none: if it fails, nothing else has run yet,
/// so the transaction is rolled back and begun again. (A batch of one, the common case at low
/// load, is then just BEGIN, the operation, COMMIT; a savepoint is a round trip on PostgreSQL.)
/// A group that fails is undone and its works run again one by one. A unit that conflicts
/// with another transaction after others succeeded is undone and left at the front of `units`,
/// and the transaction commits without it. Infrastructure failures (BEGIN, a savepoint,
/// COMMIT) fail every unit not yet answered; a unit's own failure fails only it.
async fn run_transaction(
    conn: &mut Conn<'_>,
    begin: &'static str,
    units: &mut VecDeque<Box<dyn Unit>>,
    conflicts: &mut usize,
    before_commit: Option<&BeforeCommit>,
) {
    // Units that ran, each with its own failure if it had one, answered after the commit.
    let mut ran: Vec<(Box<dyn Unit>, Option<StoreError>)> = Vec::with_capacity(units.len());
    let mut broken: Option<String> = None;
    let mut open_savepoint = false;
    while let Some(mut unit) = units.pop_front() {
        let first = ran.is_empty();
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
        let error = match unit.run(conn).await {
            Ok(()) => {
                count_grouped(unit.as_ref());
                ran.push((unit, None));
                continue;
            }
            Err(error) => error,
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
        let again = conflict && unit.can_run_again();
        if again {
            // At once if it was first (this transaction holds nothing the other waits for),
            // else in the next transaction, after this one commits.
            units.push_front(unit);
        } else {
            match unit.split() {
                // A group's works run again alone, before anything else.
                Ok(singles) => {
                    tracing::debug!(error = %error, works = singles.len(), "a write group failed; running its works one by one");
                    for single in singles.into_iter().rev() {
                        units.push_front(single);
                    }
                }
                // A single unit's failure is its answer.
                Err(unit) if first => unit.answer(Some(error)),
                Err(unit) => ran.push((unit, Some(error))),
            }
        }
        if let Err(e) = undone {
            if first {
                return fail_all(std::mem::take(units), &e.to_string());
            }
            broken = Some(e.to_string());
            break;
        }
        if again && !first {
            break;
        }
    }
    if broken.is_none()
        && let (Some(before_commit), Conn::Local(c)) = (before_commit, &mut *conn)
    {
        before_commit(c, ran.iter().map(|(unit, _)| unit.len()).sum());
    }
    let commit = match &broken {
        None => super::execute!(conn, "COMMIT").map_err(|e| e.to_string()),
        Some(message) => {
            fail_all(std::mem::take(units), message);
            let _ = super::execute!(conn, "ROLLBACK");
            Err(message.clone())
        }
    };
    for (unit, error) in ran {
        match &commit {
            Ok(_) => unit.answer(error),
            Err(message) => unit.answer(Some(batch_error(format!("transaction failed: {message}")))),
        }
    }
}

/// The error a job gets when its batch's transaction, not its own operation, failed.
fn batch_error(message: impl std::fmt::Display) -> StoreError {
    StoreError::Batch(message.to_string())
}

/// Answers every unit with the batch's failure.
fn fail_all(units: VecDeque<Box<dyn Unit>>, message: &str) {
    for unit in units {
        unit.answer(Some(batch_error(message)));
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

#[cfg(test)]
mod tests;
