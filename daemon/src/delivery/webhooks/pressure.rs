//! Whether the store's writer is saturated: the dispatcher and the fan-out task hold back while
//! it is (a burst of changes goes first; the deliveries catch up after it).

use std::time::{Duration, Instant};

use crate::store::Engine;

/// The writer counts as saturated while its batches over the last [`BUSY_WINDOW`] held this many
/// writes on average or more (at a steady load each batch holds about one), and it takes them
/// at a burst's rate ([`BUSY_RATE`]) or has done so for [`BUSY_FOR`].
const BUSY_BATCH: u64 = 8;
/// Writes a second that make large batches a burst at once. A steady 1,000 dispatches a second
/// on a slow hour fills batches too, whenever commits slow for a moment (batches of 8–30 at
/// 300–2,800 writes a second, in spells of 100–400 ms): held back then, its first attempts
/// waited 100–500 ms (docs/PERFORMANCE.md, thirty-first session); a saturated burst of
/// dispatches takes 5,000–12,000 a second on a fast hour.
const BUSY_RATE: u64 = 4_000;
/// How long large batches at a slower rate (at least [`LASTING_RATE`]) last before they count
/// as saturation: a burst on a slow hour (its windows at 3,000–4,000 writes a second, under
/// [`BUSY_RATE`]; after 500 ms, as the thirty-first session had it, the fan-out made messages
/// for the first half second of each burst).
const BUSY_FOR: Duration = Duration::from_millis(300);
/// The least rate, over the whole spell of large batches, at which they count as saturation
/// once they have lasted [`BUSY_FOR`]: on a slow hour a steady 1,000 dispatches a second made
/// large batches for seconds on end (commits of 10 ms and more, 500–2,000 writes a second), and
/// held back, its first attempts waited a second at the median (docs/PERFORMANCE.md,
/// thirty-second session); a slow hour's bursts take 2,500–6,000 a second.
const LASTING_RATE: u64 = 2_000;
/// Writes a second under which a window is quiet: large batches right after one are a burst (on
/// SQLite, if they come at [`LASTING_RATE`] or more over the last [`BUSY_WINDOW`] of their
/// window: see [`Pressure::new`]).
const QUIET_RATE: u64 = 100;
/// (Over 500 ms, a burst's first half second went unnoticed: a saturated row of 10,000 in-app
/// dispatches on PostgreSQL, two seconds long, lost 14 % with an endpoint down, to the fan-out's
/// calls of that half second, which then made the writers wait; they no longer do, but they
/// still share the two cores with the burst.)
const BUSY_WINDOW: Duration = Duration::from_millis(100);
/// The longest a due message is held back: once the oldest due message (of the endpoints not
/// paused) has waited this long, the deliveries go at their pace again until it has not, so a
/// writer saturated for longer (a load, not a burst) delays first attempts by about this much,
/// and never without end. (Bounded by how long the writer had been saturated instead, the
/// hold-back ended for good a few seconds into a load: a burst after a busy spell was not held
/// back at all. Thirty seconds, tried in the twenty-second session, held a PostgreSQL burst's
/// messages back whole, but at a steady 1,000 events a second on a slow hour, where commits
/// slow enough for the writer's batches to reach [`BUSY_BATCH`], first attempts then waited
/// seconds at the median: docs/PERFORMANCE.md.)
pub(super) const HOLD_AT_MOST_MS: i64 = 5_000;

/// Whether the store's writer is saturated, from its mean batch size over the last
/// [`BUSY_WINDOW`] (`herald_store_write_operations_total` over `…_batches_total`) and the
/// rate it takes writes at.
pub(super) struct Pressure {
    at: Instant,
    batches: u64,
    operations: u64,
    /// Since when every window has found large batches, and how many writes they took.
    full_since: Option<(Instant, u64)>,
    /// Whether the last window was quiet (fewer than [`QUIET_RATE`] writes a second, in small
    /// batches): large batches after a quiet spell are a burst's first (at a steady load the
    /// windows before a slow commit are not quiet), and a window that spans the quiet spell
    /// dilutes their rate. A window of few writes in large batches is a stalled commit, not a
    /// quiet spell: on a slow hour a steady load's commits stalled for 200–400 ms (one batch of
    /// 23 writes in 375 ms), and the windows after them were taken for a burst's first.
    quiet: bool,
    /// Whether the last window found the writer saturated.
    saturated: bool,
    /// The rate (writes a second, over the last [`BUSY_WINDOW`] of a window at most) at which
    /// large batches right after a quiet window are a burst's first.
    after_quiet_rate: f64,
}

impl Pressure {
    /// On SQLite, large batches after a quiet window are a burst only at [`LASTING_RATE`] over
    /// the window's last [`BUSY_WINDOW`]: the one writer's first commits after a pause are slow,
    /// so a steady load's first writes come in large batches (five of 12 in the bench's first
    /// 100 ms at 1,000 a second), and held back as a burst its first attempts waited 100-170 ms
    /// (docs/PERFORMANCE.md, thirty-fifth session). On PostgreSQL any large batches after a
    /// quiet window are: with that rule its bursts were found a window late, and an endpoint
    /// delivering made a saturated in-app dispatch 7 % slower, 600 messages made and delivered
    /// in each burst's first window.
    pub(super) fn new(engine: Engine) -> Self {
        let (batches, operations, _) = crate::store::writer::batch_counts();
        let after_quiet_rate = if engine == Engine::Sqlite { LASTING_RATE as f64 } else { 0.0 };
        Self {
            at: Instant::now(),
            batches,
            operations,
            full_since: None,
            quiet: true,
            saturated: false,
            after_quiet_rate,
        }
    }

    /// A pressure whose last window found the writer saturated (or not).
    #[cfg(test)]
    pub(super) fn with(saturated: bool) -> Self {
        Self {
            at: Instant::now(),
            batches: 100,
            operations: 100,
            full_since: None,
            quiet: false,
            saturated,
            after_quiet_rate: LASTING_RATE as f64,
        }
    }

    /// Whether to hold the deliveries back at `now` (ms), the oldest due message having been
    /// due since `oldest_due`: the writer is saturated, and that message has not waited
    /// [`HOLD_AT_MOST_MS`].
    pub(super) fn holds(&mut self, oldest_due: Option<i64>, now: i64) -> bool {
        if self.at.elapsed() >= BUSY_WINDOW {
            let (batches, operations, _) = crate::store::writer::batch_counts();
            self.observe(batches, operations, Instant::now());
        }
        self.saturated && oldest_due.is_none_or(|due| now - due < HOLD_AT_MOST_MS)
    }

    /// Takes the writer's counts at the end of a window (`now`).
    fn observe(&mut self, batches: u64, operations: u64, now: Instant) {
        let (b, o) = (batches.saturating_sub(self.batches), operations.saturating_sub(self.operations));
        let window = now.saturating_duration_since(self.at);
        let full = b > 0 && o >= BUSY_BATCH * b;
        // (A window that spanned an idle spell counts as one [`BUSY_WINDOW`] of large batches.)
        let began = now.checked_sub(window.min(BUSY_WINDOW)).unwrap_or(self.at);
        self.full_since =
            full.then(|| self.full_since.map_or((began, o), |(since, taken)| (since, taken + o)));
        let rate = o as f64 / window.as_secs_f64().max(0.001);
        let lasting = self.full_since.is_some_and(|(since, taken)| {
            let spell = now.saturating_duration_since(since);
            spell >= BUSY_FOR && taken as f64 / spell.as_secs_f64() >= LASTING_RATE as f64
        });
        // After a quiet spell, the rate over the window's last BUSY_WINDOW at most (as if every
        // write had come in it): a window that spans the quiet spell dilutes a burst's rate.
        let recent = o as f64 / window.min(BUSY_WINDOW).as_secs_f64().max(0.001);
        let after_quiet = self.quiet && recent >= self.after_quiet_rate;
        self.saturated = full && (rate >= BUSY_RATE as f64 || lasting || after_quiet);
        self.quiet = rate < QUIET_RATE as f64 && !full;
        if full {
            tracing::debug!(
                batches = b,
                operations = o,
                window_ms = window.as_millis() as u64,
                saturated = self.saturated,
                "the writer's batches are large"
            );
        }
        (self.at, self.batches, self.operations) = (now, batches, operations);
    }
}

#[cfg(test)]
mod tests {
    use super::{BUSY_BATCH, BUSY_FOR, BUSY_RATE, BUSY_WINDOW, HOLD_AT_MOST_MS, LASTING_RATE, Pressure};

    fn pressure(saturated: bool) -> Pressure {
        Pressure::with(saturated)
    }

    #[test]
    fn the_writer_is_saturated_while_its_batches_are_large() {
        let mut p = pressure(false);
        let start = p.at;
        let mut counts = (p.batches, p.operations);
        // One window of 100 ms: `batches` batches of `each` writes.
        let mut window = |p: &mut Pressure, n: u32, batches: u64, each: u64| {
            counts = (counts.0 + batches, counts.1 + batches * each);
            p.observe(counts.0, counts.1, start + BUSY_WINDOW * n);
            p.saturated
        };
        assert!(!window(&mut p, 1, 100, 1), "a steady load: about a write a batch");
        // A burst: many writes to a batch, at a burst's rate.
        let burst = BUSY_RATE / 10 / BUSY_BATCH;
        assert!(window(&mut p, 2, burst, BUSY_BATCH), "a burst is found in its first window");
        assert!(window(&mut p, 3, burst, BUSY_BATCH));
        assert!(!window(&mut p, 4, burst, BUSY_BATCH - 1), "just under the mean that counts: over");
        assert!(!window(&mut p, 5, 0, 0), "no batch at all in a window: idle");
        assert!(!window(&mut p, 6, 100, 1), "a steady load");
        // Its slow commits: large batches at a slow rate, for less than BUSY_FOR.
        let spell = u32::try_from(BUSY_FOR.as_millis() / BUSY_WINDOW.as_millis()).unwrap();
        for n in 7..7 + spell - 1 {
            assert!(!window(&mut p, n, 10, BUSY_BATCH), "a slow spell is not a burst");
        }
        assert!(!window(&mut p, 6 + spell, 100, 1), "the spell ends");
        // Lasting: a slow hour's burst (or a load) at LASTING_RATE is one.
        let from = 7 + spell;
        // (At one and a half times LASTING_RATE, under BUSY_RATE.)
        let lasting = LASTING_RATE * 3 / 2 / 10 / BUSY_BATCH;
        for n in from..from + spell - 1 {
            assert!(!window(&mut p, n, lasting, BUSY_BATCH));
        }
        assert!(
            window(&mut p, from + spell - 1, lasting, BUSY_BATCH),
            "large batches for BUSY_FOR: saturated"
        );
        assert!(window(&mut p, from + spell, 2, BUSY_BATCH), "a slower window within the spell: still");
        assert!(!window(&mut p, from + spell + 1, 100, 1));
        // A steady load whose commits stay slow (1,000 writes a second, in batches of 10) is
        // never a burst, however long it lasts.
        let slow = from + spell + 2;
        for n in slow..slow + 5 * spell {
            assert!(!window(&mut p, n, 10, 10), "a slow steady load is not held back");
        }
        let from = slow + 5 * spell;
        assert!(!window(&mut p, from, 100, 1));
        // A burst after a quiet second: its first large batches, whose rate the window that
        // spans the quiet second dilutes (to a tenth), are found at once.
        let quiet = from + 11;
        assert!(!window(&mut p, quiet, 0, 0), "quiet");
        assert!(window(&mut p, quiet + 10, burst, BUSY_BATCH), "large batches after a quiet spell: a burst");
        assert!(!window(&mut p, quiet + 11, 100, 1));
        // A steady load's first writes after a quiet spell: its first commits slow, in large
        // batches, but at a steady rate (1,000 a second, five batches of 12 in a window, here
        // the quiet second's last), no burst.
        let quiet = quiet + 12;
        assert!(!window(&mut p, quiet, 0, 0), "quiet");
        assert!(!window(&mut p, quiet + 10, 5, 12), "a steady load's start is not a burst");
        assert!(!window(&mut p, quiet + 11, 100, 1));
        // On PostgreSQL it is (any large batches after a quiet window).
        p.after_quiet_rate = 0.0;
        let quiet = quiet + 12;
        assert!(!window(&mut p, quiet, 0, 0), "quiet");
        assert!(window(&mut p, quiet + 10, 5, 12), "PostgreSQL: large batches after a quiet spell");
        assert!(!window(&mut p, quiet + 11, 100, 1));
        p.after_quiet_rate = LASTING_RATE as f64;
        // A steady load's stalled commit: one large batch in a long window (few writes a
        // second, but not a quiet spell), then the writes that waited for it.
        assert!(!window(&mut p, quiet + 15, 1, 3 * BUSY_BATCH), "a stalled commit is not a burst");
        assert!(!window(&mut p, quiet + 16, 3, BUSY_BATCH), "nor what waited for it");
    }

    /// Held back while the writer is saturated, but no message longer than [`HOLD_AT_MOST_MS`]:
    /// however long the writer has been saturated, a message due since a moment is held back,
    /// and one that has waited that long lets them go.
    #[test]
    fn deliveries_are_held_back_at_most_a_few_seconds_each() {
        let now = 1_000_000;
        assert!(pressure(true).holds(Some(now - 1_000), now), "a burst holds them back");
        assert!(pressure(true).holds(None, now), "nothing due yet: its first reads wait too");
        assert!(
            !pressure(true).holds(Some(now - HOLD_AT_MOST_MS), now),
            "a message waited long enough: they go"
        );
        assert!(!pressure(false).holds(Some(now - 1_000), now), "not saturated: nothing is held back");
        assert!(!pressure(false).holds(None, now));
    }
}
