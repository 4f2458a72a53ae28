//! The end user's inbox and live stream (user token only).

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, header},
    response::{IntoResponse, Response, Sse},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use herald_common::{
    Problem,
    api::inbox::{InboxItem, InboxOut, InboxPatch, ReadAllOut},
    ids::InAppId,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::UserAuth;
use super::extract::{AppJson, AppQuery};
use crate::{
    error::{ApiError, ApiResult},
    hub::MAX_STREAMS_PER_USER,
    state::AppState,
    store::{InboxItemChange, InboxPage},
    stream::{
        StreamLease,
        inbox::{InboxStream, Opening, start_for},
    },
    views,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_inbox))
        .routes(routes!(read_all))
        .routes(routes!(patch_item))
        .routes(routes!(stream))
}

const PROBLEM: &str = "application/problem+json";

fn cursor_for(seq: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("s:{seq}"))
}

fn seq_of(cursor: &str) -> Option<i64> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix("s:")?.parse().ok()
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InboxParams {
    /// Only unread items (default false).
    unread_only: Option<bool>,
    /// Archived items instead of the others (default false).
    archived: Option<bool>,
    /// 1 to 100 (default 20).
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// The caller's notifications, newest first, with the unread count.
#[utoipa::path(get, path = "/api/v1/inbox", tag = "inbox", params(InboxParams),
    security(("user" = [])),
    responses(
        (status = 200, description = "One page", body = InboxOut),
        (status = 401, description = "Missing, invalid or expired user token", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A query parameter is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn list_inbox(
    State(state): State<AppState>,
    UserAuth(user): UserAuth,
    AppQuery(params): AppQuery<InboxParams>,
) -> ApiResult<Json<InboxOut>> {
    let limit = params.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::field("limit", "must be from 1 to 100"));
    }
    let before_seq = match params.cursor.as_deref() {
        Some(cursor) => {
            Some(seq_of(cursor).ok_or_else(|| ApiError::field("cursor", "is not a cursor of this inbox"))?)
        }
        None => None,
    };
    let page = InboxPage {
        unread_only: params.unread_only.unwrap_or(false),
        archived: params.archived.unwrap_or(false),
        before_seq,
        limit: i64::from(limit) + 1,
    };
    let (app, user_id) = (&user.application_id, &user.user_id);
    let mut records = state.store.inbox_page(app, user_id, &page).await?;
    let next_cursor = if records.len() > limit as usize {
        records.truncate(limit as usize);
        records.last().map(|r| cursor_for(r.seq))
    } else {
        None
    };
    let unread_count = state.store.unread_count(app, user_id).await?;
    Ok(Json(InboxOut {
        unread_count,
        notifications: records.into_iter().map(views::inbox_item).collect(),
        next_cursor,
    }))
}

/// Marks an item read or unread, or archives it; the caller's open streams get
/// `notification.updated`.
#[utoipa::path(patch, path = "/api/v1/inbox/{id}", tag = "inbox", request_body = InboxPatch,
    params(("id" = String, Path)),
    security(("user" = [])),
    responses(
        (status = 200, description = "The changed item", body = InboxItem),
        (status = 401, description = "Missing, invalid or expired user token", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such item of this user", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A field is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn patch_item(
    State(state): State<AppState>,
    UserAuth(user): UserAuth,
    Path(id): Path<String>,
    AppJson(patch): AppJson<InboxPatch>,
) -> ApiResult<Json<InboxItem>> {
    if patch.is_read.is_none() && patch.archived.is_none() {
        return Err(ApiError::field("is_read", "give is_read, archived or both"));
    }
    let not_found = || ApiError::not_found("inbox item");
    let id = InAppId::parse(&id).map_err(|_| not_found())?;
    let change = InboxItemChange { is_read: patch.is_read, archived: patch.archived };
    let item = state
        .store
        .update_inbox_item(&user.application_id, &user.user_id, &id, change, state.clock.now_millis())
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(views::inbox_item(item)))
}

/// Marks every unread item read.
#[utoipa::path(post, path = "/api/v1/inbox/read-all", tag = "inbox",
    security(("user" = [])),
    responses(
        (status = 200, description = "How many changed", body = ReadAllOut),
        (status = 401, description = "Missing, invalid or expired user token", body = Problem, content_type = PROBLEM),
    ))]
async fn read_all(State(state): State<AppState>, UserAuth(user): UserAuth) -> ApiResult<Json<ReadAllOut>> {
    let (app, user_id) = (&user.application_id, &user.user_id);
    let changed = state.store.mark_all_read(app, user_id, state.clock.now_millis()).await?;
    let unread_count = state.store.unread_count(app, user_id).await?;
    Ok(Json(ReadAllOut { updated: changed.len() as u64, unread_count }))
}

/// The live stream of the caller's inbox (Server-Sent Events). See docs/STREAM.md.
#[utoipa::path(get, path = "/api/v1/in-app/stream", tag = "inbox",
    params(("Last-Event-ID" = Option<String>, Header, description = "Replay the notifications created after this id")),
    security(("user" = [])),
    responses(
        (status = 200, description = "text/event-stream: connection.ready, notification.created, notification.updated, heartbeat, stream.resync", body = String, content_type = "text/event-stream"),
        (status = 401, description = "Missing, invalid or expired user token", body = Problem, content_type = PROBLEM),
        (status = 429, description = "The user already has 10 open streams", body = Problem, content_type = PROBLEM),
    ))]
async fn stream(
    State(state): State<AppState>,
    UserAuth(user): UserAuth,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (app, user_id) = (&user.application_id, &user.user_id);
    let too_many = || {
        ApiError::rate_limited(format!("This user already has {MAX_STREAMS_PER_USER} open streams."), 5_000)
    };
    // Subscribe before reading, so nothing committed from here on can be missed. The hub counts
    // this daemon's streams; the lease counts them over every daemon sharing the database.
    let subscription = state.store.hub().subscribe(app, user_id).ok_or_else(too_many)?;
    let lease = StreamLease::claim(&state, app, user_id, &subscription).await?.ok_or_else(too_many)?;
    let (newest, unread_count) = state.store.inbox_position(app, user_id).await?;
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let opening =
        Opening { subscription, lease, start: start_for(last_event_id, newest), unread_count, newest };
    let stream = InboxStream::new(
        state.store.clone(),
        user,
        opening,
        state.config.stream_heartbeat,
        state.shutdown.clone(),
    );
    let mut response = Sse::new(stream.into_stream()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
