//! The activity feed.

use reqwest::Method;

use super::{Client, ClientError, users::encode_path_segment};
use crate::api::activity::{ActivityDetail, ActivityList, BulkRetryIn, BulkRetryOut, RetryQueued};

/// Filters and page of `GET /api/v1/activity` (each `None` is left out).
#[derive(Clone, Debug, Default)]
pub struct ActivityQuery {
    pub channel: Option<String>,
    pub status: Option<String>,
    pub application_id: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub page: Option<u32>,
    pub limit: Option<u32>,
}

impl Client {
    pub async fn activity(&self, query: &ActivityQuery) -> Result<ActivityList, ClientError> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for (name, value) in [
            ("channel", &query.channel),
            ("status", &query.status),
            ("application_id", &query.application_id),
            ("from", &query.from),
            ("to", &query.to),
        ] {
            if let Some(value) = value {
                pairs.push((name, value.clone()));
            }
        }
        if let Some(page) = query.page {
            pairs.push(("page", page.to_string()));
        }
        if let Some(limit) = query.limit {
            pairs.push(("limit", limit.to_string()));
        }
        Self::send(self.request(Method::GET, "/api/v1/activity").query(&pairs)).await
    }

    pub async fn activity_item(&self, id: impl AsRef<str>) -> Result<ActivityDetail, ClientError> {
        self.get(&format!("/api/v1/activity/{}", encode_path_segment(id.as_ref()))).await
    }

    pub async fn retry(&self, id: impl AsRef<str>) -> Result<RetryQueued, ClientError> {
        let path = format!("/api/v1/activity/{}/retry", encode_path_segment(id.as_ref()));
        Self::send(self.request(Method::POST, &path)).await
    }

    pub async fn retry_all(&self, filter: &BulkRetryIn) -> Result<BulkRetryOut, ClientError> {
        self.post("/api/v1/activity/retry", filter).await
    }
}
