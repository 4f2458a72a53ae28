//! The dashboard's state, and how it changes. No I/O here: keys and network results arrive as
//! [`Action`]s, [`App::update`] applies them and returns the [`Command`]s (network work) the
//! event loop should start, whose results come back as actions. So every behaviour is a plain
//! function of the state, tested without a terminal or a server.

use herald_common::{
    api::{
        activity::{ActivityDetail, ActivityItem, ActivityList, ActivityStatus, BulkRetryOut, RetryQueued},
        inbox::InboxOut,
        notifications::{Channel, NotificationAccepted},
    },
    client::{ConnectionState, Followed},
    ids::{TransactionId, UserId},
    stream::StreamEvent,
};

use crate::{
    feed::{Feed, Filter, Stats, Upsert},
    inbox::InboxPane,
    keymap::{KeyAction, Mode},
    layout,
    webhooks::{self, EndpointHealth},
};

/// How long a changed row stays highlighted.
pub const HIGHLIGHT_MS: i64 = 3_000;

/// What the event loop feeds the state.
#[derive(Debug)]
pub enum Action {
    Key(KeyAction),
    /// A character typed into a prompt.
    Input(char),
    /// Time passed (ages and sparklines move on): the wall clock in ms.
    Tick(i64),
    /// The terminal's size (columns, rows): at the start and on every resize.
    Resize(u16, u16),
    /// The first page of the feed.
    ActivityPage(Result<ActivityList, String>),
    Activity(Followed),
    Detail(Result<ActivityDetail, String>),
    Retried {
        id: TransactionId,
        result: Result<RetryQueued, String>,
    },
    /// The failed, retryable items of `channel` (the filter's when `R` was pressed).
    FailedFound {
        channel: Option<Channel>,
        result: Result<Vec<TransactionId>, String>,
    },
    /// The bulk retry of the filter's failed items is done.
    FailedRetried(Result<BulkRetryOut, String>),
    /// One of the retries of items one at a time is done.
    BulkProgress {
        ok: bool,
    },
    InboxPage {
        user: UserId,
        result: Result<InboxOut, String>,
    },
    Inbox {
        user: UserId,
        followed: Followed,
    },
    TestSent(Result<NotificationAccepted, String>),
    /// The webhook endpoints and their recent deliveries.
    Webhooks(Result<Vec<EndpointHealth>, String>),
}

/// Network work for the event loop to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    LoadDetail(TransactionId),
    Retry(TransactionId),
    FindFailed {
        channel: Option<Channel>,
    },
    /// The server's bulk retry for `channel`'s failed, retryable items (`expected` were found).
    RetryFailed {
        channel: Option<Channel>,
        expected: usize,
    },
    /// Each item retried on its own (what an id search picked, which the bulk retry cannot).
    RetryMany(Vec<TransactionId>),
    /// Mint a token for the user, load the inbox and follow its stream.
    OpenInbox(UserId),
    /// Load the inbox page again (after a resync, or an unknown item changed).
    ReloadInbox(UserId),
    CloseInbox,
    SendTest(UserId),
    /// The endpoints, and each one's newest messages.
    LoadWebhooks,
    Quit,
}

/// What a question is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Question {
    RetryOne(TransactionId),
    /// Every failed, retryable item of the channel (`count` were found): one bulk retry.
    RetryFailed {
        channel: Option<Channel>,
        count: usize,
    },
    /// These items, each on its own.
    RetryMany(Vec<TransactionId>),
}

/// What a prompt is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prompt {
    Search,
    User,
}

/// A retry of many items under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bulk {
    /// The server's bulk retry of the `expected` items found.
    Filter { expected: usize },
    /// Items retried one by one: how many, done and refused so far.
    Items { total: usize, done: usize, failed: usize },
}

/// The line at the bottom: the last thing that happened (for [`MESSAGE_MS`], then the key hints
/// are back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub text: String,
    pub error: bool,
    pub at_ms: i64,
}

/// How long a message stays.
pub const MESSAGE_MS: i64 = 6_000;

pub struct App {
    pub url: String,
    pub now_ms: i64,
    pub mode: Mode,
    pub feed: Feed,
    pub stats: Stats,
    pub filter: Filter,
    /// The selected item (kept by id, so new items arriving above do not move it).
    pub selected: Option<TransactionId>,
    pub activity_state: ConnectionState,
    /// Whether the first page arrived.
    pub backfilled: bool,
    pub inbox: Option<InboxPane>,
    pub prompt: Option<(Prompt, String)>,
    pub question: Option<Question>,
    pub detail: Option<Result<ActivityDetail, String>>,
    pub bulk: Option<Bulk>,
    pub message: Option<Message>,
    /// The terminal's size (columns, rows), for page moves.
    pub screen: (u16, u16),
    /// How far the help overlay is scrolled.
    pub help_scroll: usize,
    /// The webhooks panel's last load (`None` until one arrives).
    pub webhooks: Option<Result<Vec<EndpointHealth>, String>>,
    /// When the panel last asked for a load.
    pub webhooks_asked_ms: i64,
    pub quit: bool,
}

fn next_in<T: Copy + PartialEq>(all: &[T], current: Option<T>) -> Option<T> {
    match current {
        None => all.first().copied(),
        Some(c) => all.iter().position(|x| *x == c).and_then(|i| all.get(i + 1)).copied(),
    }
}

impl App {
    pub fn new(url: String, now_ms: i64) -> Self {
        Self {
            url,
            now_ms,
            mode: Mode::Normal,
            feed: Feed::default(),
            stats: Stats::default(),
            filter: Filter::default(),
            selected: None,
            activity_state: ConnectionState::Connecting,
            backfilled: false,
            inbox: None,
            prompt: None,
            question: None,
            detail: None,
            bulk: None,
            message: None,
            screen: (80, 24),
            help_scroll: 0,
            webhooks: None,
            webhooks_asked_ms: 0,
            quit: false,
        }
    }

    fn say(&mut self, text: impl Into<String>) {
        self.message = Some(Message { text: text.into(), error: false, at_ms: self.now_ms });
    }

    fn complain(&mut self, text: impl Into<String>) {
        self.message = Some(Message { text: text.into(), error: true, at_ms: self.now_ms });
    }

    /// The items shown, newest first.
    pub fn visible(&self) -> Vec<&ActivityItem> {
        self.feed.visible(&self.filter).collect()
    }

    /// The selected row's index among the visible items (the first when none was picked, or
    /// the picked one is filtered out or gone).
    pub fn selected_index(&self, visible: &[&ActivityItem]) -> Option<usize> {
        if visible.is_empty() {
            return None;
        }
        let picked =
            self.selected.as_ref().and_then(|id| visible.iter().position(|i| &i.transaction_id == id));
        Some(picked.unwrap_or(0))
    }

    pub fn selected_item(&self) -> Option<&ActivityItem> {
        let visible = self.visible();
        self.selected_index(&visible).map(|i| visible[i])
    }

    /// Rows the activity table shows on this screen: a page move's length.
    pub fn page_rows(&self) -> usize {
        let (width, height) = self.screen;
        let areas = layout::areas(ratatui::layout::Rect::new(0, 0, width, height), self.inbox.is_some());
        layout::table_rows(areas.activity).max(1)
    }

    fn move_selection(&mut self, delta: isize) {
        let visible = self.visible();
        if visible.is_empty() {
            return;
        }
        let current = self.selected_index(&visible);
        let target = match current {
            None => 0,
            Some(i) => (i as isize + delta).clamp(0, visible.len() as isize - 1) as usize,
        };
        self.selected = Some(visible[target].transaction_id.clone());
    }

    fn select_end(&mut self, last: bool) {
        let visible = self.visible();
        let item = if last { visible.last() } else { visible.first() };
        self.selected = item.map(|i| i.transaction_id.clone());
    }

    pub fn update(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::Key(key) => self.on_key(key),
            Action::Input(c) => {
                if let Some((_, text)) = &mut self.prompt
                    && text.chars().count() < 128
                {
                    text.push(c);
                    self.apply_prompt_live();
                }
                Vec::new()
            }
            Action::Tick(now_ms) => {
                self.now_ms = now_ms;
                self.stats.advance(now_ms);
                self.feed.expire_highlights(now_ms, HIGHLIGHT_MS);
                if self.message.as_ref().is_some_and(|m| now_ms - m.at_ms > MESSAGE_MS) {
                    self.message = None;
                }
                if self.mode == Mode::Webhooks && now_ms - self.webhooks_asked_ms >= webhooks::REFRESH_MS {
                    self.webhooks_asked_ms = now_ms;
                    return vec![Command::LoadWebhooks];
                }
                Vec::new()
            }
            Action::Resize(width, height) => {
                self.screen = (width, height);
                Vec::new()
            }
            Action::ActivityPage(Ok(page)) => {
                // Older than what the stream brings: it never overrides a newer state.
                for item in page.items {
                    if self.feed.get(&item.transaction_id).is_none() {
                        self.feed.upsert(item, i64::MIN / 2);
                    }
                }
                self.backfilled = true;
                Vec::new()
            }
            Action::ActivityPage(Err(e)) => {
                self.complain(format!("cannot load the feed: {e}"));
                Vec::new()
            }
            Action::Activity(followed) => self.on_activity(followed),
            Action::Detail(result) => {
                if self.mode == Mode::Detail {
                    self.detail = Some(result);
                }
                Vec::new()
            }
            Action::Retried { id, result } => {
                match result {
                    Ok(queued) => self.say(format!("202 {}: {} queued again", queued.status, id)),
                    Err(e) => self.complain(format!("{id}: {e}")),
                }
                Vec::new()
            }
            Action::FailedFound { channel, result: Ok(mut ids) } => {
                // The id search narrows what the API found (it filters by channel).
                let search = self.filter.search.to_ascii_lowercase();
                ids.retain(|id| id.as_str().to_ascii_lowercase().contains(&search));
                if ids.is_empty() {
                    self.say("no failed, retryable items match the filter");
                    return Vec::new();
                }
                // The bulk retry takes the channel but cannot search: what a search picked is
                // retried one by one.
                self.question = Some(if search.is_empty() {
                    Question::RetryFailed { channel, count: ids.len() }
                } else {
                    Question::RetryMany(ids)
                });
                self.mode = Mode::Confirm;
                Vec::new()
            }
            Action::FailedFound { result: Err(e), .. } => {
                self.complain(format!("cannot list the failed items: {e}"));
                Vec::new()
            }
            Action::FailedRetried(result) => {
                self.bulk = None;
                match result {
                    Ok(queued) => self.say(format!("{} items queued again", queued.count)),
                    Err(e) => self.complain(format!("the bulk retry was refused: {e}")),
                }
                Vec::new()
            }
            Action::BulkProgress { ok } => {
                if let Some(Bulk::Items { total, done, failed }) = &mut self.bulk {
                    *done += 1;
                    *failed += usize::from(!ok);
                    if *done >= *total {
                        let (total, failed) = (*total, *failed);
                        self.bulk = None;
                        if failed == 0 {
                            self.say(format!("{total} items queued again"));
                        } else {
                            self.complain(format!("{} queued again, {failed} refused", total - failed));
                        }
                    }
                }
                Vec::new()
            }
            Action::InboxPage { user, result } => {
                match (self.inbox.as_mut().filter(|p| p.user == user), result) {
                    (Some(pane), Ok(page)) => pane.load(page),
                    (Some(_), Err(e)) => self.complain(format!("cannot load {user}'s inbox: {e}")),
                    (None, _) => {}
                }
                Vec::new()
            }
            Action::Inbox { user, followed } => self.on_inbox(user, followed),
            Action::TestSent(Ok(accepted)) => {
                self.say(format!("test notification {} accepted", accepted.notification_id));
                Vec::new()
            }
            Action::TestSent(Err(e)) => {
                self.complain(format!("the test notification was refused: {e}"));
                Vec::new()
            }
            Action::Webhooks(result) => {
                self.webhooks = Some(result);
                Vec::new()
            }
        }
    }

    fn on_activity(&mut self, followed: Followed) -> Vec<Command> {
        match followed {
            Followed::State(state) => self.activity_state = state,
            Followed::Event {
                event: StreamEvent::ActivityCreated(item) | StreamEvent::ActivityUpdated(item),
                ..
            } => {
                let now = self.now_ms;
                let before = match self.feed.upsert(item.clone(), now) {
                    Upsert::New => None,
                    Upsert::Changed(before) => Some(before),
                    Upsert::Same => return Vec::new(),
                };
                self.stats.record(&item, before, now);
            }
            Followed::Event { .. } => {}
        }
        Vec::new()
    }

    fn on_inbox(&mut self, user: UserId, followed: Followed) -> Vec<Command> {
        let now = self.now_ms;
        let Some(pane) = self.inbox.as_mut().filter(|p| p.user == user) else { return Vec::new() };
        match followed {
            Followed::State(state) => pane.state = state,
            Followed::Event { event: StreamEvent::Ready(ready), .. } => {
                if let Some(unread) = ready.unread_count {
                    pane.unread = unread;
                }
            }
            Followed::Event { event: StreamEvent::NotificationCreated(item), .. } => pane.created(item, now),
            Followed::Event { event: StreamEvent::NotificationUpdated(item), .. } => {
                if !pane.updated(item) {
                    return vec![Command::ReloadInbox(user)];
                }
            }
            // The stream cannot go on without a gap: the page is loaded again.
            Followed::Event { event: StreamEvent::Resync(_), .. } => return vec![Command::ReloadInbox(user)],
            Followed::Event { .. } => {}
        }
        Vec::new()
    }

    fn on_key(&mut self, key: KeyAction) -> Vec<Command> {
        use KeyAction as K;
        match (self.mode, key) {
            (_, K::Quit) => {
                self.quit = true;
                return vec![Command::Quit];
            }
            (Mode::Normal, K::Up) => self.move_selection(-1),
            (Mode::Normal, K::Down) => self.move_selection(1),
            (Mode::Normal, K::PageUp) => self.move_selection(-(self.page_rows() as isize)),
            (Mode::Normal, K::PageDown) => self.move_selection(self.page_rows() as isize),
            (Mode::Normal, K::Top) => self.select_end(false),
            (Mode::Normal, K::Bottom) => self.select_end(true),
            (Mode::Normal, K::ShowDetail) => {
                if let Some(item) = self.selected_item() {
                    let id = item.transaction_id.clone();
                    self.detail = None;
                    self.mode = Mode::Detail;
                    return vec![Command::LoadDetail(id)];
                }
            }
            (Mode::Normal | Mode::Detail, K::Retry) => return self.ask_retry_one(),
            (Mode::Normal, K::RetryAllFailed) => {
                // Every failed (or undelivered, bounced) item the filter shows: none when it shows
                // another status.
                if self.filter.status.is_some_and(|s| !ActivityStatus::RETRIED.contains(&s)) {
                    self.say("no failed, retryable items match the filter");
                    return Vec::new();
                }
                self.say("looking for failed, retryable items…");
                return vec![Command::FindFailed { channel: self.filter.channel }];
            }
            (Mode::Normal, K::OpenFilter) => self.mode = Mode::Filter,
            (Mode::Normal, K::Search) => {
                self.prompt = Some((Prompt::Search, self.filter.search.clone()));
                self.mode = Mode::Input;
            }
            (Mode::Normal, K::PickUser) => {
                self.prompt = Some((Prompt::User, String::new()));
                self.mode = Mode::Input;
            }
            (Mode::Normal, K::SendTest) => match &self.inbox {
                Some(pane) => return vec![Command::SendTest(pane.user.clone())],
                None => self.complain("pick a user first (u)"),
            },
            (Mode::Normal, K::CloseInbox) if self.inbox.take().is_some() => return vec![Command::CloseInbox],
            (Mode::Normal, K::ShowWebhooks) => {
                self.mode = Mode::Webhooks;
                self.webhooks_asked_ms = self.now_ms;
                return vec![Command::LoadWebhooks];
            }
            (Mode::Normal, K::ToggleHelp) => {
                self.help_scroll = 0;
                self.mode = Mode::Help;
            }
            (Mode::Help, K::Up) => self.help_scroll = self.help_scroll.saturating_sub(1),
            (Mode::Help, K::Down) => {
                self.help_scroll = (self.help_scroll + 1).min(crate::keymap::KEYMAP.len().saturating_sub(1))
            }
            (Mode::Filter, K::CycleChannel) => {
                self.filter.channel = next_in(Channel::ALL, self.filter.channel)
            }
            (Mode::Filter, K::CycleStatus) => {
                self.filter.status = next_in(ActivityStatus::ALL, self.filter.status)
            }
            (Mode::Filter, K::ClearFilter) => self.filter = Filter::default(),
            (Mode::Input, K::Backspace) => {
                if let Some((_, text)) = &mut self.prompt {
                    text.pop();
                    self.apply_prompt_live();
                }
            }
            (Mode::Input, K::Submit) => return self.submit_prompt(),
            (Mode::Input, K::Close) => {
                if let Some((Prompt::Search, _)) = self.prompt.take() {
                    self.filter.search.clear();
                }
                self.mode = Mode::Normal;
            }
            (Mode::Confirm, K::Yes) => return self.answer(true),
            (Mode::Confirm, K::No) => return self.answer(false),
            (Mode::Detail, K::Close) => {
                self.detail = None;
                self.mode = Mode::Normal;
            }
            (Mode::Filter | Mode::Help | Mode::Webhooks, K::Close) => self.mode = Mode::Normal,
            _ => {}
        }
        Vec::new()
    }

    /// The search filters as it is typed.
    fn apply_prompt_live(&mut self) {
        if let Some((Prompt::Search, text)) = &self.prompt {
            self.filter.search = text.trim().to_owned();
        }
    }

    fn submit_prompt(&mut self) -> Vec<Command> {
        self.mode = Mode::Normal;
        match self.prompt.take() {
            Some((Prompt::User, text)) => match UserId::parse(text.trim()) {
                Ok(user) => {
                    self.inbox = Some(InboxPane::new(user.clone()));
                    self.say(format!("watching {user}'s inbox"));
                    vec![Command::OpenInbox(user)]
                }
                Err(e) => {
                    self.complain(format!("`{}` is not a user id: {e}", text.trim()));
                    Vec::new()
                }
            },
            Some((Prompt::Search, text)) => {
                self.filter.search = text.trim().to_owned();
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    fn ask_retry_one(&mut self) -> Vec<Command> {
        let Some(item) = self.selected_item() else {
            self.complain("select an item first");
            return Vec::new();
        };
        let retried = ActivityStatus::RETRIED.contains(&item.status);
        if !retried || !item.retryable {
            let why = if item.transaction_id.is_otp() {
                "OTP codes are never retried: ask for a new code".to_owned()
            } else if !retried {
                format!(
                    "only failed, undelivered or bounced items can be retried (this one is {})",
                    item.status
                )
            } else {
                "this failure is permanent: retrying would not help".to_owned()
            };
            self.complain(why);
            return Vec::new();
        }
        self.question = Some(Question::RetryOne(item.transaction_id.clone()));
        self.mode = Mode::Confirm;
        Vec::new()
    }

    fn answer(&mut self, yes: bool) -> Vec<Command> {
        self.mode = if self.detail.is_some() { Mode::Detail } else { Mode::Normal };
        let Some(question) = self.question.take() else { return Vec::new() };
        if !yes {
            self.say("nothing retried");
            return Vec::new();
        }
        match question {
            Question::RetryOne(id) => {
                self.say(format!("retrying {id}…"));
                vec![Command::Retry(id)]
            }
            Question::RetryFailed { channel, count } => {
                self.bulk = Some(Bulk::Filter { expected: count });
                vec![Command::RetryFailed { channel, expected: count }]
            }
            Question::RetryMany(ids) => {
                self.bulk = Some(Bulk::Items { total: ids.len(), done: 0, failed: 0 });
                vec![Command::RetryMany(ids)]
            }
        }
    }

    /// The question being asked, as a sentence.
    pub fn question_text(&self) -> Option<String> {
        match self.question.as_ref()? {
            Question::RetryOne(id) => Some(format!("Retry {id}?")),
            Question::RetryFailed { count, .. } => Some(self.retry_many_text(*count)),
            Question::RetryMany(ids) => Some(self.retry_many_text(ids.len())),
        }
    }

    fn retry_many_text(&self, count: usize) -> String {
        let scope = if self.filter.is_empty() { "" } else { " matching the filter" };
        let noun = if count == 1 { "delivery" } else { "deliveries" };
        format!("Retry {count} failed, retryable {noun}{scope}?")
    }
}

#[cfg(test)]
mod tests;
