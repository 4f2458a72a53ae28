//! The live streams' events, names and payloads: the end user's inbox stream
//! (`GET /api/v1/in-app/stream`) and the operators' activity stream
//! (`GET /api/v1/activity/stream`). The daemon writes them from these types and clients read
//! them back with [`StreamEvent::decode`], so both sides match on variants, never on strings.

use serde::{Deserialize, Serialize};

use crate::{
    Timestamp,
    api::{activity::ActivityItem, inbox::InboxItem},
    ids::ConnectionId,
    wire::wire_enum,
};

wire_enum! {
    /// The `event:` name of every event either stream sends.
    pub enum EventName {
        /// First event of every stream.
        Ready = "connection.ready",
        /// Inbox stream: a new item (its `id:` is the item's number, for `Last-Event-ID`).
        NotificationCreated = "notification.created",
        /// Inbox stream: an item was read, unread or archived.
        NotificationUpdated = "notification.updated",
        /// Activity stream: a new notification or OTP transaction.
        ActivityCreated = "activity.created",
        /// Activity stream: an item changed state (queued → sending → sent, failed, retried…).
        ActivityUpdated = "activity.updated",
        /// Keep-alive, every 15 s by default.
        Heartbeat = "heartbeat",
        /// The stream cannot go on without a gap: reload, then reconnect. The stream ends after it.
        Resync = "stream.resync",
    }
}

/// The payload of `connection.ready`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConnectionReady {
    pub connection_id: ConnectionId,
    /// Inbox stream only: the user's unread count when the stream opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread_count: Option<u64>,
    /// Inbox stream only: the id of the newest notification (the `Last-Event-ID` that would
    /// replay nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<String>,
}

/// The payload of `heartbeat`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Heartbeat {
    pub time: Timestamp,
}

wire_enum! {
    /// Why a stream asks the client to resync.
    pub enum ResyncReason {
        /// `Last-Event-ID` is further behind than the replay window.
        ReplayWindow = "replay_window",
        /// `Last-Event-ID` is not an id this stream ever sent.
        UnknownEventId = "unknown_event_id",
        /// The connection fell too far behind the changes.
        SlowConsumer = "slow_consumer",
    }
}

/// The payload of `stream.resync`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Resync {
    pub reason: ResyncReason,
    pub detail: String,
}

/// One event of either stream, with its payload.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Ready(ConnectionReady),
    NotificationCreated(InboxItem),
    NotificationUpdated(InboxItem),
    ActivityCreated(ActivityItem),
    ActivityUpdated(ActivityItem),
    Heartbeat(Heartbeat),
    Resync(Resync),
}

/// Why an SSE event could not be read as a [`StreamEvent`].
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// An event name this version does not know (a newer daemon): clients skip it.
    #[error("unknown event `{0}`")]
    UnknownEvent(String),
    #[error("event `{event}` carries an unexpected payload: {source}")]
    Payload {
        event: EventName,
        #[source]
        source: serde_json::Error,
    },
}

impl StreamEvent {
    pub fn name(&self) -> EventName {
        match self {
            StreamEvent::Ready(_) => EventName::Ready,
            StreamEvent::NotificationCreated(_) => EventName::NotificationCreated,
            StreamEvent::NotificationUpdated(_) => EventName::NotificationUpdated,
            StreamEvent::ActivityCreated(_) => EventName::ActivityCreated,
            StreamEvent::ActivityUpdated(_) => EventName::ActivityUpdated,
            StreamEvent::Heartbeat(_) => EventName::Heartbeat,
            StreamEvent::Resync(_) => EventName::Resync,
        }
    }

    /// The payload as the JSON of the `data:` line.
    pub fn data_json(&self) -> Result<String, serde_json::Error> {
        match self {
            StreamEvent::Ready(ready) => serde_json::to_string(ready),
            StreamEvent::NotificationCreated(item) | StreamEvent::NotificationUpdated(item) => {
                serde_json::to_string(item)
            }
            StreamEvent::ActivityCreated(item) | StreamEvent::ActivityUpdated(item) => {
                serde_json::to_string(item)
            }
            StreamEvent::Heartbeat(beat) => serde_json::to_string(beat),
            StreamEvent::Resync(resync) => serde_json::to_string(resync),
        }
    }

    /// Reads an SSE event from its `event:` name and `data:` text.
    pub fn decode(event: &str, data: &str) -> Result<StreamEvent, DecodeError> {
        let name = EventName::parse(event).ok_or_else(|| DecodeError::UnknownEvent(event.to_owned()))?;
        let payload = |source| DecodeError::Payload { event: name, source };
        Ok(match name {
            EventName::Ready => StreamEvent::Ready(serde_json::from_str(data).map_err(payload)?),
            EventName::NotificationCreated => {
                StreamEvent::NotificationCreated(serde_json::from_str(data).map_err(payload)?)
            }
            EventName::NotificationUpdated => {
                StreamEvent::NotificationUpdated(serde_json::from_str(data).map_err(payload)?)
            }
            EventName::ActivityCreated => {
                StreamEvent::ActivityCreated(serde_json::from_str(data).map_err(payload)?)
            }
            EventName::ActivityUpdated => {
                StreamEvent::ActivityUpdated(serde_json::from_str(data).map_err(payload)?)
            }
            EventName::Heartbeat => StreamEvent::Heartbeat(serde_json::from_str(data).map_err(payload)?),
            EventName::Resync => StreamEvent::Resync(serde_json::from_str(data).map_err(payload)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_their_wire_form() {
        let events = [
            StreamEvent::Ready(ConnectionReady {
                connection_id: ConnectionId::new(),
                unread_count: Some(3),
                last_event_id: Some("7".into()),
            }),
            StreamEvent::Heartbeat(Heartbeat { time: Timestamp::from_millis(1_700_000_000_000) }),
            StreamEvent::Resync(Resync { reason: ResyncReason::SlowConsumer, detail: "behind".into() }),
        ];
        for event in events {
            let data = event.data_json().unwrap();
            assert_eq!(StreamEvent::decode(event.name().as_str(), &data).unwrap(), event);
        }
        let activity_ready = r#"{"connection_id":"con_01jd8x3v7q0000000000000000"}"#;
        assert!(matches!(
            StreamEvent::decode("connection.ready", activity_ready),
            Ok(StreamEvent::Ready(ConnectionReady { unread_count: None, .. }))
        ));
    }

    #[test]
    fn unknown_events_and_bad_payloads_are_errors_of_their_own() {
        assert!(matches!(StreamEvent::decode("shiny.new", "{}"), Err(DecodeError::UnknownEvent(_))));
        assert!(matches!(
            StreamEvent::decode("heartbeat", "{}"),
            Err(DecodeError::Payload { event: EventName::Heartbeat, .. })
        ));
        assert_eq!(EventName::Resync.as_str(), "stream.resync");
        assert_eq!(ResyncReason::parse("replay_window"), Some(ResyncReason::ReplayWindow));
    }
}
