//! Retry policy as data: the delays between automatic attempts (`HERALD_RETRY_SCHEDULE`), each
//! stretched by ±20 % jitter so that failures do not retry in lock-step, and never shorter than
//! a provider's `Retry-After` (capped at an hour).

use std::time::Duration;

/// The most a provider's `Retry-After` can push an attempt back.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    schedule: Vec<Duration>,
}

impl RetryPolicy {
    pub fn new(schedule: Vec<Duration>) -> Self {
        Self { schedule }
    }

    /// Attempts in one cycle: the first plus one per delay.
    pub fn max_attempts(&self) -> usize {
        self.schedule.len() + 1
    }

    /// The wait before the next attempt after attempt `attempt` (1-based, within the cycle)
    /// failed transiently, or `None` if that was the last. `jitter` is uniform in `0.0..1.0`.
    pub fn next_delay(&self, attempt: u32, retry_after: Option<Duration>, jitter: f64) -> Option<Duration> {
        let index = usize::try_from(attempt).ok()?.checked_sub(1)?;
        let base = self.schedule.get(index)?;
        let delay = base.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0));
        Some(match retry_after {
            Some(wait) => delay.max(wait.min(MAX_RETRY_AFTER)),
            None => delay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::new(vec![Duration::from_secs(5), Duration::from_secs(30)])
    }

    #[test]
    fn follows_the_schedule_then_gives_up() {
        let p = policy();
        assert_eq!(p.max_attempts(), 3);
        assert_eq!(p.next_delay(1, None, 0.5), Some(Duration::from_secs(5)));
        assert_eq!(p.next_delay(2, None, 0.5), Some(Duration::from_secs(30)));
        assert_eq!(p.next_delay(3, None, 0.5), None);
        assert_eq!(p.next_delay(0, None, 0.5), None);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let p = policy();
        assert_eq!(p.next_delay(1, None, 0.0), Some(Duration::from_secs(4)));
        assert_eq!(p.next_delay(1, None, 1.0), Some(Duration::from_secs(6)));
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let p = policy();
        assert_eq!(p.next_delay(1, Some(Duration::from_secs(20)), 0.5), Some(Duration::from_secs(20)));
        assert_eq!(p.next_delay(1, Some(Duration::from_secs(1)), 0.5), Some(Duration::from_secs(5)));
        assert_eq!(p.next_delay(1, Some(Duration::from_secs(86_400)), 0.5), Some(MAX_RETRY_AFTER));
    }
}
