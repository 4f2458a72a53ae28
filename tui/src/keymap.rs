//! The keymap, as data: which key does what in which mode. The event loop looks keys up here,
//! and the help overlay (`?`) lists this table, so the two cannot disagree.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What the dashboard is showing, which decides what keys mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// The filter menu (`f`).
    Filter,
    /// Typing: a search or a user id.
    Input,
    /// A yes/no question.
    Confirm,
    /// An item's detail.
    Detail,
    /// The webhook endpoints and how their deliveries go.
    Webhooks,
    Help,
}

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAction {
    Quit,
    Up,
    Down,
    PageUp,
    PageDown,
    Top,
    Bottom,
    ShowDetail,
    Retry,
    RetryAllFailed,
    OpenFilter,
    CycleChannel,
    CycleStatus,
    ClearFilter,
    Search,
    PickUser,
    SendTest,
    CloseInbox,
    ShowWebhooks,
    ToggleHelp,
    Yes,
    No,
    Submit,
    Backspace,
    Close,
}

/// A key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Backspace,
}

impl Key {
    fn matches(self, event: &KeyEvent) -> bool {
        let ctrl = event.modifiers.contains(KeyModifiers::CONTROL);
        match (self, event.code) {
            (Key::Ctrl(c), KeyCode::Char(got)) => ctrl && got.eq_ignore_ascii_case(&c),
            (Key::Char(c), KeyCode::Char(got)) => !ctrl && got == c,
            (Key::Up, KeyCode::Up)
            | (Key::Down, KeyCode::Down)
            | (Key::PageUp, KeyCode::PageUp)
            | (Key::PageDown, KeyCode::PageDown)
            | (Key::Home, KeyCode::Home)
            | (Key::End, KeyCode::End)
            | (Key::Enter, KeyCode::Enter)
            | (Key::Esc, KeyCode::Esc)
            | (Key::Backspace, KeyCode::Backspace) => true,
            _ => false,
        }
    }

    pub fn label(self) -> String {
        match self {
            Key::Char(' ') => "space".to_owned(),
            Key::Char(c) => c.to_string(),
            Key::Ctrl(c) => format!("Ctrl-{}", c.to_ascii_uppercase()),
            Key::Up => "↑".to_owned(),
            Key::Down => "↓".to_owned(),
            Key::PageUp => "PgUp".to_owned(),
            Key::PageDown => "PgDn".to_owned(),
            Key::Home => "Home".to_owned(),
            Key::End => "End".to_owned(),
            Key::Enter => "Enter".to_owned(),
            Key::Esc => "Esc".to_owned(),
            Key::Backspace => "Backspace".to_owned(),
        }
    }
}

/// One line of the keymap.
pub struct Binding {
    /// `None`: every mode.
    pub mode: Option<Mode>,
    pub keys: &'static [Key],
    pub action: KeyAction,
    pub help: &'static str,
}

use Key::*;
use KeyAction as A;

const fn bind(mode: Option<Mode>, keys: &'static [Key], action: KeyAction, help: &'static str) -> Binding {
    Binding { mode, keys, action, help }
}

const N: Option<Mode> = Some(Mode::Normal);

/// Every key, in the order the help overlay lists them.
pub const KEYMAP: &[Binding] = &[
    bind(N, &[Up, Char('k')], A::Up, "previous item"),
    bind(N, &[Down, Char('j')], A::Down, "next item"),
    bind(N, &[PageUp], A::PageUp, "a page up"),
    bind(N, &[PageDown], A::PageDown, "a page down"),
    bind(N, &[Home, Char('g')], A::Top, "newest item"),
    bind(N, &[End, Char('G')], A::Bottom, "oldest item"),
    bind(N, &[Enter], A::ShowDetail, "the item's attempts and provider answers"),
    bind(N, &[Char('r')], A::Retry, "retry the item (failed, retryable)"),
    bind(N, &[Char('R')], A::RetryAllFailed, "retry every failed item the filter matches"),
    bind(N, &[Char('f')], A::OpenFilter, "filter by channel and status"),
    bind(N, &[Char('/')], A::Search, "search by id"),
    bind(N, &[Char('u')], A::PickUser, "watch a user's inbox"),
    bind(N, &[Char('n')], A::SendTest, "send the user a test in-app notification"),
    bind(N, &[Char('x')], A::CloseInbox, "close the inbox pane"),
    bind(N, &[Char('w')], A::ShowWebhooks, "webhook endpoints: status and recent success rate"),
    bind(N, &[Char('?')], A::ToggleHelp, "this help"),
    bind(N, &[Char('q')], A::Quit, "quit"),
    bind(Some(Mode::Filter), &[Char('c')], A::CycleChannel, "next channel"),
    bind(Some(Mode::Filter), &[Char('s')], A::CycleStatus, "next status"),
    bind(Some(Mode::Filter), &[Char('x')], A::ClearFilter, "clear the filter and search"),
    bind(Some(Mode::Filter), &[Enter, Esc, Char('f')], A::Close, "close the menu"),
    bind(Some(Mode::Input), &[Enter], A::Submit, "done"),
    bind(Some(Mode::Input), &[Esc], A::Close, "cancel"),
    bind(Some(Mode::Input), &[Backspace], A::Backspace, "delete a character"),
    bind(Some(Mode::Confirm), &[Char('y')], A::Yes, "yes"),
    bind(Some(Mode::Confirm), &[Char('n'), Esc], A::No, "no"),
    bind(Some(Mode::Detail), &[Esc, Enter, Char('q')], A::Close, "close the detail"),
    bind(Some(Mode::Detail), &[Char('r')], A::Retry, "retry this item"),
    bind(Some(Mode::Webhooks), &[Esc, Char('w'), Char('q')], A::Close, "close the webhooks panel"),
    bind(Some(Mode::Help), &[Up, Char('k')], A::Up, "scroll the help up"),
    bind(Some(Mode::Help), &[Down, Char('j')], A::Down, "scroll the help down"),
    bind(Some(Mode::Help), &[Esc, Char('?'), Char('q')], A::Close, "close the help"),
    bind(None, &[Ctrl('c')], A::Quit, "quit, from anywhere"),
];

/// What `event` means in `mode`, if anything.
pub fn lookup(mode: Mode, event: &KeyEvent) -> Option<KeyAction> {
    KEYMAP
        .iter()
        .filter(|b| b.mode.is_none_or(|m| m == mode))
        .find(|b| b.keys.iter().any(|k| k.matches(event)))
        .map(|b| b.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_mean_what_the_table_says_in_each_mode() {
        assert_eq!(lookup(Mode::Normal, &key(KeyCode::Char('r'))), Some(KeyAction::Retry));
        assert_eq!(lookup(Mode::Normal, &key(KeyCode::Char('R'))), Some(KeyAction::RetryAllFailed));
        assert_eq!(lookup(Mode::Filter, &key(KeyCode::Char('r'))), None, "not in the filter menu");
        assert_eq!(lookup(Mode::Confirm, &key(KeyCode::Char('y'))), Some(KeyAction::Yes));
        assert_eq!(lookup(Mode::Input, &key(KeyCode::Char('q'))), None, "typing, not quitting");
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        for mode in [Mode::Normal, Mode::Input, Mode::Confirm, Mode::Help] {
            assert_eq!(lookup(mode, &ctrl_c), Some(KeyAction::Quit), "{mode:?}");
        }
    }

    /// docs/TUI.md lists every key as the keymap has it.
    #[test]
    fn the_docs_list_every_key() {
        let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/TUI.md")).unwrap();
        for binding in KEYMAP {
            let keys: Vec<String> = binding.keys.iter().map(|k| format!("`{}`", k.label())).collect();
            let mode = match binding.mode {
                None => "anywhere".to_owned(),
                Some(Mode::Normal) => String::new(),
                Some(mode) => format!("{mode:?}").to_lowercase(),
            };
            let row = format!("| {} | {mode} | {} |", keys.join(" "), binding.help);
            assert!(docs.contains(&row), "docs/TUI.md lacks the row `{row}`");
        }
    }

    #[test]
    fn no_key_means_two_things_in_one_mode() {
        for (i, a) in KEYMAP.iter().enumerate() {
            for b in &KEYMAP[i + 1..] {
                let overlap = a.mode.is_none() || b.mode.is_none() || a.mode == b.mode;
                if overlap {
                    for key in a.keys {
                        assert!(
                            !b.keys.contains(key),
                            "{key:?} is bound to {:?} and {:?}",
                            a.action,
                            b.action
                        );
                    }
                }
            }
        }
    }
}
