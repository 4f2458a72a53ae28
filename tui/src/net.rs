//! The network side: every [`Command`] runs as a task of its own and reports back as an
//! [`Action`] on the loop's channel, so drawing never waits on the network. The two live streams
//! are followers ([`Client::follow_activity`], [`Client::follow_inbox`]) forwarding their reports;
//! each loads its first page once its stream is live.

use std::future::Future;

use futures_util::{StreamExt, stream};
use herald_common::{
    api::{
        activity::BulkRetryIn,
        notifications::{Channel, NotificationIn},
        webhooks::WebhookDeliveryQuery,
    },
    client::{
        ActivityQuery, Client, ClientError, ConnectionState, FollowOptions, Followed, Follower, InboxQuery,
    },
    ids::UserId,
};
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{
    app::{Action, Command},
    webhooks::{EndpointHealth, RECENT},
};

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

/// The feed's first page: the newest items, as many as a page holds.
fn first_activity_page() -> ActivityQuery {
    ActivityQuery { limit: Some(ActivityQuery::MAX_LIMIT), ..Default::default() }
}

/// The inbox pane's page.
fn inbox_page() -> InboxQuery {
    InboxQuery { limit: Some(50), ..Default::default() }
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
        F: Future<Output = Action> + Send + 'static,
    {
        let actions = self.actions.clone();
        tokio::spawn(async move {
            let _ = actions.send(work.await).await;
        })
    }

    /// Follows the live feed, and loads the first page once it is live (nothing between the
    /// page and the stream is missed; what both bring is merged by id).
    pub fn start(&mut self) {
        let (client, actions) = (self.operator.clone(), self.actions.clone());
        let follower = client.follow_activity(FollowOptions::default());
        self.activity = Some(tokio::spawn(forward(follower, actions, Action::Activity, move || {
            let client = client.clone();
            async move { Action::ActivityPage(client.activity(&first_activity_page()).await.map_err(describe)) }
        })));
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
                    let result = client.failed_retryable(&bulk_filter(channel)).await.map_err(describe);
                    let ids = result.map(|items| items.into_iter().map(|i| i.transaction_id).collect());
                    Action::FailedFound { channel, result: ids }
                });
            }
            Command::RetryFailed { channel, expected } => {
                let client = self.operator.clone();
                self.spawn(async move {
                    let result = client.retry_all_failed(&bulk_filter(channel), expected as u64).await;
                    Action::FailedRetried(result.map_err(describe))
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
                        server.with_token(token).inbox(&inbox_page()).await
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
            Command::LoadWebhooks => {
                let client = self.operator.clone();
                self.spawn(async move { Action::Webhooks(webhooks(&client).await.map_err(describe)) });
            }
            Command::Quit => {}
        }
    }

    /// Mints a token for `user` and follows its inbox stream, loading the page once the stream
    /// is live, until another user is picked or the pane is closed.
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
            let follower = client.follow_inbox(FollowOptions::default());
            let followed_user = user.clone();
            let report = move |followed| Action::Inbox { user: followed_user.clone(), followed };
            forward(follower, actions, report, move || {
                let (client, user) = (client.clone(), user.clone());
                async move {
                    let result = client.inbox(&inbox_page()).await.map_err(describe);
                    Action::InboxPage { user, result }
                }
            })
            .await;
        }));
    }
}

/// Every endpoint with its newest messages (their pages load side by side).
async fn webhooks(client: &Client) -> Result<Vec<EndpointHealth>, ClientError> {
    let endpoints = client.webhooks().await?.endpoints;
    let recent = WebhookDeliveryQuery { limit: Some(RECENT), ..Default::default() };
    let loads = endpoints.into_iter().map(|endpoint| {
        let recent = recent.clone();
        async move {
            let page = client.webhook_deliveries(&endpoint.endpoint_id, &recent).await?;
            Ok(EndpointHealth::of(endpoint, &page))
        }
    });
    futures_util::future::try_join_all(loads).await
}

/// The bulk retry's filter for the dashboard's channel filter.
fn bulk_filter(channel: Option<Channel>) -> BulkRetryIn {
    BulkRetryIn { channel, ..Default::default() }
}

/// Forwards a follower's reports as actions (`report`) until the loop goes away, and loads the
/// page (`load_page`) each time the stream turns live: first, once the server has fixed where
/// the stream starts, so the page and the events together miss nothing; and again after each
/// reconnection, since a change committed out of order just before it would not be replayed
/// (docs/ACTIVITY.md, docs/STREAM.md). The page loads beside the stream, which goes on.
async fn forward<R, L, P>(mut follower: Follower, actions: mpsc::Sender<Action>, report: R, load_page: L)
where
    R: Fn(Followed) -> Action,
    L: Fn() -> P,
    P: Future<Output = Action> + Send + 'static,
{
    while let Some(followed) = follower.next().await {
        let live = followed == Followed::State(ConnectionState::Live);
        if actions.send(report(followed)).await.is_err() {
            return;
        }
        if live {
            let (page, actions) = (load_page(), actions.clone());
            tokio::spawn(async move {
                let _ = actions.send(page.await).await;
            });
        }
    }
}
