//! The inbox (with a user token).

use reqwest::Method;
use serde::Serialize;

use super::{Client, ClientError, users::encode_path_segment};
use crate::{
    api::inbox::{InboxItem, InboxOut, InboxPatch, ReadAllOut},
    ids::InAppId,
};

/// Filters and page of `GET /api/v1/inbox` (each `None` is left out, so the server's default
/// applies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InboxQuery {
    /// Only unread items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unread_only: Option<bool>,
    /// Archived items instead of the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// 1 to 100 (default 20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Client {
    /// One page of the inbox, newest first.
    pub async fn inbox(&self, query: &InboxQuery) -> Result<InboxOut, ClientError> {
        Self::send(self.request(Method::GET, "/api/v1/inbox").query(query)).await
    }

    pub async fn patch_inbox_item(&self, id: &InAppId, patch: &InboxPatch) -> Result<InboxItem, ClientError> {
        let path = format!("/api/v1/inbox/{}", encode_path_segment(id.as_str()));
        Self::send(self.request(Method::PATCH, &path).json(patch)).await
    }

    pub async fn read_all(&self) -> Result<ReadAllOut, ClientError> {
        Self::send(self.request(Method::POST, "/api/v1/inbox/read-all").json(&serde_json::json!({}))).await
    }
}
