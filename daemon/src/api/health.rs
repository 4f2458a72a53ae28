//! Operations: liveness, readiness, Prometheus metrics and the OpenAPI document.

use axum::{
    Json,
    extract::State,
    http::header,
    response::{IntoResponse, Response},
};
use herald_common::{
    ErrorCode,
    api::health::{HealthOut, HealthStatus},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = HealthOut)))]
async fn healthz() -> Json<HealthOut> {
    Json(HealthOut { status: HealthStatus::Ok, database: None, tasks: Default::default() })
}

/// Readiness: the database answers, a write commits, and every background task runs (their
/// states are listed).
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready", body = HealthOut),
        (status = 503, description = "The database is not reachable, or a background task is down", body = herald_common::Problem,
            content_type = "application/problem+json"),
    ))]
async fn readyz(State(state): State<AppState>) -> ApiResult<Json<HealthOut>> {
    match tokio::time::timeout(std::time::Duration::from_secs(3), state.store.ping()).await {
        Ok(Ok(())) => {}
        _ => return Err(ApiError::new(ErrorCode::Unavailable, "The database is not reachable.")),
    }
    // Reads can work while writes cannot (the writer failed, another process holds SQLite's
    // write lock): an empty write must commit too.
    match tokio::time::timeout(std::time::Duration::from_secs(3), state.store.ping_writer()).await {
        Ok(Ok(())) => {}
        _ => return Err(ApiError::new(ErrorCode::Unavailable, "Writes to the database cannot commit.")),
    }
    let tasks = state.tasks.report();
    let down: Vec<String> = tasks
        .iter()
        .filter(|(_, t)| t.state != herald_common::api::health::TaskState::Running)
        .map(|(name, t)| format!("{name} ({})", t.state))
        .collect();
    if !down.is_empty() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("Background tasks are not running: {}.", down.join(", ")),
        ));
    }
    Ok(Json(HealthOut {
        status: HealthStatus::Ok,
        database: Some(state.config.database.engine().to_owned()),
        tasks: tasks.into_iter().map(|(name, t)| (name.to_owned(), t)).collect(),
    }))
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text", body = String, content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> Response {
    let (batches, operations, grouped) = crate::store::writer::batch_counts();
    metrics::counter!("herald_store_calls_total").absolute(crate::store::calls());
    metrics::counter!("herald_store_write_batches_total").absolute(batches);
    metrics::counter!("herald_store_write_operations_total").absolute(operations);
    metrics::counter!("herald_store_grouped_operations_total").absolute(grouped);
    state.metrics.run_upkeep();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
        .into_response()
}

/// This API's OpenAPI 3.1 document, generated from the code.
#[utoipa::path(get, path = "/content/openapi.json", tag = "operations",
    responses((status = 200, description = "OpenAPI 3.1 document", body = Object)))]
async fn openapi_json(State(state): State<AppState>) -> Response {
    let body = state.openapi.get().cloned().unwrap_or_default();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
