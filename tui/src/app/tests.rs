//! The dashboard's logic without a terminal: actions in, state and commands out.
use herald_common::{
    api::inbox::InboxItem,
    ids::{ConnectionId, InAppId},
    stream::ConnectionReady,
};

use super::*;
use crate::feed::tests::item;

fn event(event: StreamEvent) -> Action {
    Action::Activity(Followed::Event { id: None, event })
}

fn app_with(items: &[ActivityItem]) -> App {
    let mut app = App::new("http://h".into(), 10_000);
    for i in items {
        app.update(event(StreamEvent::ActivityCreated(i.clone())));
    }
    app
}

#[test]
fn live_changes_update_rows_in_place_and_count() {
    let queued = item(Channel::Email, ActivityStatus::Queued, 9_000);
    let mut app = app_with(std::slice::from_ref(&queued));
    let mut sent = queued.clone();
    sent.status = ActivityStatus::Sent;
    app.update(event(StreamEvent::ActivityUpdated(sent)));
    assert_eq!(app.visible().len(), 1);
    assert_eq!(app.visible()[0].status, ActivityStatus::Sent);
    assert!(app.feed.recently_changed(&queued.transaction_id, 10_000, HIGHLIGHT_MS));
    assert_eq!(app.stats.total_created, 1);
    // An older page never overrides the live state.
    let page = ActivityList { total_count: 1, page: 1, limit: 20, items: vec![queued.clone()] };
    app.update(Action::ActivityPage(Ok(page)));
    assert_eq!(app.visible()[0].status, ActivityStatus::Sent);
}

#[test]
fn retry_asks_first_and_only_for_failed_retryable_items() {
    let failed = item(Channel::Email, ActivityStatus::Failed, 2);
    let sent = item(Channel::Sms, ActivityStatus::Sent, 1);
    let mut app = app_with(&[failed.clone(), sent.clone()]);
    app.update(Action::Key(KeyAction::Top));
    assert_eq!(app.selected.as_ref(), Some(&failed.transaction_id));
    assert!(app.update(Action::Key(KeyAction::Retry)).is_empty(), "a question first");
    assert_eq!(app.mode, Mode::Confirm);
    assert_eq!(app.question_text().unwrap(), format!("Retry {}?", failed.transaction_id));
    assert_eq!(app.update(Action::Key(KeyAction::Yes)), vec![Command::Retry(failed.transaction_id.clone())]);
    assert_eq!(app.mode, Mode::Normal);
    app.update(Action::Retried {
        id: failed.transaction_id.clone(),
        result: Err("not_retryable (409): Only failed, retryable notifications can be retried".into()),
    });
    assert!(app.message.as_ref().unwrap().error);
    app.update(Action::Key(KeyAction::Down));
    assert!(app.update(Action::Key(KeyAction::Retry)).is_empty());
    assert_eq!(app.mode, Mode::Normal, "no question for a sent item");
    assert!(app.message.as_ref().unwrap().text.contains("only failed, undelivered or bounced items"));
}

#[test]
fn retrying_every_failed_item_counts_confirms_and_shows_progress() {
    let mut app = app_with(&[]);
    app.update(Action::Key(KeyAction::OpenFilter));
    app.update(Action::Key(KeyAction::CycleChannel));
    app.update(Action::Key(KeyAction::Close));
    assert_eq!(app.filter.channel, Some(Channel::Email));
    assert_eq!(
        app.update(Action::Key(KeyAction::RetryAllFailed)),
        vec![Command::FindFailed { channel: Some(Channel::Email) }]
    );
    let ids: Vec<TransactionId> = (0..3).map(|_| herald_common::ids::NotificationId::new().into()).collect();
    // The channel is the one asked about, even if the filter moved on meanwhile.
    app.filter.channel = Some(Channel::Sms);
    app.update(Action::FailedFound { channel: Some(Channel::Email), result: Ok(ids) });
    assert_eq!(app.question_text().unwrap(), "Retry 3 failed, retryable deliveries matching the filter?");
    // No search: one call of the server's bulk retry.
    assert_eq!(
        app.update(Action::Key(KeyAction::Yes)),
        vec![Command::RetryFailed { channel: Some(Channel::Email), expected: 3 }]
    );
    assert_eq!(app.bulk, Some(Bulk::Filter { expected: 3 }));
    let queued = BulkRetryOut {
        status: herald_common::api::activity::RetryStatus::RetryQueued,
        count: 3,
        queued_at: herald_common::Timestamp::from_millis(10_000),
    };
    app.update(Action::FailedRetried(Ok(queued)));
    assert_eq!(app.bulk, None);
    assert_eq!(app.message.as_ref().unwrap().text, "3 items queued again");
    app.update(Action::FailedRetried(Err("insufficient_scope (403)".into())));
    assert!(app.message.as_ref().unwrap().error);
}

#[test]
fn retrying_every_failed_item_honours_the_status_and_the_search() {
    let mut app = app_with(&[]);
    app.filter.status = Some(ActivityStatus::Sent);
    assert!(
        app.update(Action::Key(KeyAction::RetryAllFailed)).is_empty(),
        "a sent-only view has no failures"
    );
    assert_eq!(app.message.as_ref().unwrap().text, "no failed, retryable items match the filter");

    app.filter.status = Some(ActivityStatus::Failed);
    assert_eq!(
        app.update(Action::Key(KeyAction::RetryAllFailed)),
        vec![Command::FindFailed { channel: None }]
    );
    let ids: Vec<TransactionId> = (0..3).map(|_| herald_common::ids::NotificationId::new().into()).collect();
    app.filter.search = ids[1].as_str()[6..].to_ascii_uppercase();
    app.update(Action::FailedFound { channel: None, result: Ok(ids.clone()) });
    assert_eq!(app.question_text().unwrap(), "Retry 1 failed, retryable delivery matching the filter?");
    // The bulk retry cannot search: the item the search picked, on its own.
    assert_eq!(app.update(Action::Key(KeyAction::Yes)), vec![Command::RetryMany(vec![ids[1].clone()])]);
    assert_eq!(app.bulk, Some(Bulk::Items { total: 1, done: 0, failed: 0 }));
    app.update(Action::BulkProgress { ok: false });
    assert_eq!(app.bulk, None);
    assert_eq!(app.message.as_ref().unwrap().text, "0 queued again, 1 refused");

    app.filter.search = "nothing-like-an-id".into();
    app.update(Action::FailedFound { channel: None, result: Ok(ids) });
    assert_eq!(app.mode, Mode::Normal);
    assert_eq!(app.message.as_ref().unwrap().text, "no failed, retryable items match the filter");
}

#[test]
fn search_filters_as_typed_and_escape_clears_it() {
    let a = item(Channel::Email, ActivityStatus::Sent, 2);
    let b = item(Channel::Email, ActivityStatus::Sent, 1);
    let mut app = app_with(&[a.clone(), b]);
    app.update(Action::Key(KeyAction::Search));
    for c in a.transaction_id.as_str()[24..].chars() {
        app.update(Action::Input(c));
    }
    assert_eq!(app.visible().len(), 1);
    app.update(Action::Key(KeyAction::Close));
    assert_eq!(app.visible().len(), 2);
    assert_eq!(app.mode, Mode::Normal);
}

#[test]
fn a_user_is_picked_and_their_stream_applied() {
    let mut app = app_with(&[]);
    app.update(Action::Key(KeyAction::PickUser));
    for c in "ann".chars() {
        app.update(Action::Input(c));
    }
    let ann = UserId::parse("ann").unwrap();
    assert_eq!(app.update(Action::Key(KeyAction::Submit)), vec![Command::OpenInbox(ann.clone())]);
    assert_eq!(app.update(Action::Key(KeyAction::SendTest)), vec![Command::SendTest(ann.clone())]);
    let ready =
        ConnectionReady { connection_id: ConnectionId::new(), unread_count: Some(4), last_event_id: None };
    let followed = |event| Action::Inbox { user: ann.clone(), followed: Followed::Event { id: None, event } };
    app.update(followed(StreamEvent::Ready(ready)));
    let new = InboxItem {
        id: InAppId::new(),
        title: "Hello".into(),
        body: "b".into(),
        is_read: false,
        archived: false,
        created_at: herald_common::Timestamp::from_millis(10_000),
        data: Default::default(),
    };
    app.update(followed(StreamEvent::NotificationCreated(new.clone())));
    let pane = app.inbox.as_ref().unwrap();
    assert_eq!((pane.unread, pane.items.len()), (5, 1));
    assert!(pane.is_fresh(&new, 10_500));
    let mut unknown = new.clone();
    unknown.id = InAppId::new();
    assert_eq!(
        app.update(followed(StreamEvent::NotificationUpdated(unknown))),
        vec![Command::ReloadInbox(ann)]
    );
    app.update(Action::Key(KeyAction::PickUser));
    app.update(Action::Input(' '));
    app.update(Action::Key(KeyAction::Submit));
    assert!(app.message.as_ref().unwrap().error, "a blank user id is refused");
}

#[test]
fn a_page_move_is_the_rows_the_table_shows_on_this_screen() {
    let items: Vec<ActivityItem> =
        (0..60).map(|i| item(Channel::Email, ActivityStatus::Sent, 60 - i)).collect();
    let mut app = app_with(&items);
    app.update(Action::Resize(100, 30));
    app.update(Action::Key(KeyAction::Top));
    app.update(Action::Key(KeyAction::PageDown));
    // 30 rows: 7 of header, 1 of footer, the table's border and header row.
    let rows = 30 - 7 - 1 - 3;
    assert_eq!(app.selected.as_ref(), Some(&items[rows].transaction_id));
    // The inbox pane takes part of the body: a page is shorter.
    app.inbox = Some(InboxPane::new(UserId::parse("ann").unwrap()));
    assert!(app.page_rows() < rows);
}

#[test]
fn quitting_works_from_any_mode() {
    let mut app = app_with(&[]);
    app.update(Action::Key(KeyAction::ToggleHelp));
    assert_eq!(app.update(Action::Key(KeyAction::Quit)), vec![Command::Quit]);
    assert!(app.quit);
}
