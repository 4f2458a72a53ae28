//! Outbound event webhooks of the caller's tenant (CONTRACT §10): endpoints, secret rotation,
//! test events, deliveries and recovery.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use herald_common::{
    FieldError, Problem,
    api::webhooks::{
        MessageStatus, RecoverIn, RecoverOut, WebhookDeliveryList, WebhookEndpoint, WebhookEndpointCreated,
        WebhookEndpointIn, WebhookEndpointList, WebhookEndpointPatch, WebhookSecret, WebhookTestOut,
    },
    ids::WebhookEndpointId,
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    activity::{MAX_LIMIT, number},
    auth::{TenantAuth, scopes},
    extract::{AppJson, AppQuery},
};
use crate::{
    error::{ApiError, ApiResult},
    service::webhooks::{self as service, WebhookError},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_webhooks, add_webhook))
        .routes(routes!(get_webhook, update_webhook, delete_webhook))
        .routes(routes!(rotate_secret))
        .routes(routes!(test_webhook))
        .routes(routes!(list_deliveries))
        .routes(routes!(recover))
}

const PROBLEM: &str = "application/problem+json";

fn endpoint_id(text: &str) -> Result<WebhookEndpointId, ApiError> {
    WebhookEndpointId::parse(text).map_err(|_| WebhookError::NotFound.into())
}

/// The tenant's endpoints (`webhooks:read`); never their secrets.
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "webhooks",
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "Every endpoint of the tenant", body = WebhookEndpointList),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:read", body = Problem, content_type = PROBLEM),
    ))]
async fn list_webhooks(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksRead>,
) -> ApiResult<Json<WebhookEndpointList>> {
    let records = state.store.webhook_endpoints(principal.tenant_id()).await?;
    Ok(Json(WebhookEndpointList { endpoints: records.into_iter().map(service::view).collect() }))
}

/// Registers an endpoint (`webhooks:write`). The answer holds its signing secret, shown only
/// here.
#[utoipa::path(post, path = "/api/v1/webhooks", tag = "webhooks", request_body = WebhookEndpointIn,
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 201, description = "Registered: the endpoint and its secret", body = WebhookEndpointCreated),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A bad URL (or one into a private network), event type or application", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all)]
async fn add_webhook(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    AppJson(input): AppJson<WebhookEndpointIn>,
) -> ApiResult<(StatusCode, Json<WebhookEndpointCreated>)> {
    let created = service::create(&state, principal.tenant_id(), input).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// One endpoint; another tenant's is 404.
#[utoipa::path(get, path = "/api/v1/webhooks/{endpoint_id}", tag = "webhooks",
    params(("endpoint_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "Success", body = WebhookEndpoint),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:read", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn get_webhook(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<WebhookEndpoint>> {
    let id = endpoint_id(&id)?;
    Ok(Json(service::view(service::get(&state, principal.tenant_id(), &id).await?)))
}

/// Changes an endpoint (`webhooks:write`): `url`, `description`, `event_types`, `status`
/// (re-enabling clears `disabled_reason`; disabling fails its pending messages).
#[utoipa::path(patch, path = "/api/v1/webhooks/{endpoint_id}", tag = "webhooks",
    params(("endpoint_id" = String, Path)), request_body = WebhookEndpointPatch,
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The endpoint after the change", body = WebhookEndpoint),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A bad field", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
async fn update_webhook(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    Path(id): Path<String>,
    AppJson(patch): AppJson<WebhookEndpointPatch>,
) -> ApiResult<Json<WebhookEndpoint>> {
    let id = endpoint_id(&id)?;
    Ok(Json(service::update(&state, principal.tenant_id(), &id, patch).await?))
}

/// Removes an endpoint (`webhooks:write`): at once nothing more is sent to it and it is no longer
/// found; its messages are deleted in the background.
#[utoipa::path(delete, path = "/api/v1/webhooks/{endpoint_id}", tag = "webhooks",
    params(("endpoint_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 204, description = "Removed: nothing more is sent to it; its deliveries are deleted in the background"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
async fn delete_webhook(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = endpoint_id(&id)?;
    service::remove(&state, principal.tenant_id(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret (`webhooks:write`), shown only here. For the overlap
/// (`HERALD_WEBHOOK_SECRET_OVERLAP`, 24 h) every message is signed with the new and the old one.
#[utoipa::path(post, path = "/api/v1/webhooks/{endpoint_id}/rotate-secret", tag = "webhooks",
    params(("endpoint_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "The new secret", body = WebhookSecret),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
async fn rotate_secret(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    Path(id): Path<String>,
) -> ApiResult<Json<WebhookSecret>> {
    let id = endpoint_id(&id)?;
    Ok(Json(WebhookSecret { secret: service::rotate_secret(&state, principal.tenant_id(), &id).await? }))
}

/// Sends a `webhook.test` event to the endpoint (`webhooks:write`), whatever its event types.
#[utoipa::path(post, path = "/api/v1/webhooks/{endpoint_id}/test", tag = "webhooks",
    params(("endpoint_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 202, description = "Queued: the message that carries it", body = WebhookTestOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
        (status = 409, description = "The endpoint is disabled", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
async fn test_webhook(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<WebhookTestOut>)> {
    let id = endpoint_id(&id)?;
    let message_id = service::test(&state, principal.tenant_id(), &id).await?;
    Ok((StatusCode::ACCEPTED, Json(WebhookTestOut { message_id })))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryParams {
    /// `pending`, `succeeded` or `failed`.
    #[param(value_type = Option<MessageStatus>)]
    status: Option<String>,
    /// From 1 (default 1).
    page: Option<String>,
    /// 1 to 100 (default 20).
    limit: Option<String>,
}

/// The endpoint's messages, newest first, with their attempts (`webhooks:read`).
#[utoipa::path(get, path = "/api/v1/webhooks/{endpoint_id}/deliveries", tag = "webhooks",
    params(("endpoint_id" = String, Path), DeliveryParams),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "One page", body = WebhookDeliveryList),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:read", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A query parameter is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn list_deliveries(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksRead>,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<DeliveryParams>,
) -> ApiResult<Json<WebhookDeliveryList>> {
    let id = endpoint_id(&id)?;
    let mut errors = Vec::new();
    let page = number("page", params.page.as_deref(), 1, 1..=u32::MAX).unwrap_or_else(|e| {
        errors.push(e);
        1
    });
    let limit = number("limit", params.limit.as_deref(), 20, 1..=MAX_LIMIT).unwrap_or_else(|e| {
        errors.push(e);
        20
    });
    let status = params.status.as_deref().and_then(|s| {
        MessageStatus::parse(s).or_else(|| {
            errors.push(FieldError::new("status", format!("must be one of {}", MessageStatus::values())));
            None
        })
    });
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    service::get(&state, principal.tenant_id(), &id).await?;
    let (messages, total_count) = state.store.webhook_messages(&id, status, limit, page).await?;
    Ok(Json(WebhookDeliveryList {
        total_count,
        page,
        limit,
        items: messages.into_iter().map(service::delivery_view).collect(),
    }))
}

/// Sends again every message to the endpoint that failed since `since`, each with its original
/// `webhook-id` (`webhooks:write`).
#[utoipa::path(post, path = "/api/v1/webhooks/{endpoint_id}/recover", tag = "webhooks",
    params(("endpoint_id" = String, Path)), request_body = RecoverIn,
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 202, description = "Queued again", body = RecoverOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks webhooks:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such endpoint in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(endpoint_id = %id))]
async fn recover(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::WebhooksWrite>,
    Path(id): Path<String>,
    AppJson(input): AppJson<RecoverIn>,
) -> ApiResult<(StatusCode, Json<RecoverOut>)> {
    let id = endpoint_id(&id)?;
    service::get(&state, principal.tenant_id(), &id).await?;
    let queued =
        state.store.recover_webhook_messages(id, input.since.millis(), state.clock.now_millis()).await?;
    state.store.wake_webhooks();
    Ok((StatusCode::ACCEPTED, Json(RecoverOut { queued })))
}
