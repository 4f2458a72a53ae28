//! The time as the service logic sees it. Production uses the system clock; tests move it
//! forward (`advance`) to expire codes and leave rate-limit windows without waiting.

use std::{
    sync::atomic::{AtomicI64, Ordering},
    time::Duration,
};

#[derive(Debug, Default)]
pub struct Clock {
    offset_ms: AtomicI64,
}

impl Clock {
    /// Epoch milliseconds.
    pub fn now_millis(&self) -> i64 {
        herald_common::Timestamp::now().millis() + self.offset_ms.load(Ordering::Relaxed)
    }

    pub fn advance(&self, by: Duration) {
        self.offset_ms.fetch_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4), Ordering::Relaxed);
    }
}
