//! How text looks on a colour terminal: the tones of the CLI's output and the one function that
//! paints them. The bottom of the CLI's modules: both what it prints ([`crate::output`]) and how
//! it fails ([`crate::exit`]) paint, so neither has to reach into the other for it.

use herald_common::api::{activity::ActivityStatus, domains::DomainStatus, notifications::DeliveryStatus};

/// How a piece of text is shown on a colour terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Bold,
    Dim,
    /// Done and well: sent, delivered, verified.
    Good,
    /// Under way: queued, sending, pending.
    Busy,
    /// Failed, tombstoned, refused.
    Bad,
}

impl Tone {
    fn code(self) -> Option<&'static str> {
        match self {
            Tone::Plain => None,
            Tone::Bold => Some("1"),
            Tone::Dim => Some("2"),
            Tone::Good => Some("32"),
            Tone::Busy => Some("33"),
            Tone::Bad => Some("31"),
        }
    }

    pub fn of_activity(status: ActivityStatus) -> Tone {
        match status {
            ActivityStatus::Sent
            | ActivityStatus::Delivered
            | ActivityStatus::Read
            | ActivityStatus::Verified => Tone::Good,
            ActivityStatus::Queued | ActivityStatus::Sending => Tone::Busy,
            ActivityStatus::Failed
            | ActivityStatus::Tombstoned
            | ActivityStatus::Undelivered
            | ActivityStatus::Bounced
            | ActivityStatus::Complained => Tone::Bad,
            ActivityStatus::Expired | ActivityStatus::Suppressed => Tone::Dim,
        }
    }

    pub fn of_delivery(status: DeliveryStatus) -> Tone {
        Tone::of_activity(status.into())
    }

    pub fn of_domain(status: DomainStatus) -> Tone {
        match status {
            DomainStatus::Verified => Tone::Good,
            DomainStatus::Pending | DomainStatus::TemporaryFailure => Tone::Busy,
            DomainStatus::Failed => Tone::Bad,
        }
    }
}

/// `text` in `tone` when `color`.
pub fn paint(text: &str, tone: Tone, color: bool) -> String {
    match tone.code() {
        Some(code) if color => format!("\u{1b}[{code}m{text}\u{1b}[0m"),
        _ => text.to_owned(),
    }
}
