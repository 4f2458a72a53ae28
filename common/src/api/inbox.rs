//! The end user's inbox (`/api/v1/inbox`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Timestamp, ids::InAppId};

/// Spec §2.3.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboxItem {
    pub id: InAppId,
    pub title: String,
    pub body: String,
    pub is_read: bool,
    pub archived: bool,
    pub created_at: Timestamp,
    /// The `data` sent with the notification (`action_url`, `avatar_url`, `category`, …).
    #[schema(value_type = Object)]
    pub data: Map<String, Value>,
}

/// Spec §2.4, with a cursor for the next page.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InboxOut {
    /// Unread, unarchived items (the badge count).
    pub unread_count: u64,
    pub notifications: Vec<InboxItem>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InboxPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_read: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReadAllOut {
    pub updated: u64,
    pub unread_count: u64,
}
