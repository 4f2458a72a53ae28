//! The activity feed: the masked delivery timeline of the caller's tenant, and retries.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use herald_common::{
    ErrorCode, FieldError, Problem, Timestamp,
    api::{
        activity::{
            ActivityDetail, ActivityList, ActivityStatus, BulkRetryIn, BulkRetryOut, RetryQueued, RetryStatus,
        },
        notifications::Channel,
    },
    ids::{ApplicationId, TransactionId},
};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{TenantAuth, scopes};
use super::extract::{AppJson, AppQuery};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
    store::{ActivityFilter, RetryResult},
    views,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_activity))
        .routes(routes!(activity_stream))
        .routes(routes!(retry_matching))
        .routes(routes!(get_activity_item))
        .routes(routes!(retry_item))
}

const PROBLEM: &str = "application/problem+json";
pub const MAX_LIMIT: u32 = 100;
/// Most notifications one bulk retry queues.
pub const BULK_RETRY_MAX: i64 = 1_000;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ActivityParams {
    /// `email`, `sms`, `whatsapp` or `in_app`.
    #[param(value_type = Option<Channel>)]
    channel: Option<String>,
    /// One of queued, sending, sent, delivered, read, undelivered, bounced, complained, failed,
    /// suppressed, verified, expired, tombstoned.
    #[param(value_type = Option<ActivityStatus>)]
    status: Option<String>,
    #[param(value_type = Option<ApplicationId>)]
    application_id: Option<String>,
    /// Created at or after (ISO 8601).
    from: Option<String>,
    /// Created before (ISO 8601).
    to: Option<String>,
    /// Notifications of one category (`[a-z0-9_.-]{1,64}`).
    category: Option<String>,
    /// From 1 (default 1).
    page: Option<String>,
    /// 1 to 100 (default 20).
    limit: Option<String>,
}

pub(super) fn number(
    field: &str,
    value: Option<&str>,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, FieldError> {
    match value {
        None => Ok(default),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(FieldError::new(
                field,
                format!("must be a whole number from {} to {}", range.start(), range.end()),
            )),
        },
    }
}

fn time(field: &str, value: Option<&str>) -> Result<Option<i64>, FieldError> {
    value
        .map(|text| Timestamp::parse(text).map(Timestamp::millis))
        .transpose()
        .map_err(|_| FieldError::new(field, "must be an ISO 8601 time such as 2026-11-22T10:15:30Z"))
}

/// The masked timeline of every notification and OTP transaction of the caller's tenant, newest
/// first.
#[utoipa::path(get, path = "/api/v1/activity", tag = "activity", params(ActivityParams),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "One page", body = ActivityList),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks activity:read", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A query parameter is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn list_activity(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::ActivityRead>,
    AppQuery(params): AppQuery<ActivityParams>,
) -> ApiResult<Json<ActivityList>> {
    let mut errors = Vec::new();
    let page = number("page", params.page.as_deref(), 1, 1..=u32::MAX).unwrap_or_else(|e| {
        errors.push(e);
        1
    });
    let limit = number("limit", params.limit.as_deref(), 20, 1..=MAX_LIMIT).unwrap_or_else(|e| {
        errors.push(e);
        20
    });
    let mut parsed = |field: &str, value: &Option<String>, parse: &dyn Fn(&str) -> bool, values: String| {
        if value.as_deref().is_some_and(|v| !parse(v)) {
            errors.push(FieldError::new(field, format!("must be one of {values}")));
        }
    };
    parsed("channel", &params.channel, &|v| Channel::parse(v).is_some(), Channel::values());
    parsed("status", &params.status, &|v| ActivityStatus::parse(v).is_some(), ActivityStatus::values());
    let application_id = match params.application_id.as_deref().map(ApplicationId::parse) {
        Some(Err(e)) => {
            errors.push(FieldError::new("application_id", e.to_string()));
            None
        }
        Some(Ok(id)) => Some(id),
        None => None,
    };
    let from = time("from", params.from.as_deref()).unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    let to = time("to", params.to.as_deref()).unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    if let Some(Err(message)) = params.category.as_deref().map(crate::service::suppressions::check_category) {
        errors.push(FieldError::new("category", message));
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let filter = ActivityFilter {
        tenant_id: principal.tenant_id().clone(),
        channel: params.channel.as_deref().and_then(Channel::parse),
        status: params.status.as_deref().and_then(ActivityStatus::parse),
        application_id,
        from,
        to,
        category: params.category,
    };
    let offset = i64::from(page - 1) * i64::from(limit);
    let (rows, total_count) =
        state.store.list_activity(&filter, state.clock.now_millis(), i64::from(limit), offset).await?;
    Ok(Json(ActivityList {
        total_count,
        page,
        limit,
        items: rows.into_iter().map(views::activity_item).collect(),
    }))
}

/// One item of the feed with its attempt history.
#[utoipa::path(get, path = "/api/v1/activity/{transaction_id}", tag = "activity",
    params(("transaction_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "Success", body = ActivityDetail),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks activity:read", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such item in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn get_activity_item(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::ActivityRead>,
    Path(transaction_id): Path<String>,
) -> ApiResult<Json<ActivityDetail>> {
    let not_found = || ApiError::not_found("activity item");
    let id = TransactionId::parse(&transaction_id).map_err(|_| not_found())?;
    let row = state
        .store
        .get_activity(principal.tenant_id(), &id, state.clock.now_millis())
        .await?
        .ok_or_else(not_found)?;
    let updated_at = Timestamp::from_millis(row.updated_at);
    let (attempts, receipts, failed_verifications) = match &id {
        // The OTP's one delivery happened inside its send request.
        TransactionId::Otp(_) => (
            vec![views::otp_attempt(&row)],
            Vec::new(),
            Some(u32::try_from(row.failed_attempts).unwrap_or(0)),
        ),
        TransactionId::Notification(id) => {
            let attempts = match state.store.get_notification(id).await? {
                Some((_, attempts)) => attempts.into_iter().map(views::attempt_out).collect(),
                None => Vec::new(),
            };
            let receipts = state.store.receipts_of(id).await?.into_iter().map(views::receipt_out).collect();
            (attempts, receipts, None)
        }
    };
    Ok(Json(ActivityDetail {
        item: views::activity_item(row),
        updated_at,
        attempts,
        receipts,
        failed_verifications,
    }))
}

/// Queues a failed, retryable notification again (`activity:retry`).
#[utoipa::path(post, path = "/api/v1/activity/{transaction_id}/retry", tag = "activity",
    params(("transaction_id" = String, Path)),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 202, description = "Queued again", body = RetryQueued),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks activity:retry", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such item in this tenant", body = Problem, content_type = PROBLEM),
        (status = 409, description = "The item is not failed, or not retryable", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(transaction_id = %transaction_id))]
async fn retry_item(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::ActivityRetry>,
    Path(transaction_id): Path<String>,
) -> ApiResult<(StatusCode, Json<RetryQueued>)> {
    let now = state.clock.now_millis();
    let Ok(id) = TransactionId::parse(&transaction_id) else {
        return Err(ApiError::not_found("activity item"));
    };
    match state.store.retry_notification(principal.tenant_id(), &id, now).await? {
        RetryResult::Queued => {
            state.delivery_wake.notify_one();
            tracing::info!("queued again by an operator");
            Ok((
                StatusCode::ACCEPTED,
                Json(RetryQueued {
                    status: RetryStatus::RetryQueued,
                    transaction_id: id,
                    queued_at: Timestamp::from_millis(now),
                }),
            ))
        }
        RetryResult::NotRetryable => Err(ApiError::new(
            ErrorCode::NotRetryable,
            "Only retryable notifications that failed, were undelivered or bounced can be retried (OTP codes never: ask for a new one).",
        )),
        RetryResult::NotFound => Err(ApiError::not_found("activity item")),
    }
}

/// Queues again every failed, retryable notification matching the filter, at most 1,000 per call
/// (`activity:retry`).
#[utoipa::path(post, path = "/api/v1/activity/retry", tag = "activity", request_body = BulkRetryIn,
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 202, description = "Queued again", body = BulkRetryOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks activity:retry", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A field is invalid", body = Problem, content_type = PROBLEM),
    ))]
async fn retry_matching(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::ActivityRetry>,
    AppJson(filter): AppJson<BulkRetryIn>,
) -> ApiResult<(StatusCode, Json<BulkRetryOut>)> {
    let now = state.clock.now_millis();
    let filter = ActivityFilter {
        tenant_id: principal.tenant_id().clone(),
        channel: filter.channel,
        status: None,
        application_id: filter.application_id,
        from: filter.from.map(Timestamp::millis),
        to: filter.to.map(Timestamp::millis),
        category: None,
    };
    let count = state.store.retry_matching(filter, now, BULK_RETRY_MAX).await?;
    if count > 0 {
        state.delivery_wake.notify_one();
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(BulkRetryOut {
            status: RetryStatus::RetryQueued,
            count,
            queued_at: Timestamp::from_millis(now),
        }),
    ))
}

/// The live feed (Server-Sent Events): `activity.created` and `activity.updated` as items of the
/// tenant appear and change, with heartbeats and `Last-Event-ID` replay. See docs/ACTIVITY.md.
#[utoipa::path(get, path = "/api/v1/activity/stream", tag = "activity",
    params(("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id")),
    security(("operator" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "text/event-stream: connection.ready, activity.created, activity.updated, heartbeat", body = String, content_type = "text/event-stream"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks activity:read", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Last-Event-ID is not an id of this stream", body = Problem, content_type = PROBLEM),
    ))]
async fn activity_stream(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::ActivityRead>,
    headers: axum::http::HeaderMap,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    let last =
        match headers.get("last-event-id").and_then(|v| v.to_str().ok()).filter(|v| !v.trim().is_empty()) {
            Some(text) => Some(
                crate::stream::activity::parse_event_id(text)
                    .ok_or_else(|| ApiError::field("Last-Event-ID", "is not an event id of this stream"))?,
            ),
            None => None,
        };
    let stream = crate::stream::activity::ActivityStream::new(
        state.store.clone(),
        state.clock.clone(),
        principal.tenant_id().clone(),
        last,
        state.config.stream_heartbeat,
        state.shutdown.clone(),
    );
    let mut response = axum::response::Sse::new(stream.into_stream()).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-cache"));
    Ok(response)
}
