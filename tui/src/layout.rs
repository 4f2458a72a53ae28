//! Where each part of the screen goes, as one function of the screen's size and whether the
//! inbox pane is open. Drawing places the widgets with it, and the state asks it how many rows
//! the activity table shows (a page move's length), so the two never disagree and drawing writes
//! nothing back.

use ratatui::layout::{Constraint, Layout, Rect};

/// The parts of the screen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Areas {
    /// Connection states, sparklines, totals.
    pub header: Rect,
    /// The activity table, with its border.
    pub activity: Rect,
    /// The inbox pane, with its border, when it is open.
    pub inbox: Option<Rect>,
    /// The message or key hints.
    pub footer: Rect,
}

/// The body is split side by side from this width, else one above the other.
const SIDE_BY_SIDE: u16 = 140;

pub fn areas(screen: Rect, inbox_open: bool) -> Areas {
    let [header, body, footer] =
        Layout::vertical([Constraint::Length(7), Constraint::Min(6), Constraint::Length(1)]).areas(screen);
    let (activity, inbox) = match inbox_open {
        true if body.width >= SIDE_BY_SIDE => {
            let [activity, inbox] =
                Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)]).areas(body);
            (activity, Some(inbox))
        }
        true => {
            let [activity, inbox] =
                Layout::vertical([Constraint::Percentage(58), Constraint::Percentage(42)]).areas(body);
            (activity, Some(inbox))
        }
        false => (body, None),
    };
    Areas { header, activity, inbox, footer }
}

/// The item rows the activity table shows in `activity`: inside the border, below the header row.
pub fn table_rows(activity: Rect) -> usize {
    activity.height.saturating_sub(2 + 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_shares_the_body() {
        let alone = areas(Rect::new(0, 0, 80, 24), false);
        assert_eq!((alone.header.height, alone.footer.height, alone.inbox), (7, 1, None));
        assert_eq!(table_rows(alone.activity), 24 - 7 - 1 - 3);
        let below = areas(Rect::new(0, 0, 80, 24), true);
        assert!(below.inbox.is_some_and(|inbox| inbox.y > below.activity.y));
        let beside = areas(Rect::new(0, 0, 160, 40), true);
        assert!(beside.inbox.is_some_and(|inbox| inbox.x > beside.activity.x));
    }
}
