//! The webhooks panel (`w`): one row per endpoint, its status (and why it is disabled), the
//! share of its recent attempts that succeeded, what waits and when it was last tried. The state
//! it draws is [`crate::webhooks`].

use herald_common::api::webhooks::EndpointStatus;
use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    widgets::{Cell, Paragraph, Row, Table, Wrap},
};

use super::{age, popup};
use crate::{
    app::App,
    webhooks::{EndpointHealth, RECENT},
};

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
                EndpointStatus::Enabled if e.paused => ("paused", Color::Yellow),
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
            // Why it is disabled, or how long a paused one has been failing.
            let paused = e.paused.then(|| match e.failing_since {
                Some(since) => format!("failing for {}; its events held", age(app.now_ms, since)),
                None => "failing; its events held".to_owned(),
            });
            let why = e.disabled_reason.clone().or(paused).map(|reason| {
                let why = Cell::from(format!("↳ {reason}")).style(Style::default().fg(color));
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
mod tests {
    use herald_common::Timestamp;

    use super::*;
    use crate::{
        app::Action,
        keymap::KeyAction,
        ui::tests::{NOW, app, render},
        webhooks::{
            REFRESH_MS,
            tests::{endpoint, message},
        },
    };

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
        let mut dead = endpoint("https://down.example.com/hooks", EndpointStatus::Enabled);
        (dead.paused, dead.failing_since) = (true, Some(Timestamp::from_millis(NOW - 180_000)));
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
            EndpointHealth::of(dead, &page(vec![message(MessageStatus::Pending, &[None, Some(503)])])),
        ];
        let recently = Some(Timestamp::from_millis(NOW - 2_000));
        let health = health.into_iter().map(|h| EndpointHealth { last_attempt: recently, ..h }).collect();
        app.update(Action::Webhooks(Ok(health)));
        let screen = render(&app, 100, 24);
        insta::assert_snapshot!("webhooks_100x24", screen);
        assert!(screen.contains("100% of 40") && screen.contains("75% of 4"), "{screen}");
        assert!(screen.contains("disabled") && screen.contains("410 Gone"), "{screen}");
        assert!(screen.contains("paused") && screen.contains("failing for 3m"), "{screen}");
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
