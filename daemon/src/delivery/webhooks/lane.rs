//! What the dispatcher keeps of each endpoint (its lane: send slots, claimed messages, the
//! breaker, the pause) and what its sends and tasks hand back to it.

use std::{collections::VecDeque, sync::Arc};

use herald_common::ids::WebhookEndpointId;
use tokio::sync::mpsc;

use super::{CATCH_UP, PROBE_EVERY, STALL, TRIP_AFTER, millis, send::Target};
use crate::store::ClaimedMessage;

/// How many times its concurrency a lane whose requests are answered quickly may hold.
const DEEP: usize = 4;
/// The mean answer time (ms) under which a lane keeps the deeper buffer.
const QUICK_MS: f64 = 1_000.0;

/// A claimed message waiting for a free send slot of its endpoint.
pub(super) struct Queued {
    pub(super) message: ClaimedMessage,
    pub(super) endpoint: Arc<Target>,
    pub(super) lease: Arc<str>,
    /// When the lease runs out: a message that could not start in time to end before it is
    /// dropped (it comes due again then, and goes out with the same `webhook-id`).
    pub(super) lease_until: i64,
}

/// A claim's messages, handed back to the dispatcher by the claim's task.
pub(super) struct Claim {
    pub(super) target: Arc<Target>,
    pub(super) lease: Arc<str>,
    pub(super) lease_until: i64,
    /// How many it asked for: as many came back, and more may be due.
    pub(super) asked: usize,
    pub(super) messages: Vec<ClaimedMessage>,
}

/// What a pause or a catch-up did (the task of [`Lane::storing`]).
pub(super) struct Stored {
    /// When it began (the dispatcher's `now` then).
    pub(super) at: i64,
    /// The endpoint is paused in the store now.
    pub(super) paused: bool,
    /// The catch-up's messages made, and whether the endpoint is still paused.
    pub(super) caught_up: Option<(usize, bool)>,
    /// PostgreSQL's fan-out cursor was held by another transaction: nothing was done.
    pub(super) busy: bool,
}

/// What a lane's task hands back to the dispatcher (`None`: it failed, or panicked).
pub(super) enum Back {
    Claimed(Option<Claim>),
    Stored(Option<Stored>),
}

/// Hands a lane's task's result back to the dispatcher however the task ends: made with what a
/// failure answers, so that a lane never waits for a result that will not come.
pub(super) struct Reply {
    pub(super) endpoint: WebhookEndpointId,
    pub(super) back: Back,
    pub(super) tx: mpsc::UnboundedSender<(WebhookEndpointId, Back)>,
}

impl Reply {
    pub(super) fn send(mut self, back: Back) {
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
pub(super) struct Lane {
    pub(super) in_flight: usize,
    pub(super) queue: VecDeque<Queued>,
    /// Its due messages could not be claimed: left alone until then, or until a send ends.
    pub(super) stalled_until: Option<i64>,
    /// Failed attempts in a row.
    pub(super) failures: u32,
    /// Tripped ([`TRIP_AFTER`]): the next probe is not sent before then.
    pub(super) probe_at: Option<i64>,
    /// When its next message is due, as far as this dispatcher knows (`None`: nothing known
    /// pending); ended sends and full claims make it now.
    pub(super) due: Option<i64>,
    /// Paused in the store: its events are owed, not queued.
    pub(super) paused: bool,
    /// It has just tripped: to be paused in the store.
    pub(super) pause: bool,
    /// The last time a probe made the message of an owed event (at most one per [`PROBE_EVERY`]).
    pub(super) owed_probe_at: Option<i64>,
    /// Since when its pause or catch-up has found PostgreSQL's fan-out cursor locked.
    pub(super) lock_busy_since: Option<i64>,
    /// A claim of its messages is under way (one at a time: its messages are claimed in order).
    pub(super) claiming: bool,
    /// Its pause or catch-up is under way.
    pub(super) storing: bool,
    /// How long its requests take to be answered, a moving mean in ms (`None`: none answered
    /// yet): how deep a buffer of claimed messages it may keep ([`Lane::depth`]).
    pub(super) answer_ms: Option<f64>,
    /// No longer enabled (disabled, or removed): kept only until its tasks and sends end, and
    /// what they bring is dropped, not sent (a claim under way as it was disabled would
    /// otherwise send what it brings).
    pub(super) gone: bool,
}

impl Lane {
    /// A lane for an endpoint as the store has it: one found paused and failing (by this daemon
    /// before a restart, or by another) is probed first; paused and not failing (it answered
    /// since, or was enabled again before PostgreSQL settled its disabling), caught up.
    pub(super) fn new(paused: bool, failing: bool) -> Self {
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
    pub(super) fn saw_paused(&mut self, paused: bool, failing: bool) {
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
    pub(super) fn owed_now(&self, now: i64) -> i64 {
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

    pub(super) fn tripped(&self) -> bool {
        self.failures >= TRIP_AFTER
    }

    /// Sends at once: one while tripped.
    pub(super) fn slots(&self, concurrency: usize) -> usize {
        if self.tripped() { 1 } else { concurrency }
    }

    /// How many messages it may hold, in flight and waiting: [`DEEP`] times its concurrency
    /// while it answers within [`QUICK_MS`] on average, twice otherwise (or before it has
    /// answered). A claim at a time per endpoint (its messages are claimed in order), each of
    /// at most what this leaves room for, bounds how fast one endpoint's backlog drains: on a
    /// slow hour a claim of 16 took 7–10 ms on PostgreSQL, and a single endpoint drained at
    /// 1,274–1,350 deliveries a second with twice its concurrency, 1,593–1,709 with four times
    /// (docs/PERFORMANCE.md, thirty-second session). A message waits for a slot at most the
    /// answers of `DEEP - 1` sends before it, well within what its lease leaves it (the
    /// timeout and 4 s).
    pub(super) fn depth(&self, concurrency: usize) -> usize {
        let quick = self.answer_ms.is_some_and(|ms| ms <= QUICK_MS);
        if quick { DEEP * concurrency } else { 2 * concurrency }
    }

    /// How many more messages it may claim: enough to keep its slots busy until the next claim
    /// ([`Lane::depth`], in flight and waiting), none while tripped with one in hand. It
    /// claims only once it has room for a slots' worth, so a busy endpoint's messages are
    /// claimed `concurrency` at a time or more, not one per ended send.
    pub(super) fn room(&self, concurrency: usize) -> usize {
        let held = self.in_flight + self.queue.len();
        if self.tripped() {
            return 1usize.saturating_sub(held);
        }
        let room = self.depth(concurrency).saturating_sub(held);
        if room >= concurrency { room } else { 0 }
    }

    /// A task of the lane ended.
    pub(super) fn back(&mut self, back: Back, now: i64) {
        match back {
            Back::Claimed(claim) => self.claimed(claim, now),
            Back::Stored(stored) => self.stored(stored, now),
        }
    }

    /// A claim came back (`None`: it failed): its messages wait for slots; none, and the lane
    /// is left alone for a [`STALL`] (another daemon holds them, or they wait behind an earlier
    /// message). After a full claim more may be due; after one that took less, the rest is
    /// learnt of by the next read (a wake-up, an ended send, the timer).
    pub(super) fn claimed(&mut self, claim: Option<Claim>, now: i64) {
        self.claiming = false;
        if self.gone {
            return;
        }
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
    pub(super) fn stored(&mut self, stored: Option<Stored>, now: i64) {
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
    pub(super) fn wants_claim(&self, now: i64, concurrency: usize) -> bool {
        !self.gone
            && self.due.is_some_and(|due| due <= now)
            && self.paused_until(now).is_none()
            && !self.claiming
            && self.room(concurrency) > 0
    }

    pub(super) fn ended(&mut self, ended: Ended, now: i64) {
        let outcome = match ended {
            Ended::Answered(outcome, took) => {
                let ms = took.as_secs_f64() * 1_000.0;
                self.answer_ms = Some(self.answer_ms.map_or(ms, |mean| mean + (ms - mean) / 8.0));
                outcome
            }
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
    pub(super) fn paused_until(&self, now: i64) -> Option<i64> {
        [self.stalled_until, self.probe_at].into_iter().flatten().filter(|&until| until > now).max()
    }
}

/// How a send ended, as the dispatcher's breaker counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Succeeded,
    Failed,
    /// Panicked, or the event could not be rendered (not the endpoint's doing).
    Unknown,
}

/// What a send tells the dispatcher: its request is answered (the slot is free: a send slot is
/// a request in flight), then its attempt is recorded (what waited behind the message may go).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ended {
    Answered(Outcome, std::time::Duration),
    Recorded,
}

#[cfg(test)]
mod tests {
    use std::{sync::Arc, time::Duration};

    use herald_common::ids::WebhookEndpointId;
    use tokio::sync::mpsc;

    use super::{
        super::{CATCH_UP, STALL, TRIP_AFTER, millis},
        Back, Claim, DEEP, Ended, Lane, Outcome, Reply, Stored, Target,
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
            lane.ended(Ended::Answered(Outcome::Failed, QUICK), now);
        }
        assert!(lane.tripped() && lane.pause, "tripped, and to be paused");
        lane.ended(Ended::Answered(Outcome::Failed, QUICK), now);
        (lane.pause, lane.paused, lane.due) = (false, true, None);
        lane.ended(Ended::Answered(Outcome::Failed, QUICK), now);
        assert!(!lane.pause, "asked once");
        lane.paused = false;
        lane.ended(Ended::Answered(Outcome::Failed, QUICK), now);
        assert!(lane.pause, "resumed meanwhile (another daemon) and still failing here: paused again");
        (lane.pause, lane.paused) = (false, true);
        lane.due = None;
        assert_eq!(lane.owed_now(now + 500), 0, "its probe waits");
        assert_eq!(lane.owed_now(now + 1_000), 1, "a probe: one owed message");
        lane.owed_probe_at = Some(now + 1_000);
        assert_eq!(lane.owed_now(now + 1_500), 0, "one a second");
        lane.due = Some(now + 1_900);
        assert_eq!(lane.owed_now(now + 2_000), 0, "a message due goes first");
        lane.ended(Ended::Answered(Outcome::Succeeded, QUICK), now + 2_000);
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

    /// A quick answer (a loopback receiver's).
    const QUICK: Duration = Duration::from_millis(2);

    /// A lane keeps twice its concurrency until its requests are answered, then [`DEEP`] times
    /// while they are answered quickly, and twice again once they slow (a message claimed
    /// behind slow answers would wait past its lease's time to start).
    #[test]
    fn a_quick_endpoints_lane_holds_a_deeper_buffer() {
        let (now, concurrency) = (1_000_000, 16);
        let mut lane = Lane::default();
        assert_eq!(lane.depth(concurrency), 2 * concurrency, "nothing answered yet");
        lane.in_flight = 1;
        lane.ended(Ended::Answered(Outcome::Succeeded, QUICK), now);
        assert_eq!(lane.depth(concurrency), DEEP * concurrency);
        assert_eq!(lane.room(concurrency), DEEP * concurrency);
        for _ in 0..20 {
            lane.in_flight = 1;
            lane.ended(Ended::Answered(Outcome::Succeeded, Duration::from_secs(3)), now);
        }
        assert_eq!(lane.depth(concurrency), 2 * concurrency, "slow answers: the shallow buffer");
        for _ in 0..40 {
            lane.in_flight = 1;
            lane.ended(Ended::Answered(Outcome::Succeeded, QUICK), now);
        }
        assert_eq!(lane.depth(concurrency), DEEP * concurrency, "quick again");
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
        // Disabled while a claim was under way: what it brings is dropped, not queued to send.
        (lane.claiming, lane.gone) = (true, true);
        lane.claimed(Some(claim(32, 32)), now);
        assert!(!lane.claiming && lane.queue.is_empty(), "a gone endpoint's claim is not sent");
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
