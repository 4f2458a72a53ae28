//! The Herald terminal dashboard (`herald tui`). For now it holds the connection-state model
//! the dashboard shows for each live stream; the dashboard itself comes with the TUI issue.

use std::time::Duration;

/// The state of one live stream as the dashboard shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    Connecting,
    Connected,
    /// Lost; the next attempt is after `retry_in`.
    Reconnecting {
        attempt: u32,
        retry_in: Duration,
    },
    /// Refused for good (e.g. a 401): reconnecting would not help.
    Failed(String),
}

impl ConnectionState {
    /// The state after the connection is lost: exponential backoff from 500 ms, capped at 30 s.
    pub fn lost(&self) -> ConnectionState {
        let attempt = match self {
            ConnectionState::Reconnecting { attempt, .. } => attempt.saturating_add(1),
            _ => 1,
        };
        let millis = 500u64.saturating_mul(1 << attempt.saturating_sub(1).min(6));
        ConnectionState::Reconnecting { attempt, retry_in: Duration::from_millis(millis.min(30_000)) }
    }

    pub fn label(&self) -> String {
        match self {
            ConnectionState::Connecting => "connecting…".to_owned(),
            ConnectionState::Connected => "live".to_owned(),
            ConnectionState::Reconnecting { attempt, retry_in } => {
                format!("reconnecting (attempt {attempt}, in {:.1}s)", retry_in.as_secs_f32())
            }
            ConnectionState::Failed(reason) => format!("failed: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut state = ConnectionState::Connected.lost();
        assert_eq!(state, ConnectionState::Reconnecting { attempt: 1, retry_in: Duration::from_millis(500) });
        for _ in 0..20 {
            state = state.lost();
        }
        assert_eq!(state, ConnectionState::Reconnecting { attempt: 21, retry_in: Duration::from_secs(30) });
        assert_eq!(ConnectionState::Connected.label(), "live");
    }
}
