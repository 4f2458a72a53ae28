//! The live stream's event names and payloads (`GET /api/v1/in-app/stream`).

use serde::{Deserialize, Serialize};

use crate::{Timestamp, ids::ConnectionId};

pub const CONNECTION_READY: &str = "connection.ready";
pub const NOTIFICATION_CREATED: &str = "notification.created";
pub const NOTIFICATION_UPDATED: &str = "notification.updated";
pub const HEARTBEAT: &str = "heartbeat";
/// The stream cannot continue without a gap: reload the inbox, then reconnect without
/// `Last-Event-ID` (or with the newest id you hold).
pub const STREAM_RESYNC: &str = "stream.resync";

/// First event of every stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConnectionReady {
    pub connection_id: ConnectionId,
    pub unread_count: u64,
    /// The id of the newest notification (the `Last-Event-ID` that would replay nothing).
    pub last_event_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Heartbeat {
    pub time: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Resync {
    /// `replay_window`, `unknown_event_id` or `slow_consumer`.
    pub reason: String,
    pub detail: String,
}
