//! Stored templates of the caller's tenant.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use herald_common::{
    Problem, Timestamp,
    api::templates::{TemplateIn, TemplateListOut, TemplateOut},
    ids::TemplateId,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{TenantAuth, scopes};
use super::extract::AppJson;
use crate::{
    error::{ApiError, ApiResult},
    service::{templates::check_syntax, validate::single_line},
    state::AppState,
    store::TemplateRecord,
    views::template_out,
};

/// The longest template name, in characters.
pub(crate) const NAME_MAX_CHARS: usize = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_template, list_templates)).routes(routes!(
        get_template,
        replace_template,
        delete_template
    ))
}

fn checked(input: &TemplateIn) -> ApiResult<()> {
    single_line(&input.name, NAME_MAX_CHARS).map_err(|m| ApiError::field("name", m))?;
    if input.name.trim().is_empty() {
        return Err(ApiError::field("name", "is required"));
    }
    if input.subject.is_none() && input.body.is_none() && input.html_body.is_none() {
        return Err(ApiError::field("body", "a template needs at least one of subject, body, html_body"));
    }
    check_syntax(&[
        ("subject", input.subject.as_deref()),
        ("body", input.body.as_deref()),
        ("html_body", input.html_body.as_deref()),
    ])?;
    Ok(())
}

const PROBLEM: &str = "application/problem+json";

/// Stores a template (`templates:write`).
#[utoipa::path(post, path = "/api/v1/templates", tag = "templates", request_body = TemplateIn,
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 201, description = "Created", body = TemplateOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks templates:write", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A field is invalid or a part does not compile", body = Problem, content_type = PROBLEM),
    ))]
async fn create_template(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::TemplatesWrite>,
    AppJson(input): AppJson<TemplateIn>,
) -> ApiResult<(StatusCode, Json<TemplateOut>)> {
    checked(&input)?;
    let now = Timestamp::now().millis();
    let record = state
        .store
        .create_template(TemplateRecord {
            id: TemplateId::new(),
            tenant_id: principal.tenant_id().clone(),
            name: input.name.trim().to_owned(),
            subject: input.subject,
            body: input.body,
            html_body: input.html_body,
            created_at: now,
            updated_at: now,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(template_out(record))))
}

/// The tenant's templates.
#[utoipa::path(get, path = "/api/v1/templates", tag = "templates",
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = TemplateListOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
    ))]
async fn list_templates(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::Authenticated>,
) -> ApiResult<Json<TemplateListOut>> {
    let records = state.store.list_templates(principal.tenant_id()).await?;
    Ok(Json(TemplateListOut { templates: records.into_iter().map(template_out).collect() }))
}

/// One template; another tenant's is 404.
#[utoipa::path(get, path = "/api/v1/templates/{template_id}", tag = "templates",
    params(("template_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Success", body = TemplateOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such template in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn get_template(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::Authenticated>,
    Path(template_id): Path<String>,
) -> ApiResult<Json<TemplateOut>> {
    let not_found = || ApiError::not_found("template");
    let id = TemplateId::parse(&template_id).map_err(|_| not_found())?;
    let record = state.store.get_template(principal.tenant_id(), &id).await?.ok_or_else(not_found)?;
    Ok(Json(template_out(record)))
}

/// Replaces a template's name and parts (`templates:write`).
#[utoipa::path(put, path = "/api/v1/templates/{template_id}", tag = "templates", request_body = TemplateIn,
    params(("template_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 200, description = "Replaced", body = TemplateOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks templates:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such template in this tenant", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A field is invalid or a part does not compile", body = Problem, content_type = PROBLEM),
    ))]
async fn replace_template(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::TemplatesWrite>,
    Path(template_id): Path<String>,
    AppJson(input): AppJson<TemplateIn>,
) -> ApiResult<Json<TemplateOut>> {
    let not_found = || ApiError::not_found("template");
    let id = TemplateId::parse(&template_id).map_err(|_| not_found())?;
    checked(&input)?;
    let record = state
        .store
        .replace_template(TemplateRecord {
            id,
            tenant_id: principal.tenant_id().clone(),
            name: input.name.trim().to_owned(),
            subject: input.subject,
            body: input.body,
            html_body: input.html_body,
            created_at: 0,
            updated_at: Timestamp::now().millis(),
        })
        .await?
        .ok_or_else(not_found)?;
    Ok(Json(template_out(record)))
}

/// Deletes a template (`templates:write`).
#[utoipa::path(delete, path = "/api/v1/templates/{template_id}", tag = "templates",
    params(("template_id" = String, Path)),
    security(("api_key" = []), ("operator" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The credential lacks templates:write", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such template in this tenant", body = Problem, content_type = PROBLEM),
    ))]
async fn delete_template(
    State(state): State<AppState>,
    TenantAuth(principal, _): TenantAuth<scopes::TemplatesWrite>,
    Path(template_id): Path<String>,
) -> ApiResult<StatusCode> {
    let deleted = match TemplateId::parse(&template_id) {
        Ok(id) => state.store.delete_template(principal.tenant_id(), &id).await?,
        Err(_) => false,
    };
    if deleted { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::not_found("template")) }
}
