//! The webhook dispatcher: sends the outbox's messages to their endpoints in the Standard
//! Webhooks format (CONTRACT §10).
//!
//! It keeps a lane per endpoint: the sends in flight (at most
//! `HERALD_WEBHOOK_ENDPOINT_CONCURRENCY`) and the claimed messages that wait for a free slot.
//! When a lane has room for a slots' worth (twice the concurrency, in flight and waiting), it
//! reads the enabled endpoints with when their first pending message is due, and claims that
//! many due messages of each, each claim in a task of its own (the sends go on meanwhile, and
//! the endpoints' claims run side by side): a busy endpoint's messages are claimed in groups, and a slow or
//! dead endpoint fills only its own slots, so it never delays another's messages. A claim leases
//! its messages (their `next_attempt_at` becomes the lease's end), so a daemon that dies
//! mid-send loses them to the next claim once the lease runs out: at-least-once, with the same
//! `webhook-id` every time; a claimed message that cannot start in time to end within its lease
//! is dropped the same way. Messages about one subject are claimed one at a time, in order (the
//! store's claim). Each send's attempt is recorded by the [`recorder`], in groups.
//!
//! An endpoint that fails [`TRIP_AFTER`] attempts in a row is probed rather than flooded: one
//! message at a time, [`PROBE_EVERY`] apart while they fail; the others wait, their attempts
//! not spent, and the first success opens it again. A dead endpoint with a backlog of 100,000
//! costs a request a second, not 100,000 requests and their records every few seconds. And it
//! is paused in the store: its later events get no message, they are owed (`store/webhooks/
//! pause.rs`). While it is probed, each probe makes the message of its oldest owed event if
//! nothing else is due; once it answers, the owed events' messages are made [`CATCH_UP`] at a
//! time, each group once the one before has gone out, and the last resumes it.
//!
//! The messages are made by the [`fan_out`] task (on SQLite, the writer makes them just before
//! the commit that wrote their events, and the task those it could not), which holds back while
//! the writer is saturated, as the deliveries do.
//! On PostgreSQL the [`statistics`] task keeps the planner's view of the outbox fresh. The
//! [`settle`] task finishes what disabling an endpoint began.
//! Each attempt is [`send`]'s.
//!
//! The dispatcher wakes when messages are inserted (the store's webhook wake-up: SQLite's update
//! hook, PostgreSQL's NOTIFY at commit), when a send ends, and otherwise when the next message
//! is due (at most a second: other daemons' changes that it did not hear of). It reads the
//! endpoints at most every [`LINGER`] (every [`LOOK_AGAIN`] on a wake-up while all it knows are
//! paused or full), so that a steady stream's messages are claimed together; and at most every
//! [`LINGER_BUSY`] while the store's writer is saturated ([`Pressure`]): in a burst of changes the
//! deliveries' claims and records would share the writer's commits with the changes (on SQLite
//! they cost a saturated in-app dispatch 16–28 %; held back, it loses about what the outbox
//! alone costs: docs/PERFORMANCE.md), so they wait, and catch up once the burst is over.

mod fan_out;
mod pressure;
mod recorder;
mod send;
mod settle;
mod statistics;

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use herald_common::ids::WebhookEndpointId;
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

use self::pressure::Pressure;
pub use self::{fan_out::run_fan_out, send::http_client, settle::run_settle, statistics::run_statistics};
use self::{
    recorder::Recorder,
    send::{Done, Meters, Send, Sender, Target},
};
use crate::{
    retry::RetryPolicy,
    service::webhooks as service,
    state::AppState,
    store::{ClaimedMessage, FanOutLock},
};

/// The longest the dispatcher sleeps without looking for due messages.
const POLL: Duration = Duration::from_secs(1);
/// How long an endpoint whose due messages could not be claimed (another daemon holds them,
/// or they wait behind an earlier message) is left alone.
const STALL: Duration = Duration::from_millis(250);
/// Failed attempts in a row after which an endpoint is probed rather than sent to: one message
/// at a time, [`PROBE_EVERY`] apart while they fail, until one succeeds.
const TRIP_AFTER: u32 = 5;
/// How long a tripped endpoint is left alone after each failed probe.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How many of a paused endpoint's owed events get their messages at once, once it answers.
const CATCH_UP: i64 = 1_000;
/// How long a pause or a catch-up only tries PostgreSQL's fan-out cursor (its row is locked
/// while a fan-out runs), at each look, before it waits for it.
const LOCK_PATIENCE: Duration = Duration::from_secs(1);
/// When every endpoint the dispatcher knows is paused (tripped, stalled) or has no room, a
/// wake-up (messages were inserted) reads the endpoints at most this often: such a wake-up can
/// only be for an endpoint it does not know yet, and with a dead endpoint subscribed each
/// dispatch's message woke a read of every endpoint that found nothing to do.
const LOOK_AGAIN: Duration = Duration::from_millis(50);
/// The least time between two reads of the endpoints (and their claims) otherwise: at a steady
/// stream of events each message's wake-up, and each ended send, read the endpoints and claimed
/// the one or two messages come since; waiting this long gathers them into one claim (a claim is
/// a commit on SQLite, a statement of the server's CPU on PostgreSQL) at a cost of at most this
/// much to a first attempt. A wake-up after a quiet spell reads at once.
const LINGER: Duration = Duration::from_millis(5);
/// The least time between two reads of the endpoints while the store's writer is saturated (see
/// [`Pressure`]): deliveries then wait, and the writes that saturate it (dispatches) go first;
/// the deliveries catch up once it is not.
const LINGER_BUSY: Duration = Duration::from_millis(100);
/// How long shutdown waits for sends in flight.
const DRAIN: Duration = Duration::from_secs(20);

/// A claimed message waiting for a free send slot of its endpoint.
struct Queued {
    message: ClaimedMessage,
    endpoint: Arc<Target>,
    lease: Arc<str>,
    /// When the lease runs out: a message that could not start in time to end before it is
    /// dropped (it comes due again then, and goes out with the same `webhook-id`).
    lease_until: i64,
}

/// A claim's messages, handed back to the dispatcher by the claim's task.
struct Claim {
    target: Arc<Target>,
    lease: Arc<str>,
    lease_until: i64,
    /// How many it asked for: as many came back, and more may be due.
    asked: usize,
    messages: Vec<ClaimedMessage>,
}

/// What a pause or a catch-up did (the task of [`Lane::storing`]).
struct Stored {
    /// When it began (the dispatcher's `now` then).
    at: i64,
    /// The endpoint is paused in the store now.
    paused: bool,
    /// The catch-up's messages made, and whether the endpoint is still paused.
    caught_up: Option<(usize, bool)>,
    /// PostgreSQL's fan-out cursor was held by another transaction: nothing was done.
    busy: bool,
}

/// What a lane's task hands back to the dispatcher (`None`: it failed, or panicked).
enum Back {
    Claimed(Option<Claim>),
    Stored(Option<Stored>),
}

/// Hands a lane's task's result back to the dispatcher however the task ends: made with what a
/// failure answers, so that a lane never waits for a result that will not come.
struct Reply {
    endpoint: WebhookEndpointId,
    back: Back,
    tx: mpsc::UnboundedSender<(WebhookEndpointId, Back)>,
}

impl Reply {
    fn send(mut self, back: Back) {
        self.back = back;
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        let back = std::mem::replace(&mut self.back, Back::Claimed(None));
        let _ = self.tx.send((self.endpoint.clone(), back));
    }
}

/// What the dispatcher keeps of one endpoint.
#[derive(Default)]
struct Lane {
    in_flight: usize,
    queue: VecDeque<Queued>,
    /// Its due messages could not be claimed: left alone until then, or until a send ends.
    stalled_until: Option<i64>,
    /// Failed attempts in a row.
    failures: u32,
    /// Tripped ([`TRIP_AFTER`]): the next probe is not sent before then.
    probe_at: Option<i64>,
    /// When its next message is due, as far as this dispatcher knows (`None`: nothing known
    /// pending); ended sends and full claims make it now.
    due: Option<i64>,
    /// Paused in the store: its events are owed, not queued.
    paused: bool,
    /// It has just tripped: to be paused in the store.
    pause: bool,
    /// The last time a probe made the message of an owed event (at most one per [`PROBE_EVERY`]).
    owed_probe_at: Option<i64>,
    /// Since when its pause or catch-up has found PostgreSQL's fan-out cursor locked.
    lock_busy_since: Option<i64>,
    /// A claim of its messages is under way (one at a time: its messages are claimed in order).
    claiming: bool,
    /// Its pause or catch-up is under way.
    storing: bool,
}

impl Lane {
    /// A lane for an endpoint as the store has it: one found paused and failing (by this daemon
    /// before a restart, or by another) is probed first; paused and not failing (it answered
    /// since, or was enabled again before PostgreSQL settled its disabling), caught up.
    fn new(paused: bool, failing: bool) -> Self {
        Self { paused, failures: if paused && failing { TRIP_AFTER } else { 0 }, ..Self::default() }
    }

    /// Takes the store's word on whether it is paused. Paused by another daemon (whose breaker
    /// tripped) while this one's had not, and failing, it is probed from now on too: otherwise
    /// this daemon, finding it paused and not tripped here, would take it for one that answers
    /// again and make a group of its owed messages for a dead endpoint.
    ///
    /// Resumed by another daemon that it answered (no longer paused, nor failing), a lane
    /// tripped here starts counting its failures again: otherwise its next failure would pause
    /// it again at once, and two daemons that see it differently would pause and resume it by
    /// turns.
    fn saw_paused(&mut self, paused: bool, failing: bool) {
        if paused && failing && !self.paused && !self.tripped() {
            self.failures = TRIP_AFTER;
        }
        if self.paused && !paused && !failing && self.tripped() {
            (self.failures, self.probe_at) = (0, None);
        }
        self.paused = paused;
    }

    /// How many of its owed events to make messages for now: a group once it answers and
    /// nothing of it is due; while it is probed, one if nothing is in hand or due and the last
    /// such probe is [`PROBE_EVERY`] old.
    fn owed_now(&self, now: i64) -> i64 {
        let nothing_due = self.due.is_none_or(|due| due > now);
        if !self.paused || !nothing_due || self.paused_until(now).is_some() {
            return 0;
        }
        if !self.tripped() {
            return CATCH_UP;
        }
        let idle = self.in_flight == 0 && self.queue.is_empty();
        let probe_due = self.owed_probe_at.is_none_or(|at| now - at >= millis(PROBE_EVERY));
        i64::from(idle && probe_due)
    }

    fn tripped(&self) -> bool {
        self.failures >= TRIP_AFTER
    }

    /// Sends at once: one while tripped.
    fn slots(&self, concurrency: usize) -> usize {
        if self.tripped() { 1 } else { concurrency }
    }

    /// How many more messages it may claim: enough to keep its slots busy until the next claim
    /// (twice its concurrency, in flight and waiting), none while tripped with one in hand. It
    /// claims only once it has room for a slots' worth, so a busy endpoint's messages are
    /// claimed `concurrency` at a time, not one per ended send.
    fn room(&self, concurrency: usize) -> usize {
        let held = self.in_flight + self.queue.len();
        if self.tripped() {
            return 1usize.saturating_sub(held);
        }
        let room = (2 * concurrency).saturating_sub(held);
        if room >= concurrency { room } else { 0 }
    }

    /// A task of the lane ended.
    fn back(&mut self, back: Back, now: i64) {
        match back {
            Back::Claimed(claim) => self.claimed(claim, now),
            Back::Stored(stored) => self.stored(stored, now),
        }
    }

    /// A claim came back (`None`: it failed): its messages wait for slots; none, and the lane
    /// is left alone for a [`STALL`] (another daemon holds them, or they wait behind an earlier
    /// message). After a full claim more may be due; after one that took less, the rest is
    /// learnt of by the next read (a wake-up, an ended send, the timer).
    fn claimed(&mut self, claim: Option<Claim>, now: i64) {
        self.claiming = false;
        let Some(claim) = claim.filter(|claim| !claim.messages.is_empty()) else {
            self.stalled_until = Some(now + millis(STALL));
            return;
        };
        self.due = (claim.messages.len() == claim.asked).then_some(now);
        let Claim { target, lease, lease_until, messages, .. } = claim;
        self.queue.extend(messages.into_iter().map(|message| Queued {
            message,
            endpoint: target.clone(),
            lease: lease.clone(),
            lease_until,
        }));
    }

    /// Its pause or catch-up ended (`None`: it failed).
    fn stored(&mut self, stored: Option<Stored>, now: i64) {
        self.storing = false;
        let Some(stored) = stored else { return };
        if stored.paused {
            (self.pause, self.paused) = (false, true);
        }
        if let Some((made, paused)) = stored.caught_up {
            if self.tripped() {
                self.owed_probe_at = Some(stored.at);
            }
            self.paused = paused;
            if made > 0 {
                self.due = Some(now);
            }
        }
        self.lock_busy_since = if stored.busy { self.lock_busy_since.or(Some(stored.at)) } else { None };
    }

    /// Whether it may be claimed for now.
    fn wants_claim(&self, now: i64, concurrency: usize) -> bool {
        self.due.is_some_and(|due| due <= now)
            && self.paused_until(now).is_none()
            && !self.claiming
            && self.room(concurrency) > 0
    }

    fn ended(&mut self, ended: Ended, now: i64) {
        let outcome = match ended {
            Ended::Answered(outcome) => outcome,
            Ended::Recorded => {
                // What waited behind the message just settled may go now.
                self.stalled_until = None;
                self.due = Some(now);
                return;
            }
        };
        self.in_flight = self.in_flight.saturating_sub(1);
        self.due = Some(now);
        match outcome {
            Outcome::Succeeded => {
                (self.failures, self.pause) = (0, false);
                self.probe_at = None;
            }
            Outcome::Failed => {
                self.failures = self.failures.saturating_add(1);
                // Tripped and not paused (just now, or resumed meanwhile by another daemon that
                // it answered): paused again.
                self.pause |= self.tripped() && !self.paused;
                if self.tripped() {
                    self.probe_at = Some(now + millis(PROBE_EVERY));
                }
            }
            Outcome::Unknown => {}
        }
    }

    /// When it may next be sent to or claimed for, if not now.
    fn paused_until(&self, now: i64) -> Option<i64> {
        [self.stalled_until, self.probe_at].into_iter().flatten().filter(|&until| until > now).max()
    }
}

/// How a send ended, as the dispatcher's breaker counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    /// Panicked, or the event could not be rendered (not the endpoint's doing).
    Unknown,
}

/// What a send tells the dispatcher: its request is answered (the slot is free: a send slot is
/// a request in flight), then its attempt is recorded (what waited behind the message may go).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Answered(Outcome),
    Recorded,
}

/// Runs the dispatcher until `shutdown`, then waits for the sends in flight (bounded).
pub async fn run_webhooks(state: AppState, shutdown: CancellationToken) {
    let client = match http_client(&state) {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook HTTP client");
            return;
        }
    };
    let config = state.config.webhooks.clone();
    let concurrency = config.endpoint_concurrency.max(1);
    let policy = RetryPolicy::new(config.retry_schedule.clone());
    // Longer than any attempt can take (connection and answer both within the timeout), twice
    // over: a message claimed to wait for a slot starts within one timeout.
    let lease_ms = 2 * millis(config.timeout) + 5_000;
    let start_by = millis(config.timeout) + 1_000;
    let wake = state.store.webhook_wake().clone();
    let rule = service::network_rule(&state);
    let (recorder, recording) = Recorder::spawn(state.store.clone());
    let (done, mut finished) = mpsc::unbounded_channel::<(WebhookEndpointId, Ended)>();
    let (replies, mut backs) = mpsc::unbounded_channel::<(WebhookEndpointId, Back)>();
    let sender = Arc::new(Sender { state: state.clone(), client, policy, recorder, meters: Meters::new() });
    let mut lanes: HashMap<WebhookEndpointId, Lane> = HashMap::new();
    let mut tasks = JoinSet::new();
    // Whether to read the endpoints this round: woken by an insert, by the timer, or a lane
    // wants more.
    let mut look = true;
    let mut looked = Instant::now().checked_sub(LOOK_AGAIN).unwrap_or_else(Instant::now);
    // A read wanted but put off ([`LINGER`], [`LOOK_AGAIN`]): when it is due.
    let mut look_at: Option<Instant> = None;
    let mut pressure = Pressure::new();
    loop {
        let now = state.clock.now_millis();
        while let Ok((endpoint, ended)) = finished.try_recv() {
            if let Some(lane) = lanes.get_mut(&endpoint) {
                lane.ended(ended, now);
            }
        }
        while let Ok((endpoint, back)) = backs.try_recv() {
            if let Some(lane) = lanes.get_mut(&endpoint) {
                lane.back(back, now);
            }
        }
        while let Some(joined) = tasks.try_join_next() {
            report_panic(joined);
        }
        let mut next_due: Option<i64> = None;
        look |= lanes.values().any(|lane| lane.wants_claim(now, concurrency));
        let oldest_due =
            lanes.values().filter(|lane| lane.paused_until(now).is_none()).filter_map(|lane| lane.due).min();
        let linger = if pressure.holds(oldest_due, now) { LINGER_BUSY } else { LINGER };
        if look && linger == LINGER_BUSY {
            tracing::debug!(oldest_due_ms = oldest_due.map(|due| now - due), "deliveries held back");
        }
        if look && looked.elapsed() < linger {
            look = false;
            look_at = Some(look_at.map_or(looked + linger, |at| at.min(looked + linger)));
        }
        if look {
            (look, look_at, looked) = (false, None, Instant::now());
            let endpoints = match state.store.due_webhook_endpoints().await {
                Ok(endpoints) => endpoints,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the webhook endpoints");
                    Vec::new()
                }
            };
            // Endpoints no longer enabled: what waits for them is dropped (the leases run out).
            let enabled: HashSet<&WebhookEndpointId> = endpoints.iter().map(|e| &e.id).collect();
            lanes.retain(|id, lane| {
                if enabled.contains(id) {
                    return true;
                }
                lane.queue.clear();
                lane.in_flight > 0 || lane.claiming || lane.storing
            });
            for endpoint in endpoints {
                let lane = lanes
                    .entry(endpoint.id.clone())
                    .or_insert_with(|| Lane::new(endpoint.paused, endpoint.failing));
                lane.due = endpoint.next_due;
                lane.saw_paused(endpoint.paused, endpoint.failing);
                // PostgreSQL's fan-out cursor is tried at each look, and waited for once a
                // second has gone by without it.
                let lock = match lane.lock_busy_since {
                    Some(since) if now - since >= millis(LOCK_PATIENCE) => FanOutLock::Wait,
                    _ => FanOutLock::Try,
                };
                // Paused, and its owed events' messages made, in a task of its own (on
                // PostgreSQL either may wait for the fan-out's cursor, held while a group of
                // events is fanned out: awaited here, that wait held every lane's sends).
                let owed = if lane.pause { 0 } else { lane.owed_now(now) };
                if (lane.pause || owed > 0) && !lane.storing {
                    lane.storing = true;
                    let (pause, resume) = (lane.pause, !lane.tripped());
                    let reply = Reply {
                        endpoint: endpoint.id.clone(),
                        back: Back::Stored(None),
                        tx: replies.clone(),
                    };
                    let store = state.store.clone();
                    tasks.spawn(async move {
                        let (id, started) = (reply.endpoint.clone(), Instant::now());
                        let mut stored = Stored { at: now, paused: false, caught_up: None, busy: false };
                        if pause {
                            match store.pause_webhook_endpoint(id.clone(), now, lock).await {
                                Ok(Some(_)) => stored.paused = true,
                                Ok(None) => stored.busy = true,
                                Err(e) => tracing::warn!(error = %e, "cannot pause a failing webhook endpoint"),
                            }
                        }
                        if owed > 0 {
                            match store.catch_up_webhook_endpoint(id, owed, now, lock, resume).await {
                                Ok(Some(caught_up)) => stored.caught_up = Some(caught_up),
                                Ok(None) => stored.busy = true,
                                Err(e) => {
                                    tracing::warn!(error = %e, "cannot make a paused webhook endpoint's messages")
                                }
                            }
                        }
                        tracing::debug!(
                            endpoint_id = %reply.endpoint, pause, owed, ?lock, busy = stored.busy,
                            took_us = started.elapsed().as_micros() as u64, "pause or catch-up"
                        );
                        reply.send(Back::Stored(Some(stored)));
                    });
                }
                let Some(due) = lane.due else { continue };
                if let Some(until) = lane.paused_until(now) {
                    next_due = Some(next_due.map_or(until, |n| n.min(until)));
                    continue;
                }
                if due > now {
                    next_due = Some(next_due.map_or(due, |n| n.min(due)));
                    continue;
                }
                let room = lane.room(concurrency);
                if room == 0 || lane.claiming {
                    continue;
                }
                // Claimed in a task of its own: the sends of every lane start and end meanwhile,
                // and the endpoints' claims run side by side (awaited in turn, a claim of 2-3 ms
                // each, the loop spent three quarters of a busy second in them while slots idled).
                lane.claiming = true;
                let reply =
                    Reply { endpoint: endpoint.id.clone(), back: Back::Claimed(None), tx: replies.clone() };
                let target = Arc::new(Target::new(endpoint, &rule));
                let store = state.store.clone();
                tasks.spawn(async move {
                    let lease: Arc<str> = crate::secret::random_token(12).into();
                    let (started, lease_until) = (Instant::now(), now + lease_ms);
                    let id = reply.endpoint.clone();
                    match store
                        .claim_webhook_messages(id, now, lease_until, room as i64, lease.to_string())
                        .await
                    {
                        Ok(messages) => {
                            tracing::debug!(
                                endpoint_id = %reply.endpoint, room, claimed = messages.len(),
                                took_us = started.elapsed().as_micros() as u64, "claim"
                            );
                            reply.send(Back::Claimed(Some(Claim {
                                target,
                                lease,
                                lease_until,
                                asked: room,
                                messages,
                            })));
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot claim webhook messages"),
                    }
                });
            }
        }
        // Start what the free slots can take.
        for (id, lane) in &mut lanes {
            while lane.in_flight < lane.slots(concurrency) && lane.paused_until(now).is_none() {
                let Some(queued) = lane.queue.pop_front() else { break };
                if now + start_by > queued.lease_until {
                    continue;
                }
                lane.in_flight += 1;
                let send = Send {
                    sender: sender.clone(),
                    endpoint: queued.endpoint,
                    lease: queued.lease,
                    done: Done { endpoint: id.clone(), answered: false, done: done.clone() },
                };
                tasks.spawn(send.run(queued.message));
            }
            if let Some(until) = lane.paused_until(now).filter(|_| !lane.queue.is_empty()) {
                next_due = Some(next_due.map_or(until, |n| n.min(until)));
            }
        }
        let mut wait = next_due
            .map(|due| Duration::from_millis(u64::try_from(due - state.clock.now_millis()).unwrap_or(0)))
            .unwrap_or(POLL)
            .min(POLL);
        if let Some(at) = look_at {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            _ = wake.notified() => {
                let now = state.clock.now_millis();
                let busy = |lane: &Lane| {
                    lane.paused_until(now).is_some() || lane.room(concurrency) == 0 || lane.claiming
                };
                if lanes.is_empty() || !lanes.values().all(busy) || looked.elapsed() >= LOOK_AGAIN {
                    look = true;
                } else {
                    look_at = Some(look_at.unwrap_or(looked + LOOK_AGAIN));
                }
            }
            Some((endpoint, ended)) = finished.recv() => {
                if let Some(lane) = lanes.get_mut(&endpoint) {
                    lane.ended(ended, state.clock.now_millis());
                }
            }
            Some((endpoint, back)) = backs.recv() => {
                if let Some(lane) = lanes.get_mut(&endpoint) {
                    lane.back(back, state.clock.now_millis());
                }
            }
            _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => look = true,
            _ = shutdown.cancelled() => break,
        }
    }
    if !super::drain(tasks, DRAIN, report_panic).await {
        tracing::warn!(
            "webhook messages still in flight at shutdown; their leases will expire and they will be sent again"
        );
    }
    drop(sender);
    let _ = tokio::time::timeout(DRAIN, recording).await;
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

/// Logs and counts a send or claim whose task panicked; its leases run out and its messages are
/// sent again.
fn report_panic(joined: Result<(), tokio::task::JoinError>) {
    let Some(error) = joined.err().filter(tokio::task::JoinError::is_panic) else { return };
    let message = crate::tasks::panic_message(&*error.into_panic());
    tracing::error!(panic = %message, "a webhook send or claim panicked; its leases will run out and its messages will be sent again");
    metrics::counter!("herald_task_exits_total", "task" => "webhook-send", "reason" => "panicked")
        .increment(1);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use herald_common::ids::WebhookEndpointId;
    use tokio::sync::mpsc;

    use super::{
        Back, CATCH_UP, Claim, Ended, Lane, Outcome, Reply, STALL, Stored, TRIP_AFTER, Target, millis,
    };
    use crate::{
        service::webhooks::network::NetworkRule,
        store::{ClaimedMessage, DueEndpoint},
    };

    /// A lane trips after [`TRIP_AFTER`] failures and asks once to be paused; paused, it makes
    /// one owed message per probe while tripped (none while something of it is due or its probe
    /// waits), a group once it answers, and none once resumed. A lane found paused is probed
    /// first.
    #[test]
    fn a_paused_lane_makes_its_owed_messages_one_per_probe_then_in_groups() {
        let now = 1_000_000;
        let mut lane = Lane::new(false, false);
        for _ in 0..TRIP_AFTER {
            lane.ended(Ended::Answered(Outcome::Failed), now);
        }
        assert!(lane.tripped() && lane.pause, "tripped, and to be paused");
        lane.ended(Ended::Answered(Outcome::Failed), now);
        (lane.pause, lane.paused, lane.due) = (false, true, None);
        lane.ended(Ended::Answered(Outcome::Failed), now);
        assert!(!lane.pause, "asked once");
        lane.paused = false;
        lane.ended(Ended::Answered(Outcome::Failed), now);
        assert!(lane.pause, "resumed meanwhile (another daemon) and still failing here: paused again");
        (lane.pause, lane.paused) = (false, true);
        lane.due = None;
        assert_eq!(lane.owed_now(now + 500), 0, "its probe waits");
        assert_eq!(lane.owed_now(now + 1_000), 1, "a probe: one owed message");
        lane.owed_probe_at = Some(now + 1_000);
        assert_eq!(lane.owed_now(now + 1_500), 0, "one a second");
        lane.due = Some(now + 1_900);
        assert_eq!(lane.owed_now(now + 2_000), 0, "a message due goes first");
        lane.ended(Ended::Answered(Outcome::Succeeded), now + 2_000);
        lane.due = None;
        assert_eq!(lane.owed_now(now + 2_001), CATCH_UP, "it answers: a group");
        lane.saw_paused(true, false);
        assert!(!lane.tripped(), "still paused while it catches up: not tripped again");
        lane.paused = false;
        assert_eq!(lane.owed_now(now + 2_001), 0, "resumed");
        let found = Lane::new(true, true);
        assert!(found.tripped() && found.paused && !found.pause);
        assert_eq!(found.owed_now(now), 1, "found paused and failing: probed first");
        let answered = Lane::new(true, false);
        assert!(!answered.tripped(), "paused and not failing (enabled again): not probed");
        assert_eq!(answered.owed_now(now), CATCH_UP, "caught up");
        let mut elsewhere = Lane::new(false, false);
        elsewhere.saw_paused(true, true);
        assert!(elsewhere.tripped(), "paused by another daemon, failing: probed here too");
        assert_eq!(elsewhere.owed_now(now), 1);
        let mut enabled_again = Lane::new(false, false);
        enabled_again.saw_paused(true, false);
        assert!(!enabled_again.tripped(), "paused, not failing: caught up, not probed");
        let mut resumed = Lane::new(true, true);
        resumed.saw_paused(false, true);
        assert!(resumed.tripped(), "resumed but failing (this daemon's own catch-up): still tripped");
        resumed.paused = true;
        resumed.saw_paused(false, false);
        assert!(
            !resumed.tripped() && resumed.probe_at.is_none(),
            "resumed by a daemon it answered: counts afresh"
        );
    }

    fn claim(asked: usize, got: usize) -> Claim {
        let endpoint = DueEndpoint {
            id: WebhookEndpointId::new(),
            url: "https://example.com/hook".to_owned(),
            secret_generation: 0,
            previous_until: None,
            next_due: None,
            paused: false,
            failing: false,
        };
        let message = |id| ClaimedMessage {
            id,
            created_at: 0,
            attempts: 0,
            event_type: herald_common::api::webhooks::EventType::NotificationDelivered,
            subject_id: format!("subject-{id}"),
            event_id: id,
            data: String::new(),
            body: None,
            occurred_at: 0,
        };
        Claim {
            target: Arc::new(Target::new(endpoint, &NetworkRule::default())),
            lease: "lease".into(),
            lease_until: 60_000,
            asked,
            messages: (0..got as i64).map(message).collect(),
        }
    }

    /// A lane claims one claim at a time (its messages are claimed in order); what comes back
    /// waits for its slots, a full claim leaves it due (more may wait), a short one does not,
    /// and an empty or failed one leaves it alone for a [`STALL`].
    #[test]
    fn a_lane_has_one_claim_under_way_and_takes_what_it_brings() {
        let (now, concurrency) = (1_000_000, 16);
        let mut lane = Lane { due: Some(now), ..Lane::default() };
        assert!(lane.wants_claim(now, concurrency));
        lane.claiming = true;
        assert!(!lane.wants_claim(now, concurrency), "one claim at a time");
        lane.claimed(Some(claim(32, 32)), now);
        assert!(!lane.claiming && lane.queue.len() == 32 && lane.due == Some(now), "full: more may be due");
        assert!(!lane.wants_claim(now, concurrency), "no room for a slots' worth");
        lane.queue.clear();
        lane.claiming = true;
        lane.claimed(Some(claim(32, 5)), now);
        assert!(lane.queue.len() == 5 && lane.due.is_none(), "short: the rest is learnt of by the next read");
        lane.queue.clear();
        for empty in [None, Some(claim(32, 0))] {
            (lane.claiming, lane.due, lane.stalled_until) = (true, Some(now), None);
            lane.claimed(empty, now);
            assert!(!lane.claiming && lane.stalled_until == Some(now + millis(STALL)));
            assert!(!lane.wants_claim(now, concurrency), "left alone");
            assert!(lane.wants_claim(now + millis(STALL), concurrency));
        }
    }

    /// A lane's task hands its result back however it ends: dropped without one (it failed,
    /// or panicked), the lane hears what a failure answers, and is free to claim, pause or
    /// catch up again.
    #[test]
    fn a_lanes_task_that_ends_without_a_result_still_answers() {
        let (tx, mut backs) = mpsc::unbounded_channel();
        let endpoint = WebhookEndpointId::new();
        let now = 1_000_000;
        let mut lane = Lane { claiming: true, storing: true, ..Lane::default() };
        drop(Reply { endpoint: endpoint.clone(), back: Back::Claimed(None), tx: tx.clone() });
        drop(Reply { endpoint: endpoint.clone(), back: Back::Stored(None), tx: tx.clone() });
        for _ in 0..2 {
            let (id, back) = backs.try_recv().expect("an answer");
            assert!(id == endpoint);
            lane.back(back, now);
        }
        assert!(!lane.claiming && !lane.storing && lane.queue.is_empty());
        lane.claiming = true;
        Reply { endpoint, back: Back::Claimed(None), tx }.send(Back::Claimed(Some(claim(8, 8))));
        let (_, back) = backs.try_recv().expect("an answer");
        lane.back(back, now);
        assert!(!lane.claiming && lane.queue.len() == 8);
    }

    /// What a pause or catch-up did, as the lane takes it: paused; a probe's owed message made
    /// (the next probe a second on); the cursor held elsewhere (waited for after a second).
    #[test]
    fn a_lane_takes_what_its_pause_or_catch_up_did() {
        let now = 1_000_000;
        let mut lane = Lane { failures: TRIP_AFTER, pause: true, storing: true, ..Lane::default() };
        let stored = |paused, caught_up, busy| Some(Stored { at: now, paused, caught_up, busy });
        lane.stored(stored(false, None, true), now + 5);
        assert!(!lane.storing && lane.pause && lane.lock_busy_since == Some(now), "the cursor was held");
        lane.stored(stored(false, None, true), now + 10);
        assert_eq!(lane.lock_busy_since, Some(now), "held since the first");
        lane.stored(stored(true, None, false), now + 15);
        assert!(lane.paused && !lane.pause && lane.lock_busy_since.is_none(), "paused");
        lane.stored(stored(false, Some((1, true)), false), now + 20);
        assert!(
            lane.paused && lane.owed_probe_at == Some(now) && lane.due == Some(now + 20),
            "a probe's message"
        );
        lane.failures = 0;
        lane.stored(stored(false, Some((0, false)), false), now + 25);
        assert!(!lane.paused, "caught up: resumed");
    }
}
