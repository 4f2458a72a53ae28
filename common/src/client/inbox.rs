//! The inbox (with a user token).

use reqwest::Method;

use super::{Client, ClientError, users::encode_path_segment};
use crate::api::inbox::{InboxItem, InboxOut, InboxPatch, ReadAllOut};

impl Client {
    /// One page of the inbox: `query` pairs such as `("unread_only", "true")`, `("limit", "20")`,
    /// `("cursor", …)`, `("archived", "true")`.
    pub async fn inbox(&self, query: &[(&str, &str)]) -> Result<InboxOut, ClientError> {
        Self::send(self.request(Method::GET, "/api/v1/inbox").query(query)).await
    }

    pub async fn patch_inbox_item(
        &self,
        id: impl AsRef<str>,
        patch: &InboxPatch,
    ) -> Result<InboxItem, ClientError> {
        let path = format!("/api/v1/inbox/{}", encode_path_segment(id.as_ref()));
        Self::send(self.request(Method::PATCH, &path).json(patch)).await
    }

    pub async fn read_all(&self) -> Result<ReadAllOut, ClientError> {
        Self::send(self.request(Method::POST, "/api/v1/inbox/read-all").json(&serde_json::json!({}))).await
    }
}
