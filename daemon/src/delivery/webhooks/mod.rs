//! The webhook dispatcher: sends the outbox's messages to their endpoints in the Standard
//! Webhooks format (CONTRACT §10).
//!
//! It keeps a lane per endpoint: the sends in flight (at most
//! `HERALD_WEBHOOK_ENDPOINT_CONCURRENCY`) and the claimed messages that wait for a free slot.
//! When a lane has room for a slots' worth (of twice the concurrency in flight and waiting, four
//! times while the endpoint answers within a second: `Lane::depth`), it
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
mod lane;
mod pressure;
mod purge;
mod recorder;
mod send;
mod settle;
mod statistics;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use herald_common::ids::WebhookEndpointId;
use tokio::{sync::mpsc, task::JoinSet};
use tokio_util::sync::CancellationToken;

pub use self::{
    fan_out::run_fan_out, purge::run_purge, send::http_client, settle::run_settle, statistics::run_statistics,
};
use self::{
    lane::{Back, Claim, Ended, Lane, Outcome, Reply, Stored},
    pressure::Pressure,
};
use self::{
    recorder::Recorder,
    send::{Done, Meters, Send, Sender, Target},
};
use crate::{retry::RetryPolicy, service::webhooks as service, state::AppState, store::FanOutLock};

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
    let mut pressure = Pressure::new(state.store.engine());
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
                    // The lanes are kept as they are (dropping them would drop what they hold
                    // until its leases ran out), and the endpoints read again a little later.
                    tracing::warn!(error = %e, "cannot read the webhook endpoints");
                    look_at = Some(Instant::now() + STALL);
                    continue;
                }
            };
            // Endpoints no longer enabled: what waits for them is dropped (the leases run out),
            // and so is what their claims under way bring.
            let enabled: HashSet<&WebhookEndpointId> = endpoints.iter().map(|e| &e.id).collect();
            lanes.retain(|id, lane| {
                if enabled.contains(id) {
                    return true;
                }
                lane.queue.clear();
                lane.gone = true;
                lane.in_flight > 0 || lane.claiming || lane.storing
            });
            for endpoint in endpoints {
                let lane = lanes
                    .entry(endpoint.id.clone())
                    .or_insert_with(|| Lane::new(endpoint.paused, endpoint.failing));
                // Enabled again while its last claim or send was under way.
                lane.gone = false;
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
                    done: Done {
                        endpoint: id.clone(),
                        answered: false,
                        started: Instant::now(),
                        done: done.clone(),
                    },
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
