//! Custom sending domains of the caller's tenant: add, list, get, verify, remove.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use herald_common::{
    Problem,
    api::domains::{DomainIn, DomainListOut, DomainOut},
    ids::DomainId,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{TenantAuth, scopes};
use super::extract::AppJson;
use crate::{
    error::{ApiError, ApiResult},
    service::domains,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_domain, list_domains))
        .routes(routes!(get_domain, delete_domain))
        .routes(routes!(verify_domain))
}

const PROBLEM: &str = "application/problem+json";

/// Adds a sending domain (`domains:write`): generates its ownership challenge and DKIM key pair.
/// It is `pending` until its records are published and found.
#[utoipa::path(post, path = "/api/v1/domains", tag = "domains", request_body = DomainIn,
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 201, description = "Added: publish the records it lists, then verify", body = DomainOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks domains:write", body = Problem, content_type = PROBLEM),
        (status = 409, description = "The tenant already has this domain", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Not a domain name (or an IP address, a URL), or a bad selector", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all)]
async fn create_domain(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::DomainsWrite>,
    AppJson(input): AppJson<DomainIn>,
) -> ApiResult<(StatusCode, Json<DomainOut>)> {
    let domain = domains::create(&state, principal.tenant_id(), input).await?;
    Ok((StatusCode::CREATED, Json(domains::out(&domain, &state.config.spf_include))))
}

/// The tenant's sending domains, by name.
#[utoipa::path(get, path = "/api/v1/domains", tag = "domains",
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = DomainListOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks domains:read", body = Problem, content_type = PROBLEM),
    ))]
async fn list_domains(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::DomainsRead>,
) -> ApiResult<Json<DomainListOut>> {
    let records = state.store.list_domains(principal.tenant_id()).await?;
    let domains = records.iter().map(|d| domains::out(d, &state.config.spf_include)).collect();
    Ok(Json(DomainListOut { domains }))
}

/// One domain with its records and what the last check found; another tenant's is 404.
#[utoipa::path(get, path = "/api/v1/domains/{domain_id}", tag = "domains",
    params(("domain_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = DomainOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks domains:read", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such domain in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn get_domain(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::DomainsRead>,
    Path(domain_id): Path<String>,
) -> ApiResult<Json<DomainOut>> {
    let not_found = || ApiError::not_found("domain");
    let id = DomainId::parse(&domain_id).map_err(|_| not_found())?;
    let domain = state.store.get_domain(principal.tenant_id(), &id).await?.ok_or_else(not_found)?;
    Ok(Json(domains::out(&domain, &state.config.spf_include)))
}

/// Removes a domain (`domains:write`); mail is no longer sent from it.
#[utoipa::path(delete, path = "/api/v1/domains/{domain_id}", tag = "domains",
    params(("domain_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks domains:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such domain in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(domain_id = %domain_id))]
async fn delete_domain(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::DomainsWrite>,
    Path(domain_id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = DomainId::parse(&domain_id).map_err(|_| ApiError::not_found("domain"))?;
    domains::delete(&state, principal.tenant_id(), &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Looks up every record of the domain in the DNS now (`domains:write`) and answers with the
/// domain as it stands after the check: each record's status and a detail saying what was
/// found and what to change.
#[utoipa::path(post, path = "/api/v1/domains/{domain_id}/verify", tag = "domains",
    params(("domain_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Checked: see `status` and each record's `status` and `detail`", body = DomainOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks domains:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such domain in this tenant", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(domain_id = %domain_id))]
async fn verify_domain(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::DomainsWrite>,
    Path(domain_id): Path<String>,
) -> ApiResult<Json<DomainOut>> {
    let not_found = || ApiError::not_found("domain");
    let id = DomainId::parse(&domain_id).map_err(|_| not_found())?;
    let domain = state.store.get_domain(principal.tenant_id(), &id).await?.ok_or_else(not_found)?;
    let checked = domains::check(&state, &domain).await?.ok_or_else(not_found)?;
    Ok(Json(domains::out(&checked, &state.config.spf_include)))
}
