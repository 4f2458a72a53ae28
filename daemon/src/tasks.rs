//! The daemon's background tasks under one supervisor. A task that panics or ends while the
//! daemon runs is logged with its name, counted in `/metrics`
//! (`herald_task_exits_total{task, reason}`), and started again after a backoff (1 s, doubling
//! to 30 s). One that keeps dying ([`CRASH_LOOP`] exits within [`CRASH_WINDOW`]) is given up on:
//! the daemon stops and exits non-zero, for its service manager to restart it whole, rather than
//! run without, say, its delivery workers. `/readyz` reports each task's state.
//!
//! Parts that restart themselves in place (the store's writers: see
//! `store/writer/runtime.rs`) are watched instead ([`Supervisor::watch`]): when one reports
//! that it cannot go on, the daemon stops the same way at once.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures_util::future::BoxFuture;
pub use herald_common::api::health::{TaskState, TaskStatus as TaskReport};
use tokio::{
    task::{AbortHandle, Id, JoinSet},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

/// Exits within [`CRASH_WINDOW`] after which a task is given up on.
pub const CRASH_LOOP: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Starts a task's future; called again for each restart.
pub type TaskFactory = Arc<dyn Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + Sync>;

struct Entry {
    report: TaskReport,
    abort: Option<AbortHandle>,
}

/// The tasks' states, shared with the handlers (`/readyz`).
#[derive(Default)]
pub struct Tasks {
    entries: Mutex<BTreeMap<&'static str, Entry>>,
}

impl Tasks {
    /// Every task's state, by name.
    pub fn report(&self) -> BTreeMap<&'static str, TaskReport> {
        self.entries
            .lock()
            .map(|entries| entries.iter().map(|(name, entry)| (*name, entry.report.clone())).collect())
            .unwrap_or_default()
    }

    /// Whether every task is running.
    pub fn all_running(&self) -> bool {
        self.report().values().all(|r| r.state == TaskState::Running)
    }

    /// Ends task `name` as a crash would, so that the supervisor's handling of it can be checked
    /// (fault injection); `false` if there is no such running task.
    pub fn kill(&self, name: &str) -> bool {
        let Ok(entries) = self.entries.lock() else { return false };
        match entries.get(name).and_then(|e| e.abort.as_ref()) {
            Some(abort) => {
                abort.abort();
                true
            }
            None => false,
        }
    }

    fn set(&self, name: &'static str, state: TaskState, abort: Option<AbortHandle>) {
        if let Ok(mut entries) = self.entries.lock() {
            let entry = entries
                .entry(name)
                .or_insert(Entry { report: TaskReport { state, restarts: 0 }, abort: None });
            if state == TaskState::Restarting && entry.report.state != TaskState::Restarting {
                entry.report.restarts += 1;
            }
            entry.report.state = state;
            if abort.is_some() || state != TaskState::Running {
                entry.abort = abort;
            }
        }
    }
}

struct Spec {
    name: &'static str,
    factory: TaskFactory,
    /// Watched, not restarted: its end is a failure the daemon cannot run on.
    watched: bool,
    /// When it exited lately, for the crash-loop rule.
    exits: VecDeque<Instant>,
}

/// Runs the tasks; see the module's documentation.
pub struct Supervisor {
    tasks: Arc<Tasks>,
    set: JoinSet<()>,
    specs: HashMap<Id, Spec>,
    /// Stops every task (the daemon is stopping).
    shutdown: CancellationToken,
    /// Cancelled when a task is given up on.
    failed: CancellationToken,
}

impl Supervisor {
    pub fn new(tasks: Arc<Tasks>, shutdown: CancellationToken) -> Self {
        Self { tasks, set: JoinSet::new(), specs: HashMap::new(), shutdown, failed: CancellationToken::new() }
    }

    /// Cancelled when a task was given up on: the daemon must stop and exit non-zero.
    pub fn failed(&self) -> CancellationToken {
        self.failed.clone()
    }

    /// Starts `name`, running `task` until the shutdown token it is given is cancelled.
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Fn(CancellationToken) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    {
        let spec = Spec { name, factory: Arc::new(task), watched: false, exits: VecDeque::new() };
        self.start(spec, Duration::ZERO);
    }

    /// Watches `name`, a part that supervises itself: `failed` resolves, with the reason, when
    /// it cannot go on; the daemon then stops and exits non-zero.
    pub fn watch<F>(&mut self, name: &'static str, failed: F)
    where
        F: Fn() -> BoxFuture<'static, String> + Send + Sync + 'static,
    {
        let factory: TaskFactory = Arc::new(move |token: CancellationToken| {
            let failed = failed();
            Box::pin(async move {
                tokio::select! {
                    reason = failed => tracing::error!(task = name, %reason, "a part the daemon cannot run without has failed"),
                    _ = token.cancelled() => {}
                }
            })
        });
        self.start(Spec { name, factory, watched: true, exits: VecDeque::new() }, Duration::ZERO);
    }

    fn start(&mut self, spec: Spec, delay: Duration) {
        let (tasks, name, factory, token) =
            (self.tasks.clone(), spec.name, spec.factory.clone(), self.shutdown.clone());
        let state = if delay.is_zero() { TaskState::Running } else { TaskState::Restarting };
        self.tasks.set(name, state, None);
        let handle = self.set.spawn(async move {
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = token.cancelled() => return,
                }
                tasks.set(name, TaskState::Running, None);
            }
            factory(token).await
        });
        self.tasks.set(name, state, Some(handle.clone()));
        self.specs.insert(handle.id(), spec);
    }

    /// Supervises until the shutdown token is cancelled and every task has ended. Returns the
    /// name of a task that was given up on, if one was.
    pub async fn run(mut self) -> Option<&'static str> {
        let mut given_up = None;
        while let Some(joined) = self.set.join_next_with_id().await {
            let (id, reason) = match joined {
                Ok((id, ())) => (id, "returned".to_owned()),
                Err(e) if e.is_panic() => {
                    let id = e.id();
                    (id, format!("panicked: {}", panic_message(&*e.into_panic())))
                }
                Err(e) => (e.id(), "was aborted".to_owned()),
            };
            let Some(mut spec) = self.specs.remove(&id) else { continue };
            if self.shutdown.is_cancelled() {
                continue;
            }
            let kind = match reason.split(':').next().unwrap_or_default() {
                // A watched part's future ends only when the part has failed.
                "returned" if spec.watched => "failed".to_owned(),
                kind => kind.replace("was ", ""),
            };
            metrics::counter!("herald_task_exits_total", "task" => spec.name, "reason" => kind).increment(1);
            let now = Instant::now();
            spec.exits.push_back(now);
            while spec.exits.front().is_some_and(|at| now.duration_since(*at) > CRASH_WINDOW) {
                spec.exits.pop_front();
            }
            if spec.watched || spec.exits.len() >= CRASH_LOOP {
                if spec.watched {
                    tracing::error!(task = spec.name, "stopping the daemon: it cannot run without this part");
                } else {
                    tracing::error!(
                        task = spec.name,
                        %reason,
                        "a background task keeps dying ({CRASH_LOOP} times within {}s); stopping the daemon",
                        CRASH_WINDOW.as_secs()
                    );
                }
                self.tasks.set(spec.name, TaskState::Failed, None);
                given_up = Some(spec.name);
                self.failed.cancel();
                self.shutdown.cancel();
                continue;
            }
            let backoff = FIRST_BACKOFF
                .saturating_mul(1 << (spec.exits.len().saturating_sub(1)).min(5))
                .min(MAX_BACKOFF);
            tracing::error!(task = spec.name, %reason, backoff_ms = backoff.as_millis() as u64, "a background task died; restarting it");
            self.start(spec, backoff);
        }
        given_up
    }
}

/// What a panic said, for the log.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&'static str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_is_restarted_and_reported() {
        let tasks = Arc::new(Tasks::default());
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(tasks.clone(), shutdown.clone());
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = starts.clone();
        supervisor.spawn("flaky", move |token| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n == 0 {
                    panic!("injected fault");
                }
                token.cancelled().await;
            })
        });
        let failed = supervisor.failed();
        let running = tokio::spawn(supervisor.run());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(tasks.report()["flaky"], TaskReport { state: TaskState::Restarting, restarts: 1 });
        assert!(!tasks.all_running());
        tokio::time::sleep(FIRST_BACKOFF).await;
        assert_eq!(starts.load(Ordering::SeqCst), 2);
        assert_eq!(tasks.report()["flaky"], TaskReport { state: TaskState::Running, restarts: 1 });
        assert!(tasks.all_running());
        shutdown.cancel();
        assert_eq!(running.await.unwrap(), None);
        assert!(!failed.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_keeps_dying_stops_the_daemon() {
        let tasks = Arc::new(Tasks::default());
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(tasks.clone(), shutdown.clone());
        supervisor.spawn("doomed", |_| Box::pin(async {}));
        supervisor.spawn("steady", |token| Box::pin(async move { token.cancelled().await }));
        let failed = supervisor.failed();
        assert_eq!(supervisor.run().await, Some("doomed"));
        assert!(failed.is_cancelled() && shutdown.is_cancelled(), "the daemon stops");
        assert_eq!(tasks.report()["doomed"].state, TaskState::Failed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watched_part_that_fails_stops_the_daemon_at_once() {
        let tasks = Arc::new(Tasks::default());
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(tasks.clone(), shutdown.clone());
        let (fail, failed_part) = tokio::sync::watch::channel(None::<String>);
        supervisor.watch("store-writer", move || {
            let mut failed_part = failed_part.clone();
            Box::pin(async move {
                let reason = failed_part.wait_for(Option::is_some).await.map(|r| r.clone());
                reason.ok().flatten().unwrap_or_default()
            })
        });
        supervisor.spawn("steady", |token| Box::pin(async move { token.cancelled().await }));
        let failed = supervisor.failed();
        let running = tokio::spawn(supervisor.run());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(tasks.report()["store-writer"].state, TaskState::Running);
        assert!(!failed.is_cancelled());
        fail.send_replace(Some("injected".to_owned()));
        assert_eq!(running.await.unwrap(), Some("store-writer"), "given up at the first failure");
        assert!(failed.is_cancelled() && shutdown.is_cancelled(), "the daemon stops");
        assert_eq!(tasks.report()["store-writer"].state, TaskState::Failed);
    }

    /// A watched part ends quietly with the daemon, failing nothing.
    #[tokio::test(start_paused = true)]
    async fn a_watched_part_ends_with_the_daemon() {
        let tasks = Arc::new(Tasks::default());
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(tasks.clone(), shutdown.clone());
        supervisor.watch("store-writer", || Box::pin(std::future::pending()));
        let running = tokio::spawn(supervisor.run());
        tokio::time::sleep(Duration::from_millis(10)).await;
        shutdown.cancel();
        assert_eq!(running.await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_task_is_restarted() {
        let tasks = Arc::new(Tasks::default());
        let shutdown = CancellationToken::new();
        let mut supervisor = Supervisor::new(tasks.clone(), shutdown.clone());
        supervisor.spawn("worker", |token| Box::pin(async move { token.cancelled().await }));
        let running = tokio::spawn(supervisor.run());
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(tasks.kill("worker"));
        assert!(!tasks.kill("nobody"));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(tasks.report()["worker"].state, TaskState::Restarting);
        tokio::time::sleep(FIRST_BACKOFF).await;
        assert_eq!(tasks.report()["worker"], TaskReport { state: TaskState::Running, restarts: 1 });
        shutdown.cancel();
        assert_eq!(running.await.unwrap(), None);
    }
}
