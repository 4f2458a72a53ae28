//! The activity feed: its pages, one item, retries one at a time or in bulk, and the failed,
//! retryable items a filter matches (what the CLI and the dashboard ask about before a bulk
//! retry).

use std::collections::HashSet;

use reqwest::Method;
use serde::Serialize;

use super::{Client, ClientError, users::encode_path_segment};
use crate::{
    Timestamp,
    api::{
        activity::{
            ActivityDetail, ActivityItem, ActivityList, ActivityStatus, BulkRetryIn, BulkRetryOut,
            RetryQueued,
        },
        notifications::Channel,
    },
    ids::{ApplicationId, TransactionId},
};

/// Filters and page of `GET /api/v1/activity` (each `None` is left out, so the server's default
/// applies).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ActivityQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<Channel>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ActivityStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application_id: Option<ApplicationId>,
    /// Created at or after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<Timestamp>,
    /// Created before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<Timestamp>,
    /// Notifications of one category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// From 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<u32>,
    /// 1 to [`ActivityQuery::MAX_LIMIT`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl ActivityQuery {
    /// The most items one page holds.
    pub const MAX_LIMIT: u32 = 100;

    /// The failed items of a bulk retry's filter, a full page at a time.
    pub fn failed(filter: &BulkRetryIn, status: ActivityStatus) -> Self {
        Self {
            channel: filter.channel,
            status: Some(status),
            application_id: filter.application_id.clone(),
            from: filter.from,
            to: filter.to,
            category: None,
            page: Some(1),
            limit: Some(Self::MAX_LIMIT),
        }
    }
}

impl Client {
    /// One page of the feed, newest first.
    pub async fn activity(&self, query: &ActivityQuery) -> Result<ActivityList, ClientError> {
        Self::send(self.request(Method::GET, "/api/v1/activity").query(query)).await
    }

    /// One item with its attempts: `id` is a notification's or an OTP transaction's
    /// (`&NotificationId`, `&OtpId` and `&TransactionId` all do).
    pub async fn activity_item(&self, id: impl Into<TransactionId>) -> Result<ActivityDetail, ClientError> {
        let id = id.into();
        self.get(&format!("/api/v1/activity/{}", encode_path_segment(id.as_str()))).await
    }

    /// Queues one failed, retryable notification again (409 `not_retryable` otherwise, an OTP
    /// transaction's id included).
    pub async fn retry(&self, id: impl Into<TransactionId>) -> Result<RetryQueued, ClientError> {
        let id = id.into();
        let path = format!("/api/v1/activity/{}/retry", encode_path_segment(id.as_str()));
        Self::send(self.request(Method::POST, &path)).await
    }

    /// One call of the bulk retry: queues at most [`BulkRetryOut::MAX_PER_CALL`] of the failed,
    /// retryable notifications `filter` matches, oldest first.
    pub async fn retry_all(&self, filter: &BulkRetryIn) -> Result<BulkRetryOut, ClientError> {
        self.post("/api/v1/activity/retry", filter).await
    }

    /// Queues again the failed, retryable notifications `filter` matches, calling the bulk
    /// retry again while a call queues a full batch, until `at_most` are queued in all (the
    /// number the person agreed to: items that keep failing again at once cannot keep it going
    /// for ever). The answer's `count` is the total; its `queued_at`, the last call's.
    pub async fn retry_all_failed(
        &self,
        filter: &BulkRetryIn,
        at_most: u64,
    ) -> Result<BulkRetryOut, ClientError> {
        let mut total = self.retry_all(filter).await?;
        let mut last = total.count;
        while last >= BulkRetryOut::MAX_PER_CALL && total.count < at_most {
            let next = self.retry_all(filter).await?;
            (last, total.count, total.queued_at) = (next.count, total.count + next.count, next.queued_at);
        }
        Ok(total)
    }

    /// Every failed, retryable item `filter` matches, newest first: what
    /// [`Client::retry_all_failed`] would queue now. Walks every page of the failed items; an
    /// item that fails while the walk goes on shifts the pages down, so one seen twice is kept
    /// once.
    pub async fn failed_retryable(&self, filter: &BulkRetryIn) -> Result<Vec<ActivityItem>, ClientError> {
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for status in ActivityStatus::RETRIED {
            let mut query = ActivityQuery::failed(filter, status);
            loop {
                let page = self.activity(&query).await?;
                let (number, full) = (page.page, page.limit > 0 && page.items.len() >= page.limit as usize);
                let walked = u64::from(page.page) * u64::from(page.limit);
                for item in page.items {
                    if item.retryable && seen.insert(item.transaction_id.clone()) {
                        found.push(item);
                    }
                }
                if !full || walked >= page.total_count {
                    break;
                }
                query.page = Some(number + 1);
            }
        }
        Ok(found)
    }
}
