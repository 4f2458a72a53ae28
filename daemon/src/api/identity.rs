//! Who am I, and the applications of my tenant.

use axum::{
    Json,
    extract::{Path, State},
};
use herald_common::{
    Problem,
    api::{
        applications::{ApplicationListOut, ApplicationOut},
        whoami::WhoamiOut,
    },
    ids::ApplicationId,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{AnyAuth, TenantAuth, scopes};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
    views,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(whoami))
        .routes(routes!(list_applications))
        .routes(routes!(get_application))
}

/// What the presented credential is: its kind, tenant, application and scopes.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "identity",
    security(("api_key" = []), ("operator" = []), ("user" = [])),
    responses(
        (status = 200, description = "Success", body = WhoamiOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
    ))]
async fn whoami(AnyAuth(principal, _): AnyAuth<scopes::Authenticated>) -> Json<WhoamiOut> {
    Json(principal.whoami())
}

/// The applications of the caller's tenant.
#[utoipa::path(get, path = "/api/v1/applications", tag = "identity",
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = ApplicationListOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
    ))]
async fn list_applications(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::Authenticated>,
) -> ApiResult<Json<ApplicationListOut>> {
    let records = state.store.list_applications(principal.tenant_id()).await?;
    let applications = records.into_iter().map(views::application_out).collect();
    Ok(Json(ApplicationListOut { applications }))
}

/// One application of the caller's tenant; another tenant's is 404.
#[utoipa::path(get, path = "/api/v1/applications/{application_id}", tag = "identity",
    params(("application_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = ApplicationOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in the caller's tenant", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_application(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::Authenticated>,
    Path(application_id): Path<String>,
) -> ApiResult<Json<ApplicationOut>> {
    let not_found = || ApiError::not_found("application");
    let id = ApplicationId::parse(&application_id).map_err(|_| not_found())?;
    let record = state.store.get_application(&id).await?.ok_or_else(not_found)?;
    if &record.tenant_id != principal.tenant_id() {
        return Err(not_found());
    }
    Ok(Json(views::application_out(record)))
}
