//! Drawing: a pure function of the [`App`], which it only reads (what the state needs to know of
//! the screen, such as a page's length, comes from [`crate::layout`], as the panes' places do
//! here). The header (connection states, per-channel throughput and failure-rate sparklines,
//! totals), the activity table, the inbox pane, the footer, and the overlays (filter menu,
//! prompt, question, detail, webhooks, help). Everything fits down to 80×24.

use herald_common::{
    Timestamp,
    api::{
        activity::{ActivityItem, ActivityStatus},
        notifications::Channel,
    },
    client::ConnectionState,
};
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, Table, Wrap},
};

mod webhooks;

use crate::{
    app::{App, Bulk, HIGHLIGHT_MS, Prompt},
    feed::BUCKET_SECONDS,
    inbox::InboxPane,
    keymap::{KEYMAP, Mode},
    layout,
};

pub fn status_color(status: ActivityStatus) -> Color {
    match status {
        ActivityStatus::Sent
        | ActivityStatus::Delivered
        | ActivityStatus::Read
        | ActivityStatus::Verified => Color::Green,
        ActivityStatus::Queued | ActivityStatus::Sending => Color::Yellow,
        ActivityStatus::Failed
        | ActivityStatus::Tombstoned
        | ActivityStatus::Undelivered
        | ActivityStatus::Bounced
        | ActivityStatus::Complained => Color::Red,
        ActivityStatus::Expired | ActivityStatus::Suppressed => Color::DarkGray,
    }
}

fn state_span(name: &str, state: &ConnectionState) -> Span<'static> {
    let color = match state {
        ConnectionState::Live => Color::Green,
        ConnectionState::Failed(_) => Color::Red,
        _ => Color::Yellow,
    };
    Span::styled(format!("{name}: {}", state.label()), Style::default().fg(color))
}

/// A short age: `5s`, `3m`, `2h`, `4d`.
pub fn age(now_ms: i64, at: Timestamp) -> String {
    let seconds = ((now_ms - at.millis()) / 1000).max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub fn draw(frame: &mut Frame, app: &App) {
    let areas = layout::areas(frame.area(), app.inbox.is_some());
    draw_header(frame, app, areas.header);
    draw_activity(frame, app, areas.activity);
    if let Some(inbox) = areas.inbox {
        draw_inbox(frame, app, inbox);
    }
    draw_footer(frame, app, areas.footer);
    match app.mode {
        Mode::Filter => draw_filter(frame, app),
        Mode::Input => draw_prompt(frame, app),
        Mode::Confirm => draw_question(frame, app),
        Mode::Detail => draw_detail(frame, app),
        Mode::Help => draw_help(frame, app.help_scroll),
        Mode::Webhooks => webhooks::draw(frame, app),
        Mode::Normal => {}
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let [title, channels, totals] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(4), Constraint::Length(2)]).areas(area);
    let mut spans = vec![
        Span::styled(" Herald ", Style::default().add_modifier(Modifier::BOLD | Modifier::REVERSED)),
        Span::raw(format!(" {}  ", app.url)),
        state_span("activity", &app.activity_state),
    ];
    if let Some(pane) = &app.inbox {
        spans.push(Span::raw("  "));
        spans.push(state_span(&format!("inbox {}", pane.user), &pane.state));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), title);

    // One row per channel: its name, throughput bars, rate, failure-rate bars, failure rate.
    let rows = Layout::vertical([Constraint::Length(1); 4]).split(channels);
    let bar_width = (area.width.saturating_sub(9 + 10 + 12) / 2).max(4);
    for (channel, row) in Channel::ALL.iter().zip(rows.iter()) {
        let [name, spark, rate, fail_spark, fail_rate] = Layout::horizontal([
            Constraint::Length(9),
            Constraint::Length(bar_width),
            Constraint::Length(10),
            Constraint::Length(bar_width),
            Constraint::Length(12),
        ])
        .areas(*row);
        frame.render_widget(Paragraph::new(format!(" {channel}")), name);
        // As many bars as the area holds, the newest on the right.
        let created: Vec<u64> =
            app.stats.series(*channel, spark.width as usize, app.now_ms).iter().map(|c| c.created).collect();
        frame
            .render_widget(Sparkline::default().data(created).style(Style::default().fg(Color::Cyan)), spark);
        let per_second = app.stats.rate(*channel, app.now_ms);
        let shown = if per_second >= 1.0 {
            format!(" {per_second:>6.1}/s")
        } else {
            format!(" {:>4.0}/min", per_second * 60.0)
        };
        frame.render_widget(Paragraph::new(shown), rate);
        let failure: Vec<u64> = app
            .stats
            .series(*channel, fail_spark.width as usize, app.now_ms)
            .iter()
            .map(|c| (100 * c.failed).checked_div(c.finished).unwrap_or(0))
            .collect();
        frame.render_widget(
            Sparkline::default().data(failure).max(100).style(Style::default().fg(Color::Red)),
            fail_spark,
        );
        let shown = match app.stats.failure_rate(*channel, app.now_ms) {
            Some(pct) => format!(" fail {pct:>4.0}%"),
            None => " fail    -".to_owned(),
        };
        frame.render_widget(Paragraph::new(shown), fail_rate);
    }
    let mut totals_spans = vec![Span::raw(format!(
        " seen {} · failures {} · holding {} ({} failed, {} queued)",
        app.stats.total_created,
        app.stats.total_failed,
        app.feed.len(),
        app.feed.count(ActivityStatus::Failed),
        app.feed.count(ActivityStatus::Queued)
    ))];
    if area.width >= 110 {
        totals_spans.push(Span::styled(
            format!("   bars of {BUCKET_SECONDS} s: items created, then failure rate"),
            Style::default().fg(Color::DarkGray),
        ));
    }
    let totals_line = Line::from(totals_spans);
    frame.render_widget(Paragraph::new(totals_line), totals);
}

fn draw_activity(frame: &mut Frame, app: &App, area: Rect) {
    let mut title = " Activity ".to_owned();
    if !app.filter.is_empty() {
        title = format!(" Activity · {} ", app.filter.describe());
    }
    if !app.backfilled {
        title.push_str("(loading…) ");
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let rows_fit = layout::table_rows(area);
    let now = app.now_ms;
    let visible = app.visible();
    if visible.is_empty() {
        let text = if app.filter.is_empty() {
            "Nothing yet: deliveries appear here as they happen."
        } else {
            "Nothing matches the filter (f, x clears it)."
        };
        frame.render_widget(Paragraph::new(text).style(Style::default().fg(Color::DarkGray)), inner);
        return;
    }
    let selected = app.selected_index(&visible);
    // Scroll so that the selection is on screen.
    let offset = match selected {
        Some(i) if i >= rows_fit => i + 1 - rows_fit,
        _ => 0,
    };
    let wide = inner.width >= 110;
    let rows: Vec<Row> = visible
        .iter()
        .enumerate()
        .skip(offset)
        .take(rows_fit)
        .map(|(i, item)| activity_row(app, item, Some(i) == selected, now, wide))
        .collect();
    let widths: Vec<Constraint> = if wide {
        vec![
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(22),
            Constraint::Length(5),
            Constraint::Length(14),
            Constraint::Min(20),
        ]
    } else {
        vec![
            Constraint::Length(4),
            Constraint::Length(8),
            Constraint::Length(10),
            // Narrow screens keep the id whole and cut the recipient.
            Constraint::Length(if inner.width >= 96 { 22 } else { 16 }),
            Constraint::Length(2),
            Constraint::Min(10),
        ]
    };
    let header: Vec<&str> = if wide {
        vec!["AGE", "CHANNEL", "STATUS", "RECIPIENT", "RETRY", "APP", "ID / REASON"]
    } else {
        vec!["AGE", "CHANNEL", "STATUS", "RECIPIENT", "RT", "ID / REASON"]
    };
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
        .column_spacing(1);
    frame.render_widget(table, inner);
}

fn activity_row<'a>(app: &App, item: &'a ActivityItem, selected: bool, now: i64, wide: bool) -> Row<'a> {
    let status = Cell::from(item.status.as_str()).style(Style::default().fg(status_color(item.status)));
    // The daemon sends a reason only with an item that failed, did not arrive or was complained
    // about (views::activity_item).
    let last = match &item.failure_reason {
        Some(reason) => {
            Cell::from(format!("{} {}", item.transaction_id, reason)).style(Style::default().fg(Color::Red))
        }
        _ => Cell::from(item.transaction_id.to_string()),
    };
    let mut cells = vec![
        Cell::from(age(now, item.created_at)),
        Cell::from(item.channel.as_str()),
        status,
        Cell::from(item.recipient_masked.as_str()),
        Cell::from(item.retry_count.to_string()),
    ];
    if wide {
        cells.push(Cell::from(item.application_name.as_str()));
    }
    cells.push(last);
    let mut style = Style::default();
    if app.feed.recently_changed(&item.transaction_id, now, HIGHLIGHT_MS) {
        style = style.add_modifier(Modifier::BOLD);
    }
    if selected {
        style = style.add_modifier(Modifier::REVERSED);
    }
    Row::new(cells).style(style)
}

fn draw_inbox(frame: &mut Frame, app: &App, area: Rect) {
    let Some(pane) = &app.inbox else { return };
    let title = format!(" Inbox · {} · {} unread · {} ", pane.user, pane.unread, pane.state.label());
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    frame.render_widget(inbox_list(pane, app.now_ms, inner.height as usize), inner);
}

fn inbox_list(pane: &InboxPane, now: i64, height: usize) -> Paragraph<'_> {
    if pane.items.is_empty() {
        let text = if pane.loaded { "No notifications yet (n sends a test)." } else { "Loading…" };
        return Paragraph::new(text).style(Style::default().fg(Color::DarkGray));
    }
    let lines: Vec<Line> = pane
        .items
        .iter()
        .take(height)
        .map(|item| {
            let marker = if item.archived {
                Span::styled("a ", Style::default().fg(Color::DarkGray))
            } else if item.is_read {
                Span::raw("  ")
            } else {
                Span::styled("● ", Style::default().fg(Color::Cyan))
            };
            let mut style = Style::default();
            if pane.is_fresh(item, now) {
                style = style.fg(Color::Black).bg(Color::Cyan);
            } else if !item.is_read {
                style = style.add_modifier(Modifier::BOLD);
            }
            Line::from(vec![
                marker,
                Span::styled(
                    format!("{:<4}", age(now, item.created_at)),
                    Style::default().fg(Color::DarkGray),
                ),
                Span::styled(item.title.clone(), style),
                Span::styled(format!("  {}", item.body), Style::default().fg(Color::Gray)),
            ])
        })
        .collect();
    Paragraph::new(lines)
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let line = if let Some(bulk) = &app.bulk {
        let text = match bulk {
            Bulk::Filter { expected } => format!(" retrying {expected} failed items…"),
            Bulk::Items { total, done, failed } => format!(" retrying {done}/{total} ({failed} refused)…"),
        };
        Line::from(Span::styled(text, Style::default().fg(Color::Yellow)))
    } else if let Some(message) = &app.message {
        let color = if message.error { Color::Red } else { Color::Green };
        Line::from(Span::styled(format!(" {}", message.text), Style::default().fg(color)))
    } else {
        Line::from(Span::styled(
            " Enter detail · r retry · R all · f filter · / find · u user · ? keys · q quit",
            Style::default().fg(Color::DarkGray),
        ))
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A centered box of `width`×`height` (clamped to the screen), cleared.
fn popup(frame: &mut Frame, width: u16, height: u16, title: &str) -> Rect {
    let screen = frame.area();
    let (w, h) = (width.min(screen.width), height.min(screen.height));
    let area = Rect {
        x: screen.x + (screen.width - w) / 2,
        y: screen.y + (screen.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, area);
    let block = Block::default().borders(Borders::ALL).title(format!(" {title} "));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    inner
}

fn draw_filter(frame: &mut Frame, app: &App) {
    let inner = popup(frame, 44, 6, "Filter");
    let show = |v: Option<String>| v.unwrap_or_else(|| "all".to_owned());
    let text = vec![
        Line::from(format!("c  channel: {}", show(app.filter.channel.map(|c| c.to_string())))),
        Line::from(format!("s  status:  {}", show(app.filter.status.map(|s| s.to_string())))),
        Line::from("x  clear    Enter/Esc  done").style(Style::default().fg(Color::DarkGray)),
    ];
    frame.render_widget(Paragraph::new(text), inner);
}

fn draw_prompt(frame: &mut Frame, app: &App) {
    let Some((prompt, text)) = &app.prompt else { return };
    let title = match prompt {
        Prompt::Search => "Search by id",
        Prompt::User => "Watch a user's inbox: user id",
    };
    let inner = popup(frame, 56, 3, title);
    frame.render_widget(Paragraph::new(format!("{text}█")), inner);
}

fn draw_question(frame: &mut Frame, app: &App) {
    let Some(question) = app.question_text() else { return };
    let inner = popup(frame, 70, 4, "Confirm");
    let text =
        vec![Line::from(question), Line::from("y yes · n no").style(Style::default().fg(Color::DarkGray))];
    frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), inner);
}

fn draw_detail(frame: &mut Frame, app: &App) {
    let screen = frame.area();
    let inner =
        popup(frame, screen.width.saturating_sub(4).min(110), screen.height.saturating_sub(2), "Detail");
    let detail = match &app.detail {
        None => return frame.render_widget(Paragraph::new("Loading…"), inner),
        Some(Err(e)) => {
            return frame
                .render_widget(Paragraph::new(e.as_str()).style(Style::default().fg(Color::Red)), inner);
        }
        Some(Ok(detail)) => detail,
    };
    let item = &detail.item;
    let mut lines = vec![
        Line::from(item.transaction_id.to_string()).style(Style::default().add_modifier(Modifier::BOLD)),
        Line::from(match &item.category {
            Some(category) => format!(
                "{} · {} · {} · category {category}",
                item.channel, item.recipient_masked, item.application_name
            ),
            None => format!("{} · {} · {}", item.channel, item.recipient_masked, item.application_name),
        }),
        Line::from(vec![
            Span::raw("status "),
            Span::styled(item.status.as_str(), Style::default().fg(status_color(item.status))),
            Span::raw(format!(
                " · retryable {} · retries {} · created {} ago",
                item.retryable,
                item.retry_count,
                age(app.now_ms, item.created_at)
            )),
        ]),
    ];
    if let Some(reason) = &item.failure_reason {
        // A suppression is a stop the tenant asked for, not an error: grey like its status.
        lines.push(
            Line::from(format!("reason: {reason}")).style(Style::default().fg(status_color(item.status))),
        );
    }
    if let Some(n) = detail.failed_verifications {
        lines.push(Line::from(format!("wrong codes: {n}")));
    }
    lines.push(Line::from(""));
    lines.push(
        Line::from("Attempts (the provider's answer):").style(Style::default().add_modifier(Modifier::BOLD)),
    );
    for attempt in &detail.attempts {
        let color = if attempt.outcome.is_failure() { Color::Red } else { Color::Green };
        let answer = attempt.error.as_deref().or(attempt.provider_message_id.as_deref()).unwrap_or("-");
        lines.push(Line::from(vec![
            Span::raw(format!("#{:<3}", attempt.attempt)),
            Span::raw(format!("{} ago  ", age(app.now_ms, attempt.finished_at))),
            Span::styled(format!("{:<18}", attempt.outcome.as_str()), Style::default().fg(color)),
            Span::raw(answer.to_owned()),
        ]));
    }
    if detail.attempts.is_empty() {
        lines.push(Line::from("none yet"));
    }
    if !detail.receipts.is_empty() {
        lines.push(Line::from(""));
        lines.push(
            Line::from("Receipts (what arrived):").style(Style::default().add_modifier(Modifier::BOLD)),
        );
    }
    for receipt in &detail.receipts {
        let said = match (&receipt.error_code, &receipt.detail) {
            (_, Some(detail)) => detail.clone(),
            (Some(code), None) => code.clone(),
            (None, None) => receipt.provider_status.clone(),
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{:<9}", receipt.provider.as_str())),
            Span::raw(format!("{} ago  ", age(app.now_ms, receipt.received_at))),
            Span::styled(
                format!("{:<12}", receipt.status.as_str()),
                Style::default().fg(status_color(receipt.status.into())),
            ),
            Span::raw(said),
        ]));
    }
    lines.push(Line::from(""));
    lines.push(Line::from("Esc close · r retry").style(Style::default().fg(Color::DarkGray)));
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

fn draw_help(frame: &mut Frame, scroll: usize) {
    let rows: Vec<Row> = KEYMAP
        .iter()
        .skip(scroll)
        .map(|b| {
            let keys: Vec<String> = b.keys.iter().map(|k| k.label()).collect();
            let mode = match b.mode {
                None => "anywhere".to_owned(),
                Some(Mode::Normal) => String::new(),
                Some(mode) => format!("{mode:?}").to_lowercase(),
            };
            Row::new(vec![Cell::from(keys.join(" ")), Cell::from(mode), Cell::from(b.help)])
        })
        .collect();
    let screen = frame.area();
    let inner =
        popup(frame, 90, (KEYMAP.len() as u16 + 3).min(screen.height), "Keys (↑↓ scroll, Esc closes)");
    let table = Table::new(rows, [Constraint::Length(14), Constraint::Length(9), Constraint::Min(20)])
        .header(Row::new(vec!["KEY", "WHERE", "DOES"]).style(Style::default().add_modifier(Modifier::BOLD)));
    frame.render_widget(table, inner);
}

#[cfg(test)]
pub(crate) mod tests {
    use herald_common::{
        api::{
            activity::{ActivityDetail, ActivityStatus},
            inbox::InboxItem,
            notifications::{AttemptOut, DeliveryStatus, ReceiptOut, ReceiptProvider},
        },
        client::Followed,
        ids::{InAppId, UserId},
        stream::StreamEvent,
    };
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::{app::Action, feed::tests::item, keymap::KeyAction};

    pub(crate) const NOW: i64 = 1_795_000_000_000;

    pub(crate) fn render(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| draw(frame, app)).unwrap();
        let buffer = terminal.backend().buffer();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_owned())
                    .collect::<String>()
                    .trim_end()
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// An app with fixed items (ids replaced by fixed ones so snapshots are stable).
    pub(crate) fn app() -> App {
        let mut app = App::new("http://127.0.0.1:8080".into(), NOW);
        app.activity_state = ConnectionState::Live;
        app.backfilled = true;
        let fixed = [
            "notif_01kqzs0000000000000000000a",
            "notif_01kqzs0000000000000000000b",
            "otp_01kqzs0000000000000000000c",
        ];
        let statuses = [ActivityStatus::Failed, ActivityStatus::Sent, ActivityStatus::Verified];
        let channels = [Channel::Email, Channel::Sms, Channel::Email];
        for (i, id) in fixed.iter().enumerate() {
            let mut it = item(channels[i], statuses[i], NOW - 5_000 - i as i64 * 60_000);
            it.transaction_id = herald_common::ids::TransactionId::parse(id).unwrap();
            app.update(Action::Activity(Followed::Event {
                id: None,
                event: StreamEvent::ActivityCreated(it),
            }));
        }
        app.update(Action::Tick(NOW + 4_000));
        app
    }

    #[test]
    fn the_activity_pane_at_80_by_24() {
        let app = app();
        let screen = render(&app, 80, 24);
        insta::assert_snapshot!("activity_80x24", screen);
        assert!(screen.contains("activity: live"));
        assert!(screen.contains("failed"));
    }

    #[test]
    fn the_activity_pane_wide_with_a_filter_and_a_selection() {
        let mut app = app();
        app.update(Action::Key(KeyAction::OpenFilter));
        app.update(Action::Key(KeyAction::CycleChannel));
        app.update(Action::Key(KeyAction::Close));
        app.update(Action::Key(KeyAction::Top));
        insta::assert_snapshot!("activity_filtered_120x30", render(&app, 120, 30));
    }

    #[test]
    fn the_inbox_pane_with_a_fresh_item() {
        let mut app = app();
        let ann = UserId::parse("ann").unwrap();
        app.inbox = Some(InboxPane::new(ann.clone()));
        let fresh = InboxItem {
            id: InAppId::parse("inapp_01kqzs0000000000000000000d").unwrap(),
            title: "Welcome".into(),
            body: "Your account is ready".into(),
            is_read: false,
            archived: false,
            created_at: Timestamp::from_millis(NOW),
            data: Default::default(),
        };
        let read = InboxItem {
            id: InAppId::parse("inapp_01kqzs0000000000000000000e").unwrap(),
            title: "Older".into(),
            is_read: true,
            ..fresh.clone()
        };
        let pane = app.inbox.as_mut().unwrap();
        pane.state = ConnectionState::Live;
        pane.created(read, NOW - 60_000);
        pane.created(fresh, NOW + 3_000);
        let screen = render(&app, 80, 24);
        insta::assert_snapshot!("inbox_80x24", screen);
        assert!(screen.contains("Inbox · ann · 1 unread · live"));
    }

    #[test]
    fn the_overlays() {
        let mut app = app();
        app.update(Action::Key(KeyAction::ToggleHelp));
        let help = render(&app, 100, 40);
        for binding in KEYMAP {
            assert!(help.contains(binding.help), "the help lists `{}`", binding.help);
        }
        app.update(Action::Key(KeyAction::Close));
        app.update(Action::Key(KeyAction::Top));
        app.update(Action::Key(KeyAction::Retry));
        insta::assert_snapshot!("confirm_80x24", render(&app, 80, 24));
        app.update(Action::Key(KeyAction::No));
        app.update(Action::Key(KeyAction::ShowDetail));
        let selected = app.selected_item().unwrap().clone();
        let attempt = |n, outcome, error: Option<&str>| AttemptOut {
            attempt: n,
            started_at: Timestamp::from_millis(NOW - 3_000),
            finished_at: Timestamp::from_millis(NOW - 2_000),
            outcome,
            provider_message_id: None,
            error: error.map(str::to_owned),
        };
        use herald_common::api::notifications::AttemptOutcome::*;
        app.update(Action::Detail(Ok(ActivityDetail {
            item: selected,
            updated_at: Timestamp::from_millis(NOW),
            attempts: vec![
                attempt(1, TransientFailure, Some("451 4.3.0 try again later")),
                attempt(2, TransientFailure, Some("451 4.3.0 try again later")),
            ],
            receipts: Vec::new(),
            failed_verifications: None,
        })));
        insta::assert_snapshot!("detail_80x24", render(&app, 80, 24));
        // An SMS the provider accepted, then reported undelivered, then delivered after all.
        let receipt = |status, said: &str, code: Option<&str>, detail: Option<&str>| ReceiptOut {
            provider: ReceiptProvider::Twilio,
            provider_status: said.to_owned(),
            status,
            error_code: code.map(str::to_owned),
            detail: detail.map(str::to_owned),
            received_at: Timestamp::from_millis(NOW - 1_000),
        };
        let mut item = app.selected_item().unwrap().clone();
        item.status = ActivityStatus::Delivered;
        app.update(Action::Detail(Ok(ActivityDetail {
            item,
            updated_at: Timestamp::from_millis(NOW),
            attempts: vec![attempt(1, Sent, None)],
            receipts: vec![
                receipt(
                    DeliveryStatus::Undelivered,
                    "undelivered",
                    Some("30003"),
                    Some("30003: Unreachable destination handset"),
                ),
                receipt(DeliveryStatus::Delivered, "delivered", None, None),
            ],
            failed_verifications: None,
        })));
        let screen = render(&app, 80, 24);
        insta::assert_snapshot!("detail_receipts_80x24", screen);
        assert!(screen.contains("Receipts (what arrived):"));
        assert!(screen.contains("30003: Unreachable destination handset"));
        // A newsletter stopped at send time: the category, and the reason in grey, no attempt.
        let mut item = app.selected_item().unwrap().clone();
        item.status = ActivityStatus::Suppressed;
        item.retryable = false;
        item.category = Some("newsletter".into());
        item.failure_reason = Some("recipient suppressed: hard_bounce since 2026-11-25".into());
        app.update(Action::Detail(Ok(ActivityDetail {
            item,
            updated_at: Timestamp::from_millis(NOW),
            attempts: vec![attempt(
                1,
                Suppressed,
                Some("recipient suppressed: hard_bounce since 2026-11-25"),
            )],
            receipts: Vec::new(),
            failed_verifications: None,
        })));
        let screen = render(&app, 80, 24);
        insta::assert_snapshot!("detail_suppressed_80x24", screen);
        assert!(screen.contains("category newsletter"));
        assert!(screen.contains("reason: recipient suppressed: hard_bounce since 2026-11-25"));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        terminal.draw(|frame| draw(frame, &app)).unwrap();
        let buffer = terminal.backend().buffer();
        let reason_row = (0..24).find(|&y| {
            (0..80).map(|x| buffer[(x, y)].symbol()).collect::<String>().contains("reason: recipient")
        });
        let reason_row = reason_row.expect("the reason is on screen");
        let first = (0..80).find(|&x| buffer[(x, reason_row)].symbol() == "r").unwrap();
        assert_eq!(
            buffer[(first, reason_row)].fg,
            Color::DarkGray,
            "a suppression's reason is grey, not red"
        );
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(10_000, Timestamp::from_millis(5_000)), "5s");
        assert_eq!(age(4_000_000, Timestamp::from_millis(0)), "1h");
        assert_eq!(age(0, Timestamp::from_millis(5_000)), "0s");
    }
}
