//! The network side: every [`Command`] runs as a task of its own and reports back as an
//! [`Action`] on the loop's channel, so drawing never waits on the network. The two live streams
//! are followers ([`Client::follow`]) forwarding their reports.

use std::time::Duration;

use futures_util::{StreamExt, stream};
use herald_common::{
    api::{
        activity::ActivityStatus,
        notifications::{Channel, NotificationIn},
    },
    client::{ActivityQuery, Client, ClientError, FollowOptions},
    ids::{TransactionId, UserId},
};
use tokio::{sync::mpsc, task::JoinHandle};

use crate::app::{Action, Command};

/// A short text for an error of a call: the problem's code, status and detail.
fn describe(error: ClientError) -> String {
    match error.problem() {
        Some(p) => match &p.detail {
            Some(detail) => format!("{} ({}): {detail}", p.code.as_str(), p.status),
            None => format!("{} ({})", p.code.as_str(), p.status),
        },
        None => error.to_string(),
    }
}

/// Runs the dashboard's network work.
pub struct Net {
    /// The operators' credential (operator token, else API key).
    operator: Client,
    /// The API key (user tokens, test notifications), if configured.
    server: Option<Client>,
    actions: mpsc::Sender<Action>,
    activity: Option<JoinHandle<()>>,
    inbox: Option<JoinHandle<()>>,
}

impl Net {
    pub fn new(operator: Client, server: Option<Client>, actions: mpsc::Sender<Action>) -> Self {
        Self { operator, server, actions, activity: None, inbox: None }
    }

    fn spawn<F>(&self, work: F) -> JoinHandle<()>
    where
        F: std::future::Future<Output = Action> + Send + 'static,
    {
        let actions = self.actions.clone();
        tokio::spawn(async move {
            let _ = actions.send(work.await).await;
        })
    }

    /// Follows the live feed, then loads the first page (following first: nothing between the
    /// page and the stream is missed; what both bring is merged by id).
    pub fn start(&mut self) {
        let (client, actions) = (self.operator.clone(), self.actions.clone());
        self.activity = Some(tokio::spawn(async move {
            let mut follower = client.follow("/api/v1/activity/stream", FollowOptions::default());
            let page_client = client.clone();
            let page_actions = actions.clone();
            tokio::spawn(async move {
                // The stream's connection first, then the page.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let query = ActivityQuery { limit: Some(100), ..Default::default() };
                let page = page_client.activity(&query).await.map_err(describe);
                let _ = page_actions.send(Action::ActivityPage(page)).await;
            });
            while let Some(followed) = follower.next().await {
                if actions.send(Action::Activity(followed)).await.is_err() {
                    return;
                }
            }
        }));
    }

    pub fn run(&mut self, command: Command) {
        match command {
            Command::LoadDetail(id) => {
                let client = self.operator.clone();
                self.spawn(async move { Action::Detail(client.activity_item(&id).await.map_err(describe)) });
            }
            Command::Retry(id) => {
                let client = self.operator.clone();
                self.spawn(async move {
                    let result = client.retry(&id).await.map_err(describe);
                    Action::Retried { id, result }
                });
            }
            Command::FindFailed { channel } => {
                let client = self.operator.clone();
                self.spawn(async move {
                    Action::FailedFound(failed_items(&client, channel).await.map_err(describe))
                });
            }
            Command::RetryMany(ids) => {
                let (client, actions) = (self.operator.clone(), self.actions.clone());
                tokio::spawn(async move {
                    stream::iter(ids)
                        .map(|id| {
                            let client = client.clone();
                            async move { client.retry(&id).await.is_ok() }
                        })
                        .buffer_unordered(8)
                        .for_each(|ok| {
                            let actions = actions.clone();
                            async move {
                                let _ = actions.send(Action::BulkProgress { ok }).await;
                            }
                        })
                        .await;
                });
            }
            Command::OpenInbox(user) => self.open_inbox(user),
            Command::ReloadInbox(user) => {
                let Some(server) = self.server.clone() else { return };
                self.spawn(async move {
                    let result = async {
                        let token = server.user_token(&user, Some(3600)).await?.token;
                        server.with_token(token).inbox(&[("limit", "50")]).await
                    }
                    .await
                    .map_err(describe);
                    Action::InboxPage { user, result }
                });
            }
            Command::CloseInbox => {
                if let Some(task) = self.inbox.take() {
                    task.abort();
                }
            }
            Command::SendTest(user) => {
                let Some(server) = self.server.clone() else {
                    let actions = self.actions.clone();
                    tokio::spawn(async move {
                        let _ = actions
                            .send(Action::TestSent(Err("no API key: set HERALD_API_KEY".into())))
                            .await;
                    });
                    return;
                };
                self.spawn(async move {
                    let mut n = NotificationIn::new(
                        Channel::InApp,
                        user.as_str(),
                        "Sent from herald tui to watch it travel.",
                    );
                    n.title = Some(format!("Test {}", herald_common::Timestamp::now()));
                    Action::TestSent(server.send_notification(&n, None).await.map_err(describe))
                });
            }
            Command::Quit => {}
        }
    }

    /// Mints a token for `user`, loads the inbox and follows its stream, until another user is
    /// picked or the pane is closed.
    fn open_inbox(&mut self, user: UserId) {
        if let Some(task) = self.inbox.take() {
            task.abort();
        }
        let actions = self.actions.clone();
        let Some(server) = self.server.clone() else {
            tokio::spawn(async move {
                let result = Err("no API key to mint a user token: set HERALD_API_KEY".to_owned());
                let _ = actions.send(Action::InboxPage { user, result }).await;
            });
            return;
        };
        self.inbox = Some(tokio::spawn(async move {
            let token = match server.user_token(&user, Some(86_400)).await {
                Ok(minted) => minted.token,
                Err(e) => {
                    let _ = actions.send(Action::InboxPage { user, result: Err(describe(e)) }).await;
                    return;
                }
            };
            let client = server.with_token(token);
            let mut follower = client.follow("/api/v1/in-app/stream", FollowOptions::default());
            let page = client.inbox(&[("limit", "50")]).await.map_err(describe);
            let _ = actions.send(Action::InboxPage { user: user.clone(), result: page }).await;
            while let Some(followed) = follower.next().await {
                if actions.send(Action::Inbox { user: user.clone(), followed }).await.is_err() {
                    return;
                }
            }
        }));
    }
}

/// Every failed, retryable item (of `channel`), by walking the feed's pages.
async fn failed_items(client: &Client, channel: Option<Channel>) -> Result<Vec<TransactionId>, ClientError> {
    let mut query = ActivityQuery {
        channel: channel.map(|c| c.to_string()),
        status: Some(ActivityStatus::Failed.to_string()),
        page: Some(1),
        limit: Some(100),
        ..Default::default()
    };
    let mut ids = Vec::new();
    loop {
        let page = client.activity(&query).await?;
        let last = page.items.len() < 100;
        ids.extend(page.items.into_iter().filter(|i| i.retryable).map(|i| i.transaction_id));
        if last {
            return Ok(ids);
        }
        query.page = query.page.map(|p| p + 1);
    }
}
