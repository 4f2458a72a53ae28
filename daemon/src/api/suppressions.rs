//! The suppression list of the caller's tenant (CONTRACT §9): list, add, get, lift.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use herald_common::{
    FieldError, Problem,
    api::{
        notifications::Channel,
        suppressions::{Suppression, SuppressionIn, SuppressionList, SuppressionReason},
    },
    ids::SuppressionId,
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
    service::suppressions,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_suppressions, add_suppression))
        .routes(routes!(get_suppression, delete_suppression))
}

const PROBLEM: &str = "application/problem+json";

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SuppressionParams {
    /// `email`, `sms` or `whatsapp`.
    #[param(value_type = Option<Channel>)]
    channel: Option<String>,
    /// `hard_bounce`, `complaint`, `unsubscribe`, `carrier_opt_out` or `manual`.
    #[param(value_type = Option<SuppressionReason>)]
    reason: Option<String>,
    /// A raw recipient, matched by its keyed hash; never echoed.
    recipient: Option<String>,
    /// From 1 (default 1).
    page: Option<String>,
    /// 1 to 100 (default 20).
    limit: Option<String>,
}

/// The tenant's suppression list, newest first (`suppressions:read`).
#[utoipa::path(get, path = "/api/v1/suppressions", tag = "suppressions", params(SuppressionParams),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "One page", body = SuppressionList),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks suppressions:read", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A query parameter is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn list_suppressions(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::SuppressionsRead>,
    AppQuery(params): AppQuery<SuppressionParams>,
) -> ApiResult<Json<SuppressionList>> {
    let mut errors = Vec::new();
    let mut keep = |result: Result<u32, FieldError>, default| {
        result.unwrap_or_else(|e| {
            errors.push(e);
            default
        })
    };
    let page = keep(number("page", params.page.as_deref(), 1, 1..=u32::MAX), 1);
    let limit = keep(number("limit", params.limit.as_deref(), 20, 1..=MAX_LIMIT), 20);
    let channel = params.channel.as_deref().map(|c| {
        Channel::parse(c)
            .ok_or_else(|| FieldError::new("channel", format!("must be one of {}", Channel::values())))
    });
    let reason = params.reason.as_deref().map(|r| {
        SuppressionReason::parse(r).ok_or_else(|| {
            FieldError::new("reason", format!("must be one of {}", SuppressionReason::values()))
        })
    });
    let channel = channel.transpose().unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    let reason = reason.transpose().unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let (items, total_count) = suppressions::list(
        &state,
        principal.tenant_id(),
        channel,
        reason,
        params.recipient.as_deref(),
        limit,
        page,
    )
    .await?;
    Ok(Json(SuppressionList { total_count, page, limit, items }))
}

/// Adds a recipient to the list (`suppressions:write`): sends to it on the channel stop, for
/// every category or the one given. The same recipient, channel and category again answers
/// 200 with the entry already there.
#[utoipa::path(post, path = "/api/v1/suppressions", tag = "suppressions", request_body = SuppressionIn,
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 201, description = "Added", body = Suppression),
        (status = 200, description = "Already on the list: the entry there", body = Suppression),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks suppressions:write", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A bad recipient, channel, category or reason", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all)]
async fn add_suppression(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::SuppressionsWrite>,
    AppJson(input): AppJson<SuppressionIn>,
) -> ApiResult<(StatusCode, Json<Suppression>)> {
    let (entry, created) = suppressions::add(&state, principal.tenant_id(), input).await?;
    Ok((if created { StatusCode::CREATED } else { StatusCode::OK }, Json(entry)))
}

/// One entry; another tenant's is 404.
#[utoipa::path(get, path = "/api/v1/suppressions/{suppression_id}", tag = "suppressions",
    params(("suppression_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "Success", body = Suppression),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks suppressions:read", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such entry in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn get_suppression(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::SuppressionsRead>,
    Path(suppression_id): Path<String>,
) -> ApiResult<Json<Suppression>> {
    let id = SuppressionId::parse(&suppression_id).map_err(|_| ApiError::not_found("suppression"))?;
    Ok(Json(suppressions::get(&state, principal.tenant_id(), &id).await?))
}

/// Lifts an entry (`suppressions:write`): sends to the recipient resume.
#[utoipa::path(delete, path = "/api/v1/suppressions/{suppression_id}", tag = "suppressions",
    params(("suppression_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 204, description = "Lifted"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks suppressions:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such entry in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(suppression_id = %suppression_id))]
async fn delete_suppression(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::SuppressionsWrite>,
    Path(suppression_id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = SuppressionId::parse(&suppression_id).map_err(|_| ApiError::not_found("suppression"))?;
    suppressions::remove(&state, principal.tenant_id(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
