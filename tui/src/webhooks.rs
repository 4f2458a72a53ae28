//! The webhooks panel (`w`): each endpoint of the tenant, whether it is enabled (or why it was
//! disabled), and how its recent deliveries went: the share of its last attempts the endpoint
//! accepted, the messages still waiting, and when it was last tried. Loaded when the panel opens
//! and every [`REFRESH_MS`] while it stays open. (Drawn by `ui::webhooks`.)

use herald_common::{
    Timestamp,
    api::webhooks::{MessageStatus, WebhookDeliveryList, WebhookEndpoint},
};

/// How often the open panel loads again.
pub const REFRESH_MS: i64 = 5_000;

/// How many of an endpoint's newest messages its health is computed over.
pub const RECENT: u32 = 100;

/// One endpoint and how its recent deliveries went.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointHealth {
    pub endpoint: WebhookEndpoint,
    /// Attempts of the recent messages, and how many of them got a 2xx.
    pub attempts: usize,
    pub succeeded: usize,
    /// Recent messages not yet accepted, still to be tried.
    pub pending: usize,
    /// Recent messages given up on (`recover` sends them again).
    pub failed: usize,
    pub last_attempt: Option<Timestamp>,
}

impl EndpointHealth {
    /// The health of `endpoint` from a page of its newest messages.
    pub fn of(endpoint: WebhookEndpoint, recent: &WebhookDeliveryList) -> Self {
        let attempts = recent.items.iter().flat_map(|m| &m.attempts);
        let ok = |status: Option<u16>| status.is_some_and(|s| (200..300).contains(&s));
        let count = |status| recent.items.iter().filter(|m| m.status == status).count();
        Self {
            endpoint,
            attempts: attempts.clone().count(),
            succeeded: attempts.clone().filter(|a| ok(a.http_status)).count(),
            pending: count(MessageStatus::Pending),
            failed: count(MessageStatus::Failed),
            last_attempt: attempts.map(|a| a.at).max(),
        }
    }

    /// The share of recent attempts that succeeded, in percent; `None` before any attempt.
    pub fn success_percent(&self) -> Option<f64> {
        (self.attempts > 0).then(|| self.succeeded as f64 * 100.0 / self.attempts as f64)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use herald_common::{
        api::webhooks::{EndpointStatus, EventType, WebhookAttempt, WebhookDelivery},
        ids::{MessageId, WebhookEndpointId},
    };

    use super::*;

    pub fn endpoint(url: &str, status: EndpointStatus) -> WebhookEndpoint {
        WebhookEndpoint {
            endpoint_id: WebhookEndpointId::new(),
            url: url.into(),
            description: None,
            event_types: None,
            application_id: None,
            status,
            disabled_reason: None,
            failing_since: None,
            paused: false,
            created_at: Timestamp::from_millis(0),
        }
    }

    pub fn message(status: MessageStatus, answers: &[Option<u16>]) -> WebhookDelivery {
        WebhookDelivery {
            message_id: MessageId::new(),
            event_type: EventType::NotificationSent,
            status,
            attempts: answers
                .iter()
                .enumerate()
                .map(|(i, s)| WebhookAttempt {
                    at: Timestamp::from_millis(1_000 * i as i64),
                    http_status: *s,
                    error: s.is_none().then(|| "connection refused".to_owned()),
                    duration_ms: 3,
                })
                .collect(),
            next_attempt_at: None,
            created_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn health_counts_attempts_and_messages() {
        let items = vec![
            message(MessageStatus::Succeeded, &[Some(500), Some(200)]),
            message(MessageStatus::Pending, &[None]),
            message(MessageStatus::Failed, &[Some(503), Some(503), Some(503)]),
            message(MessageStatus::Succeeded, &[Some(204)]),
        ];
        let page = WebhookDeliveryList { total_count: 4, page: 1, limit: RECENT, items };
        let health = EndpointHealth::of(endpoint("https://a.example/h", EndpointStatus::Enabled), &page);
        assert_eq!((health.attempts, health.succeeded, health.pending, health.failed), (7, 2, 1, 1));
        assert_eq!(health.last_attempt, Some(Timestamp::from_millis(2_000)));
        assert!((health.success_percent().unwrap() - 200.0 / 7.0).abs() < 1e-9);
        let quiet = WebhookDeliveryList { total_count: 0, page: 1, limit: RECENT, items: Vec::new() };
        let fresh = EndpointHealth::of(endpoint("https://b.example/h", EndpointStatus::Enabled), &quiet);
        assert_eq!(fresh.success_percent(), None);
    }
}
