//! The webhooks panel (`w`): each endpoint of the tenant, whether it is enabled (or why it was
//! disabled), and how its recent deliveries went: the share of its last attempts the endpoint
//! accepted, the messages still waiting, and when it was last tried. Loaded when the panel opens
//! and every [`REFRESH_MS`] while it stays open. What it holds, and how it is drawn.

use herald_common::{
    Timestamp,
    api::webhooks::{EndpointStatus, MessageStatus, WebhookDeliveryList, WebhookEndpoint},
};
use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    widgets::{Cell, Paragraph, Row, Table, Wrap},
};

use crate::{
    app::App,
    ui::{age, popup},
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

/// The webhooks panel: one row per endpoint, its status (and why it is disabled), the share of
/// its recent attempts that succeeded, what waits and when it was last tried.
pub fn draw(frame: &mut Frame, app: &App) {
    let screen = frame.area();
    let inner = popup(
        frame,
        screen.width.saturating_sub(4).min(120),
        screen.height.saturating_sub(2),
        "Webhook endpoints",
    );
    let endpoints = match &app.webhooks {
        None => return frame.render_widget(Paragraph::new("Loading…"), inner),
        Some(Err(e)) => {
            let text =
                Paragraph::new(e.as_str()).style(Style::default().fg(Color::Red)).wrap(Wrap { trim: true });
            return frame.render_widget(text, inner);
        }
        Some(Ok(endpoints)) => endpoints,
    };
    let [table_area, hint] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(inner);
    let rate = |h: &EndpointHealth| match h.success_percent() {
        None => Cell::from("-"),
        Some(p) => {
            let color = match p {
                p if p >= 99.0 => Color::Green,
                p if p >= 90.0 => Color::Yellow,
                _ => Color::Red,
            };
            Cell::from(format!("{p:.0}% of {}", h.attempts)).style(Style::default().fg(color))
        }
    };
    // One row per endpoint, and under a disabled one a row saying why.
    let rows: Vec<Row> = endpoints
        .iter()
        .flat_map(|h| {
            let e = &h.endpoint;
            let (status, color) = match e.status {
                EndpointStatus::Enabled => ("enabled", Color::Green),
                EndpointStatus::Disabled => ("disabled", Color::Red),
            };
            let about = match &e.description {
                Some(description) => format!("{} · {description}", e.url),
                None => e.url.clone(),
            };
            let last = h.last_attempt.map(|t| format!("{} ago", age(app.now_ms, t)));
            let row = Row::new(vec![
                Cell::from(status).style(Style::default().fg(color)),
                rate(h),
                Cell::from(h.pending.to_string()),
                Cell::from(h.failed.to_string()),
                Cell::from(last.unwrap_or_else(|| "never".into())),
                Cell::from(about),
            ]);
            let why = e.disabled_reason.as_ref().map(|reason| {
                let why = Cell::from(format!("↳ {reason}")).style(Style::default().fg(Color::Red));
                Row::new(vec![
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(""),
                    Cell::from(""),
                    why,
                ])
            });
            std::iter::once(row).chain(why)
        })
        .collect();
    if rows.is_empty() {
        frame.render_widget(Paragraph::new("No endpoints: herald webhooks add URL"), table_area);
    } else {
        let widths = [
            Constraint::Length(9),
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Min(10),
        ];
        let header = Row::new(["STATUS", "SUCCESS", "PENDING", "FAILED", "LAST", "URL"])
            .style(Style::default().add_modifier(Modifier::BOLD));
        frame.render_widget(Table::new(rows, widths).header(header), table_area);
    }
    let note = format!(
        "success: the 2xx share of the attempts of each endpoint's last {} messages · Esc close",
        RECENT
    );
    frame.render_widget(Paragraph::new(note).style(Style::default().fg(Color::DarkGray)), hint);
}

#[cfg(test)]
pub(crate) mod tests {
    use herald_common::{
        api::webhooks::{EndpointStatus, EventType, WebhookAttempt, WebhookDelivery},
        ids::{MessageId, WebhookEndpointId},
    };

    use super::*;
    use crate::{
        app::Action,
        keymap::KeyAction,
        ui::tests::{NOW, app, render},
    };

    pub fn endpoint(url: &str, status: EndpointStatus) -> WebhookEndpoint {
        WebhookEndpoint {
            endpoint_id: WebhookEndpointId::new(),
            url: url.into(),
            description: None,
            event_types: None,
            application_id: None,
            status,
            disabled_reason: None,
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

    #[test]
    fn the_webhooks_panel() {
        use herald_common::{
            api::webhooks::{MessageStatus, WebhookDeliveryList},
            ids::WebhookEndpointId,
        };

        let mut app = app();
        assert_eq!(app.update(Action::Key(KeyAction::ShowWebhooks)), vec![crate::app::Command::LoadWebhooks]);
        assert!(render(&app, 100, 24).contains("Loading…"));
        let page = |items| WebhookDeliveryList { total_count: 0, page: 1, limit: 100, items };
        let mut healthy = endpoint("https://hooks.example.com/herald", EndpointStatus::Enabled);
        healthy.endpoint_id = WebhookEndpointId::parse("whe_01kqzs0000000000000000000a").unwrap();
        let mut gone = endpoint("https://old.example.com/in", EndpointStatus::Disabled);
        gone.endpoint_id = WebhookEndpointId::parse("whe_01kqzs0000000000000000000b").unwrap();
        gone.disabled_reason = Some("the endpoint answered 410 Gone".into());
        let ok = |n| (0..n).map(|_| message(MessageStatus::Succeeded, &[Some(200)])).collect::<Vec<_>>();
        let mut flaky = ok(3);
        flaky.push(message(MessageStatus::Pending, &[Some(500)]));
        let health = vec![
            EndpointHealth::of(healthy, &page(ok(40))),
            EndpointHealth::of(gone, &page(vec![message(MessageStatus::Failed, &[Some(410)])])),
            EndpointHealth::of(
                endpoint("https://flaky.example.com/h", EndpointStatus::Enabled),
                &page(flaky),
            ),
        ];
        let recently = Some(Timestamp::from_millis(NOW - 2_000));
        let health = health.into_iter().map(|h| EndpointHealth { last_attempt: recently, ..h }).collect();
        app.update(Action::Webhooks(Ok(health)));
        let screen = render(&app, 100, 24);
        insta::assert_snapshot!("webhooks_100x24", screen);
        assert!(screen.contains("100% of 40") && screen.contains("75% of 4"), "{screen}");
        assert!(screen.contains("disabled") && screen.contains("410 Gone"), "{screen}");
        // It loads again while open, and not once closed.
        assert_eq!(
            app.update(Action::Tick(NOW + 4_000 + REFRESH_MS)),
            vec![crate::app::Command::LoadWebhooks]
        );
        app.update(Action::Key(KeyAction::Close));
        assert!(app.update(Action::Tick(NOW + 60_000)).is_empty());
        app.update(Action::Key(KeyAction::ShowWebhooks));
        app.update(Action::Webhooks(Err("forbidden (403): the credential lacks webhooks:read".into())));
        assert!(render(&app, 100, 24).contains("lacks webhooks:read"));
    }
}
