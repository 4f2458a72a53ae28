//! Dispatch and lookup of notifications.

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use herald_common::{
    Problem,
    api::notifications::{NotificationAccepted, NotificationIn, NotificationOut},
    ids::NotificationId,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{ApiKeyAuth, Principal, TenantAuth, scopes};
use super::extract::{JsonBody, idempotency_key, parse_json, replayed};
use crate::{
    error::{ApiError, ApiResult},
    service::notifications::{self, Dispatched},
    state::AppState,
    views,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(send_notification)).routes(routes!(get_notification))
}

/// Accepts a notification for delivery. `in_app` notifications are in the user's inbox when
/// this returns; the others are queued and delivered by the workers, with automatic retries.
#[utoipa::path(post, path = "/api/v1/notifications", tag = "notifications",
    request_body = NotificationIn,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Repeats with the same key and body return the first response and send nothing (24 h)")),
    security(("api_key" = [])),
    responses(
        (status = 202, description = "Accepted", body = NotificationAccepted),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key lacks notifications:send", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A request with this Idempotency-Key is in flight", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, a reused Idempotency-Key, or an unverified `from` domain", body = Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(application_id = %key.application_id))]
async fn send_notification(
    State(state): State<AppState>,
    ApiKeyAuth(key, _): ApiKeyAuth<scopes::NotificationsSend>,
    headers: HeaderMap,
    JsonBody(bytes): JsonBody,
) -> ApiResult<Response> {
    let input: NotificationIn = parse_json(&bytes)?;
    let idempotency = idempotency_key(&headers, &bytes, &state.secret)?;
    Ok(match notifications::dispatch(&state, &key, input, idempotency).await? {
        Dispatched::Accepted(accepted) => (StatusCode::ACCEPTED, Json(accepted)).into_response(),
        Dispatched::Replayed(earlier) => replayed(earlier),
    })
}

/// The current state of one dispatch, with its delivery attempts.
#[utoipa::path(get, path = "/api/v1/notifications/{notification_id}", tag = "notifications",
    params(("notification_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = NotificationOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The credential lacks notifications:read", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such notification for this caller", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_notification(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::NotificationsRead>,
    Path(notification_id): Path<String>,
) -> ApiResult<Json<NotificationOut>> {
    let not_found = || ApiError::not_found("notification");
    let id = NotificationId::parse(&notification_id).map_err(|_| not_found())?;
    let (record, attempts) = state.store.get_notification(&id).await?.ok_or_else(not_found)?;
    // A key sees its application's notifications; an operator, its tenant's.
    let visible = match &principal {
        Principal::ApiKey(key) => record.application_id == key.application_id,
        other => &record.tenant_id == other.tenant_id(),
    };
    if !visible {
        return Err(not_found());
    }
    let receipts = state.store.receipts_of(&id).await?;
    Ok(Json(views::notification_out(record, attempts, receipts)))
}
